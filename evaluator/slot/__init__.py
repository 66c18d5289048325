"""Layer 5: what runs per device: the process entry, the judge host, the runner zygote and the worker's phases.
Imports only the layers above it."""
