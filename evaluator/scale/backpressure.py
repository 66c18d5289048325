"""Backpressure for batches: submit while the evaluator has room, wait for one of ours when it is busy. Used by every
evaluator that sits behind a bounded queue (Ray cluster, HTTP client), with the rest they share around `submit`."""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, as_completed, wait
from typing import Any, Callable, Iterable, Iterator

from evaluator.contract.types import EvalRequest, EvalResult, EvaluatorBusy, EvaluatorError, check_request


def evaluate_with_backpressure(submit: Callable[[EvalRequest], Future],
                               requests: Iterable[EvalRequest]) -> Iterator[EvalResult]:
    """Results in the order they finish, each request's exactly once; while the evaluator is busy, wait for one of
    ours to finish before submitting more (so a long batch never overflows a bounded queue)."""
    pending: set[Future] = set()
    for request in requests:
        while True:
            try:
                pending.add(submit(request))
                break
            except EvaluatorBusy as busy:
                if not pending:  # the queue is full of other callers' work
                    time.sleep(min(busy.retry_after_s, 0.5))
                    continue
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
    for future in as_completed(pending):
        yield future.result()


class QueuedEvaluator:
    """What the evaluators behind a bounded queue share around their own submit() and close(): evaluate,
    evaluate_many with backpressure, use as a context manager, and how a submit starts (a checked request's running
    Future; refused once close() has begun, which each subclass marks by setting `closing` under its own lock)."""

    closing = False

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.submit(request).result()

    def evaluate_many(self, requests: Iterable[EvalRequest]) -> Iterator[EvalResult]:
        return evaluate_with_backpressure(self.submit, requests)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def running_future(self, request: EvalRequest) -> Future:
        """The Future a submit hands back for `request` (checked first: EvaluatorError for the caller's mistakes)."""
        check_request(request)
        future: Future = Future()
        future.set_running_or_notify_cancel()
        return future

    def refuse_when_closing(self) -> None:
        """Called under the subclass's lock before it takes a request in."""
        if self.closing:
            raise EvaluatorError("the evaluator is closed; open a new one.")
