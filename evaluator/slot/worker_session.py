"""The candidate side of one task in a slot: the real worker's checks, run one judge order at a time. It answers
only with outputs and findings; the judge makes every input, times every call and decides every verdict."""

from __future__ import annotations

import socket
from typing import Any, Optional

from evaluator.judging import judge, kernelbench_timing, sol, timing
from evaluator.contract.types import EvalRequest, EvalResult, Verdict
from evaluator.judging.rules import runtime as runtime_rules
from evaluator.judging.rules import static as static_rules
from evaluator.slot.run_state import RunState, note_broken_context, record_failure
from evaluator.slot.worker_outcome import Outcome, hack


class TaskSession(RunState):
    """One request on a runner. Each method is one order of the judge; a candidate fault raises (see failure())."""

    def __init__(self, request: EvalRequest, ctx: Any, prebuilt: Optional[dict]):
        import torch

        result = EvalResult(request_id=request.request_id, problem_id=request.problem_id, verdict=Verdict.RUNTIME_ERROR,
                            device_name=ctx.device_name, node=socket.gethostname(),
                            timing_clock=timing.CLOCK_CUDA if ctx.is_cuda else timing.CLOCK_MONOTONIC)
        super().__init__(request, ctx, result, torch)
        self.prebuilt = prebuilt
        self.pushed: dict[str, list] = {}  # input sets the judge pushed, by name (poison: for the kernel checks)
        self.models: Optional[tuple] = None
        self.last_inputs: list = []
        self.sets: list[list] = []
        self.bases: list[list] = []  # the timing base sets, on the device once staged
        self.outputs: list = []
        self.profiler_released = False  # CUPTI detached after the last profile (release_profiler)
        self.kernelbench_flush: Any = None  # KernelBench's flush buffer, made by the first eager order
        self.kept: dict[str, Any] = {}  # picked outputs kept for the judge (keep), by name
        self.gate: Any = None  # the judge's device gate (slot/device_gate.py), once attached
        self.trial_output: Any = None  # the last trial's output, kept alive to see whether the next one reuses it
        self.reuses_outputs = False  # two trials returned one storage: batches keep a copy of every output at once

    # ---- orders
    def load(self, prebuilt: Optional[dict] = None) -> tuple:
        if self.models is None:
            with self.torch.no_grad():
                self.models = super().load(self.prebuilt)
        return self.models

    def trial(self, inputs: list) -> Any:
        """One correctness call on the judge's inputs; the judge compares the output with its own reference."""
        _, _, new_model, watch = self.models
        inputs = judge.to_device(inputs, self.ctx.device)
        pristine = judge.clone_inputs(inputs)
        counter = self.ctx.launch_counter
        before = counter.count
        with self.torch.no_grad():
            output = self._call_candidate(new_model, inputs, watch, verify=False)
        self.trial_launches.append(counter.count - before)
        self.ctx.guard.reset_numeric_flags()
        hack(runtime_rules.check_inputs_unchanged(inputs, pristine))
        self.last_inputs = inputs
        self.output_bytes = sol.tensor_bytes(output)
        self.reuses_outputs = self.reuses_outputs or judge.shares_storage(output, self.trial_output)
        self.trial_output = output
        return output

    def kernel_checks(self, poison_inputs: list, swap_inputs: list) -> None:
        """The candidate's own kernels must run and their work must reach the output (poisoning, on `poison_inputs`;
        swapped writes from `swap_inputs`); advisory evidence."""
        if self.request.backend not in ("triton", "cuda"):
            return
        reference, _, new_model, watch = self.models
        self.pushed["poison"] = judge.to_device(poison_inputs, self.ctx.device)
        self.pushed["swap"] = judge.to_device(swap_inputs, self.ctx.device)
        own_names = static_rules.own_kernel_names(self.request.candidate_source)
        with self.torch.no_grad():
            self._check_custom_kernel_used(new_model, self.last_inputs, own_names, watch)
            self._check_output_uses_kernels(reference, new_model, watch)
        self._verify_untampered()
        # CUPTI stays attached until the timing's first staging (stage), which the judge sends without holding the
        # device: its teardown (a profiler session of its own, ~30 ms) then lengthens no shared step.

    def release_profiler(self) -> None:
        """CUPTI detached once this runner profiles no more, before any timed batch (timing.release_cupti)."""
        if self.ctx.is_cuda and not self.profiler_released:
            self.profiler_released = True
            timing.release_cupti()

    def _inputs_named(self, name: str, reference: Any) -> list:
        return self.pushed[name]

    def stage(self, bases: list[list], count: int) -> None:
        """Ready for timed batches of up to `count` calls: the base sets on the device and (CPU) the batch's pages
        mapped. The values themselves are made inside the charged batch, from the salt its order brings (make_sets):
        a runner that knew them here could compute every output off the clock."""
        self.release_profiler()  # (a torch candidate's runner never attached CUPTI: nothing to release then)
        self.trial_output = None  # the trials are over: a whole output need not stay on the device through the timing
        if not self.ctx.is_cuda:
            # CPU mode charges every thread of the task: one intra-op thread, as the reference has in the judge, so
            # no pool thread spins idle on the candidate's account (the guard's reset after a call restores more).
            self.torch.set_num_threads(1)
        self.bases = [judge.to_device(b, self.ctx.device) for b in bases]
        self.sets, self.outputs = [], []
        if not self.ctx.is_cuda:  # the batch's outputs on pages already mapped, as the judge does for the reference
            timing.keep_freed_memory()
            # outputs + the projection's stack, with room (slot/projection.py): a fresh runner otherwise
            # faults on pages the long-lived judge already has (identical code read 0.4-0.5x at 1 MiB).
            timing.reserve_touched_memory(4 * count * getattr(self, "output_bytes", 0))
        self._sync()

    def make_sets(self, calls: int, salt: int, shift: Any = None) -> list:
        """This batch's `calls` value sets, made as the judge makes them (judge.nudged_batch of the base sets, the salt
        and, behind a device gate, the shift it reads), so the judge can check any call's output it picks."""
        self.sets = judge.nudged_batch(self.bases, salt, calls, shift)
        return self.sets

    def _batch(self, calls: int, salt: int, shift: Any = None) -> None:
        """The candidate called on each of this batch's fresh value sets; its outputs kept for the hand-over. The last
        batch's sets and outputs are freed before this one's are made (one staging serves many batches)."""
        _, _, new_model, watch = self.models
        self.sets, self.outputs = [], []
        sets, outputs = self.make_sets(calls, salt, shift), self._batch_outputs()
        with self.torch.no_grad():
            watch.candidate_running = True
            for index in range(calls):
                outputs.append(new_model(*sets[index % len(sets)]))
            watch.candidate_running = False
        self.outputs = outputs

    def _batch_outputs(self) -> list:
        """Where a batch's outputs go. A candidate that returns one reused buffer for every call (seen in its trials)
        would leave each call of a batch holding the last call's values, which the judge takes for a replay: its
        outputs are copied as they come, in stream order before the next call can write over them. The copies are work
        in its timed batch (about one more pass over each output), the price of keeping each call's answer."""
        return judge.CopiedOutputs() if self.reuses_outputs else []

    def run(self, calls: int, salt: int) -> None:
        """A batch of calls on fresh value sets made from `salt`, then a device-wide synchronisation: the judge's clock
        (or the task's CPU accounting) is around all of it."""
        self._batch(calls, salt)
        self._sync()

    def attach_gate(self, path: str) -> bool:
        """The judge's gate page at `path`, waited on by this runner's queued batches; False where this process cannot
        wait on it (the judge then times without a gate, as it does on a CPU)."""
        if self.gate is None and self.ctx.is_cuda:
            from evaluator.slot import device_gate

            try:
                self.gate = device_gate.DeviceGate(device_gate.runner_page(path), read_only=True)
            except Exception:  # noqa: BLE001 - whatever stops the gate, the judge times without one (no verdict)
                return False
        return self.gate is not None

    def queue(self, calls: int, salt: int, count: int) -> None:
        """A batch like run()'s, queued behind the judge's gate (it runs when the page's count reaches `count`) and not
        waited for: its value sets are made on the device from the shift the judge writes as it opens the gate (the
        wait queued once their draws are: judge.nudged_batch)."""
        self._batch(calls, salt, lambda: self.gate.wait(count))

    def drain(self) -> None:
        """The queued batch waited for (the judge's clock runs from its gate's opening to this answer)."""
        self._sync()

    def run_eager(self, calls: int, salt: int) -> list[float]:
        """KernelBench's convention, with its code and order (kernelbench_timing.event_times_ms): per call a
        synchronisation, KernelBench's L2 flush, a start event, the call, an end event, a synchronisation. Returns the
        milliseconds between each call's events (none on a CPU). This process ran candidate code, so the judge believes
        them only within bounds of its own (slot/kernelbench_phase.py), and times the whole order by its own clock."""
        _, _, new_model, watch = self.models
        self.sets, self.outputs = [], []
        sets, outputs = self.make_sets(calls, salt), self._batch_outputs()

        def call(values: list) -> Any:
            watch.candidate_running = True
            try:
                return new_model(*values)
            finally:
                watch.candidate_running = False

        times: list[float] = []
        with self.torch.no_grad():
            if self.ctx.is_cuda:
                times = kernelbench_timing.event_times_ms(call, sets, self._kernelbench_flush().flush, outputs)
            else:
                for values in sets:
                    outputs.append(call(values))
        self.outputs = outputs
        return times

    def _kernelbench_flush(self) -> Any:
        """KernelBench's 256 MiB flush, made by the first eager order (the judge's untimed one) and paged in there."""
        flush = self.kernelbench_flush
        if flush is None:
            flush = self.kernelbench_flush = kernelbench_timing.KernelBenchFlush(self.ctx.device)
            flush.flush()
            self._sync()
        return flush

    def keep(self, calls: dict[str, int]) -> None:
        """Copies of the last batch's picked outputs, by name: the next batch frees the batch's outputs, and the judge
        asks for these only after its exclusive timing."""
        for name, call in calls.items():
            output = self.outputs[call]
            hack(runtime_rules.check_plain_outputs(output))
            self.kept[name] = judge.snapshot(output)

    def kept_output(self, name: str) -> Any:
        return self.kept.pop(name)

    def projections(self, seed: int, scale: float = 1.0) -> list[float]:
        """Every batch call's output projected on weights drawn from `seed`, at the judge's `scale`
        (evaluator/slot/projection.py)."""
        from evaluator.slot.projection import projections

        return projections(self.outputs, seed, scale)

    def digests(self, seed: int) -> list[bytes]:
        """Every batch call's output digested (keyed by `seed` on a GPU): what the picked outputs handed over later
        must match (evaluator/slot/output_digest.py)."""
        from evaluator.slot.output_digest import digests

        return digests(self.outputs, seed)

    def recheck(self, fresh: list) -> Any:
        """The last inputs refilled in place with fresh values: a memo by identity, pointer or shape answers stale."""
        _, _, new_model, watch = self.models
        inputs = self.sets[0] if self.sets else self.last_inputs
        fresh = judge.to_device(fresh, self.ctx.device)
        torch = self.torch
        for value, new_value in zip(inputs, fresh):
            if isinstance(value, torch.Tensor) and isinstance(new_value, torch.Tensor) and \
                    value.shape == new_value.shape:
                value.copy_(new_value)
        with torch.no_grad():
            return self._call_candidate(new_model, inputs, watch)

    def finish(self) -> None:
        self._verify_untampered()
        self._check_threads()

    def evidence(self) -> dict[str, Any]:
        """What the judge may report (never decide on): the share of GPU time in the candidate's own kernels; and what
        it may build for later runners: the Triton launchers this one built (build/triton_launchers.py)."""
        return {"own_kernel_time_fraction": self.result.own_kernel_time_fraction,
                "triton_launchers": list(self.ctx.triton_launchers)}

    def failure(self, exc: BaseException) -> dict[str, Any]:
        """A candidate fault as the runner's claim: the judge accepts only verdicts that lower the reward."""
        record_failure(self.result, exc, self.request.candidate_source, self.candidate_path)
        note_broken_context(self.result, self.ctx, self.torch)
        return {"type": "failed", "verdict": self.result.verdict.value, "message": self.result.error_message,
                "rule": self.result.hack_rule, "compiled": self.result.compiled}


def open_session(request: EvalRequest, ctx: Any, prebuilt: Optional[dict]) -> TaskSession:
    return TaskSession(request, ctx, prebuilt)


__all__ = ["Outcome", "TaskSession", "open_session"]
