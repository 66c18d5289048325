"""The judge's end of one runner's pipes: send an order, wait for its one answer, never block. Writes and reads are
non-blocking against the task's deadline; anything else the runner says is a breach of the protocol."""

from __future__ import annotations

import os
import selectors
import time
from typing import Any, Callable, Optional

from evaluator.slot.evidence import check_answer
from evaluator.slot.outcome import ProtocolBreach, RunnerGone, SlotFailure, TaskEnded
from evaluator.contract.types import Verdict

MAX_ANSWER_BYTES = 256 * 1024  # answers are small: names and numbers (a batch's projections); outputs travel beside
MEMORY_CHECK_S = 0.25


class Deadline(Exception):
    """The task's limit passed while the judge waited on its runner."""


TRACE_ENV = "KRL_EVAL_TRACE"


def write_trace(driver: "TaskDriver", request_id: str, phases: dict) -> None:
    """One JSON line per task into KRL_EVAL_TRACE: its phases and its orders (type, start, seconds to the answer)."""
    path = os.environ.get(TRACE_ENV)
    if not path or driver.trace is None:
        return
    import json

    start = driver.trace[0][1] if driver.trace else 0.0
    line = json.dumps({"request_id": request_id, "phases": phases, "rounds": driver.rounds,
                       "orders": [(kind, round(at - start, 6), took) for kind, at, took in driver.trace]})
    with open(path, "a") as handle:
        handle.write(line + "\n")


class TaskDriver:
    """Orders to one runner and its answers, with the slot's other duties (spares, zygote, memory) served meanwhile."""

    def __init__(self, slot: Any, runner: Any, deadline: float, resident_limit: Optional[int] = None,
                 spares: tuple = (), on_spare: Optional[Callable[[Any], bool]] = None,
                 group_memory: Optional[Callable[[], int]] = None,
                 group_oom_kills: Optional[Callable[[], int]] = None,
                 runner_cpu_ns: Optional[Callable[[], Optional[int]]] = None):
        self.slot, self.runner, self.deadline = slot, runner, deadline
        self.runner_cpu_ns = runner_cpu_ns  # the runner's CPU time (task cgroup, else its tree): CPU mode's charge
        self.order_cpu_s: Optional[float] = None  # the runner's mean CPU for a clean ping (clean_round_trip)
        self.resident_limit = resident_limit
        self.group_memory = group_memory  # the task cgroup's charge: memfd, shm and tmpfs pages count too
        self.group_oom_kills = group_oom_kills  # the kernel's backstop (a limit above the watch's) killed in the task
        self.on_spare = on_spare
        self.selector = selectors.DefaultSelector()
        self.selector.register(runner.result_r, selectors.EVENT_READ, "runner")
        if slot.control is not None:
            self.selector.register(slot.control, selectors.EVENT_READ, "zygote")
        for spare in spares:
            self.selector.register(spare.result_r, selectors.EVENT_READ, spare)
        os.set_blocking(runner.task_w, False)
        self.runner.reader.max_bytes = MAX_ANSWER_BYTES
        self.memory_at = 0.0
        self.sent_at = self.answered_at = 0.0
        self.begun: tuple[str, float] = ("", 0.0)  # the order sent last: its type, when its sending began
        self.pending: list[dict[str, Any]] = []
        # KRL_EVAL_TRACE=file: every order's type, when the judge began sending it and when its answer came, for
        # tests/bench/bench_slot.py's breakdown of where a task's time goes (judge-side clocks only).
        self.trace: Optional[list] = [] if os.environ.get(TRACE_ENV) else None
        self.rounds: list = []  # with a trace: the timing's rounds (timing_phase.one_round)
        self.round_trip = 0.0  # clean_round_trip's figure, once measured

    def close(self) -> None:
        self.selector.close()

    # ---- one exchange
    def order(self, message: dict[str, Any], expected: str, name: Optional[str] = None,
              deadline: Optional[float] = None) -> dict[str, Any]:
        """Send `message` and return its answer (of type `expected`). sent_at / answered_at: the judge's clock just
        before the write that completed the order, and when the answer was read."""
        self.send(message, deadline)
        return self.collect(expected, name, deadline)

    def send(self, message: dict[str, Any], deadline: Optional[float] = None) -> None:
        """The first half of `order`: the judge may do its own work before it collects the answer (one order is out
        at a time all the same)."""
        from evaluator.contract.framing import encode_message

        self.expect_silence()
        self.begun = (str(message.get("type")), time.perf_counter())
        self.send_bytes(encode_message(message), deadline)

    def collect(self, expected: str, name: Optional[str] = None, deadline: Optional[float] = None) -> dict[str, Any]:
        """The second half of `order`: the answer to the order sent last. answered_at is late by whatever the judge
        did between the two."""
        answer = self.answer(expected, name, deadline)
        if self.trace is not None:
            kind, begun = self.begun
            self.trace.append((kind, round(begun, 6), round(self.answered_at - begun, 6)))
        return answer

    def clean_round_trip(self, count: int, deadline: float) -> float:
        """Seconds of the fastest of `count` round trips (ping, pong) to this runner before it has its task: no
        candidate code has run in it yet, so it is the fixed cost of an honest order (the pipe both ways, the runner's
        wake-up, its synchronisation), which the timing takes off the candidate's charge (slot/timing_phase.py)."""
        best = float("inf")
        cpu_before = self.runner_cpu_ns() if self.runner_cpu_ns is not None else None
        for _ in range(count):
            self.order({"type": "ping"}, "pong", deadline=deadline)
            best = min(best, self.answered_at - self.sent_at)
        cpu_after = self.runner_cpu_ns() if cpu_before is not None else None
        self.round_trip = best
        # The mean over the pings, read around all of them: the kernel books a process's CPU time when it stops
        # running, which one pong's arrival can precede, so a reading around a single ping may fall short of it.
        if cpu_before is not None and cpu_after is not None and count > 0:
            self.order_cpu_s = max(0, cpu_after - cpu_before) / 1e9 / count
        return best

    def send_bytes(self, data: bytes, deadline: Optional[float] = None) -> None:
        deadline = min(deadline or self.deadline, self.deadline)
        view = memoryview(data)
        while view:
            # The clock is read before each write, and the read before the one that completes the order is sent_at:
            # read after it, a judge preempted by the runner it just woke (on its own CPU, where the kernel puts a
            # woken pipe reader) started the candidate's clock once the runner had done its batch. On an H100 at 8
            # slots, identical code then read 20-112x faster than the reference in 5 of 48 tasks.
            attempted_at = time.perf_counter()
            try:
                written = os.write(self.runner.task_w, view)
                view = view[written:]
                self.sent_at = attempted_at
                continue
            except BlockingIOError:
                pass
            except OSError:
                raise RunnerGone() from None
            # The runner is not reading: wait for room, watching everything else, until the deadline.
            self.selector.register(self.runner.task_w, selectors.EVENT_WRITE, "room")
            try:
                self._wait(deadline, want_room=True)
            finally:
                self.selector.unregister(self.runner.task_w)

    def answer(self, expected: str, name: Optional[str] = None, deadline: Optional[float] = None) -> dict[str, Any]:
        deadline = min(deadline or self.deadline, self.deadline)
        while True:
            # answered_at: when the read that completed the answer began, before its decoding: a batch's projections
            # (hundreds of numbers) took the judge 0.15-0.5 ms to decode, charged to the candidate alone (identical
            # torch code read ~0.93 at one slot on an H100 with gated batches, its hand-overs 0.1-0.5 ms the longer).
            arrived = time.perf_counter()
            self.pending += self._read()
            if self.pending:
                self.answered_at = arrived
                return check_answer(self.pending.pop(0), expected, name)
            if self.runner.reader.eof:
                raise RunnerGone()
            self._wait(deadline)

    def expect_silence(self) -> None:
        """Between orders the runner says nothing: anything already there is unsolicited."""
        if self.pending or self._read() or self.runner.reader.buffer:
            raise ProtocolBreach("it sent messages the judge did not ask for")

    # ---- waiting
    def _read(self) -> list[dict[str, Any]]:
        try:
            return self.runner.reader.read()
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProtocolBreach(f"garbage on its pipe: {str(exc)[:80]}") from None

    def _wait(self, deadline: float, want_room: bool = False) -> None:
        """Until the runner's pipe is readable (or writable, with want_room) or the deadline; serves the zygote's
        reports, the spares' readiness and the memory watch meanwhile."""
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise Deadline()
            self._watch_memory(now)
            timeout = deadline - now
            if self.resident_limit:
                timeout = min(timeout, max(0.0, self.memory_at - now))
            for key, _ in self.selector.select(timeout):
                if key.data == "room":
                    return
                if key.data == "runner":
                    if not want_room:
                        return
                    if self._read():  # it talks instead of reading the order the judge is still writing
                        raise ProtocolBreach("it spoke while the judge was still sending its order")
                    if self.runner.reader.eof:
                        raise RunnerGone()
                elif key.data == "zygote":
                    self.slot.drain_control()
                    if self.slot.control is None:
                        self.selector.unregister(key.fileobj)
                        raise SlotFailure("the sandbox's zygote died during the evaluation")
                elif self.on_spare is not None:
                    if self.on_spare(key.data):
                        self.selector.unregister(key.fileobj)

    def _watch_memory(self, now: float) -> None:
        if not self.resident_limit or now < self.memory_at:
            return
        self.memory_at = now + MEMORY_CHECK_S
        used = self.slot.resident_bytes(self.runner)
        if self.group_memory is not None:
            used = max(used, self.group_memory())
        if used > self.resident_limit:
            self.slot.counters.add("memory_kills")
            raise TaskEnded(Verdict.RUNTIME_ERROR, self.memory_message(used))

    def memory_message(self, used: Optional[int] = None) -> str:
        amount = f"{used / 2**30:.1f}" if used is not None else "too many"  # the kernel's kill leaves no reading
        amount += " GiB of host memory"
        return (f"The candidate used {amount}, over the {(self.resident_limit or 0) / 2**30:.1f} GiB limit per "
                "evaluation, and was stopped. Keep host-side buffers small; work on the GPU tensors you are given.")

    def killed_for_memory(self) -> bool:
        """The runner died because the kernel's memory backstop killed in the task's cgroup: the candidate went over
        its limit between two of the watch's looks, the same fault the watch reports."""
        return self.group_oom_kills is not None and self.group_oom_kills() > 0
