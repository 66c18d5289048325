"""Layer 2: how a process that may run candidate code is confined (sandbox, syscall filter, process tree,
limits, environment, exit descriptions). Imports only contract/."""
