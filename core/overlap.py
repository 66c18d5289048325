"""Off-policy overlap (max_steps_off_policy = K): the rollouts of steps t+1..t+K are sampled and evaluated while
step t trains, each step's batch tagged with the policy version it was sampled from; older data is dropped."""

from __future__ import annotations

import logging
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Callable, Optional

log = logging.getLogger("krl.overlap")


@dataclass
class PendingStep:
    step: int
    futures: list[Future]
    sampler_version: int  # optimizer updates applied when its sampling was submitted (later turns may see newer)


@dataclass
class TakenStep:
    futures: list[Future]
    sampler_version: int
    staleness: int  # updates between the sampler and the weights this step trains (at most K)
    prefetched: bool


class RolloutPrefetch:
    """Keeps the rollouts of up to K future steps in flight. `submit(step)` starts one step's episodes and returns
    their futures. The data order is unchanged (a step's batch is a function of its index), so a resume that
    discards what was in flight re-samples the same problems with the same seeds."""

    def __init__(self, submit: Callable[[int], list[Future]], max_steps_off_policy: int, end_step: int) -> None:
        self.submit = submit
        self.max_off_policy = max_steps_off_policy
        self.end_step = end_step
        self.pending: dict[int, PendingStep] = {}
        self.dropped_steps = 0  # prefetched batches thrown away as too stale (counted over the segment)

    def take(self, step: int, version: int) -> TakenStep:
        """The rollouts of `step`, trained at policy `version`: the prefetched ones when at most K updates stale,
        else (or when none were prefetched) submitted now."""
        pending = self.pending.pop(step, None)
        if pending is not None and version - pending.sampler_version > self.max_off_policy:
            self.dropped_steps += 1
            log.warning("step %d: prefetched rollouts are %d updates stale (> %d): dropped and sampled again",
                        step, version - pending.sampler_version, self.max_off_policy)
            _settle(pending.futures)
            pending = None
        if pending is None:
            return TakenStep(self.submit(step), version, 0, False)
        return TakenStep(pending.futures, pending.sampler_version, version - pending.sampler_version, True)

    def run_ahead(self, step: int, version: int) -> None:
        """Start the steps after `step` up to K ahead (the current weights' version is `version`)."""
        for ahead in range(step + 1, min(self.end_step, step + 1 + self.max_off_policy)):
            if ahead not in self.pending:
                self.pending[ahead] = PendingStep(ahead, self.submit(ahead), version)

    def discard(self) -> None:
        """Drop everything in flight (a step failed and is retried, or the run ends), waiting for it to settle so
        no episode still uses the backend afterwards."""
        for pending in self.pending.values():
            _settle(pending.futures)
        self.pending.clear()

    def metrics(self, taken: TakenStep) -> dict[str, float]:
        return {"overlap/staleness": float(taken.staleness), "overlap/sampler_version": float(taken.sampler_version),
                "overlap/prefetched": float(taken.prefetched), "overlap/dropped_steps": float(self.dropped_steps)}


def _settle(futures: list[Future], timeout_s: Optional[float] = None) -> None:
    for future in futures:
        future.cancel()
    wait(futures, timeout=timeout_s)
    for future in futures:
        if future.done() and not future.cancelled():
            future.exception()  # retrieved, so a failure of discarded work is not reported as unhandled

