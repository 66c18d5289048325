"""Runtime hack rules: guards on what the evaluator relies on, launch counting, kernel attribution, and the checks
that compare what the candidate did while timed with what it did while checked. Each check returns Finding | None."""

from __future__ import annotations

import contextlib
import re
import sys
import types
from typing import Any, Callable, Iterable, Iterator, Optional

from evaluator.judging.rules import Finding, finding

# Runtime cross-check: device-wide synchronised wall time per call may exceed the event median by this factor + slack.
UNTIMED_WORK_FACTOR = 1.5
UNTIMED_WORK_SLACK_MS = 0.02

# ---- runtime: pristine function identities ---------------------------------------------------------------------

_CLASS_KEYS_IGNORED = {"__slotnames__", "__annotations__", "_abc_impl", "__weakref__", "__doc__", "__parameters__"}


class FunctionGuard:
    """Snapshots what correctness checks and timing rely on (torch, Tensor methods, nn layers, CUDA events, clocks)
    so a candidate that patches any of it is caught and the process is restored for the next request."""

    def __init__(self):
        import builtins
        import math
        import statistics
        import time

        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        modules: list[Any] = [torch, F, time, builtins, math, statistics, torch.cuda]
        for name in ("linalg", "fft", "special", "profiler", "random"):
            sub = getattr(torch, name, None)
            if sub is not None:
                modules.append(sub)
        classes: list[type] = [torch.Tensor, torch._C.TensorBase, nn.Module, torch.cuda.Event]
        classes += [obj for obj in vars(nn).values() if isinstance(obj, type) and issubclass(obj, nn.Module)]
        # Module-level plain values (flags, caches, counters) legitimately change; functions and classes do not.
        self._modules = [(m, {k: v for k, v in vars(m).items() if callable(v)}) for m in modules]
        self._classes = [(c, dict(vars(c))) for c in dict.fromkeys(classes)]
        # Python functions keep their identity when their __code__ is swapped (a slow F.relu inflates the speedup
        # against a reference timed in this process): their code objects are snapshotted too.
        functions = [v for _, snap in self._modules + self._classes for v in snap.values()]
        self._codes = {id(f): (f, f.__code__) for f in functions if isinstance(f, types.FunctionType)}
        self._modes = self._mode_depths()
        self._flags = self._numeric_flags()

    @staticmethod
    def _numeric_flags() -> dict:
        """Global switches that change what torch computes or how fast (TF32, default dtype, threads)."""
        import torch

        flags = {"default_dtype": torch.get_default_dtype(), "num_threads": torch.get_num_threads(),
                 "matmul_precision": torch.get_float32_matmul_precision(),
                 "deterministic": torch.are_deterministic_algorithms_enabled()}
        for name, owner in (("cuda_matmul_tf32", "torch.backends.cuda.matmul"), ("cudnn_tf32", "torch.backends.cudnn"),
                            ("cudnn_benchmark", "torch.backends.cudnn"), ("cudnn_deterministic", "torch.backends.cudnn")):
            attr = {"cuda_matmul_tf32": "allow_tf32", "cudnn_tf32": "allow_tf32"}.get(name, name.replace("cudnn_", ""))
            try:
                obj = torch.backends.cuda.matmul if owner.endswith("matmul") else torch.backends.cudnn
                flags[name] = (obj, attr, getattr(obj, attr))
            except Exception:
                pass
        return flags

    def reset_numeric_flags(self) -> None:
        """Put global numeric switches back, so the reference always runs under the defaults (not a hack: a candidate
        may set them for its own ops, but not for the reference's)."""
        import torch

        flags = self._flags
        try:
            if torch.get_default_dtype() != flags["default_dtype"]:
                torch.set_default_dtype(flags["default_dtype"])
            if torch.get_num_threads() != flags["num_threads"]:
                torch.set_num_threads(flags["num_threads"])
            if torch.get_float32_matmul_precision() != flags["matmul_precision"]:
                torch.set_float32_matmul_precision(flags["matmul_precision"])
            if torch.are_deterministic_algorithms_enabled() != flags["deterministic"]:
                torch.use_deterministic_algorithms(flags["deterministic"])
            for value in flags.values():
                if isinstance(value, tuple):
                    obj, attr, original = value
                    if getattr(obj, attr) != original:
                        setattr(obj, attr, original)
        except Exception:
            pass

    @staticmethod
    def _mode_depths() -> tuple:
        import torch

        depths = []
        for name in ("_len_torch_function_stack", "_len_torch_dispatch_stack"):
            fn = getattr(torch._C, name, None)
            try:
                depths.append(fn() if fn else 0)
            except Exception:
                depths.append(0)
        return tuple(depths)

    @staticmethod
    def _library_rewrap(original: Any, current: Any) -> bool:
        """torch re-wraps some of its own functions on lazy imports (torch._dynamo wraps torch.manual_seed): a wrapper
        whose code lives inside torch/triton and that wraps the original is the library's, not the candidate's."""
        if getattr(current, "__wrapped__", None) is not original:
            return False
        code = getattr(current, "__code__", None)
        filename = (getattr(code, "co_filename", "") or "").replace("\\", "/")
        return bool(filename) and any(filename.startswith(root) for root in _library_roots())

    def violations(self) -> list[str]:
        found = []
        for module, snapshot in self._modules:
            current = vars(module)
            for key, value in list(snapshot.items()):
                now = current.get(key, _MISSING)
                if now is not value:
                    if self._library_rewrap(value, now):
                        snapshot[key] = now
                        continue
                    found.append(f"{module.__name__}.{key}")
        for cls, snapshot in self._classes:
            current = vars(cls)
            get = current.get
            for key, value in snapshot.items():
                if get(key, _MISSING) is not value:
                    found.append(f"{cls.__qualname__}.{key}")
            if len(current) != len(snapshot):  # something was added (the set difference is the slow part)
                for key in current.keys() - snapshot.keys():
                    if key not in _CLASS_KEYS_IGNORED:
                        found.append(f"{cls.__qualname__}.{key}")
        for function, code in self._codes.values():
            if function.__code__ is not code:
                found.append(f"{function.__module__}.{function.__qualname__}.__code__")
        if self._mode_depths() != self._modes:
            found.append("a global torch function/dispatch mode")
        return found

    def restore(self) -> None:
        for module, snapshot in self._modules:
            current = vars(module)
            for key, value in snapshot.items():
                if current.get(key, _MISSING) is not value:
                    setattr(module, key, value)
        for cls, snapshot in self._classes:
            current = vars(cls)
            for key, value in snapshot.items():
                if current.get(key, _MISSING) is not value:
                    setattr(cls, key, value)
            for key in list(current.keys() - snapshot.keys()):
                if key not in _CLASS_KEYS_IGNORED:
                    delattr(cls, key)
        for function, code in self._codes.values():
            if function.__code__ is not code:
                function.__code__ = code
        self._pop_modes()

    def _pop_modes(self) -> None:
        import torch

        try:
            while getattr(torch._C, "_len_torch_function_stack", lambda: 0)() > self._modes[0]:
                torch._C._pop_torch_function_stack()
            while getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)() > self._modes[1]:
                torch._C._pop_torch_dispatch_stack()
        except Exception:
            pass


class _Missing:
    pass


def _library_roots() -> tuple:
    import os

    roots = []
    for name in ("torch", "triton"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            roots.append(os.path.dirname(module.__file__).replace("\\", "/") + "/")
    return tuple(roots)


_MISSING = _Missing()


def _installed_roots() -> tuple:
    """The standard library and installed packages: their compiled modules (math lives in lib-dynload as a .so, and
    Triton's interpreter puts `math` into the kernel's globals) are never the candidate's extensions."""
    import os
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple(dict.fromkeys(os.path.realpath(paths[k]).replace("\\", "/").rstrip("/") + "/"
                               for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)))


class LaunchCounter:
    """Counts Triton kernel launches (compiled and interpreted) so a candidate whose kernel never runs is caught; while
    `poison` holds a fill value, every tensor a launch wrote is overwritten with it afterwards (see KernelPoisoner)."""

    def __init__(self):
        self.count = 0
        self.installed = False
        self.poison: Any = None  # a fill value, or SwappedWrites

    def reset(self) -> None:
        self.count = 0

    def install(self) -> None:
        targets = []
        try:
            import triton.runtime.jit as triton_jit

            targets.append(triton_jit.JITFunction)
        except Exception:
            pass
        try:
            import triton.runtime.interpreter as triton_interp

            targets.append(triton_interp.InterpretedFunction)
        except Exception:
            pass
        counter = self
        for cls in targets:
            original = cls.__dict__.get("run")
            if original is None or getattr(original, "_krl_counting", False):
                continue

            def run(kernel, *args, __original=original, **kwargs):
                counter.count += 1
                if counter.poison is None:
                    return __original(kernel, *args, **kwargs)
                return call_and_poison(__original, (kernel,) + args, kwargs, counter.poison)

            run._krl_counting = True  # type: ignore[attr-defined]
            cls.run = run
        self.installed = bool(targets)


# ---- runtime: does the output depend on the candidate's own kernels? ----------------------------------------------

# Below this share of output elements moved by poisoning the candidate's kernels, those kernels are token work.
MIN_DEPENDENT_FRACTION = 0.01



def poison_fills() -> tuple[float, float]:
    """A large finite base drawn afresh (written as per-element noise above it, see _poison: a candidate cannot
    special-case it; `0 * y` or `y - y` hide it) and NaN (which masking code such as `where` may hide). The output
    must move under both."""
    import random

    return (random.SystemRandom().uniform(1e3, 1e4), float("nan"))


def _tensors_in(values: Iterable[Any]) -> list:
    import torch

    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_tensors_in(value))
    return found


def _poison(tensor: Any, fill: float) -> None:
    """NaN as is; a finite fill as per-element noise in [fill, 2 * fill): a constant can be normalised away (a row
    of one value has no variance), noise cannot."""
    import math

    import torch

    with torch.no_grad():
        if tensor.is_floating_point() or tensor.is_complex():
            if math.isfinite(fill):
                tensor.uniform_(fill, 2 * fill)
            else:
                tensor.fill_(fill)
        elif tensor.dtype == torch.bool:
            tensor.logical_not_()
        else:
            tensor.add_(7)


class SwappedWrites:
    """A poisoning that puts in place of what each launch wrote what the same launch wrote on other inputs, recorded
    first (`replaying` off): values of the kernel's own kind, so torch code after it runs as usual. An output that does
    not move then shows that the kernels' writes do not depend on the inputs: a kernel that copied a bias vector torch
    spread over the result, or zero-filled a status buffer `torch.where` selected torch's result by, moved every element
    under noise and NaN and read correct (red team, session 29)."""

    FALLBACK_FILL = 1e3  # a launch with no recorded match (another count or shape of writes): noise as usual

    def __init__(self):
        self.recorded: list[list[Any]] = []
        self.replaying = False
        self.index = 0

    def apply(self, tensors: list) -> None:
        import torch

        if not self.replaying:
            self.recorded.append([tensor.detach().clone() for tensor in tensors])
            return
        recorded = self.recorded[self.index] if self.index < len(self.recorded) else []
        self.index += 1
        for position, tensor in enumerate(tensors):
            source = recorded[position] if position < len(recorded) else None
            if source is not None and source.shape == tensor.shape and source.dtype == tensor.dtype:
                with torch.no_grad():
                    tensor.copy_(source)
            else:
                _poison(tensor, self.FALLBACK_FILL)


def call_and_poison(fn: Callable, args: tuple, kwargs: dict, fill: Any) -> Any:
    """Run one launch of the candidate's own code, then overwrite what it wrote (with `fill`, or SwappedWrites):
    tensor arguments whose values changed (output buffers and in-place results) and tensors it returned. Read-only
    inputs keep their values. A write of values a buffer already held is invisible here; KernelPoisoner makes fresh
    allocations hold NaN/max-int first."""
    from evaluator.judging import judge

    arguments = _tensors_in(list(args) + list(kwargs.values()))
    before = [t.detach().clone() for t in arguments]
    result = fn(*args, **kwargs)
    written = [t for t, old in zip(arguments, before) if not judge.same_values(t.detach(), old)]
    written += _tensors_in(result if isinstance(result, (list, tuple)) else [result])
    if isinstance(fill, SwappedWrites):
        fill.apply(written)
    else:
        for tensor in written:
            _poison(tensor, fill)
    return result


@contextlib.contextmanager
def filled_fresh_memory():
    """torch.empty*/resize_ fill new memory (NaN, max int) while deterministic algorithms are on. Without it a freed
    temporary that held this very result (e.g. the nan_to_num copies of the previous launch's written-check) comes
    back from the allocator as the next output buffer, the kernel's write changes no value, is not seen, and an
    honest kernel is called unused (CPU mode: rmsnorm at hidden 96, softmax at 64, about one evaluation in 8).
    Deterministic mode also picks other cuDNN algorithms, so the normal run compared with the poisoned ones must run
    under it too (else a torch conv's bits differ and a decoy's output seems to move). warn_only, warnings silenced:
    nondeterministic ops still run."""
    import warnings

    import torch

    deterministic = torch.utils.deterministic
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             deterministic.fill_uninitialized_memory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.use_deterministic_algorithms(True, warn_only=True)
        deterministic.fill_uninitialized_memory = True
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
            deterministic.fill_uninitialized_memory = saved[2]


class KernelPoisoner:
    """While active, the candidate's own kernels have their results overwritten: Triton launches through the launch
    counter, CUDA extension functions (load_inline modules) by wrapping them where the candidate reaches them."""

    def __init__(self, counter: LaunchCounter, holders: list[Any], fill: Any):
        self.counter, self.fill = counter, fill
        self.holders = holders  # the candidate module and the candidate model's submodules
        self.undo: list[tuple[Any, str, Any, bool]] = []
        self.extension_calls = 0

    def __enter__(self) -> "KernelPoisoner":
        self.counter.poison = self.fill
        self._filled = filled_fresh_memory()
        self._filled.__enter__()
        for holder in self.holders:
            namespace = vars(holder)
            for name, value in list(namespace.items()):
                if _is_extension_module(value):
                    for attr, function in list(vars(value).items()):
                        if callable(function) and not attr.startswith("__"):
                            self._wrap(value, attr, function)
                elif _is_extension_function(value):
                    self._wrap(holder, name, value, in_dict=True)
        return self

    def _wrap(self, owner: Any, name: str, function: Any, in_dict: bool = False) -> None:
        poisoner = self

        def poisoned(*args, **kwargs):
            poisoner.extension_calls += 1
            return call_and_poison(function, args, kwargs, poisoner.fill)

        self.undo.append((owner, name, function, in_dict))
        if in_dict:
            vars(owner)[name] = poisoned  # a module's globals or an nn.Module's plain attribute
        else:
            setattr(owner, name, poisoned)

    def __exit__(self, *exc) -> None:
        self.counter.poison = None
        self._filled.__exit__(None, None, None)
        for owner, name, function, in_dict in reversed(self.undo):
            if in_dict:
                vars(owner)[name] = function
            else:
                setattr(owner, name, function)
        self.undo.clear()


def _extension_file(module: Any) -> str:
    import os

    path = str(getattr(module, "__file__", "") or "")
    if not path.endswith((".so", ".pyd")):
        return ""
    roots = _library_roots() + _installed_roots()
    real = os.path.realpath(path).replace(os.sep, "/")
    return "" if any(p.startswith(r) for r in roots for p in (path.replace(os.sep, "/"), real)) else path


def _is_extension_module(value: Any) -> bool:
    import types

    return isinstance(value, types.ModuleType) and bool(_extension_file(value))


def _is_extension_function(value: Any) -> bool:
    """A pybind11 function of a candidate's extension (held without its module: `self.fn = ext.relu_cuda`)."""
    import types

    if not isinstance(value, types.BuiltinFunctionType):
        return False
    owner = getattr(value, "__self__", None)
    home = sys.modules.get(str(getattr(value, "__module__", "") or ""))
    return _is_extension_module(owner) or _is_extension_module(home)


def moved_fraction(normal: Any, poisoned: Any, atol: float = 0.0, rtol: float = 0.0) -> float:
    """Share of output elements that differ (NaN-aware; floating-point ones by more than atol + rtol |normal|) between
    a normal and a poisoned run on the same inputs. Within the tolerance is not moved: torch code whose rounding varies
    from call to call (a split-K that cycles 1, 2 and 4 ways) moved 30-89% of the elements of a torch result beside a
    token kernel, every one in the last bits (red team, session 29)."""
    import torch

    from evaluator.judging import judge

    moved = total = 0
    for a, b in zip(judge.flatten_output(normal), judge.flatten_output(poisoned)):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            return 1.0  # a different structure is a moved output
        if a.is_floating_point() or a.is_complex():
            same = torch.isclose(b, a, rtol=rtol, atol=atol, equal_nan=True) if (atol or rtol) else \
                (a == b) | (a.isnan() & b.isnan())
        else:
            same = a == b
        moved += int((~same).sum())
        total += a.numel()
    return moved / total if total else 0.0


def check_output_uses_kernels(fraction_moved: float, own_launches: int) -> Optional[Finding]:
    """Decoy and token kernels: the candidate's kernels ran, but replacing their results barely moves the output."""
    if own_launches == 0 or fraction_moved >= MIN_DEPENDENT_FRACTION:
        return None
    if fraction_moved == 0:
        return finding("custom_kernel_unused", "no output element changed")
    return finding("custom_kernel_unused", f"only {fraction_moved:.2%} of the output elements changed")


# ---- runtime: named checks on what the candidate did ----------------------------------------------------------------

def check_reference_calls(reference_calls: int) -> Optional[Finding]:
    return finding("reference_model") if reference_calls else None


def check_reference_class(model_new_cls: Any, reference_cls: type) -> Optional[Finding]:
    if isinstance(model_new_cls, type) and issubclass(model_new_cls, reference_cls):
        return finding("reference_model", "ModelNew subclasses Model")
    return None


def check_reference_instance(new_model: Any, reference_cls: type) -> Optional[Finding]:
    if any(isinstance(m, reference_cls) for m in new_model.modules()):
        return finding("reference_model", "ModelNew holds a Model")
    return None


def check_reference_intact(namespaces: list, weights_changed: bool) -> Optional[Finding]:
    for live, kept in namespaces:
        if any(live.get(k, _MISSING) is not v for k, v in kept.items()):
            return finding("reference_model", "the reference was modified")
    if weights_changed:
        return finding("reference_model", "the reference weights were modified")
    return None


def check_patched(patched: list[str]) -> Optional[Finding]:
    return finding("patched_torch", ", ".join(patched[:5])) if patched else None


def check_inputs_unchanged(inputs: list, pristine: list, detail: str = "") -> Optional[Finding]:
    import torch

    from evaluator.judging import judge

    for value, copy in zip(inputs, pristine):
        if isinstance(value, torch.Tensor) and not judge.same_values(value, copy):
            return finding("input_mutation", detail)
    return None


def check_plain_outputs(output: Any) -> Optional[Finding]:
    """Every tensor forward returns is exactly a torch.Tensor (an nn.Parameter too): a subclass can defer its work past
    the timed region (__torch_function__ computing on first use) or override how it compares."""
    import torch

    values = output if isinstance(output, (tuple, list)) else [output]
    for value in values:
        if isinstance(value, torch.Tensor) and type(value) not in (torch.Tensor, torch.nn.Parameter):
            return finding("lazy_output", f"forward returned a {type(value).__name__}")
    return None


def storage_address(output: Any) -> Optional[int]:
    """The storage address of the (first) tensor forward returned, None when it returned no tensor."""
    import torch

    values = output if isinstance(output, (tuple, list)) else [output]
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.untyped_storage().data_ptr()
    return None


def check_replayed_storages(storage_values: dict, value_set_count: int, calls: int) -> Optional[Finding]:
    """Timed calls cycle through a few value sets. A memo keyed on the inputs' content hands back one stored tensor per
    value set: several output storages, each returned again and again but only ever for its own value set. Fresh
    outputs never repeat a storage while held (the caching allocator reuses freed ones for any value set), and a
    persistent output buffer carries every value set."""
    if value_set_count < 2 or calls <= value_set_count:  # some value set must have come round again
        return None
    repeated = [sets for sets in storage_values.values() if len(sets) == 1]
    if len(storage_values) >= 2 and len(storage_values) == len(repeated) == value_set_count:
        return finding("cached_output", f"{len(repeated)} stored outputs were handed back, each only for the input "
                       "values it was first computed for")
    return None


def check_cached_output(earlier_outputs: list, output: Any) -> Optional[Finding]:
    """A wrong output equal to one returned for other inputs: a result cached across calls."""
    from evaluator.judging import judge

    if any(judge.outputs_identical(earlier, output) for earlier in earlier_outputs):
        return finding("cached_output")
    return None


def check_kernels_launched(own_launches: Optional[int]) -> Optional[Finding]:
    return finding("custom_kernel_not_launched") if own_launches == 0 else None


def check_work_when_timed(correctness_launches_min: int, idle_timed_calls: int, timed_calls: int) -> Optional[Finding]:
    """Every correctness call launched kernels; a timed call that launched none returned without computing."""
    if correctness_launches_min > 0 and idle_timed_calls > 0:
        return finding("no_work_when_timed", f"{idle_timed_calls} of {timed_calls} timed calls launched no kernel")
    return None


def check_current_stream(before: Any, after: Any) -> Optional[Finding]:
    if before != after:
        return finding("side_work", "forward returned with a different current CUDA stream")
    return None


def check_threads(leftover: list) -> Optional[Finding]:
    return finding("side_work", "threads still running after the forward") if leftover else None


def check_speed_of_light(measured_ms: float, floor_ms: Optional[float]) -> Optional[Finding]:
    if floor_ms is not None and 0 < measured_ms < floor_ms:
        return finding("below_speed_of_light", f"measured {measured_ms:.4f} ms, physically at least {floor_ms:.4f} ms")
    return None


# ---- runtime: kernel attribution and timing cross-checks ----------------------------------------------------

def _device_work(events: Iterable[Any]) -> Iterator[tuple[Any, str]]:
    """(event, name) of the profiler events that are GPU work (kernels, copies, sets), not the host's launch calls."""
    for event in events:
        if "CUDA" not in str(getattr(event, "device_type", "")):
            continue
        name = getattr(event, "name", "") or ""
        if not name.startswith(("cudaLaunch", "cuLaunch", "cudaDeviceSynchronize")):
            yield event, name


def own_kernel_fraction(events: Iterable[Any], own_names: set[str]) -> tuple[Optional[float], int, int]:
    """(fraction of kernel time in own kernels, own kernel launches, all kernel launches) from profiler events."""
    patterns = [re.compile(rf"(?<![\w]){re.escape(n)}(?![\w])") for n in own_names]
    own_us = total_us = 0.0
    own_count = total = 0
    for event, name in _device_work(events):
        try:
            duration = float(event.time_range.elapsed_us())
        except Exception:
            duration = float(getattr(event, "self_device_time_total", 0.0) or 0.0)
        total += 1
        total_us += duration
        if any(p.search(name) for p in patterns):
            own_count += 1
            own_us += duration
    if total == 0 or total_us <= 0:
        return (0.0 if total == 0 else None), own_count, total
    return own_us / total_us, own_count, total


HOLD_KERNEL = "spin_kernel"  # what torch.cuda._sleep (timing.LaunchHold) launches


def check_early_start(events: Iterable[Any]) -> Optional[Finding]:
    """Profiler events of calls each queued behind a long launch hold (worker: `_early_start_finding`). Work on the
    current stream, or on a side stream that waits for it, cannot begin before the hold ends; work a candidate puts on
    a side stream that does not wait begins during the hold, as it would during the timer's flush and hold ahead of
    each sample, where that much of it escapes the timed region. None when no hold was seen (profiler trouble)."""
    spans = [(float(event.time_range.start), float(event.time_range.end), name)
             for event, name in _device_work(events)]
    holds = [(start, end) for start, end, name in spans if HOLD_KERNEL in name]
    if not holds:
        return None
    for start, end, name in spans:
        if HOLD_KERNEL not in name and any(h_start <= start < h_end for h_start, h_end in holds):
            return finding("untimed_work", f"GPU work ({name[:80]}) began while the current stream was still held "
                                           "before the call: a side stream that does not wait for the current stream")
    return None


def untimed_work(event_median_ms: float, wall_ms_per_call: float, issue_ms_per_call: float) -> Optional[Finding]:
    """Device-wide synchronised wall time per call vs the event median: hidden side-stream work shows up only in the
    former. Host-side issue time bounds the honest wall time for launch-bound candidates."""
    allowed = UNTIMED_WORK_FACTOR * max(event_median_ms, issue_ms_per_call) + UNTIMED_WORK_SLACK_MS
    if wall_ms_per_call > allowed:
        return finding("untimed_work", f"{wall_ms_per_call:.3f} ms per call synchronised vs {event_median_ms:.3f} ms timed")
    return None


