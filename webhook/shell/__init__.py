"""The IO shell: HTTP server, API-server informers, reconciler, files and the command line."""
