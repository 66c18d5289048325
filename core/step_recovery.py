"""What a passing service failure costs a run: the step is retried (sampler refreshed, weights restored to the
last completed step), and a run that gives up first keeps a final checkpoint of its last completed step."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional, TypeVar

from core.checkpoint import TRAINER_STATE_FILE, append_checkpoint_record, checkpoint_dir
from core.config import RecoveryConfig
from core.errors import KrlError
from core.rollouts import StopRequested

log = logging.getLogger("krl.recovery")

T = TypeVar("T")
RETRY_EVENT = "retry"  # registry event kinds this module writes
CHECKPOINT_EVENT = "checkpoint"


def is_transient(backend: Any, exc: BaseException) -> bool:
    """True for a failure a retry can fix, as the backend's own SDK classifies it (backends without a service
    never have one)."""
    judge = getattr(backend, "is_transient_error", None)
    return bool(judge(exc)) if judge is not None else False


class StepRecovery:
    """Runs one step, retrying it after a transient failure: at most `max_attempts` tries, waiting backoff_s,
    2 x backoff_s, ... (capped) in between, and calling `prepare_retry(exc)` before each new try."""

    def __init__(self, config: RecoveryConfig, backend: Any, record_event: Callable[[str, str], None],
                 stop_event: threading.Event) -> None:
        self.config = config
        self.backend = backend
        self.record_event = record_event
        self.stop_event = stop_event
        self.retries = 0  # over the whole segment, for the step's metrics

    def backoff_s(self, attempt: int) -> float:
        return min(self.config.backoff_max_s, self.config.backoff_s * 2 ** (attempt - 1))

    def run(self, step: int, attempt_step: Callable[[], T], prepare_retry: Callable[[BaseException], None]) -> T:
        attempts = self.config.max_attempts
        for attempt in range(1, attempts + 1):
            try:
                return attempt_step()
            except StopRequested:
                raise
            except Exception as exc:
                if attempt == attempts or not is_transient(self.backend, exc):
                    raise
                wait = self.backoff_s(attempt)
                message = (f"step {step}: try {attempt}/{attempts} failed ({first_line(exc)}); retrying in "
                           f"{wait:g} s")
                log.warning(message)
                self.record_event(RETRY_EVENT, message)
                self.retries += 1
                if self.stop_event.wait(wait):  # a stop during the wait still checkpoints and exits cleanly
                    raise StopRequested("stop requested while waiting to retry") from None
                prepare_retry(exc)
        raise AssertionError("unreachable")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def rolling_due(config: RecoveryConfig, backend: Any, step: int, periodic: bool) -> bool:
    """A state-only rolling checkpoint after this step: only where the backend keeps state on a service (a local
    backend's failures are not passing ones), and not where a periodic checkpoint is saved anyway."""
    if periodic or not config.rolling_every or getattr(backend, "save_rolling_state", None) is None:
        return False
    return (step + 1) % config.rolling_every == 0


def keep_resume_point(trainer: Any, failure: BaseException) -> Optional[int]:
    """Before a run gives up on a failure: a final (never expiring) checkpoint of its last completed step, taken
    from restored weights when the failure came mid-update. Returns the step kept, or None when the service
    refused that too (the newest rolling checkpoint, if any, stays the resume point until it expires)."""
    step = trainer.last_completed_step
    try:
        if trainer.update_started:
            restore_last_completed(trainer)
        if step is None:
            if trainer.last_checkpoint_step is None:
                trainer.checkpoint(-1, final=True)
        elif trainer.last_checkpoint_step != step or not trainer.last_checkpoint_final:
            keep_or_save_final(trainer, step)
    except Exception as exc:  # noqa: BLE001 - the original failure is what the run reports
        message = f"could not save a final checkpoint after the failure ({first_line(exc)})"
        log.error(message)
        trainer.registry.add_event(trainer.run_id, CHECKPOINT_EVENT, message)
        return None
    kept = -1 if step is None else step
    trainer.registry.add_event(trainer.run_id, CHECKPOINT_EVENT,
                               f"gave up on {first_line(failure)}; resume point: final checkpoint at step {kept}")
    return kept


# ---------------------------------------------------------------- checkpoints a failure needs (over a Trainer)

def save_rolling_checkpoint(trainer: Any, step: int) -> None:
    """Best effort: a rolling checkpoint the service refuses costs only a longer way back after a failure."""
    try:
        trainer.checkpoint(step, rolling=True)
    except Exception as exc:
        if not is_transient(trainer.backend, exc):
            raise
        trainer.registry.add_event(trainer.run_id, CHECKPOINT_EVENT,
                                   f"rolling checkpoint of step {step} not saved ({first_line(exc)})")


def keep_or_save_final(trainer: Any, step: int) -> None:
    """Make the checkpoint of `step` the run's kept resume point: the periodic one saved at that step, its TTL
    cleared where the backend's checkpoints expire (through the SDK), or else a new final one."""
    keep = getattr(trainer.backend, "keep_checkpoint", None)
    saved = trainer.registry.last_checkpoint(trainer.run_id)
    if (saved is not None and saved["step"] == step and trainer.last_checkpoint_step == step
            and not saved["name"].endswith("-rolling")):
        if keep is not None:
            keep([saved["state_path"], saved["sampler_path"]])
        append_checkpoint_record(trainer.run_dir, {
            "name": saved["name"], "batch": step + 1, "step": step, "state_path": saved["state_path"],
            "sampler_path": saved["sampler_path"],
            "trainer_state_path": str(checkpoint_dir(trainer.run_dir, saved["name"]) / TRAINER_STATE_FILE),
            "kind": "final", "final": True, "ttl_s": None})
        trainer.registry.add_event(trainer.run_id, CHECKPOINT_EVENT, f"{saved['name']} kept as the final checkpoint")
        trainer.last_checkpoint_final = True
        return
    trainer.checkpoint(step, final=True)


def restore_last_completed(trainer: Any) -> None:
    """Load the weights and optimizer saved at the last completed step (a rolling or periodic checkpoint of this
    run), undoing a step's update that failed half-way. Raises when there is none to load."""
    wanted = -1 if trainer.last_completed_step is None else trainer.last_completed_step
    rows = [c for c in trainer.registry.checkpoints(trainer.run_id) if c["step"] == wanted and c["state_path"]]
    if not rows or not trainer.backend.can_train:
        raise KrlError(f"no saved state at step {wanted} to restore the weights from after a failed update")
    trainer.backend.load_state(rows[-1]["state_path"], with_optimizer=True)
    trainer.update_started = False
    trainer.registry.add_event(trainer.run_id, CHECKPOINT_EVENT, f"weights restored from {rows[-1]['name']}")
