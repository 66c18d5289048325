"""Opens the evaluator a run's config asks for: this machine's pool, a Ray cluster (eval.cluster) or a remote
`krl serve` (eval.endpoint, its token read from the environment variable named by eval.token_env, never the config)."""

from __future__ import annotations

from typing import Any, Mapping

from core.errors import KrlError


def open_run_evaluator(eval_config: Any) -> Any:
    """An EvaluatorLike for a run's `eval` section; a KrlError saying what to fix when it cannot start."""
    from evaluator.api import EvaluatorError
    from evaluator.factory import open_evaluator

    pool = {"workers_per_device": eval_config.workers_per_device, "cpu_workers": eval_config.cpu_workers}
    try:
        if eval_config.endpoint:
            return open_evaluator(eval_config.endpoint, token_env=eval_config.token_env)
        if eval_config.cluster:
            return open_evaluator(eval_config.cluster, evaluator_options=pool)
        return open_evaluator("local", devices=eval_config.devices, **pool)
    except EvaluatorError as exc:
        raise KrlError(f"cannot start the evaluator: {exc}") from None


def remote_address(eval_config: Any) -> str:
    """Where a run evaluates when not on this machine's pool: eval.endpoint or eval.cluster, '' for the local pool.
    Takes the config's eval section or its stored JSON form (the registry's runs.config["eval"])."""
    if isinstance(eval_config, Mapping):
        return eval_config.get("endpoint") or eval_config.get("cluster") or ""
    return eval_config.endpoint or eval_config.cluster or ""
