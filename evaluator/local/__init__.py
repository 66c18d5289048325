"""Layer 6: the evaluator on one machine: the pool (a dispatcher), the Evaluator class and baselines.
Imports only the layers above it."""
