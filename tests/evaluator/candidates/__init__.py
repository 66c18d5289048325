"""Candidate kernels for the worker tests (files read as plain source, never imported) and the subprocess harness.
Each hack candidate trips one named rule; the honest ones trip none."""
