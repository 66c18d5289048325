"""The factory that opens an evaluator by address (local pool, Ray cluster, HTTP service), and the public names
callers use with it. Imports nothing heavy: Ray and httpx are loaded only when their kind of evaluator is opened."""

from __future__ import annotations

from typing import Any

from evaluator.contract.protocol import EvaluatorLike
from evaluator.contract.types import EvaluatorBusy, EvaluatorError
from evaluator.scale.backpressure import evaluate_with_backpressure
from evaluator.scale.stats import COMPILE_STATS_KEYS, compile_stats, worker_rows

__all__ = ["COMPILE_STATS_KEYS", "EvaluatorBusy", "EvaluatorLike", "compile_stats", "evaluate_with_backpressure",
           "open_evaluator", "worker_rows"]


def open_evaluator(target: str = "local", **options: Any) -> EvaluatorLike:
    """"local": the pool on this machine (options are Evaluator's). "ray://local": start a Ray instance here;
    "ray://auto": join the Ray cluster this machine belongs to; "ray://HOST:PORT": Ray Client address (options are
    ClusterEvaluator's, `evaluator_options` go to each node's pool). "http://…" / "https://…": a `krl serve`
    service (options: token, token_env, timeout_s, retries)."""
    target = (target or "local").strip()
    if target == "local":
        from evaluator.local.evaluator import Evaluator

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
