"""The `policy-webhook` command line: serve, check, explain, rules, and the pages made from code."""
