"""One evaluation's moving parts inside a worker process: load, correctness, kernel checks, timing, cleanup.
slot/worker.py drives it in process; slot/worker_session.py drives it one judge order at a time."""

from __future__ import annotations

import ast
import gc
import importlib.util
import os
import sys
import time
import types
from contextlib import contextmanager
from typing import Any, Optional

from evaluator.judging import judge, rules, second_look, timing
from evaluator.judging.rules import runtime as runtime_rules
from evaluator.judging.rules import static as static_rules
from evaluator.contract.types import BACKENDS, PRECISIONS, EvalRequest, EvalResult, Verdict
from evaluator.slot.candidate_errors import cap, format_compile_error, format_traceback, is_compile_exception
from evaluator.slot.in_process_timing import InProcessTiming
from evaluator.slot.worker_outcome import Outcome, hack
from evaluator.slot.worker_setup import WorkerContext

FULL_GC_EVERY = 32
FULL_GC_CUDA_BYTES = 2 * 2**30


def _cuda_broken(torch: Any, ctx: WorkerContext) -> bool:
    """True when the CUDA context is unusable (illegal address, device assert): the worker must be retired."""
    if not ctx.is_cuda:
        return False
    try:
        torch.cuda.synchronize()
        torch.ones(1, device=ctx.device).add_(1).item()
        return False
    except Exception:
        return True


# A profile that saw no device work at all is taken again, and after this many such profiles the profiler is deemed to
# have failed (nothing is judged from it): with 8 slots on one H100, 4 of 16 honest CUDA ReLUs came back
# custom_kernel_not_launched from one profile, and 1 of 16 from three.
PROFILE_ATTEMPTS = 3


class _Watch:
    """Counts calls of the reference Model while the candidate runs (calling the reference is a hack)."""

    def __init__(self, ref_cls: type):
        self.candidate_running = False
        self.reference_calls = 0
        original_forward = ref_cls.forward
        original_init = ref_cls.__init__
        watch = self

        def forward(module, *args, **kwargs):
            if watch.candidate_running:
                watch.reference_calls += 1
            return original_forward(module, *args, **kwargs)

        def init(module, *args, **kwargs):
            if watch.candidate_running:
                watch.reference_calls += 1
            return original_init(module, *args, **kwargs)

        ref_cls.forward = forward
        ref_cls.__init__ = init

    @contextmanager
    def candidate(self):
        self.candidate_running = True
        try:
            yield
        finally:
            self.candidate_running = False


def _load_reference(request: EvalRequest) -> types.ModuleType:
    from evaluator.judging.reference import load_reference, missing_parts

    module = load_reference(request.reference_source, request.size_overrides, f"krl_reference_{request.request_id}")
    missing = missing_parts(module)
    if missing:
        raise Outcome(Verdict.RUNTIME_ERROR, f"The reference problem defines no `{missing[0]}` (evaluator input error).")
    return module


class _Phase:
    def __init__(self, result: EvalResult, name: str):
        self.result, self.name = result, name

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.result.phase_times_s[self.name] = round(self.result.phase_times_s.get(self.name, 0.0) + time.perf_counter() - self.t0, 6)
        return False


def record_failure(result: EvalResult, exc: BaseException, source: str, candidate_path: str) -> None:
    """An evaluation ended by `exc`: a rule's or phase's Outcome, a build failure, or the candidate's own exception."""
    if isinstance(exc, Outcome):
        result.verdict, result.error_message, result.hack_rule = exc.verdict, cap(exc.message), exc.hack_rule
    elif is_compile_exception(exc):
        result.verdict, result.compiled = Verdict.COMPILE_ERROR, False
        result.error_message = format_compile_error(exc, source, candidate_path)
    else:
        result.verdict, result.error_message = Verdict.RUNTIME_ERROR, format_traceback(exc, candidate_path)


def note_broken_context(result: EvalResult, ctx: WorkerContext, torch: Any) -> None:
    """A failed evaluation that left the CUDA context unusable: the process is retired, the verdict says why."""
    if result.verdict not in (Verdict.CORRECT,) and ctx.is_cuda and _cuda_broken(torch, ctx):
        ctx.sticky_cuda_error = True
        if result.verdict != Verdict.HACK_DETECTED:
            result.verdict = Verdict.RUNTIME_ERROR
        result.error_message = cap(result.error_message + "\n(The CUDA context is unusable after this kernel.)")


_MISSING = object()


class RunState(InProcessTiming):
    """One evaluation's moving parts, so cleanup can undo whatever was reached."""

    def __init__(self, request: EvalRequest, ctx: WorkerContext, result: EvalResult, torch: Any):
        self.request, self.ctx, self.result, self.torch = request, ctx, result, torch
        safe_id = "".join(c if c.isalnum() else "_" for c in request.request_id)[:40] or "x"
        self.module_name = f"krl_candidate_{safe_id}"
        self.candidate_path = os.path.join(ctx.work_dir, f"{self.module_name}.py")
        self.candidate_module: Optional[types.ModuleType] = None
        self.threads_before = set()
        self.earlier_outputs: list = []  # the candidate's outputs so far, to recognise a cached one
        self.trial_launches: list[int] = []  # Triton launches in each correctness trial
        self.correctness_kernels = 0  # CUDA kernels (all, from the profiler) of one call after correctness

    # ---- phases -------------------------------------------------------------------------------------------------
    def run(self, prebuilt: dict | None) -> None:
        reference, ref_model, new_model, watch = self.load(prebuilt)
        self.after_load(reference, ref_model, new_model, watch)

    def load(self, prebuilt: dict | None) -> tuple:
        """Parse, rule-check and load the candidate, build both models: (reference module, Model, ModelNew, watch)."""
        request, ctx, result, torch = self.request, self.ctx, self.result, self.torch
        if request.backend not in BACKENDS:
            raise Outcome(Verdict.FORMAT_ERROR, f"Unknown backend {request.backend!r}; use one of {', '.join(BACKENDS)}.")
        if request.precision not in PRECISIONS:
            raise Outcome(Verdict.FORMAT_ERROR, f"Unknown precision {request.precision!r}; use one of {', '.join(PRECISIONS)}.")
        if request.backend == "cuda" and not ctx.is_cuda:
            raise Outcome(Verdict.RUNTIME_ERROR, "CUDA candidates need a GPU; this worker runs on the CPU.")
        ctx.guard.reset_numeric_flags()  # (patched functions were already restored by the last cleanup)
        import threading

        self.threads_before = {t.ident for t in threading.enumerate()}

        with _Phase(result, "load"):
            tree = self._parse_candidate()
            hack(static_rules.findings(tree, request.candidate_source, request.backend))
            try:
                reference = _load_reference(request)
            except Outcome:
                raise
            except Exception as exc:
                raise Outcome(Verdict.RUNTIME_ERROR, f"The reference problem failed to load (evaluator input error): "
                               f"{type(exc).__name__}: {exc}") from None
            ref_cls = reference.Model
            watch = _Watch(ref_cls)
            self.reference_dicts = [(d, dict(d)) for d in (reference.__dict__, ref_cls.__dict__)]
            model_new_cls = self._load_candidate(prebuilt, watch, reference)
            hack(runtime_rules.check_reference_class(model_new_cls, ref_cls))

            dtype = judge.DTYPES[request.precision]
            with self._default_device():
                try:
                    judge.set_seed(request.seed)
                    init_inputs = judge.to_device(list(reference.get_init_inputs()), ctx.device)
                    judge.set_seed(request.seed)
                    ref_model = ref_cls(*init_inputs)
                    self.reference_model = ref_model
                    self.reference_state = self._reference_checksum()  # before the candidate can reach it
                except Exception as exc:
                    raise Outcome(Verdict.RUNTIME_ERROR, f"The reference Model could not be built (evaluator input "
                                   f"error): {type(exc).__name__}: {exc}") from None
                judge.set_seed(request.seed)
                with watch.candidate():
                    new_model = model_new_cls(*init_inputs)
            self._verify_untampered()  # outside the device context, whose torch-function mode the guard would see
            hack(runtime_rules.check_reference_calls(watch.reference_calls))
            hack(runtime_rules.check_reference_instance(new_model, ref_cls))
            ref_model = ref_model.to(ctx.device).to(dtype) if dtype != torch.float32 else ref_model.to(ctx.device)
            new_model = new_model.to(ctx.device).to(dtype) if dtype != torch.float32 else new_model.to(ctx.device)
            self._sync()
            self.reference_state = self._reference_checksum()  # again after our own device/precision cast
            result.compiled = True
        return reference, ref_model, new_model, watch

    def after_load(self, reference, ref_model, new_model, watch) -> None:
        request, result = self.request, self.result
        own_kernels = request.backend in ("triton", "cuda")
        with _Phase(result, "correctness"):
            last_inputs = self._correctness(reference, ref_model, new_model, watch)
        if own_kernels:
            with _Phase(result, "kernel_checks"):
                own_names = static_rules.own_kernel_names(request.candidate_source)
                self._check_custom_kernel_used(new_model, last_inputs, own_names, watch)
                self._check_output_uses_kernels(reference, new_model, watch)
        if request.measure_timing:
            with _Phase(result, "timing"):
                self._time(reference, ref_model, new_model, watch)
        with _Phase(result, "recheck"):
            self._recheck_fresh_inputs(reference, ref_model, new_model, watch)
        self._check_threads()

    def _parse_candidate(self) -> ast.AST:
        source = self.request.candidate_source
        try:
            return ast.parse(source, filename=self.candidate_path)
        except SyntaxError as exc:
            line = (exc.text or "").rstrip()
            pointer = f"\n    {line}" if line else ""
            raise Outcome(Verdict.COMPILE_ERROR, f"SyntaxError at line {exc.lineno}: {exc.msg}{pointer}") from None

    def _load_candidate(self, prebuilt: dict | None, watch: _Watch, reference: types.ModuleType) -> type:
        request, ctx = self.request, self.ctx
        if request.backend == "cuda":
            try:
                from evaluator.build import compile as compile_mod
            except ImportError:
                compile_mod = None
            if compile_mod is not None and hasattr(compile_mod, "install_load_inline_hook"):
                cache_dir = (prebuilt or {}).get("cache_dir") or ctx.cache_dir  # empty: compile.py's default
                compile_mod.install_load_inline_hook(cache_dir, prebuilt)
        with open(self.candidate_path, "w", encoding="utf-8") as handle:
            handle.write(request.candidate_source)
        spec = importlib.util.spec_from_file_location(self.module_name, self.candidate_path)
        module = importlib.util.module_from_spec(spec)
        # KernelBench runs problem and candidate in one namespace, so real solutions use the problem's sizes and
        # constants; the candidate sees copies of those plain globals (never Model or the input makers).
        vars(module).update(judge.problem_globals(reference))
        sys.modules[self.module_name] = module
        self.candidate_module = module
        try:
            with watch.candidate():
                spec.loader.exec_module(module)
        except Outcome:
            raise
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            self._verify_untampered()
            message = (format_compile_error(exc, request.candidate_source, self.candidate_path)
                       if request.backend == "cuda" or is_compile_exception(exc)
                       else format_traceback(exc, self.candidate_path))
            raise Outcome(Verdict.COMPILE_ERROR, message) from None
        self._verify_untampered()
        model_new = getattr(module, "ModelNew", None)
        if model_new is None:
            raise Outcome(Verdict.FORMAT_ERROR, "The candidate defines no `ModelNew` class; define `class ModelNew(nn.Module)` "
                           "taking the same init arguments as `Model`.")
        import torch

        if not (isinstance(model_new, type) and issubclass(model_new, torch.nn.Module)):
            raise Outcome(Verdict.FORMAT_ERROR, "`ModelNew` must be a subclass of torch.nn.Module.")
        return model_new

    def _reference_checksum(self) -> list:
        """Sums of the reference model's parameters: a candidate that reaches the reference (through gc) and zeroes
        its weights would otherwise make both sides agree. Buffers are left out: BatchNorm's running stats move."""
        torch = self.torch
        sums = [torch.stack([p.detach().double().sum(), p.detach().double().abs().sum()])
                for p in self.reference_model.parameters() if p.numel()]
        return torch.stack(sums).cpu().flatten().tolist() if sums else []

    def _reference_changed(self) -> bool:
        now = self._reference_checksum()
        return len(now) != len(self.reference_state) or any(
            abs(a - b) > 1e-9 * (1.0 + abs(b)) for a, b in zip(now, self.reference_state))

    def _verify_untampered(self) -> None:
        self.ctx.guard.reset_numeric_flags()
        changed = getattr(self, "reference_model", None) is not None and self._reference_changed()
        hack(runtime_rules.check_reference_intact(getattr(self, "reference_dicts", []), changed))
        patched = self.ctx.guard.violations()
        if patched:
            self.ctx.guard.restore()
        hack(runtime_rules.check_patched(patched))

    def _sync(self) -> None:
        if self.ctx.is_cuda:
            self.torch.cuda.synchronize()

    @contextmanager
    def _default_device(self):
        """On a GPU, problems create their tensors (inputs, weights) directly there: generating 64M random numbers
        on the CPU and copying them took ~0.4 s per trial on the H200 box. Seeded, so still deterministic."""
        with self.torch.device(self.ctx.device):  # also on the CPU, so CI exercises this path
            yield

    def _inputs(self, reference: types.ModuleType, seed: int) -> list:
        return judge.make_inputs(reference, seed, self.ctx.device, self.request.precision)

    def _inputs_named(self, name: str, reference: types.ModuleType) -> list:
        """The input set `name` (see judge.input_seed), made here from its seed; a slot's session (worker_session.py)
        takes the sets the judge pushes instead."""
        return self._inputs(reference, judge.input_seed(self.request.seed, name))

    def _call_reference(self, ref_model: Any, inputs: list) -> Any:
        try:
            output = ref_model(*inputs)
            self._sync()
            return output
        except Exception as exc:
            if self.ctx.is_cuda and _cuda_broken(self.torch, self.ctx):
                raise  # an earlier candidate kernel broke the context; reported as the candidate's fault
            raise Outcome(Verdict.RUNTIME_ERROR, f"The reference Model failed (evaluator input error): "
                           f"{type(exc).__name__}: {exc}") from None

    def _call_candidate(self, new_model: Any, inputs: list, watch: _Watch, verify: bool = True) -> Any:
        stream = self.torch.cuda.current_stream() if self.ctx.is_cuda else None
        with watch.candidate():
            output = new_model(*inputs)
            self._sync()  # asynchronous CUDA faults belong to the candidate
        if stream is not None:
            hack(runtime_rules.check_current_stream(stream, self.torch.cuda.current_stream()))
        if verify:
            self._verify_untampered()
        hack(runtime_rules.check_reference_calls(watch.reference_calls))
        hack(runtime_rules.check_plain_outputs(output))
        return output

    def _fail_wrong(self, comparison: judge.Comparison, output: Any, where: str, earlier: list) -> None:
        """A wrong output: a hack when it repeats an output returned for other inputs, else wrong_output with the
        measured difference (an approximation outside tolerance is never a hack)."""
        hack(runtime_rules.check_cached_output(earlier, output))
        if comparison.verdict == Verdict.SHAPE_MISMATCH:
            raise Outcome(Verdict.SHAPE_MISMATCH, comparison.message)
        self.result.max_abs_diff = comparison.max_abs_diff
        self.result.mean_abs_diff = comparison.mean_abs_diff
        raise Outcome(Verdict.WRONG_OUTPUT, f"{where}{comparison.message}")

    def _correctness(self, reference, ref_model, new_model, watch) -> list:
        request, result, torch = self.request, self.result, self.torch
        atol, rtol = request.tolerances()
        passed = 0
        first_failure = None
        worst = (0.0, 0.0)
        inputs: list = []
        counter = self.ctx.launch_counter
        for trial in range(request.correctness_trials):
            inputs = self._inputs_named(f"trial-{trial}", reference)
            pristine = judge.clone_inputs(inputs)
            ref_out = self._call_reference(ref_model, inputs)
            for value, copy in zip(inputs, pristine):  # a reference that works in place must not change the candidate's inputs
                if isinstance(value, torch.Tensor) and not judge.same_values(value, copy):
                    value.copy_(copy)
            # Function identities are verified once after the trials (a patch is caught either way); the numeric
            # switches are reset before every reference call.
            launches_before = counter.count
            new_out = self._call_candidate(new_model, inputs, watch, verify=False)
            self.trial_launches.append(counter.count - launches_before)
            self.ctx.guard.reset_numeric_flags()
            hack(runtime_rules.check_inputs_unchanged(inputs, pristine))
            comparison = judge.compare(ref_out, new_out, atol, rtol)
            if not comparison.ok:
                self._verify_untampered()  # a failure may come from a patched torch: report the patch instead
                hack(runtime_rules.check_cached_output(self.earlier_outputs, new_out))
            if comparison.verdict == Verdict.SHAPE_MISMATCH:
                result.correctness_trials_passed = passed
                raise Outcome(Verdict.SHAPE_MISMATCH, comparison.message)
            if comparison.ok:
                passed += 1
                worst = (max(worst[0], comparison.max_abs_diff), max(worst[1], comparison.mean_abs_diff))
            elif first_failure is None:
                first_failure = comparison
            if comparison.ok:  # a replay repeats a correct answer; an honest bug may repeat its wrong one
                self.earlier_outputs.append(judge.snapshot(new_out))
            del ref_out, new_out
        result.correctness_trials_passed = passed
        self._verify_untampered()
        if first_failure is not None:
            result.max_abs_diff = first_failure.max_abs_diff
            result.mean_abs_diff = first_failure.mean_abs_diff
            raise Outcome(Verdict.WRONG_OUTPUT, f"{first_failure.message} Passed {passed}/{request.correctness_trials} trials.")
        result.max_abs_diff, result.mean_abs_diff = worst
        return inputs

    def _check_custom_kernel_used(self, new_model, inputs, own_names, watch) -> None:
        """cuda/triton: the candidate's own kernels must run. Their share of the GPU time is reported, never judged:
        keeping a GEMM in cuBLAS and fusing the epilogue into one small kernel is the standard honest optimisation."""
        request, ctx = self.request, self.ctx
        triton_launches = min(self.trial_launches, default=0)
        if ctx.is_cuda and timing.kernel_profile_wanted():
            fraction, own_launches, total = self._profile_candidate(new_model, inputs, own_names, watch)
            self.result.own_kernel_time_fraction = fraction
            self.correctness_kernels = total
            if request.backend == "triton" and own_launches is not None:
                own_launches = max(own_launches, triton_launches)
            if own_names and own_launches is not None:
                hack(runtime_rules.check_kernels_launched(own_launches))
        elif request.backend == "triton":  # the CPU's interpreter, or a GPU runner without its profiler
            hack(runtime_rules.check_kernels_launched(triton_launches))

    def _profile_candidate(self, new_model, inputs, own_names, watch) -> tuple[Optional[float], Optional[int], int]:
        """(own-kernel time fraction, own launches, all launches) of one extra call; (None, None, 0) when the
        profiler itself fails, so an evaluator problem is never blamed on the candidate. A profile without the
        candidate's own kernels is taken again too: only every attempt missing them is a finding."""
        found: Optional[tuple[Optional[float], Optional[int], int]] = None
        for _ in range(PROFILE_ATTEMPTS):
            self._sync()
            events = timing.profiler_events(lambda: self._call_candidate(new_model, inputs, watch), cpu=True)
            if events is None:
                return None, None, 0
            try:
                seen = runtime_rules.own_kernel_fraction(events, own_names)
            except Exception:
                return None, None, 0
            if seen[2] > 0:  # some device work seen: the profiler works here
                found = seen
                if not own_names or seen[1]:
                    return seen
        # No device work in any profile is the profiler's failure, not a finding: 1 of 16 honest CUDA ReLUs still came
        # back custom_kernel_not_launched at 8 slots on an H100 after three tries. A candidate that skips its own kernel
        # still launches whatever computes its output (torch's kernels, copies), which the profile does see; its
        # decoys are the output-dependence check's to find. Profiles that saw other work but none of the candidate's
        # kernels are retaken as well: an honest cuBLAS-plus-epilogue kernel (76_Gemm_Add_ReLU) was called not
        # launched once in 96 evaluations at 8 slots on an H100, its GEMM seen and its own kernel not.
        return found if found is not None else (None, None, 0)

    def _check_output_uses_kernels(self, reference, new_model, watch) -> None:
        """Decoy and token kernels: run with the results of the candidate's own kernels overwritten (per-element noise,
        then NaN) and once normally, on fresh inputs; the output must move where the kernels' work went. Fresh
        buffers start as NaN in all three runs (filled_fresh_memory), so a buffer that already held the result
        cannot hide a write."""
        inputs = self._inputs_named("poison", reference)
        holders = [self.candidate_module] + list(new_model.modules())
        swapped = runtime_rules.SwappedWrites()  # what each launch writes on other inputs, for the third poisoning
        with runtime_rules.KernelPoisoner(self.ctx.launch_counter, holders, swapped):
            self._call_candidate(new_model, judge.clone_inputs(self._inputs_named("swap", reference)), watch,
                                 verify=False)
        swapped.replaying = True
        launches = 0
        poisoned_outputs = []
        raised = False
        for fill in (*runtime_rules.poison_fills(), swapped):
            poisoner = runtime_rules.KernelPoisoner(self.ctx.launch_counter, holders, fill)
            before = self.ctx.launch_counter.count
            try:
                with poisoner:
                    output = self._call_candidate(new_model, judge.clone_inputs(inputs), watch, verify=False)
            except Outcome:
                raise
            except Exception:  # noqa: BLE001 - torch code that could not take its kernels' poisoned results (an index
                # out of range, a factorisation of a matrix no longer positive-definite) depends on them: honest
                # kernels whose output torch gathers by or factorises read runtime_error (red team, session 29)
                raised = True
                continue
            finally:
                launches += self.ctx.launch_counter.count - before + poisoner.extension_calls
            poisoned_outputs.append(judge.snapshot(output))
            del output
        with runtime_rules.filled_fresh_memory():  # the same algorithms as the poisoned runs, bit for bit
            normal = judge.snapshot(self._call_candidate(new_model, judge.clone_inputs(inputs), watch))
        if launches == 0:
            # Nothing of the candidate's ran where we could see it. Where its kernels ran in every trial, that is a
            # forward that tells this check from the trials (a token kernel in the trials, none here, red team,
            # session 29); else the launch rules decide.
            if self.trial_launches and min(self.trial_launches) > 0:
                hack(runtime_rules.check_output_uses_kernels(0.0, min(self.trial_launches)))
            return
        if raised and not poisoned_outputs:
            return  # every poisoned run failed on the kernels' results: the output depends on them
        atol, rtol = self.request.tolerances()
        moved = min(runtime_rules.moved_fraction(normal, poisoned, atol, rtol) for poisoned in poisoned_outputs)
        hack(runtime_rules.check_output_uses_kernels(moved, launches))

    def _recheck_fresh_inputs(self, reference, ref_model, new_model, watch) -> None:
        """After timing, refill the very input tensors in place with fresh values: a candidate that memoises by
        object identity, pointer or shape returns its stale result here."""
        torch = self.torch
        inputs = getattr(self, "timing_inputs", None)
        if inputs is None:  # no timing: make one call on these very tensors first, as timing would have
            inputs = self._inputs_named("timing-0", reference)
            self.timed_output = judge.snapshot(self._call_candidate(new_model, inputs, watch))
        fresh = self._inputs_named("recheck", reference)
        for value, new_value in zip(inputs, fresh):
            if isinstance(value, torch.Tensor) and isinstance(new_value, torch.Tensor) and value.shape == new_value.shape:
                value.copy_(new_value)
        pristine = judge.clone_inputs(inputs)
        ref_out = self._call_reference(ref_model, inputs)
        new_out = self._call_candidate(new_model, inputs, watch)
        atol, rtol = self.request.tolerances()
        look = second_look.look_twice(ref_model, lambda: pristine, ref_out, new_out, atol, rtol)
        comparison = look.comparison
        if comparison.ok or second_look.within_accepted_error(look, getattr(self, "trials_max_abs_diff", None)):
            return
        stale = [self.timed_output] if getattr(self, "timed_output", None) is not None else []
        if comparison.verdict == Verdict.SHAPE_MISMATCH:
            hack(rules.finding("cached_output", "the output shape did not follow the inputs"))
        self._fail_wrong(comparison, new_out, "Wrong on fresh inputs after repeated calls: ", stale + self.earlier_outputs)

    def _check_threads(self) -> None:
        import threading

        def from_candidate(thread) -> bool:
            target = getattr(thread, "_target", None)
            code = getattr(target, "__code__", None)
            return type(thread).__module__ == self.module_name or (code is not None and code.co_filename == self.candidate_path)

        leftover = [t for t in threading.enumerate()
                    if t.ident not in self.threads_before and t.is_alive() and from_candidate(t)]
        if leftover:
            self.ctx.polluted_reason = "candidate left threads running"
        hack(runtime_rules.check_threads(leftover))

    # ---- cleanup ------------------------------------------------------------------------------------------------
    def cleanup(self) -> None:
        sys.modules.pop(self.module_name, None)
        try:
            os.unlink(self.candidate_path)
        except OSError:
            pass
        try:
            if self.ctx.guard.violations():
                self.ctx.guard.restore()
        except Exception:
            self.ctx.polluted_reason = self.ctx.polluted_reason or "could not restore patched functions"
        self.candidate_module = None
        # A full collection costs ~0.1-0.2 s with torch loaded: do it only when memory says so (or now and then).
        gc.collect(1)
        full = self.ctx.requests_done % FULL_GC_EVERY == FULL_GC_EVERY - 1
        if self.ctx.is_cuda:
            try:
                full = full or self.torch.cuda.memory_allocated() > self.ctx.baseline_cuda_bytes + FULL_GC_CUDA_BYTES
            except Exception:
                pass
        if full:
            gc.collect()
            if self.ctx.is_cuda:
                try:
                    self.torch.cuda.empty_cache()
                except Exception:
                    pass
