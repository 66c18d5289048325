"""The one protocol every evaluator satisfies (local pool, Ray cluster, HTTP client), so callers and the
contract test treat them alike."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Iterable, Iterator, Protocol, runtime_checkable

from evaluator.contract.types import EvalRequest, EvalResult


@runtime_checkable
class EvaluatorLike(Protocol):
    """What a training run, the service and the benchmarks need from an evaluator, wherever it runs.
    submit never raises for a bad candidate (that is a verdict); it raises EvaluatorError for our faults."""

    def submit(self, request: EvalRequest) -> "Future[EvalResult]": ...

    def evaluate_many(self, requests: Iterable[EvalRequest]) -> Iterator[EvalResult]: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
