"""Layer 1 of the evaluator: the request, result, verdict and error types every other layer speaks.
Imports nothing else of the evaluator."""
