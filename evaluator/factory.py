"""One protocol for every evaluator (local pool, Ray cluster, HTTP service) and the factory that opens one by address.
Imports nothing heavy: Ray and httpx are loaded only when their kind of evaluator is opened."""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, as_completed, wait
from typing import Any, Callable, Iterable, Iterator, Protocol, runtime_checkable

from evaluator.api import EvalRequest, EvalResult, EvaluatorError


class EvaluatorBusy(EvaluatorError):
    """The evaluator's queue is full: try again later (HTTP 503 with Retry-After). Carries the queue depth seen."""

    def __init__(self, message: str, queue_depth: int, retry_after_s: float = 1.0):
        super().__init__(message)
        self.queue_depth = queue_depth
        self.retry_after_s = retry_after_s


@runtime_checkable
class EvaluatorLike(Protocol):
    """What a training run, the service and the benchmarks need from an evaluator, wherever it runs.
    submit never raises for a bad candidate (that is a verdict); it raises EvaluatorError for our faults."""

    def submit(self, request: EvalRequest) -> "Future[EvalResult]": ...

    def evaluate_many(self, requests: Iterable[EvalRequest]) -> Iterator[EvalResult]: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


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


def open_evaluator(target: str = "local", **options: Any) -> EvaluatorLike:
    """"local": the pool on this machine (options are Evaluator's). "ray://local": start a Ray instance here;
    "ray://auto": join the Ray cluster this machine belongs to; "ray://HOST:PORT": Ray Client address (options are
    ClusterEvaluator's, `evaluator_options` go to each node's pool). "http://…" / "https://…": a `krl serve`
    service (options: token, token_env, timeout_s, retries)."""
    target = (target or "local").strip()
    if target == "local":
        from evaluator.api import Evaluator

        return Evaluator(**options)
    if target.startswith("ray://"):
        try:
            from evaluator.scale.cluster import ClusterEvaluator
        except ImportError as exc:
            raise EvaluatorError(f"{target} needs Ray ({exc.name} is missing): pip install 'kernelrl[ray]'.") from None
        rest = target.removeprefix("ray://")
        address = None if rest == "local" else ("auto" if rest == "auto" else target)
        return ClusterEvaluator(address=address, **options)
    if target.startswith(("http://", "https://")):
        try:
            from evaluator.scale.client import HttpEvaluator
        except ImportError as exc:
            raise EvaluatorError(f"{target} needs httpx ({exc.name} is missing): pip install 'kernelrl[serve]'.") from None
        return HttpEvaluator(target, **options)
    raise EvaluatorError(f"unknown evaluator address {target!r}: use 'local', 'ray://local', 'ray://auto', "
                         "'ray://HOST:PORT' or an http(s):// URL of `krl serve`.")


# A cluster's compile figures (evaluator/scale/cluster.py), passed through the service's /v1/workers and the HTTP client.
COMPILE_STATS_KEYS = ("compile_queue_depth", "compiles_in_flight", "compiles_per_min", "compile_nodes")


def compile_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """The compile figures an evaluator's stats() carries (none for a local pool)."""
    return {key: stats[key] for key in COMPILE_STATS_KEYS if key in stats}


def worker_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per node/device from any evaluator's stats(): state, queue, done, failures, evals per minute.
    The local pool reports processes; a cluster or a service already reports rows ("nodes")."""
    if "nodes" in stats:
        return list(stats["nodes"])
    broken = stats.get("broken") or {}
    devices: dict[str, dict[str, Any]] = {}
    for worker in stats.get("workers", []):
        if worker.get("role") != "eval":
            continue
        row = devices.setdefault(worker["device"], {"node": "local", "device": worker["device"], "gpu_name": "",
                                                   "ready": 0, "busy": 0, "starting": 0})
        if worker["state"] in ("idle", "busy") and not worker.get("spare"):
            row["ready"] += 1
            row["busy"] += worker["state"] == "busy"
        elif worker["state"] == "starting":
            row["starting"] += 1
    for device in broken:
        if device != "compile":
            devices.setdefault(device, {"node": "local", "device": device, "gpu_name": "", "ready": 0, "busy": 0,
                                        "starting": 0})
    rows = []
    for device, row in devices.items():
        state = "broken" if device in broken else ("ready" if row["ready"] else "starting")
        rows.append({"node": row["node"], "device": device, "gpu_name": row["gpu_name"], "state": state,
                     "in_flight": row["busy"], "done": None, "failures": None,  # the pool counts per pool, not device
                     "evals_per_min": None, "why": broken.get(device, "")})
    return rows
