"""Admission webhook that makes Gateway API policy attachment safe and visible.

`webhook.core` is the pure part (rules, hierarchy, precedence, summaries, the in-memory store);
`webhook.shell` moves data between it and the world (HTTP, the API server, files, the CLI).
"""
