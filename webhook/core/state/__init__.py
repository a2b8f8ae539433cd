"""Cluster state: the read-only view the rest reads, its in-memory store, a copy-free "what if"
overlay, what is kept of each object, and ReferenceGrants."""
