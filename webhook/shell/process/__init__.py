"""What one webhook process has, whichever way it runs: logs, metrics, readiness, the heap,
usage errors."""
