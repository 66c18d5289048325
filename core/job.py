"""The life of a run's job, shared by training (core/train.py) and evaluation (core/evaluation.py): marking it
running, the heartbeat and obeying "you were marked crashed", stop signals, closing the segment, the final status."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from core.errors import KrlError
from core.identity import process_identity
from core.reconcile import reconcile
from core.registry import Registry
from core.rollouts import StopRequested
from core.run_status import RESTARTABLE_STATUSES, RunStatus
from core.segments import close_segment, open_segment

log = logging.getLogger("krl.job")

HEARTBEAT_INTERVAL_S = 2.0  # contract: at least every 5 s (procman's limits assume it)


class MarkedEnded(Exception):
    """The run was marked ended (crashed) by a reader while this job was frozen: the job must stop writing."""


class RunJob(Protocol):
    """What run_job drives: a training run's Trainer or an evaluation's EvaluationJob."""

    def run(self) -> None: ...
    def close(self) -> None: ...
    def request_stop(self, reason: str) -> None: ...
    def stopped_message(self, stop: StopRequested) -> str: ...
    def finished_message(self) -> str: ...


class RunLifecycle:
    """One job's hold on its run: marks it running, beats every HEARTBEAT_INTERVAL_S in a thread, and tells the job
    when a reader has ended the run behind its back (the registry refuses the heartbeat)."""

    def __init__(self, registry: Registry, run_id: int, thread_name: str = "krl-heartbeat") -> None:
        self.registry = registry
        self.run_id = run_id
        self.thread_name = thread_name
        self.marked_ended = threading.Event()  # a reader ended the run (crashed) while this job was frozen
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def mark_running(self, request_stop: Callable[[str], None]) -> None:
        """Move the run to `running` (a `stopping` run is asked to stop at once, as its user asked before)."""
        row = self.registry.get_run(self.run_id)
        if row["status"] == RunStatus.STOPPING:
            request_stop("stop requested before start")
        fields: dict[str, Any] = {"ended_at": None, "exit_code": None, "error": None}
        if not row.get("started_at"):
            fields["started_at"] = time.time()
        if row["status"] != RunStatus.RUNNING:
            self.registry.compare_and_set_status(self.run_id, RESTARTABLE_STATUSES, RunStatus.RUNNING,
                                                 "job started", **fields)
        else:
            self.registry.update_run(self.run_id, **{k: v for k, v in fields.items() if k == "started_at"})

    def start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_INTERVAL_S):
                try:
                    if not self.registry.heartbeat(self.run_id):
                        self.marked_ended.set()  # the job leaves at its next check_alive()
                except Exception as exc:  # a busy database must not kill the job; the next beat retries
                    log.warning("heartbeat failed: %s", exc)

        self.registry.heartbeat(self.run_id)
        self._thread = threading.Thread(target=beat, name=self.thread_name, daemon=True)
        self._thread.start()

    def still_ours(self) -> bool:
        """Beat now; False once a reader has ended the run (then the job must stop writing)."""
        if not self.registry.heartbeat(self.run_id):
            self.marked_ended.set()
        return not self.marked_ended.is_set()

    def check_alive(self) -> None:
        """Raise MarkedEnded (with the recorded status) when the run is no longer this job's."""
        if not self.still_ours():
            raise MarkedEnded(self.registry.get_run(self.run_id)["status"])

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HEARTBEAT_INTERVAL_S + 1)


class StopSignals:
    """SIGTERM/SIGINT ask the attached job to stop; a signal that comes before the job exists is handed to it on
    attach."""

    def __init__(self, install: bool):
        self.job: Any = None
        self.pending: list[str] = []
        self.previous: dict[int, Any] = {}
        if install and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.job is not None:
            self.job.request_stop(name)
        else:
            self.pending.append(name)

    def attach(self, job: Any) -> Any:
        self.job = job
        if self.pending:
            job.request_stop(self.pending[0])
        return job

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def finish(registry: Registry, run_id: int, status: RunStatus, message: str, exit_code: int,
           error: str | None = None) -> None:
    """The job's last word: its final status, exit code and (if any) error, with its segment closed."""
    row = registry.get_run(run_id)
    fields: dict[str, Any] = {"ended_at": time.time(), "exit_code": exit_code,
                              "segments": close_segment(row, status, message if status != RunStatus.FINISHED else "")}
    if error is not None:
        fields["error"] = error
    registry.set_status(run_id, status, message, **fields)


def record_failure(registry: Registry, run_id: int, exc: BaseException) -> int:
    """Mark the run failed with what went wrong (a user error's message, or the traceback of anything else)."""
    if isinstance(exc, KrlError):
        finish(registry, run_id, RunStatus.FAILED, str(exc), 1, error=str(exc))
        log.error("failed: %s", exc)
    else:
        text = "".join(traceback.format_exception(exc))
        finish(registry, run_id, RunStatus.FAILED, f"{type(exc).__name__}: {exc}", 1, error=text[-4000:])
        log.error("failed:\n%s", text)
    return 1


def run_job(registry: Registry, run_id: int, make_job: Callable[[], RunJob], install_signals: bool = True) -> int:
    """Run a registered run's job to its end in this process; returns the exit code (0 finished/stopped,
    1 failed or ended by someone else). Signals: SIGTERM (and SIGINT) → the job stops → `stopped`."""
    signals = StopSignals(install_signals)
    job: Optional[RunJob] = None
    try:
        try:
            job = signals.attach(make_job())
            job.run()
        except MarkedEnded as ended:
            # Another process decided this run's end (stale heartbeat) and may have given its GPUs away: leave
            # without writing a status, so the recorded one stays true.
            registry.add_event(run_id, "status", f"the job found its run marked {ended} and stopped")
            log.error("this run was marked %s while the job was not running (stopped or frozen); exiting", ended)
            return 1
        except StopRequested as stop:
            message = job.stopped_message(stop) if job is not None else str(stop)
            finish(registry, run_id, RunStatus.STOPPED, message, 0)
            log.info("stopped: %s", message)
            return 0
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the registry
            return record_failure(registry, run_id, exc)
        message = job.finished_message()
        finish(registry, run_id, RunStatus.FINISHED, message, 0)
        log.info("finished: %s", message)
        return 0
    finally:
        if job is not None:
            job.close()
        signals.restore()


def start_foreground(registry: Registry, row: dict[str, Any]) -> None:
    """Mark a registered run running in this process (a new segment with this process's identity), for
    `krl train`/`krl eval` without --detach."""
    identity = process_identity()
    now = time.time()
    # started_at stays the first segment's: elapsed covers every segment, for evaluations as for training runs.
    registry.set_status(row["id"], RunStatus.RUNNING, f"foreground, pid {identity['pid']}",
                        started_at=row.get("started_at") or now,
                        heartbeat_at=now, segments=open_segment(row, identity, note="foreground", now=now),
                        command={"argv": sys.argv, "cwd": os.getcwd()}, ended_at=None, exit_code=None, error=None,
                        **identity)


def configure_logging(log_file: Path | None = None) -> list[logging.Handler]:
    """The job's log lines on stderr (and in log_file); returns the handlers so a foreground run can remove them."""
    logger = logging.getLogger("krl")
    logger.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file))
    for handler in handlers:
        handler.setFormatter(fmt)
        logger.addHandler(handler)
    return handlers


def remove_logging(handlers: Sequence[logging.Handler]) -> None:
    logger = logging.getLogger("krl")
    for handler in handlers:
        logger.removeHandler(handler)
        handler.close()


def start_queued_runs(registry: Registry) -> None:
    """A job that ends frees its GPUs: start queued runs now rather than at the next reader's reconcile."""
    try:
        reconcile(registry)
    except Exception as exc:  # never turn a finished run into a failed exit
        print(f"warning: could not start queued runs: {exc}", file=sys.stderr)


def job_main(argv: Sequence[str] | None, prog: str, description: str,
             execute: Callable[[Registry, int], int]) -> int:
    """`python -m core.train|core.evaluation <run>`: the command procman spawns for a run of that kind."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("run", help="run id or name (from the registry)")
    parser.add_argument("--workspace", default=None, help="workspace folder (default $KRL_WORKSPACE or ./runs)")
    args = parser.parse_args(argv)
    handlers = configure_logging()
    try:
        registry = Registry.for_workspace(args.workspace, create=False)
        # procman passes the numeric id; a name is accepted for hand-run jobs.
        row = (registry.find_run(int(args.run)) if args.run.isdigit() else None) or registry.find_run(args.run)
        if row is None:
            registry.get_run(args.run)  # raises with did-you-mean
        code = execute(registry, row["id"])
        start_queued_runs(registry)
        return code
    except KrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        for handler in handlers:
            handler.flush()
