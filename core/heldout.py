"""Held-out problems during training (eval_every): which problems leave training, and scoring them with the current
weights like `krl eval` does. Used by core/train.py; core/evaluation.py is the stand-alone evaluation job."""

from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

from core import scores
from core.config import RunConfig
from core.errors import KrlError
from core.problems import Problem, load_problem_set
from core.records import rollout_records
from core.rollouts import RolloutRunner, wait_all


def split_heldout(problems: Sequence[Problem], config: RunConfig) -> tuple[list[Problem], list[Problem]]:
    """(training problems, held-out problems). evaluation.heldout names a set whose problems leave training;
    otherwise a seeded share (evaluation.heldout_fraction, at least one) of `problems` is held out by hashing ids,
    so the split does not depend on order and never overlaps."""
    if config.evaluation.heldout:
        heldout = load_problem_set(config.evaluation.heldout)
        ids = {p.id for p in heldout}
        train = [p for p in problems if p.id not in ids]
        if not train:
            raise KrlError(f"every training problem is in the held-out set '{config.evaluation.heldout}'; "
                           "choose a held-out set that leaves problems to train on.")
        return train, list(heldout)

    def rank(problem: Problem) -> str:
        return hashlib.sha256(f"heldout:{config.seed}:{problem.id}".encode()).hexdigest()

    if len(problems) < 2:
        raise KrlError("eval_every needs at least two problems to hold some out; set evaluation.heldout to a "
                       "separate problem set.")
    count = min(len(problems) - 1, max(1, round(config.evaluation.heldout_fraction * len(problems))))
    held = {p.id for p in sorted(problems, key=rank)[:count]}
    return [p for p in problems if p.id not in held], [p for p in problems if p.id in held]


def heldout_metrics(runner: RolloutRunner, pool: ThreadPoolExecutor, problems: Sequence[Problem], samples: int,
                    step: int, prefix: str = "eval/heldout/") -> dict[str, float]:
    """Play every held-out problem `samples` times with the current weights and score it like `krl eval`:
    the training run's metrics at this step (e.g. eval/heldout/fast_p/eager/kernelbench/1)."""
    futures: list[Future] = []
    for index, problem in enumerate(problems):
        # A group index far from training's keeps the sampling seeds apart from the training rollouts'.
        futures += runner.submit_group(pool, step, 1_000_000 + index, problem, 0, range(samples), samples)
    rollouts = wait_all(futures)
    records = [r for rollout in rollouts for r in rollout_records(rollout)]
    summary = scores.summarise(records, [p.id for p in problems], samples, runner.config.max_turns)
    return {prefix + key: value for key, value in summary.items()}
