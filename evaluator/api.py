"""The evaluator's public entry point: EvalRequest in, EvalResult out, and the Evaluator that maps one to the
other. The types live in contract/ and the Evaluator in local/; this module only gathers them for callers."""

from __future__ import annotations

from evaluator.contract.types import (BACKENDS, DEFAULT_TOLERANCE, KERNELBENCH_CONVENTION, PRECISIONS,
                                      SPEEDUP_CONVENTION, EvalRequest, EvalResult, EvaluatorError, RuntimeStats,
                                      Verdict, check_request)
from evaluator.local.evaluator import Evaluator

__all__ = ["BACKENDS", "DEFAULT_TOLERANCE", "KERNELBENCH_CONVENTION", "PRECISIONS", "SPEEDUP_CONVENTION", "EvalRequest",
           "EvalResult", "Evaluator", "EvaluatorError", "RuntimeStats", "Verdict", "check_request"]
