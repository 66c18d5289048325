"""Layer 7: the evaluator across machines: Ray cluster and compile actors, HTTP service and client, result store.
Imports only the layers above it; api.py and factory.py sit on top."""
