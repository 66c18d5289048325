"""The judge's watch on the runner while it times the reference: the runner's task group frozen for the window, its CPU
time against the judge's own, and on a GPU the gap probe's view of the device, so the candidate cannot work beside it."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator, Optional

from evaluator.contract.types import Verdict
from evaluator.slot import gap_probe
from evaluator.slot.outcome import Interfered, TaskEnded

# The runner's whole tree is watched while the judge times the reference (its batch and projection): an honest runner
# waits for its next order then, using next to no CPU. More than this share of the CPU time the judge's timing thread
# used meanwhile, plus the slack, is the candidate's own work (a thread or process it left running) stretching the
# reference through the host's cores, caches and memory bandwidth, which the reference's host-bound calls need.
# The round is timed again; past INTERFERED_ROUNDS_MAX such rounds the task ends `hack_detected` (side_work).
INTERFERENCE_SHARE = 0.5  # a process spinning throughout is ~1.0 (more on idle cores); spinning OpenMP threads ~0.7
INTERFERENCE_SLACK_S = 1e-3
INTERFERED_ROUNDS_MAX = 2
# CPU mode: the watched windows taken together cover at least this much of the judge's CPU (check_watched_together),
# with at most this many extra watched reference batches.
WATCHED_MIN_S = 0.03
WATCHED_EXTRA_MAX = 16
# The runner has nothing to do while the judge times the reference (it waits for its next order), so its whole task
# group is stopped by the kernel's freezer for each counted window: work it left running (a thread, a child process,
# one with a CUDA context of its own) cannot run beside the reference at all, where the CPU watch and the gap probe can
# only catch what is large enough to see. GPU work already queued on the device still runs (the device gates and the
# gap probe are about that). An idle group froze in ~0.2 ms and thawed in ~0.15 ms (v1, the 2-core VM); one that has
# not frozen within FREEZE_WAIT_S (a thread in an uninterruptible wait) is thawed and the window is only watched.
# "0" turns it off.
FREEZE_ENV = "KRL_WORKER_FREEZE_RUNNER"
FREEZE_WAIT_S = 0.05
FREEZE_POLL_S = 5e-5


class WatchedReference:
    """The watch part of slot/timing_phase.TimingPhase (a mixin: it uses the phase's watch, kind, calls, rng, schedule
    and reference_batch)."""

    def init_watch(self, group: Any = None) -> None:
        # The task's cgroup (isolation/cgroups.TaskCgroup), frozen for each counted window; None where it has none.
        self.freezer = group if os.environ.get(FREEZE_ENV, "1").strip() != "0" else None
        self.frozen_windows = 0
        self.unfrozen_windows = 0  # counted windows that were only watched (no freezer, or it did not freeze in time)
        self.interfered_rounds = 0
        self.watched_clean = [0.0, 0.0]  # the runner's and the judge's CPU seconds over the clean watched windows
        self.gapped_rounds = 0
        # GPU: the judge's gap probe (slot/gap_probe.py) beside the reference in every counted window; window_probe is
        # the one of the window open now, for the code that queues the reference's work (start and end around it).
        self.gap_probe = gap_probe.probe_for_device() if self.kind == "cuda" else None
        self.window_probe: Optional[gap_probe.GapProbe] = None

    @contextlib.contextmanager
    def reference_watched(self, counted: bool = True) -> Iterator[None]:
        """Around the judge's timing of the reference (a `counted` round's): the runner's CPU time meanwhile within
        INTERFERENCE_SHARE of the judge's own (its timing thread's CPU time, not the wall time: on a loaded host a
        process working beside it gets a share of a core, as the judge does) and the slack, else Interfered (the round
        timed again, up to INTERFERED_ROUNDS_MAX rounds a task, then hack_detected). On a GPU, then, the gap probe's
        reading: another context on the device meanwhile is Interfered too (gapped_window)."""
        if not counted:
            yield
            return
        frozen = self.runner_frozen()
        probe = self.window_probe = self.gap_probe
        try:
            with self.cpu_window() if self.watch is not None else contextlib.nullcontext() as spent:
                yield
        except BaseException:
            if probe is not None:
                probe.end()  # a probe whose work was never ended would run on to its own bound
                probe.discard()
            raise
        finally:
            self.window_probe = None
            if frozen:
                began = time.perf_counter()
                self.freezer.thaw()
                self.add_phase("timing_freeze", time.perf_counter() - began)
        if spent is not None:
            self.runner_watched(*spent)
        if probe is not None:
            self.gapped_window(probe.read())

    def runner_frozen(self) -> bool:
        """The task's group frozen for the window about to start (FREEZE_ENV); False where it is only watched."""
        if self.freezer is None:
            self.unfrozen_windows += 1
            return False
        began = time.perf_counter()
        frozen = self.group_frozen()
        if frozen:
            self.frozen_windows += 1
        else:
            self.unfrozen_windows += 1
            self.schedule.phases["timing_unfrozen_windows"] = self.unfrozen_windows
        self.add_phase("timing_freeze", time.perf_counter() - began)
        return frozen

    def group_frozen(self) -> bool:
        """The task's group frozen and waited for. False where it did not freeze in time (thawed again) or cannot be
        frozen at all (then never tried again)."""
        if self.freezer is None:
            return False
        frozen = self.freezer.freeze(FREEZE_WAIT_S, FREEZE_POLL_S)
        if not frozen:
            self.freezer.thaw()
            if frozen is None:
                self.freezer = None
        return bool(frozen)

    def charge_read_frozen(self) -> int:
        """CPU mode: the task's CPU time (the phase's charge) read with its group frozen where it can be. The kernel
        books a running thread's time at its ticks (4 ms on the 2-core VM) or when it stops running; read live, up to
        a tick of a thread still running at the answer went uncharged, and a helper thread timed to finish its share
        just past the read hid it (red team, session 27). Frozen, every thread has stopped and been booked."""
        frozen = self.group_frozen()
        try:
            return self.charge.now()
        finally:
            if frozen:
                self.freezer.thaw()

    def add_phase(self, name: str, seconds: float) -> None:
        phases = self.schedule.phases
        phases[name] = phases.get(name, 0.0) + seconds

    def runner_watched(self, used_s: float, judge_s: float) -> None:
        """The runner's CPU over one watched window against the judge's: clean, Interfered or side_work."""
        if not worked_beside(used_s, judge_s):
            self.watched_clean[0] += used_s
            self.watched_clean[1] += judge_s
            return
        self.interfered_rounds += 1
        self.schedule.phases["timing_interfered_rounds"] = self.interfered_rounds
        if self.interfered_rounds > INTERFERED_ROUNDS_MAX:
            raise side_work(used_s, judge_s)
        raise Interfered()

    def gapped_window(self, gaps: gap_probe.Gaps) -> None:
        """The gap probe's reading of one window: another context had the device meanwhile is Interfered, up to
        GAPPED_ROUNDS_MAX rounds a task, then TimingContended (no figure: an infrastructure failure, retried once)."""
        phases = self.schedule.phases
        phases["timing_gap_largest_ms"] = max(phases.get("timing_gap_largest_ms", 0.0), round(gaps.largest_ns / 1e6, 4))
        if gaps.bounded:
            # Something in the window synchronised the whole device, which waited for the probe to its bound (the
            # reference's own work: the candidate cannot reach the judge's process): the window's clock holds that
            # wait, and the probe cannot run beside this reference. Timed again, the rest of the task without it.
            self.gap_probe = None
            phases["timing_gap_probe_off"] = 1
            raise Interfered()
        if not gaps.gapped():
            return
        self.gapped_rounds += 1
        phases["timing_gapped_rounds"] = self.gapped_rounds
        if self.gapped_rounds > gap_probe.GAPPED_ROUNDS_MAX:
            raise gap_probe.contended(self.gapped_rounds, gaps)
        raise Interfered()

    @contextlib.contextmanager
    def cpu_window(self) -> Iterator[list[float]]:
        """[the runner's CPU seconds, the judge's timing thread's] over the block, filled in when it ends."""
        spent = [0.0, 0.0]
        runner_from, judge_from = self.watch.now(), time.thread_time()
        yield spent
        spent[:] = (self.watch.now() - runner_from) / 1e9, time.thread_time() - judge_from

    def check_watched_together(self) -> None:
        """CPU mode: the clean windows of reference_watched taken together, against one slack, made up to
        WATCHED_MIN_S of the judge's CPU with watched reference batches of its own (untimed) where the rounds' were
        shorter. The kernel books a running process's CPU at its ticks (4 ms on a 2-core VM, by the process clock and
        schedstat alike), so a window of a few ms can read a process that worked all through it as nothing; over
        enough windows the lag evens out (a process copying 64 MiB buffers beside the reference passed 0.8 ms rounds
        unseen, its candidate having slowed its own calls to keep the batches short)."""
        if self.kind != "cpu" or self.watch is None or (self.frozen_windows and not self.unfrozen_windows):
            return  # every window was frozen: nothing of the candidate's could run beside the reference
        for _ in range(WATCHED_EXTRA_MAX):
            if self.watched_clean[1] >= WATCHED_MIN_S:
                break
            with self.cpu_window() as spent:
                self.reference_batch(self.calls, self.rng.getrandbits(30))
            self.watched_clean[0] += spent[0]
            self.watched_clean[1] += spent[1]
        if worked_beside(*self.watched_clean):
            raise side_work(*self.watched_clean)


def worked_beside(runner_s: float, judge_s: float) -> bool:
    """Whether the runner's CPU while the judge timed the reference is more than an idle runner's."""
    return runner_s > INTERFERENCE_SHARE * judge_s + INTERFERENCE_SLACK_S


def side_work(runner_s: float, judge_s: float) -> TaskEnded:
    """The `side_work` verdict: the candidate's processes worked while the judge timed the reference."""
    from evaluator.judging.rules import finding

    found = finding("side_work", f"the candidate's processes used {runner_s * 1e3:.1f} ms of CPU while the judge "
                    f"used {judge_s * 1e3:.1f} ms timing the reference, waiting for its next order")
    return TaskEnded(Verdict.HACK_DETECTED, found.message, found.rule)
