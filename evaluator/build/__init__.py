"""Layer 4: turning candidate source into loadable code (CUDA compile, content-addressed caches, Triton cache).
Imports only the layers above it."""
