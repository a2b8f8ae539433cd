"""The admission rules (SPEC §2): the rule table, findings and verdicts, shape and target
rules, and the conflict and impact findings that need the engine."""
