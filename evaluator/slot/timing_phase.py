"""The timing of one task, measured by the judge alone. The reference runs in the judge (a process that never ran
candidate code); the candidate runs batches of calls on the judge's order and is charged what the judge measures
around them (its own clock on a GPU, the task's CPU accounting on the CPU), then shows the outputs of calls the judge
picks after each batch. Rounds interleave the two sides; an unsteady measurement is retried a bounded number of
times."""

from __future__ import annotations

import contextlib
import math
import os
import random
import statistics
import time
from typing import Any, Iterator, Optional

from evaluator.contract.types import Verdict
from evaluator.slot import device_memory
from evaluator.slot.exclusive_hold import exclusive_window
from evaluator.slot.gated_rounds import GATE_OFF_BY, GatedRounds
from evaluator.slot.outcome import Interfered, ProtocolBreach, TaskEnded, timed_again_if_interfered
from evaluator.slot.output_digest import device_digests_work
from evaluator.slot.reference_watch import WatchedReference
from evaluator.slot.round_figures import MAX_SPREAD, round_limits, side_figure, spread
from evaluator.slot.upkeep_hold import upkeep_shared

CLOCK_JUDGE_WALL = "judge_wall"  # the judge's clock around a synchronised batch (GPU)
CLOCK_TASK_CPU = "task_cpu"  # CPU time of the task's processes, from the kernel (CPU mode)
# What `speedup` means when the slot timed it (the in-process path stamps contract.types.SPEEDUP_CONVENTION).
SLOT_SPEEDUP_CONVENTION = ("judge_batches: reference timed in the judge, candidate charged around synchronised batches "
                           "by the judge (its clock on a GPU, the task's CPU accounting on a CPU), rounds interleaved, "
                           "per-call time of each side's two fastest rounds (GPU) or its median round (CPU)")
# The runner's fixed cost per order comes off each candidate order (less_round_trip), so a batch need not dwarf it.
# CPU: 5 ms halved the rounds of a 256-element ReLU against 10 ms (69 -> ~35 ms on a 2-core VM), self-speedups alike;
# the watch beside the reference keeps a window of its own (WATCHED_MIN_S), which short batches cannot give it.
BATCH_TARGET_S = {"cuda": 0.005, "cpu": 0.005}
# Per side (runner, judge) and slot: distinct value sets and their outputs never more than this. A batch of a large
# memory-bound problem is capped by it (each call needs values and an output of its own, and every output is
# projected after the batch), so a smaller budget shortens its batches until the round trip's jitter dominates:
# 512 MiB gave a 4M-element op 16-call batches of ~0.3 ms on an H100.
STAGING_BUDGET_BYTES = {"cuda": 2 << 30, "cpu": 64 << 20}
# GPU: each side's staging at most this fraction of the device's free memory at timing time, divided among the judges
# that may stage on the device at once (judging/timing.DEVICE_SLOTS_ENV, set by the pool): timings hold the device a
# round at a time, so every slot's sets can be staged together (at free/6 each, 8 slots left an honest 4M-element
# ReLU out of memory on an H100).
STAGING_FREE_SHARE = 6
# CPU: each call's value set is made on both sides (~25 us a set here), which at 4096 calls cost ~0.8 s per evaluation
# of a 256-element problem; 2048 keeps a batch >= ~5 ms there.
MAX_CALLS = {"cuda": 1024, "cpu": 2048}
# GPU: each candidate order's charge less the runner's clean round trip (slot/task_driver.clean_round_trip, measured
# before its candidate ran), at most this much: the judge's own batches have no pipe in them, and on an H100 the
# 0.1-0.3 ms of a round trip read identical torch code of ~6 us a call at 0.64x in batches of ~1.5 ms.
ROUND_TRIP_CAP_S = 0.3e-3
ORDER_CPU_CAP_S = 0.3e-3  # CPU mode's clean per-order cost taken off, at most (a 2-core VM: 0.05-0.2 ms)
# Each timing order's own bound (TimingPhase.order): this long, plus this many times its calls at the pace of the
# task's fastest correctness trial (an order that answers within it is never cut short; a trial's pace includes a whole
# output's hand-over, so it errs long).
ORDER_BASE_S = 5.0
ORDER_FACTOR = 10.0
PICKED_PER_BATCH = 2  # two calls' outputs: the same answer for both (a replay) is told from a plain wrong one
# Picked outputs travel as files and are compared whole, drawn after each batch: PICKED_PER_BATCH of the first batch
# of each size (and of every batch whose outputs the projection cannot see whole), one of every other batch. Every
# call of every batch is checked through its projection too, but a projection's bound lets through an output off by a
# few tolerances on every element, or one of zeros where outputs sit near the tolerance. Until session 29 later
# batches were picked at a share of 1/4, and red teams skipped or cut the unpicked ones: 33-79x in 6 of 21 runs
# (softmax near fp32's tolerance), 3.7-4.3x in 3 of 6 (the softmax of `softmax(x @ W) + residual` left out), 2.8-2.9x
# in 5 of 10 (the same over 4 MiB, where a CPU figure is the median of three rounds and the runner skipped two).
PICKED_LATER = 1
PROBE_CALLS = 3  # the cold round's and the sizing probe's batch
# And the GPU's batch target in milliseconds (BATCH_TARGET_S): batches sized on a warm round are longer than the
# ~0.5-1.5 ms the allocator-polluted sizing gave before session 10, so each round holds the device longer.
GPU_BATCH_MS_ENV = "KRL_WORKER_TIMING_BATCH_MS"
BASE_SETS = 2
# GPU: a counted batch whose faster side took under GROW_BELOW of the target is made longer (longer_batch), by at most
# GROW_FACTOR_MAX a time and BATCH_GROWTHS times a task; the round is dropped and the counting starts again.
GROW_BELOW, GROW_FACTOR_MAX, BATCH_GROWTHS = 0.6, 4.0, 2
# Picked outputs wait for the end of the rounds (check_kept) while the judge's copies of them and of their values stay
# under this many bytes (the runner's copies match them); beyond it they are checked at once, after the round: on a GPU
# eight judges' caches filled the device before (an honest candidate out of memory at 8 slots on an H100).
KEPT_BYTES_MAX = 512 << 20

# Further measurements of the same task by other conventions (KernelBench's: evaluator/slot/kernelbench_phase.py, set
# at the end of this module): each hook's prepare(phase) runs with the untimed start of the timing and its
# measure(phase, result) after the judge's own rounds; measure may add fields to the result and holds the device for
# each of its timed windows itself (phase.held). Both run in the judge and may order the runner through phase.driver
# (phase.measured, phase.stage) like the rounds do. A hook's figures are reported, never the reward's default.
EXTRA_TIMINGS: dict[str, Any] = {}
# CPU mode: the harness's share of the reference's charge past which speedups are capped at 1 (harness_capped). On
# this 2-core VM it was 0.88-0.97 for elementwise problems and softmax (256 elements to 1M) and 0.31 for a 32 x 1024
# x 1024 matrix product. A runner that removes a fraction r of its own harness gains 1 / (1 - r share): the red team's
# rewrite removed ~63% (2.24x at 0.88), which at 0.4 is 1.34x.
HARNESS_SHARE_MAX = 0.4


class TimingPhase(GatedRounds, WatchedReference):
    def __init__(self, task: Any, driver: Any, schedule: Any, charge: Any = None, lock: Any = None,
                 watch: Any = None, group: Any = None):
        self.task, self.driver, self.schedule = task, driver, schedule
        self.kind = "cuda" if task.device.startswith("cuda") else "cpu"
        self.charge = charge  # CpuCharge of the runner's tree (CPU mode)
        self.watch = watch if watch is not None else charge  # the same reading, for the runner's work while idle
        self.lock = lock  # DeviceLock of this GPU, held exclusive only for timed windows (held)
        self.rng = random.SystemRandom()
        self.bases: list[list] = []
        self.judge_sets: list[list] = []  # this round's value sets, made as the runner makes its own
        self.outputs: list = []  # the reference's outputs of this round's batch
        self.reference_sums: list[float] = []  # the judge's projection of its last batch (reference_hand)
        self.hand_seed = 0  # and the seed it drew, for the bounds worked out after the window (check)
        self.hand_scale = 1.0  # the projections' scale (projection.output_scale of the reference's first timing output)
        # Picked calls of the batches so far, by batch: (the name the runner keeps the output under, the judge's
        # reference output, the values, the digest the runner's hand-over gave that call's output and the seed that
        # keyed it, or None), compared after the hold (check_kept).
        self.kept: list[list[tuple[str, Any, list, Optional[tuple[bytes, int]]]]] = []
        self.kept_bytes = 0
        self.candidate_projection: list[float] = []
        # Each hand-over also digests every output (output_digest.digests), binding the picked outputs handed over
        # later to the batch's; on a GPU where Triton can make the digests there (else the picks stay unbound, said in
        # the phases as timing_picks_unbound).
        self.binds_outputs = self.kind == "cpu" or device_digests_work()
        if not self.binds_outputs:
            schedule.phases["timing_picks_unbound"] = 1
        self.candidate_digests: list[bytes] = []
        self.sets_s = 0.0  # CPU: the judge's making of its last batch's sets, seconds
        self.harness_shares: list[float] = []  # CPU, per counted round: the harness's share of the reference's charge
        self.made_events: Any = None  # made_sets' two events around its last making (GPU)
        self.harness_ms: list[float] = []  # per counted GPU round: note_harness
        self.batch_only: dict[str, float] = {}
        self.calls = 1  # calls per timed batch, once sized
        self.staged = 1
        self.staged_for = 0  # the batch size the runner was last staged for
        self.cost_counted, self.counted_cost = False, None  # the reference's flops and bytes (problem_cost)
        self.init_gates(self.kind)
        self.init_watch(group)  # group: the task's cgroup, frozen while the reference is timed (reference_watch.py)

    # ---- the two sides' batches
    def reference_batch(self, calls: int, salt: int) -> float:
        """Seconds of the reference over this round's `calls` sets, timed here, the making of the sets included (as the
        runner makes its own inside its charged batch); the sets (self.judge_sets) and outputs (self.outputs) kept."""
        import torch

        model, outputs = self.task.model, []
        self.outputs, self.judge_sets = outputs, []  # the last batch's freed before this one's are made
        with torch.no_grad():
            if self.kind == "cuda":
                torch.cuda.synchronize()
                probe = self.window_probe  # a counted window's gap probe (reference_watched), started before the clock
                if probe is not None:
                    probe.start()
                start = time.perf_counter()
                sets = self.judge_sets = self.made_sets(salt, calls)
                for index in range(calls):  # outputs kept, as the runner keeps its own for the hand-over
                    outputs.append(model(*sets[index % len(sets)]))
                probe_s = probe.end() if probe is not None else 0.0
                torch.cuda.synchronize()
                return time.perf_counter() - start - probe_s
            from evaluator.judging import sol, timing

            # Both sides' outputs on pages already mapped (the runner does the same before its batch): a page fault
            # per 4 KiB of a fresh output costs more than a small kernel's work.
            timing.keep_freed_memory()
            timing.reserve_touched_memory(4 * calls * sol.tensor_bytes(self.task.reference_outputs["timing-0"]))
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # the candidate's runner works on one thread too (its CPU time is what counts)
            try:
                start = time.thread_time_ns()
                sets = self.judge_sets = self.made_sets(salt, calls)
                made = time.thread_time_ns()
                for index in range(calls):
                    outputs.append(model(*sets[index % len(sets)]))
                ended = time.thread_time_ns()
                self.sets_s = (made - start) / 1e9  # the harness's part of the batch (harness_capped)
                return (ended - start) / 1e9
            finally:
                torch.set_num_threads(threads)

    def made_sets(self, salt: int, calls: int, shift: Any = None) -> list[list]:
        """This round's value sets, made as the runner makes its own (judge.nudged_batch of the base sets, `salt` and a
        gate's `shift`); on a GPU the making's device time is bracketed by events (made_events, read by one_round)."""
        from evaluator.judging import judge

        if self.kind != "cuda":
            return judge.nudged_batch(self.bases, salt, calls, shift)
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if callable(shift):  # a gate's wait, queued after the draws: the timed making starts behind it
            wait = shift

            def opened() -> Any:
                value = wait()
                start.record()
                return value

            shift = opened
        else:
            start.record()
        sets = judge.nudged_batch(self.bases, salt, calls, shift)
        end.record()
        self.made_events = start, end
        return sets

    def note_harness(self, reference_hand: float, calls: int) -> None:
        """A counted GPU round's harness per call, in ms: the judge's making of its sets (device time, from its own
        events) and its projection of every output, the work both sides' charges carry beside the calls. KernelBench's
        convention takes its largest as the harness of its lower bound (kernelbench_phase.py), which a dedicated
        measurement held the device ~20 ms a task for (8 slots, H100, session 15)."""
        start, end = self.made_events
        self.harness_ms.append((start.elapsed_time(end) + reference_hand * 1e3) / calls)

    def reference_hand(self, picked: list[int], seed: int) -> float:
        """Seconds of the judge doing what the runner's charged hand-over does: project every output of its batch.
        The picked outputs' files are not mirrored: neither side is charged for them (see candidate_hand)."""
        import torch

        from evaluator.contract.framing import encode_message, pack_digests, pack_floats
        from evaluator.slot.output_digest import digests
        from evaluator.slot.projection import projections

        cuda = self.kind == "cuda"
        probe = self.window_probe  # a counted window's gap probe (reference_watched): the hand-over is charged too
        if probe is not None:
            probe.start()
        start = time.perf_counter() if cuda else time.thread_time_ns() / 1e9
        self.reference_sums, self.hand_seed = projections(self.outputs, seed, self.hand_scale), seed
        mirrored = pack_digests(digests(self.outputs, seed)) if self.binds_outputs else None  # as the runner's
        probe_s = probe.end() if probe is not None else 0.0
        if cuda:
            torch.cuda.synchronize()
        # The runner's answer carries every projection, encoded on its charge: the same encoding on the judge's (with
        # JSON's numbers, ~1 ms for 2048 calls on a 2-core VM, identical code read 0.71x at 256 elements without it).
        encode_message({"type": "handed", "projections": pack_floats(self.reference_sums), "digests": mirrored})
        return (time.perf_counter() if cuda else time.thread_time_ns() / 1e9) - start - probe_s

    def order(self, message: dict[str, Any], expected: str, calls: int) -> dict[str, Any]:
        """The runner's answer to an order of the timing that covers `calls` calls, within a bound of its own:
        ORDER_BASE_S plus ORDER_FACTOR times the calls at the pace of its fastest correctness trial. A candidate that
        hangs or spins in its timing (an honest loop bound that the nudged values break, or a hostile one) otherwise
        held the device exclusive, and every other slot's timing with it, until its task's limit (60 s)."""
        with self.order_bound(calls) as deadline:
            return self.driver.order(message, expected, deadline=deadline)

    def collected(self, expected: str, calls: int) -> dict[str, Any]:
        """A further answer to the order sent last (an armed drain's second), within the same bound as `order`."""
        with self.order_bound(calls) as deadline:
            return self.driver.collect(expected, deadline=deadline)

    @contextlib.contextmanager
    def order_bound(self, calls: int) -> Iterator[Optional[float]]:
        """The deadline of an order covering `calls` calls (None: the task's own), and the timeout past it."""
        from evaluator.slot.task_driver import Deadline

        trial_s = self.schedule.fastest_trial_s
        if trial_s is None:
            yield None
            return
        bound_s = ORDER_BASE_S + ORDER_FACTOR * max(1, calls) * trial_s
        try:
            yield time.monotonic() + bound_s
        except Deadline:
            if time.monotonic() >= self.driver.deadline:
                raise  # the task's own limit: the usual timeout
            raise TaskEnded(Verdict.TIMEOUT, f"Stopped while being timed: an order of {calls} call(s) took over "
                            f"{bound_s:.1f} s, where each correctness trial took at most {trial_s:.3f} s.") from None

    def measured(self, message: dict[str, Any], expected: str, calls: int = 1) -> tuple[float, dict[str, Any]]:
        """Seconds the runner took to answer `message` (an order covering `calls` calls), as the judge measures it, and
        the answer."""
        before = self.charge.now() if self.charge is not None else 0
        answer = self.order(message, expected, calls)
        if self.charge is not None:
            return (self.charge_read_frozen() - before) / 1e9, answer
        return self.driver.answered_at - self.driver.sent_at, answer

    def less_round_trip(self, seconds: float, share: float = 1.0) -> float:
        """A candidate order's charge in the judge's rounds, less the fixed cost of an honest order measured before any
        candidate code ran in the runner (task_driver.clean_round_trip), capped, and never below half the raw figure.
        GPU: the clean round trip on the judge's clock (a `share` of it where the clock holds only the answer's way).
        CPU: the runner's CPU time for a clean ping (reading the order, answering), which the judge's own reference
        batch never pays."""
        if self.charge is not None:
            fixed = min(self.driver.order_cpu_s or 0.0, ORDER_CPU_CAP_S)
        else:
            fixed = share * min(self.driver.round_trip, ROUND_TRIP_CAP_S)
        return max(seconds - fixed, seconds / 2)

    def candidate_batch(self, calls: int, salt: int, picked: list[int], seed: int) -> tuple[float, float]:
        """Seconds of the candidate's batch (its value sets made from `salt` inside it) and of its hand-over (picked
        outputs, every output's projection)."""
        seconds, _ = self.measured({"type": "run", "calls": calls, "salt": salt}, "ran", calls)
        seconds = self.batch_only["candidate"] = self.less_round_trip(seconds)
        return seconds, self.less_round_trip(self.candidate_hand(calls, picked, seed))

    def candidate_hand(self, calls: int, picked: list[int], seed: int) -> float:
        """Seconds charged for the runner's hand-over of its last batch: the projection of every call's output (an
        order of its own, charged in full, as the judge's own projection is), then the picked outputs' files (not
        charged: the projection has already shown every output, so no work of the batch can still be pending; in CPU
        mode the files' writes inside the sandbox cost the runner 2-3x the judge's, which read identical code as 0.4x
        at 1 MiB when both were charged)."""
        from evaluator.contract.framing import unpack_digests, unpack_floats

        order = {"type": "hand", "seed": seed, "scale": self.hand_scale, "digest": self.binds_outputs}
        hand_s, answer = self.measured(order, "handed")
        projected = unpack_floats(answer.get("projections"), calls)
        if projected is None:
            raise ProtocolBreach("its hand-over did not project every call of the batch")
        self.candidate_projection = projected
        if self.binds_outputs:
            digested = unpack_digests(answer.get("digests"), calls)
            if digested is None:
                raise ProtocolBreach("its hand-over did not digest every call of the batch")
            self.candidate_digests = digested
        if picked:
            self.order({"type": "keep", "calls": {self.kept_name(call): call for call in picked}}, "kept", len(picked))
        return hand_s

    def kept_name(self, call: int) -> str:
        """The name call `call` of the current batch is kept under. Numbered from 1 again after each check_kept, so
        the runner's outputs folder holds no more kept files than one pending set (they stay until the task ends)."""
        return f"kept-{len(self.kept) + 1}-{call}"

    def check(self, picked: list[int]) -> None:
        """Every call through its projection, now; the picked outputs, kept in the runner, against the reference outputs
        of the same values after the exclusive hold (check_kept), or at once when a projection is wrong."""
        from evaluator.judging.second_look import ACCEPTED_ERROR_FACTOR
        from evaluator.slot.projection import allowed_differences

        if picked:
            from evaluator.judging.sol import tensor_bytes

            batch = [(self.kept_name(call), self.outputs[call], self.judge_sets[call],
                      (self.candidate_digests[call], self.hand_seed) if self.binds_outputs else None)
                     for call in picked]
            self.kept.append(batch)
            self.kept_bytes += sum(tensor_bytes(output) + tensor_bytes(values) for _, output, values, _ in batch)
            if self.kept_bytes > KEPT_BYTES_MAX:
                self.check_kept()
        atol, rtol = self.task.request.tolerances()
        # How far each projection may be off, worked out now, untimed: the hand-overs answer the sums alone. Near misses
        # up to twice the trials' largest accepted difference are accepted on a few elements (second_look).
        near_miss_diff = ACCEPTED_ERROR_FACTOR * (self.task.accepted_max_abs_diff or 0.0)
        allowed = allowed_differences(self.outputs, self.hand_seed, atol, rtol, near_miss_diff, self.hand_scale)
        for call, (got, want, bound) in enumerate(zip(self.candidate_projection, self.reference_sums, allowed)):
            if not abs(got - want) <= bound:  # NaN fails too
                self.check_kept()  # a replay among the picked outputs says more (cached_output) than a wrong sum
                raise TaskEnded(Verdict.WRONG_OUTPUT, f"Wrong while being timed: the output of timed call {call} "
                                f"does not match the reference (projection {got:.6g}, expected {want:.6g}).")

    def check_kept(self) -> None:
        """The picked outputs the runner kept during the timing, handed over in one order and compared with the
        reference outputs the judge kept: after the rounds, in one order rather than one a round (the files and
        comparisons were most of the 0.21 s a task spent in hand-over orders at one slot on an H100). The same answer
        handed for another call of its batch too is a replay (schedule.wrong). Each must be the output its batch's
        hand-over digested (where digests bind outputs): else the runner computed it once named, not in the batch."""
        from evaluator.slot.output_digest import digests

        kept, self.kept, self.kept_bytes = self.kept, [], 0
        names = [name for batch in kept for name, *_ in batch]
        if not names:
            return
        self.order({"type": "hand", "kept": names}, "handed", len(names))
        for batch in kept:
            checked = [self.task.compare(name, reference, lambda values=values: values)
                       for name, reference, values, _ in batch]
            for (name, *_, committed), (_, output) in zip(batch, checked):
                if committed is not None and output is not None and digests([output], committed[1]) != [committed[0]]:
                    raise ProtocolBreach(f"the output it handed over as {name} is not the one its timed batch "
                                         "produced and digested")
            outputs = [output for _, output in checked]
            for index, (comparison, output) in enumerate(checked):
                if not comparison.ok:
                    self.schedule.wrong(comparison, output, "while being timed", outputs[:index] + outputs[index + 1:])
            for output in outputs:
                self.schedule.remember(output)

    # ---- the rounds
    def run(self, result: Any) -> None:
        from evaluator.judging import sol, timing
        from evaluator.slot.projection import output_scale

        setup_from = time.perf_counter()
        names = [f"timing-{j}" for j in range(BASE_SETS)]
        with self.schedule.on_device("timing_inputs"):  # the judge's inputs: GPU work, not yet exclusive
            self.bases = [self.task.make(name) for name in names]
        set_bytes = sol.tensor_bytes(self.bases[0]) + sol.tensor_bytes(self.task.reference_outputs[names[0]])
        self.hand_scale = output_scale(self.task.reference_outputs[names[0]])
        self.staged = max(1, min(MAX_CALLS[self.kind], self.staging_budget() // max(1, set_bytes)))
        if self.kind == "cuda":  # how many of the task's device allocations its timing makes (recorded only)
            mallocs_before = device_memory.allocator_counts(reset_peak=False).get("mallocs")
        import torch

        threads = torch.get_num_threads()
        if self.kind == "cpu":  # the judge's own work on one thread: on a loaded host a pool per small op stalls
            torch.set_num_threads(1)  # (0.5-1.9 s to make 32 MiB of value sets with two threads, 30 ms with one)
        try:
            if self.kind == "cuda":
                self.problem_cost()  # counted before any round (the flop counter runs the reference)
            started = time.perf_counter()
            self.schedule.phases["timing_setup"] = round(started - setup_from, 6)  # inputs, staging, flop count
            probe_calls = self.warmed()
            reference_ms, candidate_ms = self.rounds(probe_calls)
            self.round_ms = reference_ms, candidate_ms  # per call, for the hooks (kernelbench_phase's lower bound)
            rounds_done = time.perf_counter()
            if self.kind == "cuda":  # whether the counted rounds were gated (a blocked side turns them off)
                self.schedule.phases["timing_gated"] = int(self.gated)
            for hook in EXTRA_TIMINGS.values():
                hook.measure(self, result)
            self.check_watched_together()
            # Where the timing's time goes (waits for the device included): the rounds, then the hooks; the device's
            # exclusive holds alone add up in timing_held (the slot's throughput is bounded by their sum).
            self.schedule.phases["timing_rounds"] = round(rounds_done - started, 6)
            self.schedule.phases["timing_hooks"] = round(time.perf_counter() - rounds_done, 6)
        finally:
            torch.set_num_threads(threads)
            self.close_gates()
            if self.kind == "cuda":  # the judge's staging back to the device before the next slot's timing: eight
                # judges each keeping 2+ GiB cached left an honest candidate out of memory at 8 slots on an H100
                self.judge_sets, self.outputs = [], []
                mallocs_after = device_memory.allocator_counts(reset_peak=False).get("mallocs")
                if mallocs_before is not None and mallocs_after is not None:
                    self.schedule.phases["judge_cuda_mallocs_timing"] = mallocs_after - mallocs_before
                device_memory.release_device_cache()
        kept_from = time.perf_counter()
        with self.schedule.on_device("timing_checks"):  # the picked outputs' files and comparisons: GPU work, shared
            self.check_kept()  # its copies go back to the device with the task's end (device_memory.release_device_cache)
        self.schedule.phases["timing_kept"] = round(time.perf_counter() - kept_from, 6)
        self.schedule.phases["round_trip"] = round(self.driver.round_trip, 6)
        if self.charge is not None and self.driver.order_cpu_s is not None:
            self.schedule.phases["order_cpu"] = round(self.driver.order_cpu_s, 6)
        self.schedule.phases["timing_spread"] = round(max(spread(candidate_ms), spread(reference_ms)), 4)
        # The calls each side ran in the rounds the figure comes from (bench_slot_cpu.py times as many bare).
        self.schedule.phases["timing_counted_calls"] = self.calls * len(candidate_ms)
        result.kernel_runtime = timing.summarize(candidate_ms)
        result.reference_runtime = timing.summarize(reference_ms)
        result.timing_clock = CLOCK_JUDGE_WALL if self.kind == "cuda" else CLOCK_TASK_CPU
        result.speedup_convention = SLOT_SPEEDUP_CONVENTION
        candidate = side_figure(candidate_ms, self.kind)
        result.speedup = side_figure(reference_ms, self.kind) / candidate if candidate > 0 else None
        self.speed_of_light(result, candidate)
        self.harness_capped(result)

    def harness_capped(self, result: Any) -> None:
        """CPU mode: where the harness (the sets' making, the hand-over's projections and digests) is over
        HARNESS_SHARE_MAX of the reference's charge, both speedups are capped at 1. Each side is charged its own
        harness, and the runner's is code in the candidate's process: patched to make its sets in bulk, run one
        call over the whole batch and project from one buffer, with every output exact, it read 2.24x (median of 5)
        on a 256-element ReLU where honest code read 0.95 (red team, session 28). Honest speedups there are mostly
        harness anyway: at a share of 0.88 a kernel twice as fast reads ~1.06x. The share is the judge's own: its sets'
        making and its hand-over over its whole charge, the median of the counted rounds (timing_harness_share)."""
        if self.kind == "cuda" or not self.harness_shares:
            return
        share = statistics.median(self.harness_shares)
        self.schedule.phases["timing_harness_share"] = round(share, 4)
        if share <= HARNESS_SHARE_MAX:
            return
        self.schedule.phases["timing_speedup_capped"] = 1
        for name in ("speedup", "speedup_kernelbench"):
            if getattr(result, name, None) is not None:
                setattr(result, name, min(getattr(result, name), 1.0))

    def held(self, exclusive: bool = True, why: str = "rounds") -> Any:
        """This GPU held exclusive for one timed window (a round's two sides, a measurement the hooks compare with);
        nothing when not `exclusive` (a round that only warms) or on the CPU (no lock). Only the timed windows are
        held, not the whole timing: held whole, a task kept the device 0.65-0.73 s at 8 slots on an H100, most of it
        in rounds that only warm (the cold round, each batch size's first), and tasks went through that hold one at a
        time; a window at a time, 0.26-0.38 s."""
        if not exclusive or self.lock is None:
            return contextlib.nullcontext()
        return exclusive_window(self.lock, self.driver.deadline, self.schedule.phases, self.runner_pid(), why)

    @contextlib.contextmanager
    def held_together(self, why: str) -> Iterator[None]:
        """Several timed windows (a task's counted rounds) held as one where exclusive_hold.rounds_held_together() says
        so: the windows inside take nothing more, and the work between them (queueing, the checks) is held too. After
        a drain that overran (a shared step still on the device past its bound, such as a hog's long trials) the group
        lets go, and each round waits for a drain of its own rather than all of them running beside it (beside
        bandwidth hogs an honest speedup read 1.43x once, session 24, call D). Nothing on the CPU."""
        from evaluator.slot.exclusive_hold import rounds_held_together

        if self.lock is not None and rounds_held_together():
            with self.held(True, why):
                if not self.lock.overran:
                    yield
                    return
        yield

    def staging_budget(self) -> int:
        """Bytes of value sets and outputs each side may stage: STAGING_BUDGET_BYTES, and on a GPU at most a share of
        what the device has free now (the runner's sets and outputs, the judge's, the reference's outputs and the
        batch's temporaries all come out of it, beside the other slots' processes)."""
        budget = STAGING_BUDGET_BYTES[self.kind]
        if self.kind == "cuda":
            import torch

            from evaluator.judging.timing import device_slots

            free, _total = torch.cuda.mem_get_info()
            budget = min(budget, free // (STAGING_FREE_SHARE * device_slots()))
        return budget

    def projected_whole(self) -> bool:
        """Whether the projection sees every element of the outputs (floating-point tensors only): only then may a
        batch go without picked outputs. An index or mask output (argmax, a comparison) is checked by picks alone."""
        import torch

        from evaluator.judging import judge

        parts = judge.flatten_output(self.task.reference_outputs.get("timing-0"))
        return bool(parts) and all(isinstance(p, torch.Tensor) and p.is_floating_point() for p in parts)

    def picks(self, calls: int, first: bool) -> list[int]:
        """The calls of a batch whose whole outputs the runner hands over: PICKED_PER_BATCH of them on a `first` batch
        (of its size, or of a phase) and on every batch whose outputs the projection cannot see whole, else
        PICKED_LATER.
        Each pick is a copy the runner keeps on the device, handed over as a file after the rounds; every output is
        projected either way."""
        count = PICKED_PER_BATCH if first or not self.projected_whole() else PICKED_LATER
        return sorted(self.rng.sample(range(calls), min(count, calls)))

    def runner_pid(self) -> int:
        """The timed runner's pid as this process sees it (0 where unknown: then only the judge is boosted)."""
        return self.driver.runner.host_pid

    def speed_of_light(self, result: Any, measured_ms: float) -> None:
        """The speed-of-light time and fraction on this GPU, reported from the judge's own reference
        (evaluator/judging/sol.py).
        Not judged here: the batch's inputs may sit in L2, which sol.hack_floor_ms assumes flushed."""
        from evaluator.judging import sol

        if self.kind != "cuda":
            return
        import torch

        spec = sol.device_spec(torch.cuda.get_device_name(0))
        if spec is None:
            return
        cost = self.problem_cost()
        if cost is None:
            return
        result.sol_time_ms = sol.sol_time_ms(cost.flops, cost.bytes_moved, spec, self.task.request.precision,
                                             cost.tf32_flops)
        result.sol_fraction = sol.sol_fraction(result.sol_time_ms, measured_ms)

    def problem_cost(self) -> Any:
        """The reference's flops and bytes (evaluator/judging/sol.py) on the first timing set, counted once per task and
        before the device is held (the flop counter runs the reference); None where the counter cannot follow it."""
        from evaluator.judging import judge, sol

        if not self.cost_counted:
            self.cost_counted = True
            try:
                self.counted_cost = sol.problem_cost(self.task.model, judge.clone_inputs(self.bases[0]))
            except Exception:  # noqa: BLE001 - the flop counter cannot follow this reference: no cost known
                self.counted_cost = None
        return self.counted_cost

    def one_round(self, calls: int, candidate_first: bool, counted: bool = False,
                  exclusive: bool = True) -> tuple[float, float]:
        """(reference, candidate) seconds per call of one round: both sides on the same fresh value sets, each timed
        over its batch and its hand-over; then the judge's checks (untimed). An `exclusive` round holds the device
        (held): the counted rounds and the sizing ones (sized beside another slot's round, a probe read 3 ms a call
        of a 20 us ReLU and gave it 1-call batches); the cold and warm rounds only warm both sides, beside whatever
        the other slots do. A `counted` round watches the runner while the reference is timed (reference_watched)."""
        if exclusive:  # a block while queueing may have halved what a gate holds back since this length was chosen
            calls = min(calls, self.most_calls())
        waited_before = self.schedule.phases.get("device_wait", 0.0)
        first = calls != self.staged_for
        salt = self.stage(calls)
        picked = self.picks(calls, first)
        seed = self.rng.getrandbits(30)
        hands = {}
        try:
            if exclusive and self.gated:
                with upkeep_shared(self.lock):  # a measurement knob (a counted round's hold takes nothing more)
                    queued = self.queued_both(calls, salt, counted)
                if not queued:  # dropped: this round again, its batch halved or ungated
                    return self.one_round(calls, candidate_first, counted, exclusive)
                self.gated_sides(candidate_first, counted, calls, picked, seed, hands)
            else:
                self.issued_sides(candidate_first, counted, exclusive, calls, salt, picked, seed, hands)
        except Interfered:
            # A round timed again still has its outputs checked: a runner that learnt from `keep` that its skipped
            # batch was picked, then worked beside the reference to have the round dropped, escaped the check (red
            # team, session 29: 29% to 56% of runs correct at 34-79x).
            if "candidate" in hands and "reference" in hands:
                self.check(picked)
            raise
        self.check(picked)
        if counted and self.kind == "cuda":
            self.note_harness(hands["reference"], calls)
        if counted and self.kind != "cuda":
            charged = self.batch_only["reference"] + hands["reference"]
            self.harness_shares.append((self.sets_s + hands["reference"]) / charged if charged > 0 else 1.0)
        if self.driver.trace is not None:  # per round for the benchmark's trace: batch and hand-over of each side, ms
            # and the round's wait for the device (a window that follows another slot's at once, or not)
            self.driver.rounds.append([calls] + [round(v * 1e3, 4) for v in (
                self.batch_only["reference"], hands["reference"], self.batch_only["candidate"], hands["candidate"],
                self.schedule.phases.get("device_wait", 0.0) - waited_before)])
        reference, candidate = self.charged(hands["reference"], hands["candidate"])
        return reference / calls, candidate / calls

    def issued_sides(self, candidate_first: bool, counted: bool, exclusive: bool, calls: int, salt: int,
                     picked: list[int], seed: int, hands: dict) -> None:
        """One round's two sides, each batch issued and timed as it goes (CPU; GPU without gates; the unheld warm
        rounds, held shared where KRL_WORKER_DEVICE_SHARED_STEPS names `warm_rounds`, the hand-overs too: their stacks
        and projections read a whole batch's outputs, as much traffic as a small problem's timed batch)."""
        step = self.schedule.on_device("warm_rounds") if not exclusive else contextlib.nullcontext()
        with step, self.held(exclusive, "rounds" if counted else "sizing"):
            for side in self.sides(candidate_first):
                if side == "reference":
                    with self.reference_watched(counted):
                        self.batch_only[side] = self.reference_batch(calls, salt)
                        hands[side] = self.reference_hand(picked, seed)
                else:
                    _, hands[side] = self.candidate_batch(calls, salt, picked, seed)

    @staticmethod
    def sides(candidate_first: bool) -> tuple[str, str]:
        """The two sides of a round in the order they run (rounds alternate it)."""
        return ("candidate", "reference") if candidate_first else ("reference", "candidate")

    def charged(self, reference_hand: float, candidate_hand: float) -> tuple[float, float]:
        """(reference, candidate) seconds charged for this round: each side's batch and its projection of every output
        (work deferred from the batch must be done before the projection can be right)."""
        return self.batch_only["reference"] + reference_hand, self.batch_only["candidate"] + candidate_hand

    def warmed(self) -> int:
        """The untimed start of a timing: one cold round (GPU), one probe round that sizes the next (by the slower
        side), the hooks' preparations. Returns the probe's batch size."""
        warm = min(self.staged, PROBE_CALLS)
        if self.kind == "cuda":
            # The very first round of a task is colder still (each side's first launches at this size, the runner's
            # first staging): sized on it, 8 slots on an H100 gave a ~6 us kernel 1-call batches (24 ms for 3 calls),
            # timed at ~0.5 ms a call of fixed costs on both sides and unsteady to the end. Run once, unused, outside
            # the hold (it took 50-300 ms there at 8 slots). (CPU: the sizing already settles, and a round there is
            # charged CPU time on a 2-core host.)
            self.one_round(warm, False, exclusive=False)
        calls = self.sized(warm, probe=True)
        for hook in EXTRA_TIMINGS.values():
            hook.prepare(self)
        return calls

    def rounds(self, calls: int) -> tuple[list[float], list[float]]:
        """Per-call milliseconds of every counted round, (reference, candidate), batches sized from a probe of
        `calls`."""
        warm = min(self.staged, PROBE_CALLS)
        # The first calls are cold and carry the batch's fixed costs (its sets made, first allocations): sized on
        # them alone, a CPU batch came out at ~1 ms (15 us against 3 us per tiny call), where the runner's fixed
        # cost per order read identical code as 0.75x; on an H100 a 6 us ReLU got 3-call batches, ~0.7 ms charged
        # per call on both sides and speedups of identical torch ops from 0.44 to 1.05. Sized again on a batch of
        # the estimated length, also when the probe asked for no more than its own calls: a probe slowed by the
        # neighbours (5 ms for 3 calls of a Triton ReLU at 8 slots on an H100) gave 2-call batches of ~0.4 ms, whose
        # rounds the host's hiccups (10-60 ms) made read 4.1x; on a CPU, a probe that carried a fork gave 0.5 ms
        # batches, too short for the watch beside the reference to see a process working there.
        estimate = max(calls, warm)
        if self.kind == "cuda" and estimate != self.staged_for:
            # And warmed at that length first, untimed and outside the hold: a size's first round allocates its sets
            # and outputs on both sides, and at 8 slots on an H100 a 13-call sizing round of a small ReLU took 110 ms
            # (judge) and 183 ms (runner) against ~0.3 ms a call later. Sized on it, identical torch code got 1- to
            # 7-call batches of 0.25-0.6 ms (the target is 5 ms) and read a median of 0.85 (session 10, call A).
            self.one_round(estimate, False, exclusive=False)
        calls = self.sized(estimate)
        if calls != self.staged_for:
            # Warm at the batch size the counted rounds use, outside the hold, unless the sizing ran at it already: a
            # size's first round allocates its sets and outputs on both sides (the caching allocator grows), 20-80 ms
            # a side on an H100 at 8 slots.
            # CPU: the runner's first hand-over at a new size took 7-10 ms against the judge's 2 (a 1 MiB ReLU's
            # projection faulting in its temporaries), and was one of the three counted rounds: identical code 0.75x.
            self.one_round(calls, False, exclusive=False)
        self.calls = calls
        reference_ms: list[float] = []
        candidate_ms: list[float] = []
        # The request's timing_trials bounds the rounds (a cheap evaluation asks for few); each round is a batch.
        most, extra_most = round_limits(self.kind)
        rounds = max(1, min(most, int(self.task.request.timing_trials)))
        self.add_round(calls, 0, reference_ms, candidate_ms)
        for _ in range(BATCH_GROWTHS):
            longer = self.longer_batch(calls)
            if longer == calls:
                break
            # The first counted round was short of the target: its fixed costs (two orders' round trips, the sets'
            # making, the synchronisation) were sized as if they were per call. Dropped; warmed at the longer length
            # outside the hold, then counted afresh.
            reference_ms.clear()
            candidate_ms.clear()
            self.one_round(longer, False, exclusive=False)
            calls = self.calls = longer
            self.add_round(calls, 0, reference_ms, candidate_ms)
        extra = 0
        with self.held_together("rounds"):
            for index in range(1, rounds):
                self.add_round(calls, index, reference_ms, candidate_ms)
            # Unsteady: one more round at a time, judged on the latest `rounds`, rather than all of them again (a whole
            # repeat cost ~2.5 attempts per evaluation on an H100, most of the timing's time).
            limit = min(extra_most, rounds)
            while extra < limit and self.unsteady(reference_ms[-rounds:], candidate_ms[-rounds:]):
                self.add_round(calls, rounds + extra, reference_ms, candidate_ms)
                extra += 1
        if extra:
            self.schedule.phases["timing_extra_rounds"] = extra
        if self.unsteady(reference_ms[-rounds:], candidate_ms[-rounds:]):
            return reference_ms, candidate_ms  # never steady: the median over every round
        return reference_ms[-rounds:], candidate_ms[-rounds:]

    def add_round(self, calls: int, index: int, reference_ms: list[float], candidate_ms: list[float]) -> None:
        reference, candidate = timed_again_if_interfered(lambda: self.one_round(calls, index % 2 == 1, counted=True))
        reference_ms.append(reference * 1e3)
        candidate_ms.append(candidate * 1e3)

    @staticmethod
    def unsteady(reference_ms: list[float], candidate_ms: list[float]) -> bool:
        return spread(candidate_ms) > MAX_SPREAD or spread(reference_ms) > MAX_SPREAD

    def sized(self, warm: int, probe: bool = False) -> int:
        """Calls per batch for BATCH_TARGET_S, from one untimed round of `warm` calls (batches alone: the hand-over's
        cost does not grow with the calls). A `probe` from a few cold calls sizes by the slower side, so the next
        sizing round cannot overshoot: sized by the faster side, a 3-call probe gave a ~6 us kernel 931-call batches,
        0.75 s of one task's hold at 8 slots on an H100 (each new value set allocated), then 16-call batches."""
        self.one_round(warm, False)
        reference_s, candidate_s = self.batch_only["reference"] / warm, self.batch_only["candidate"] / warm
        target = batch_target_s(self.kind)
        if self.kind == "cpu" or probe:  # the slower side's batch near the target: a slow candidate (a process
            # spawned per call) must not get the reference's thousands of calls, nor a slow reference the candidate's
            return max(1, min(self.most_calls(), int(target / max(reference_s, candidate_s, 1e-7))))
        # A short batch's pipe round trip inflates the candidate's estimate: never fewer calls than the reference
        # would get (H100: batches of ~0.5 ms otherwise, unsteady and biased by the round trip).
        reference_calls = int(target / max(reference_s, 1e-7))
        return max(1, min(self.most_calls(), max(reference_calls, int(target / max(candidate_s, 1e-7)))))

    def most_calls(self) -> int:
        """Calls a batch may have: what both sides can stage, and while gated what a gate can hold back."""
        return min(self.staged, self.gate_cap) if self.gated else self.staged

    def longer_batch(self, calls: int) -> int:
        """GPU: the batch length for the next counted rounds, from the last round's batches (at a length already warm):
        longer where the faster side's batch fell under GROW_BELOW of the target, at most GROW_FACTOR_MAX times.
        The sizing estimates per call from short batches whose fixed costs dominate: at one slot on an H100 a
        15-call round of a torch ReLU read ~39 us a call, and its 127-call batches then took 1.6-2.5 ms of the 5 ms
        target (13-20 us a call), where the candidate's two round trips a round weigh 2-3 times as much."""
        most = self.most_calls()
        if self.kind != "cuda" or calls >= most:
            return calls
        target = batch_target_s(self.kind)
        faster = min(self.batch_only["reference"], self.batch_only["candidate"])
        if faster >= GROW_BELOW * target:
            return calls
        return min(most, max(calls + 1, int(calls * min(GROW_FACTOR_MAX, target / max(faster, 1e-7)))))

    def stage(self, calls: int) -> int:
        """The runner ready for a batch of `calls` (its base sets loaded, its pages mapped), and the salt of the batch's
        fresh values (a memo from an earlier call or batch answers stale). The salt travels only with the charged `run`
        order: a runner that knew the values here could compute every output off the clock."""
        # GPU: the base sets stay loaded between rounds of one batch size. CPU: staged before every batch, which maps
        # the batch's pages afresh in the runner as the judge's are (staged once, identical code read ~0.83x).
        if calls != self.staged_for or self.kind == "cpu":
            order: dict[str, Any] = {"type": "stage", "sets": [f"timing-{j}" for j in range(BASE_SETS)], "count": calls}
            page = self.open_gate_page() if self.gated and self.gate_page is None else None
            if page is not None:
                order["gate"] = page
            answer = self.order(order, "staged", calls)
            if page is not None and answer.get("gate") is not True:  # the runner cannot wait on it: no gates
                self.gated = False
                self.schedule.phases["timing_gate_off"] = GATE_OFF_BY["runner"]
            self.staged_for = calls
        return self.rng.getrandbits(30)


def batch_target_s(kind: str) -> float:
    """Seconds a timed batch aims at: BATCH_TARGET_S, on a GPU overridden by GPU_BATCH_MS_ENV (0.5-50 ms) where set."""
    try:
        milliseconds = float(os.environ.get(GPU_BATCH_MS_ENV, "") if kind == "cuda" else "")
    except ValueError:
        return BATCH_TARGET_S[kind]
    return BATCH_TARGET_S[kind] if math.isnan(milliseconds) else min(0.05, max(0.5e-3, milliseconds / 1e3))


def _register_kernelbench() -> None:
    from evaluator.slot import kernelbench_phase

    EXTRA_TIMINGS.setdefault("kernelbench", kernelbench_phase)


_register_kernelbench()
