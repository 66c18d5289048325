"""Backpressure for batches: submit while the evaluator has room, wait for one of ours when it is busy.
Used by every evaluator's evaluate_many that sits behind a bounded queue (Ray cluster, HTTP client)."""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, as_completed, wait
from typing import Callable, Iterable, Iterator

from evaluator.contract.types import EvalRequest, EvalResult, EvaluatorBusy


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
