"""One task's judging in the trusted process: it builds the reference, makes every input, pushes the schedule of orders
to the runner, compares every output and decides the verdict. Nothing the runner says is taken as a pass or a speed."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import socket
import time
import types
from typing import Any, Callable, Optional

from evaluator.contract.types import EvalRequest, EvalResult, Verdict
from evaluator.judging.reference_cache import ReferenceCache, nbytes, problem_key
from evaluator.slot.evidence import kernel_fraction
from evaluator.slot.outcome import TaskEnded
from evaluator.slot.task_driver import Deadline

MAX_TIMING_SETS = 64
# A trial set (inputs and reference output) up to this size is made while the runner runs the trial before it; a larger
# one after (two at once per judge, eight judges a GPU, would crowd its memory).
OVERLAP_MAX_BYTES = 1 << 30
# The GPU steps outside timing that hold the device lock shared (docs/slot.md), named so a measurement can leave some
# out (KRL_WORKER_DEVICE_SHARED_STEPS, read by slot/judge_host.py): the checks, say, set up the runner's profiler
# (mostly CPU), which a timing waiting for the device sits through.
# warm_rounds: the timing's cold and warm rounds, full batches outside its exclusive windows (slot/timing_phase.py).
SHARED_STEPS = frozenset({"trials", "checks", "timing_inputs", "timing_checks", "recheck",
                          "warm_rounds"})
_SET_NAME = re.compile(r"^(trial-\d{1,4}|timing-\d{1,2}|recheck|poison|swap)$")
_SECRET_SEED_OFFSET = secrets.randbelow(2**40) + 2**32  # per judge process; never sent to a runner


def _remove(path: str) -> None:
    """A file of the exchange folders gone, if it is there (a link is removed, never followed)."""
    try:
        os.unlink(path)
    except OSError:
        pass


@functools.cache
def outputs_buffer() -> Any:
    """A GPU judge's buffer for the runner's output files (one a process), pinned: they go to the device from it."""
    from evaluator.judging import tensorwire

    return tensorwire.ReusedBuffer(pinned=True)


def input_seed(request: EvalRequest, name: str) -> Optional[int]:
    """The seed of a named input set the judge makes, None for a name outside its schedule. Trials keep KernelBench's
    reproducible seeds; timing, recheck and poison sets use this judge's secret: answers precomputed at import miss."""
    from evaluator.judging import judge

    if not _SET_NAME.match(name):
        return None
    kind, _, index = name.partition("-")
    if (kind == "trial" and int(index) >= request.correctness_trials) or \
            (kind == "timing" and int(index) >= MAX_TIMING_SETS):
        return None
    if kind == "trial":
        return judge.input_seed(request.seed, name)
    return judge.input_seed(request.seed + _SECRET_SEED_OFFSET, name)


def load_reference(request: EvalRequest) -> types.ModuleType:
    from evaluator.judging.reference import load_reference as load, missing_parts

    module = load(request.reference_source, request.size_overrides, f"krl_reference_{request.request_id}")
    missing = missing_parts(module)
    if missing:
        raise ValueError(f"the reference problem defines no `{missing[0]}`")
    return module


class TaskJudge:
    """The reference side of one request: its model (cached across tasks of one problem), its inputs and outputs."""

    def __init__(self, request: EvalRequest, device: str, inputs_dir: str, outputs_dir: str,
                 cache: Optional[ReferenceCache] = None):
        self.request, self.device = request, device
        self.inputs_dir, self.outputs_dir = inputs_dir, outputs_dir
        # The largest difference the correctness trials accepted, and how a near miss after them was decided
        # (judging/second_look.py): "float64", "trial_error" or "".
        self.accepted_max_abs_diff: Optional[float] = None
        self.near_miss = ""
        self.triton_launchers: list = []  # as the runner reported them at its finish (unchecked)
        self.cache = cache if cache is not None else ReferenceCache(0)
        self.problem_key = problem_key(request.reference_source, request.size_overrides, request.precision,
                                       request.seed, device)
        # On a GPU the outputs this judge reads go through its one pinned buffer (outputs_buffer), and sets too large
        # for its cache go from the device straight into their files: values go to the device at once there. CPU
        # mode keeps a fresh buffer a file (its values stay views of it).
        self.reuse_buffers = device.startswith("cuda")
        self.model: Any = None
        self.reference: Any = None
        self.problem_error = ""
        self.reference_outputs: dict[str, Any] = {}
        self.values: dict[str, list] = {}

    def build(self) -> None:
        from evaluator.judging import judge

        if self.model is not None or self.problem_error:
            return
        built = self.cache.get(("model", self.problem_key))
        if built is not None:
            self.reference, self.model = built
            return
        request = self.request
        try:
            self.reference = load_reference(request)
            self.model = judge.build_reference_model(self.reference, request.seed, self.device, request.precision)
            self.cache.put(("model", self.problem_key), (self.reference, self.model), nbytes(self.model))
        except Exception as exc:  # noqa: BLE001 - the problem itself is broken: the evaluator's input error
            self.problem_error = f"The reference problem failed in the judge (evaluator input error): " \
                                 f"{type(exc).__name__}: {exc}"[:1000]

    def make(self, name: str) -> list:
        """The inputs of set `name` on the judge's device (made once per problem, seed); its reference output kept."""
        from evaluator.judging import judge, tensorwire

        self.build()
        if self.problem_error:
            raise TaskEnded(Verdict.RUNTIME_ERROR, self.problem_error)
        if name in self.values:
            return self.values[name]
        seed = input_seed(self.request, name)
        if seed is None:
            raise ValueError(f"no input set named {name!r}")
        key = ("set", self.problem_key, seed)
        made = self.cache.get(key)
        path = os.path.join(self.inputs_dir, name + ".krlt")
        if made is None:
            inputs = judge.make_inputs(self.reference, seed, self.device, self.request.precision)
            # Written before the reference runs (it may work in place). A set too large for the cache to keep (a 256
            # MiB elementwise input) goes from the device straight into the file's pages (tensorwire.write_values);
            # one the cache keeps is built once in memory and served from there to later tasks.
            # Its entry holds the reference output too, not made yet: taken as large as the inputs (asked on the
            # inputs alone, 256 MiB sets were built in fresh memory for an entry of 512 MiB the cache then refused).
            cacheable = not self.reuse_buffers or self.cache.keeps(2 * nbytes(inputs))
            encoded = tensorwire.encode_values(inputs) if cacheable else None
            self._write(path, encoded, inputs)
            made = (encoded, self.reference_output(judge.clone_inputs(inputs)))
            if cacheable:
                self.cache.put(key, made, len(encoded) + nbytes(made[1]))
            # The values as made are the judge's own (the reference ran on clones): no round trip through the bytes,
            # two copies of each set saved (~0.2 s a 256 MiB set on a loaded host).
            self.values[name] = inputs
        else:
            self._write(path, made[0])
            # On a GPU the move to the device copies; on a CPU the values would be views of the cached bytes, which
            # the reference or the comparison may change.
            cached = made[0] if self.reuse_buffers else bytearray(made[0])
            self.values[name] = judge.to_device(list(tensorwire.decode(cached)), self.device)
        self.reference_outputs[name] = made[1]
        return self.values[name]

    @staticmethod
    def _write(path: str, encoded: Any, values: Any = None) -> None:
        """The set's file, whole or absent: its `encoded` bytes, else `values` written straight to it."""
        from evaluator.judging import tensorwire

        if encoded is not None:
            with open(path + ".part", "wb") as handle:
                handle.write(encoded)
        else:
            tensorwire.write_values(path + ".part", values)
        os.replace(path + ".part", path)

    def forget(self, name: str) -> None:
        """Set `name`'s values, reference output and input file let go once judged: eight judges each keeping every
        trial's on the GPU left KernelBench-sized problems out of memory (retried alone, the device drained), and the
        exchange folder is memory too (isolation/exchange_tmpfs.py). The runner has read the file by then; a mapping
        of it it still holds keeps its pages until it lets go."""
        self.values.pop(name, None)
        self.reference_outputs.pop(name, None)
        _remove(os.path.join(self.inputs_dir, name + ".krlt"))

    def set_bytes(self, name: str) -> int:
        """The device bytes a made set holds in this judge: its inputs and its reference output."""
        return nbytes(self.values.get(name)) + nbytes(self.reference_outputs.get(name))

    def reference_output(self, inputs: list) -> Any:
        import torch

        with torch.no_grad():
            output = self.model(*inputs)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        return output

    def output(self, file_name: str, reference: Any) -> Any:
        """The runner's output file, read within a size bound set by the reference output; a WireError if unusable."""
        import torch

        from evaluator.judging import judge, tensorwire

        expected = sum(t.numel() * t.element_size() for t in judge.flatten_output(reference)
                       if isinstance(t, torch.Tensor))
        # Read into the reused buffer, every tensor is copied out of it (to the device, or a CPU copy of one the
        # runner left there) before the next file.
        scratch = outputs_buffer() if self.reuse_buffers else None
        path = os.path.join(self.outputs_dir, file_name + ".krlt")
        try:
            value = tensorwire.read_values(path, max_bytes=8 * expected + 2**20, scratch=scratch)
        finally:
            _remove(path)  # read once: its pages are charged to the task's memory until it goes
        return self.placed(value, copied=scratch is not None)

    def compare(self, file_name: str, reference: Any, inputs: Optional[Callable[[], list]] = None) -> tuple[Any, Any]:
        """(judge.Comparison, the output) of the runner's output against `reference`. With `inputs` (the values the
        output came from; timed and re-check sets), a near miss gets a second look, so a verdict does not flip between
        runs of the same code on a handful of rounding-sized elements."""
        import torch

        from evaluator.judging import judge, second_look

        try:
            output = self.output(file_name, reference)
        except Exception as exc:  # noqa: BLE001 - whatever the file holds is the candidate's doing (WireError mostly)
            return judge.Comparison(Verdict.WRONG_OUTPUT, f"The output handed to the judge was unusable: "
                                                          f"{str(exc)[:200]}."), None
        atol, rtol = self.request.tolerances()
        try:
            with torch.no_grad():
                if inputs is None:
                    return judge.compare(reference, output, atol, rtol), output
                look = second_look.look_twice(self.model, inputs, reference, output, atol, rtol)
        except (ValueError, TypeError, OverflowError, IndexError) as exc:  # a value of the candidate's making that the
            # comparison cannot take (an int beyond 64 bits read as the judge's own failure, red team, session 28);
            # a device fault (RuntimeError) stays the judge's to report
            return judge.Comparison(Verdict.WRONG_OUTPUT, f"The output could not be compared with the reference: "
                                                          f"{type(exc).__name__}: {str(exc)[:200]}."), None
        if look.second_look and look.comparison.ok:
            self.near_miss = "float64"
        elif second_look.within_accepted_error(look, self.accepted_max_abs_diff):
            self.near_miss = "trial_error"  # the trials' own rounding, met on other values: not a flip
            return judge.Comparison(Verdict.CORRECT), output
        return look.comparison, output

    def placed(self, output: Any, copied: bool = False) -> Any:
        """Tensors go to the judge's device when the runner had them on that kind of device, else stay on the CPU
        (so judge.compare reports the wrong device), as copies when `copied`; opaque values keep their type name."""
        from evaluator.judging import tensorwire

        def place(value: Any) -> Any:
            if isinstance(value, tensorwire.Opaque):
                return type(value.type_name, (), {})()
            if hasattr(value, "krl_device_type") and value.krl_device_type == self.device.split(":")[0]:
                return value.to(self.device, copy=copied)  # (already there, `to` would return the view itself)
            return value.clone() if copied and hasattr(value, "clone") else value

        if isinstance(output, (tuple, list)):
            return type(output)(place(v) for v in output)
        return place(output)


@contextlib.contextmanager
def shared_device(lock: Any, deadline: float, phases: dict[str, float], step: str = ""):
    """A step that uses the GPU outside a timing (the judge's inputs and comparisons, an order that makes the runner
    use it), run with this GPU's lock (isolation/device_lock.py) held shared, so no timing measures beside it. The
    wait and the hold add to `phases` (device_shared_wait, device_shared_hold, and the hold by step name in
    shared_hold_<step>: a timing waits for the longest step on the device to drain); not had by `deadline`: Deadline,
    which ends a started task as timeout. No lock (CPU mode): nothing."""
    if lock is None:
        yield
        return
    waited = lock.acquire_shared(deadline)
    if waited is None:
        raise Deadline()
    began = time.monotonic()
    try:
        yield
    finally:
        lock.release_shared()
        phases["device_shared_wait"] = round(phases.get("device_shared_wait", 0.0) + waited, 6)
        held = time.monotonic() - began
        phases["device_shared_hold"] = round(phases.get("device_shared_hold", 0.0) + held, 6)
        if step:
            phases["shared_hold_" + step] = round(phases.get("shared_hold_" + step, 0.0) + held, 6)


def shared_steps_from(setting: str) -> frozenset[str]:
    """The steps a setting names: "1" (or empty: the default) every step, "0" none, else a comma-separated list of
    SHARED_STEPS. Every step by default since session 23 (one H200, 8 slots): beside bandwidth hogs, 14 of 16 honest
    speedups stayed within ±5% of quiet with every step shared and none of 16 with none (0.58-1.75x); identical torch
    code read within ±5% on 31 of 32 tasks against 17 of 32, at about half the rate (docs/slot.md)."""
    setting = setting.strip()
    if setting == "0":
        return frozenset()
    if setting in ("", "1"):
        return SHARED_STEPS
    return frozenset(step.strip() for step in setting.split(",")) & SHARED_STEPS


class Schedule:
    """The orders of one task, in the judge's order: load, trials, kernel checks, timing, recheck, finish."""

    def __init__(self, task: TaskJudge, driver: Any, timing_factory: Callable[..., Any], device_lock: Any = None,
                 shared_steps: frozenset[str] = SHARED_STEPS):
        self.task, self.driver, self.timing_factory = task, driver, timing_factory
        self.device_lock = device_lock  # this GPU's lock, held shared around each GPU step outside timing (None: CPU)
        self.shared_steps = shared_steps
        self.fastest_trial_s: Optional[float] = None  # the quickest correctness trial's order, judge's clock
        # Fingerprints of the candidate's outputs so far, to recognise one replayed for other inputs (the outputs
        # themselves, five 256 MiB trial outputs a judge, helped fill a GPU at 8 slots)
        self.earlier: set = set()
        request = task.request
        self.result = EvalResult(request_id=request.request_id, problem_id=request.problem_id,
                                 verdict=Verdict.RUNTIME_ERROR, node=socket.gethostname(),
                                 correctness_trials_total=request.correctness_trials)
        self.phases: dict[str, float] = {}
        # KernelBench's reference as its runner timed it before the candidate loaded (slot/reference_first.py), ms a
        # call; None where not asked for or not had
        self.reference_first_ms: Optional[list[float]] = None

    def on_device(self, step: str):
        """Context of one GPU step outside timing (a SHARED_STEPS name): the device shared for it (shared_device)."""
        lock = self.device_lock if step in self.shared_steps else None
        return shared_device(lock, self.driver.deadline, self.phases, step)

    def lap(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - since, 6)
        return now

    def run(self) -> EvalResult:
        """The verdict; TaskEnded (and the driver's exceptions) end it earlier."""
        task, driver, request, result = self.task, self.driver, self.task.request, self.result
        t = time.monotonic()
        driver.answer("loaded")
        result.compiled = True
        t = self.lap("load", t)
        self.trials()
        t = self.lap("correctness", t)
        if request.backend in ("triton", "cuda"):
            with self.on_device("checks"):  # the runner profiles and poisons its kernels
                task.make("poison")
                task.make("swap")
                driver.order({"type": "checks", "name": "poison", "other": "swap"}, "checked")
                task.forget("poison")
                task.forget("swap")
            t = self.lap("kernel_checks", t)
        if request.measure_timing:
            self.timing_factory(task, driver, self).run(result)
            t = self.lap("timing", t)
        self.recheck()
        t = self.lap("recheck", t)
        evidence = driver.order({"type": "finish"}, "evidence")
        result.own_kernel_time_fraction = kernel_fraction(evidence, request)  # candidate-reported
        task.triton_launchers = evidence.get("triton_launchers") or []  # checked where built (build/triton_launchers)
        result.near_miss = task.near_miss
        result.verdict = Verdict.CORRECT
        return result

    def trials(self) -> None:
        """The correctness trials, judged in order, and overlapped: the judge makes trial k+1's inputs while the runner
        runs trial k, and compares trial k's output while the runner runs trial k+1 (one order is out at a time all
        the same). On 256 MiB problems each side's files and copies took ~0.25 s a trial, one after the other."""
        request, result, task, driver = self.task.request, self.result, self.task, self.driver
        names = [f"trial-{trial}" for trial in range(request.correctness_trials)]
        passed, failure, worst = 0, None, (0.0, 0.0)
        # Every trial's GPU work, the judge's and the runner's, overlaps the next one's: the trials hold the device
        # shared as one step, from the first trial's answer on. That order carries the candidate's first call, with
        # Triton's JIT or a CUDA module's load in it (0.1-0.4 s, mostly CPU), which kept every timing on the GPU
        # waiting while it held the device (H200, 8 slots, session 23); it runs unheld, as the load before it does.
        with contextlib.ExitStack() as held:
            t = time.monotonic()
            if names:
                task.make(names[0])
                driver.send({"type": "trial", "name": names[0]})
            for trial, name in enumerate(names):
                following = names[trial + 1] if trial + 1 < len(names) else None
                ahead = following is not None and task.set_bytes(name) <= OVERLAP_MAX_BYTES
                if ahead:  # beside the runner's trial; two sets at once on the judge's device
                    task.make(following)
                t = self.lap("trials_judge_inputs", t)
                driver.collect("output", name)
                if trial == 0:
                    held.enter_context(self.on_device("trials"))
                # The pace timing orders are bounded by (timing_phase). An answer that came while the judge made or
                # compared a set reads late; the last trial's order goes out alone, after the comparison before it,
                # so at least that one reads exactly.
                took = driver.answered_at - driver.sent_at
                self.fastest_trial_s = took if self.fastest_trial_s is None else min(self.fastest_trial_s, took)
                t = self.lap("trials_runner", t)
                if following is not None and not ahead:
                    task.make(following)
                sent_early = following is not None and following != names[-1]
                if sent_early:
                    driver.send({"type": "trial", "name": following})
                comparison = self.judged_trial(name, passed)
                t = self.lap("trials_judge_compare", t)
                if following is not None and not sent_early:
                    driver.send({"type": "trial", "name": following})
                if comparison.ok:
                    passed += 1
                    worst = (max(worst[0], comparison.max_abs_diff or 0.0),
                             max(worst[1], comparison.mean_abs_diff or 0.0))
                elif failure is None:
                    failure = comparison
        result.correctness_trials_passed = passed
        if failure is not None:
            result.max_abs_diff, result.mean_abs_diff = failure.max_abs_diff, failure.mean_abs_diff
            raise TaskEnded(Verdict.WRONG_OUTPUT, f"{failure.message} Passed {passed}/{request.correctness_trials} "
                            "trials.")
        result.max_abs_diff, result.mean_abs_diff = worst
        self.task.accepted_max_abs_diff = worst[0]

    def judged_trial(self, name: str, passed: int) -> Any:
        """Trial `name`'s output against the reference's (judge.Comparison), its values let go; a replayed answer or
        another shape ends the task here (an order still out ends with the runner)."""
        comparison, output = self.task.compare(name, self.task.reference_outputs[name])
        self.task.forget(name)
        if not comparison.ok:
            self.replayed(output)
        if comparison.verdict == Verdict.SHAPE_MISMATCH:
            self.result.correctness_trials_passed = passed
            raise TaskEnded(Verdict.SHAPE_MISMATCH, comparison.message)
        if comparison.ok:
            self.remember(output)
        return comparison

    def remember(self, output: Any) -> None:
        """An output the candidate gave, correct, for some inputs, kept as its fingerprint (see replayed). Only correct
        ones: an honest bug that answers every input alike (an empty grid's zeros, a constant) repeated its own wrong
        answer and read `cached_output`, a hack, where it is only wrong (red team, session 27)."""
        from evaluator.judging.fingerprint import fingerprint

        mark = fingerprint(output) if output is not None else None
        if mark is not None:
            self.earlier.add(mark)

    def replayed(self, output: Any, others: tuple = ()) -> None:
        """A wrong output that repeats one returned for other inputs is a cached answer, a hack."""
        from evaluator.judging.fingerprint import fingerprint
        from evaluator.judging.rules.runtime import finding

        mark = fingerprint(output) if output is not None else None
        if mark is None:
            return
        if mark in self.earlier or any(fingerprint(other) == mark for other in others if other is not None):
            found = finding("cached_output")
            raise TaskEnded(Verdict.HACK_DETECTED, found.message, found.rule)

    def wrong(self, comparison: Any, output: Any, where: str, others: list = ()) -> None:
        self.replayed(output, tuple(others))
        self.result.max_abs_diff, self.result.mean_abs_diff = comparison.max_abs_diff, comparison.mean_abs_diff
        verdict = Verdict.SHAPE_MISMATCH if comparison.verdict == Verdict.SHAPE_MISMATCH else Verdict.WRONG_OUTPUT
        raise TaskEnded(verdict, f"Wrong {where}: {comparison.message}")

    def recheck(self) -> None:
        with self.on_device("recheck"):
            self.task.make("recheck")
            self.driver.order({"type": "recheck", "name": "recheck"}, "output", "recheck")
            comparison, output = self.task.compare("recheck", self.task.reference_outputs["recheck"],
                                                   lambda: self.task.values["recheck"])
        if not comparison.ok:
            self.wrong(comparison, output, "after repeated calls, on fresh inputs")
