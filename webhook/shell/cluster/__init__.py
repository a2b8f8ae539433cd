"""The API server side: the client, list+watch into the store, the Lease, the reconciler and
the wiring that runs them."""
