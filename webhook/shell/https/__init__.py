"""The HTTPS server: TLS that follows rotated certificates, the admission endpoints, probes,
metrics, graceful drain."""
