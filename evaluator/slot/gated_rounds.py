"""The judge's gated rounds on a GPU: both sides' batches queued behind device gates before the exclusive hold, each
timed from its gate's opening (slot/device_gate.py); a side that blocks while queueing turns them off for its task."""

from __future__ import annotations

import os
import time
from typing import Any, Optional

from evaluator.slot.outcome import Interfered

# GPU: the counted and sizing rounds' batches queued behind device gates (slot/device_gate.py) and timed from the
# gate's opening, so the host's launch speed stays out of both sides. "0" times the batches as issued, as before.
GATE_ENV = "KRL_WORKER_TIMING_GATE"
# A side that has not queued its batch within this long is blocked (CUDA takes ~1000 launches ahead of a waiting stream,
# then the launching thread waits; a call that synchronises waits for the gate itself): the gate is opened, the round
# dropped and the batch halved; after GATE_OVERFLOWS_MAX such rounds the task is timed without gates.
GATE_QUEUE_WAIT_S = 0.25
GATE_OVERFLOWS_MAX = 2
# A gated batch's calls at first: 800 calls of two launches each blocked on an H100 (tests/bench/probe_gate.py), 100
# did not; a candidate of more launches a call is halved by its first blocked round.
GATE_CALLS_MAX = 768
# A block at this many calls or fewer cannot be CUDA's launch queue filling up: that side synchronises inside a call.
SYNC_BLOCK_CALLS = 3
GATE_OFF_BY = {"reference": 1, "candidate": 2, "runner": 3}  # phases["timing_gate_off"]: which side turned gates off


class GatedRounds:
    """The gate part of slot/timing_phase.TimingPhase (a mixin: it uses the phase's driver, task, hold and hand-overs)."""

    def init_gates(self, kind: str) -> None:
        # The runner's page (written here, read there) and this judge's own gate; no page until the first staging
        # asks the runner to attach, and gates off for good once the task falls back to ungated batches.
        self.gate_page: Any = None
        self.gated = kind == "cuda" and os.environ.get(GATE_ENV, "1").strip() != "0"
        self.gate_cap = GATE_CALLS_MAX  # calls a gated batch may have (halved by each block)
        self.gate_overflows = 0

    def gated_sides(self, candidate_first: bool, counted: bool, calls: int, picked: list[int], seed: int,
                    hands: dict) -> None:
        """The two queued batches released one after the other while the device is held, on the same shift."""
        import torch

        shift = self.rng.random()
        writer = self.own_gate().writer
        drained = False
        try:
            with self.held(True, "rounds" if counted else "sizing"):
                for side in self.sides(candidate_first):
                    if side == "reference":
                        with self.reference_watched(counted):  # its gap probe queued with the batch (queued_both)
                            start = time.perf_counter()
                            writer.open(shift)
                            torch.cuda.synchronize()
                            self.batch_only[side] = time.perf_counter() - start
                            hands[side] = self.reference_hand(picked, seed)
                    else:
                        self.batch_only[side] = self.armed_drain(shift, calls)
                        drained = True
                        hands[side] = self.less_round_trip(self.candidate_hand(calls, picked, seed))
        except Interfered:
            if not drained:  # the round is timed again: the runner's batch, still queued, goes first (unheld)
                self.gate_page.open_all()
                self.order({"type": "drain"}, "ran", calls)
            raise

    def armed_drain(self, shift: float, calls: int) -> float:
        """Seconds of the runner's queued batch, from its gate's opening to its answer that the batch ran, less the
        answer's way. The runner is told first and says so (unclocked), so the gate opens on a runner already waiting
        for its stream: told after the opening, a runner asleep since its queueing woke into the clock, and at 8 slots
        on an H200 its batches read ~3 ms over the reference's in a third of the rounds (session 18, call E)."""
        self.order({"type": "drain", "armed": True}, "draining", calls)
        start = time.perf_counter()
        self.gate_page.open(shift)
        self.collected("ran", calls)
        return self.less_round_trip(self.driver.answered_at - start, share=0.5)

    def queued_both(self, calls: int, salt: int, counted: bool = False) -> bool:
        """Both batches of a round queued behind their gates: the reference here, then the runner's; a `counted`
        round's reference with the gap probe (slot/gap_probe.py) queued first behind the same gate, so it starts with
        the batch. False when either side blocked while queueing (both gates opened, the batches waited for, the round
        dropped): the batch is halved for the next try, or the task goes on without gates."""
        import torch

        from evaluator.contract.framing import encode_message
        from evaluator.slot.task_driver import Deadline

        own = self.own_gate()
        # The runner's order first: its draws then run beside the judge's own, at once after the window before, and
        # not a few milliseconds into the next slot's window (session 18: sent after the judge's queueing, they were
        # part of what slowed the side another slot's window released first).
        self.driver.expect_silence()
        self.driver.send_bytes(encode_message({"type": "queue", "calls": calls, "salt": salt,
                                               "count": self.gate_page.next()}))
        # The reference may synchronise inside (a .item(), a boolean mask) and so wait for its own shut gate, holding
        # Python's lock: the keeper, a process of its own, opens it then.
        probe = self.gap_probe if counted else None

        def behind_gate() -> Any:
            """The gate's wait, queued after the sets' draws (judge.nudged_batch); a counted round's gap probe just
            before it, behind the same gate. One hardware queue a process (isolation/environment.py) runs what is
            queued in order: a probe queued after the batch would start with its last kernel, and one queued before
            the draws would hold them behind the shut gate, into the clock."""
            if probe is not None:
                probe.start(behind=lambda: own.gate.wait(count, shift=False))
            return own.gate.wait(count)

        with own.queueing(GATE_QUEUE_WAIT_S) as queueing:
            self.outputs, self.judge_sets = [], []
            with torch.no_grad():
                count = own.writer.next()
                try:
                    sets = self.judge_sets = self.made_sets(salt, calls, behind_gate)
                    self.outputs = [self.task.model(*sets[index % len(sets)]) for index in range(calls)]
                finally:
                    if probe is not None:
                        probe.end()  # after the batch: the probe stops once it has run
        if queueing.forced:  # the runner's batch let go and waited for too: nothing stays queued behind its gate
            torch.cuda.synchronize()
            self.gate_page.open_all()
            self.driver.answer("queued")
            self.order({"type": "drain"}, "ran", calls)
            return self.gate_blocked("reference", calls)
        try:
            self.driver.answer("queued", deadline=time.monotonic() + GATE_QUEUE_WAIT_S)
            return True
        except Deadline:
            if time.monotonic() >= self.driver.deadline:
                raise
        # The runner blocked while queueing: both gates open, its answer and its batch's end awaited, unheld.
        self.gate_page.open_all()
        own.writer.open_all()
        self.driver.answer("queued")
        self.order({"type": "drain"}, "ran", calls)
        torch.cuda.synchronize()
        return self.gate_blocked("candidate", calls)

    def gate_blocked(self, side: str, calls: int) -> bool:
        """A side blocked while queueing `calls` calls: the next batches halved, or no more gates for this task; the
        dropped round's gap-probe totals with it."""
        if self.gap_probe is not None:
            self.gap_probe.discard()
        self.gate_overflows += 1
        self.schedule.phases["timing_gate_blocked"] = self.gate_overflows
        # A few calls cannot fill CUDA's queue: a side that blocked on them synchronises inside a call.
        if self.gate_overflows >= GATE_OVERFLOWS_MAX or calls <= SYNC_BLOCK_CALLS:
            self.gated = False
            self.schedule.phases["timing_gate_off"] = GATE_OFF_BY[side]
        self.gate_cap = max(1, calls // 2)
        return False

    def close_gates(self) -> None:
        """After the rounds, or when they end early: nothing of this judge's stays queued behind its own gate (its next
        synchronisation would wait for ever), and the runner's page is let go; the gap probe's totals of a window the
        task left unread are dropped."""
        if self.gap_probe is not None:
            self.gap_probe.discard()
        if self.gate_page is None:
            return
        self.own_gate().writer.open_all()
        self.gate_page.open_all()
        self.gate_page.buffer.close()
        self.gate_page = None
        self.gated = False

    def own_gate(self) -> Any:
        from evaluator.slot import device_gate

        return device_gate.own_gate()

    def open_gate_page(self) -> Optional[str]:
        """The runner's gate page for this task, made in the inputs folder it reads; None where gates are off or this
        judge cannot have its own gate."""
        from evaluator.slot import device_gate

        if not self.gated:
            return None
        try:
            self.own_gate()
            self.gate_page = device_gate.judge_page(os.path.join(self.task.inputs_dir, device_gate.PAGE_NAME))
        except Exception:  # noqa: BLE001 - whatever stops the gate (a driver without its calls), time without it
            self.gated = False
            return None
        return device_gate.PAGE_NAME

