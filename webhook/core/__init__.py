"""The pure core: no network, no event loop, no Kubernetes client — only data in, data out."""
