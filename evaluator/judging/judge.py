"""The judge's pure part: make a problem's inputs from its reference module and a seed, and compare outputs.
Takes tensors and the reference module, never candidate objects, so it can run in a process the candidate cannot reach."""

from __future__ import annotations

import copy
import re
import types
from dataclasses import dataclass
from typing import Any, Optional

import torch

from evaluator.contract.types import Verdict

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Comparison:
    """How a candidate's output compares with the reference's: a verdict (correct, wrong_output or shape_mismatch),
    feedback text, and the differences where the outputs were comparable (positions where both are finite)."""

    verdict: Verdict
    message: str = ""
    max_abs_diff: Optional[float] = None
    mean_abs_diff: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.CORRECT


# ---- inputs --------------------------------------------------------------------------------------------------------

def set_seed(seed: int) -> None:
    if torch.cuda.is_initialized():
        torch.manual_seed(seed)  # CPU and every CUDA generator, as KernelBench does
    else:
        # CPU mode: torch.manual_seed would also queue a lazy CUDA seeding call, with a captured stack, every time.
        torch.default_generator.manual_seed(seed)


def trial_seeds(seed: int, count: int) -> list[int]:
    """The per-trial input seeds of the correctness trials, derived from the request's seed."""
    set_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(count)]


RECHECK_SEED_OFFSET = 7919
POISON_SEED_OFFSET = 104729
SWAP_SEED_OFFSET = 130363
TIMING_SEED_STRIDE = 1000003


def input_seed(seed: int, name: str) -> int:
    """The seed of a named input set of one request: "trial-<k>" (correctness trial k), "timing-<j>" (timing value
    set j; timing-0 is the request's seed), "recheck" (fresh inputs after timing), "poison" (the kernel-dependency
    check), "swap" (the other inputs of its swapped writes). One pure function, so the judge and the runner agree
    without sending seeds around."""
    kind, _, index = name.partition("-")
    if kind == "trial":
        return trial_seeds(seed, int(index) + 1)[int(index)]
    if kind == "timing":
        return seed + TIMING_SEED_STRIDE * int(index)
    if kind == "recheck":
        return seed + RECHECK_SEED_OFFSET
    if kind == "poison":
        return seed + POISON_SEED_OFFSET
    if kind == "swap":
        return seed + SWAP_SEED_OFFSET
    raise ValueError(f"unknown input set {name!r}")


# The nudge's relative size: above bf16's resolution, so every element changes at every precision, and wide, so no
# timed call's values lie close to another's. At 2^-5 (until session 27) every timed set of a base lay within ~6% of
# each other, element by element, and a candidate kept the first as an anchor, certified from that radius which few
# columns of an argmax(x @ W) could still win, and computed only those: exact outputs, 2.6-3.7x (red team).
NUDGE = 0.25


def nudged_values(values: list, seed: int) -> list:
    """`values` with every floating-point tensor element multiplied by its own factor in [1 - NUDGE, 1 + NUDGE] (the
    same for the same seed): made on the tensor's device, in about the time a copy takes. Signs, zeros, magnitudes,
    integer and boolean tensors and non-tensors stay as they were, so the inputs keep get_inputs()'s domain (positive
    stays positive, an index stays an index). Per element rather than one factor per tensor: a memo keyed on content
    normalised by scale would otherwise serve a linear kernel."""
    nudged, generators = [], {}
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0:
            generator = generators.get(value.device)
            if generator is None:  # one stream of draws per device, in the order of the values
                generator = generators[value.device] = torch.Generator(device=value.device)
                generator.manual_seed(seed)
            factor = torch.rand(value.shape, generator=generator, device=value.device, dtype=torch.float32)
            value = (value.float() * factor.mul_(2 * NUDGE).add_(1 - NUDGE)).to(value.dtype)
        nudged.append(value)
    return nudged


def nudged_batch(bases: list[list], salt: int, calls: int, shift: Any = None) -> list[list]:
    """Value sets for a timed batch of `calls` calls: set i is base i % len(bases) with every floating-point element
    scaled by its own factor in [1 - NUDGE, 1 + NUDGE], drawn from `salt` (the same sets for the same salt on the same
    kind of device). Made with one draw and one multi-tensor multiply-add per base tensor, where nudged_values per call
    costs several launches and ~50 us of host time, as much as a small kernel: both sides make their sets inside their
    timed batch, so that cost compressed every small problem's speedup towards 1. Each set's tensors are allocations
    of their own, as a call's inputs would be: no call can reach another call's values through its inputs' storage.
    With a `shift` (a one-element float tensor on the device, written as a device gate opened: slot/device_gate.py),
    each factor's draw is moved by it (shifted_factors), so the values exist only once the gate is open. `shift` may be
    a function that queues the gate's wait and returns that tensor: it is called once every draw is queued, so the
    draws, which do not depend on it, run before the gate and outside the timed batch (a 4M-element ReLU's sets took
    ~69 us a call to make behind the gate on an H100, seven times the call itself)."""
    count = len(bases)
    if not any(isinstance(v, torch.Tensor) and v.is_cuda for values in bases for v in values):
        # CPU: one set at a time (no launches to save there), so the runner's fresh process touches no more new
        # memory at once than the long-lived judge does (made in bulk, identical code read 0.79-0.90x, not ~0.98x).
        return [nudged_values(bases[i % count], salt + i) for i in range(calls)]
    return nudged_in_bulk(bases, salt, calls, shift)


def nudged_in_bulk(bases: list[list], salt: int, calls: int, shift: Any = None) -> list[list]:
    """nudged_batch's GPU path, on any device: every draw made, then `shift` (or what calling it returns, once the
    draws are done), then one multi-tensor multiply-add per base tensor."""
    count = len(bases)
    draws = _batch_draws(bases, salt, calls)
    if callable(shift):
        if any(d.is_cuda for d in draws.values()):  # done before the gate: no timed batch starts behind them
            torch.cuda.current_stream().synchronize()
        shift = shift()
    made: list[list] = [[] for _ in range(calls)]
    for base_index, values in enumerate(bases):
        share = len(range(base_index, calls, count))
        if share == 0:
            continue
        columns = []
        for position, value in enumerate(values):
            factors = draws.pop((base_index, position), None)
            if factors is None:
                columns.append([value] * share)
                continue
            if shift is not None:
                shifted_factors(factors, shift)
            # value * (1 - NUDGE + 2 NUDGE u) as one multiply-add a set: base * (1 - NUDGE) + (base * 2 NUDGE) * u
            source = value.float()
            low, high = source * (1 - NUDGE), source * (2 * NUDGE)
            products = torch._foreach_addcmul([low] * share, [high] * share, list(factors.unbind(0)))
            del factors
            columns.append(products if value.dtype == torch.float32 else [p.to(value.dtype) for p in products])
        for k in range(share):
            made[base_index + k * count] = [column[k] for column in columns]
    return made


def _batch_draws(bases: list[list], salt: int, calls: int) -> dict[tuple[int, int], torch.Tensor]:
    """nudged_batch's uniform draws in [0, 1), one tensor (its share of the calls, *shape) per floating-point base
    tensor, keyed (base, position)."""
    count, draws = len(bases), {}
    for base_index, values in enumerate(bases):
        share = len(range(base_index, calls, count))
        for position, value in enumerate(values):
            if share and isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0:
                generator = torch.Generator(device=value.device)
                generator.manual_seed(salt * 1009 + base_index * 101 + position)
                draws[(base_index, position)] = torch.rand((share, *value.shape), generator=generator,
                                                           device=value.device, dtype=torch.float32)
    return draws


def shifted_factors(draws: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Uniform draws in [0, 1) moved by `shift` in [0, 1), in place, still uniform in [0, 1): frac(draw + shift)."""
    return draws.add_(shift).frac_()


def nudged_set_name(base: int, seed: int) -> str:
    """The name of timing value set `base` nudged with `seed`: what a timed call beyond the first few is given."""
    return f"nudged-{base}-{seed}"


def parse_nudged_set(name: str) -> Optional[tuple[int, int]]:
    """(base, seed) of a nudged set's name, None for any other name."""
    match = re.fullmatch(r"nudged-(\d{1,2})-(\d{1,10})", name)
    return (int(match.group(1)), int(match.group(2))) if match else None


# What a candidate may not see of the problem module: the reference itself and the evaluator's input makers.
HIDDEN_PROBLEM_NAMES = frozenset({"Model", "get_inputs", "get_init_inputs"})


def problem_globals(reference: types.ModuleType) -> dict[str, Any]:
    """The problem module's plain globals (sizes, constants such as `hardtanh_min`, imported modules), copied: the
    namespace a KernelBench candidate runs in. Classes, functions and dunders stay out, and `Model` with them."""
    found = {}
    for name, value in vars(reference).items():
        if name.startswith("__") or name in HIDDEN_PROBLEM_NAMES:
            continue
        if isinstance(value, type) or callable(value) and not isinstance(value, types.ModuleType):
            continue
        found[name] = value if isinstance(value, types.ModuleType) else copy.deepcopy(value)
    return found


def to_device(values: list, device: str, dtype: Optional[torch.dtype] = None) -> list:
    """Tensors moved to the device; floating tensors cast to dtype. Integer and boolean inputs keep their dtype
    (KernelBench casts them; that changes the problem)."""
    moved = []
    for value in values:
        if isinstance(value, torch.Tensor):
            value = value.to(device)
            if dtype is not None and value.is_floating_point():
                value = value.to(dtype)
        moved.append(value)
    return moved


def build_reference_model(reference: types.ModuleType, seed: int, device: str, precision: str = "fp32") -> Any:
    """The problem's Model as KernelBench builds it (the seed set before its init inputs and again before the model),
    created on the device and cast to the request's precision. The judge's and the runner's timed-first copy alike."""
    with torch.device(device):
        set_seed(seed)
        init_inputs = to_device(list(reference.get_init_inputs()), device)
        set_seed(seed)
        model = reference.Model(*init_inputs)
    model = model.to(device)
    dtype = DTYPES[precision]
    return model.to(dtype) if dtype != torch.float32 else model


def make_inputs(reference: types.ModuleType, seed: int, device: str, precision: str = "fp32") -> list:
    """The reference problem's get_inputs() under a seed, created directly on the device (generating large inputs
    on the CPU and copying them cost ~0.4 s per trial on an H200), cast to the request's precision."""
    set_seed(seed)
    with torch.device(device):
        values = list(reference.get_inputs())
    dtype = DTYPES[precision]
    return to_device(values, device, dtype if dtype != torch.float32 else None)


def clone_inputs(values: list) -> list:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


# ---- comparing -----------------------------------------------------------------------------------------------------

def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal values (NaN equal to NaN), same shape and dtype."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) and torch.equal(a.isnan(), b.isnan()))
    return bool(torch.equal(a, b))


def flatten_output(output: Any) -> list:
    return list(output) if isinstance(output, (tuple, list)) else [output]


def outputs_identical(a: Any, b: Any) -> bool:
    """Two outputs hold the very same values (used to recognise a cached result returned for new inputs)."""
    items_a, items_b = flatten_output(a), flatten_output(b)
    if len(items_a) != len(items_b):
        return False
    for x, y in zip(items_a, items_b):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            return False
        if x.device != y.device or not same_values(x, y):
            return False
    return True


def snapshot(output: Any) -> Any:
    """A detached copy of an output, safe from later in-place writes into a reused output buffer."""
    if isinstance(output, (tuple, list)):
        return type(output)(snapshot(o) for o in output)
    return output.detach().clone() if isinstance(output, torch.Tensor) else output


def shares_storage(output: Any, other: Any) -> bool:
    """Whether any tensor of `output` lies in the memory of a tensor of `other` (one buffer returned twice)."""
    def storages(value: Any) -> set:
        return {t.untyped_storage().data_ptr() for t in flatten_output(value)
                if isinstance(t, torch.Tensor) and t.numel()}

    return other is not None and bool(storages(output) & storages(other))


class CopiedOutputs(list):
    """A list that keeps a snapshot of each output appended, not the output itself."""

    def append(self, output: Any) -> None:
        super().append(snapshot(output))


def element_tolerances(tensor: Any, atol: float, rtol: float) -> tuple[float, float]:
    """(atol, rtol) for the elements of one output tensor: integers and booleans are compared exactly."""
    return (atol, rtol) if tensor.is_floating_point() else (0.0, 0.0)


def compare(reference_output: Any, candidate_output: Any, atol: float, rtol: float) -> Comparison:
    """Elementwise |new - ref| <= atol + rtol * |ref| over every output tensor; NaN/Inf must match the reference's."""
    ref_items = flatten_output(reference_output)
    ref_is_seq = isinstance(reference_output, (tuple, list))
    new_is_seq = isinstance(candidate_output, (tuple, list))
    if ref_is_seq != new_is_seq or len(flatten_output(candidate_output)) != len(ref_items):
        expected = f"a {type(reference_output).__name__} of {len(ref_items)}" if ref_is_seq else "a tensor"
        got = (f"a {type(candidate_output).__name__} of {len(candidate_output)}" if new_is_seq
               else type(candidate_output).__name__)
        return Comparison(Verdict.SHAPE_MISMATCH, f"Output structure mismatch: expected {expected}, got {got}.")
    max_diff = 0.0
    mean_diffs = []
    failure = None
    for index, (ref, new) in enumerate(zip(ref_items, flatten_output(candidate_output))):
        where = f" (output {index})" if len(ref_items) > 1 else ""
        if not isinstance(ref, torch.Tensor):
            ref = torch.as_tensor(ref)
        if not isinstance(new, torch.Tensor):
            if not isinstance(new, (int, float, bool)):
                return Comparison(Verdict.WRONG_OUTPUT, f"Output{where} is a {type(new).__name__}, expected a tensor.")
            try:
                new = torch.as_tensor(new)
            except (OverflowError, ValueError, RuntimeError):  # an int no tensor holds (2**70): the candidate's
                return Comparison(Verdict.WRONG_OUTPUT, f"Output{where} is the number {str(new)[:40]}, which no "
                                  "tensor holds.")
        if tuple(new.shape) != tuple(ref.shape):
            return Comparison(Verdict.SHAPE_MISMATCH,
                              f"Output shape mismatch{where}: expected {list(ref.shape)}, got {list(new.shape)}.")
        if new.dtype != ref.dtype:
            return Comparison(Verdict.WRONG_OUTPUT, f"Output dtype mismatch{where}: expected {ref.dtype}, got {new.dtype}.")
        if new.device != ref.device:
            return Comparison(Verdict.WRONG_OUTPUT, f"Output{where} is on {new.device}, expected {ref.device}.")
        if ref.is_complex():  # compare real and imaginary parts as separate elements
            ref, new = torch.view_as_real(ref.detach().resolve_conj()), torch.view_as_real(new.detach().resolve_conj())
        # Integers and booleans exactly: a relative tolerance let a count of a million be off by ten thousand at
        # 1e-2 (a count over an eighth of each row, times 8: correct at 1.34x; red team, session 28). float64 outputs
        # in float64: in float32 everything past 3.4e38 was an infinity on both sides, and so "the same".
        exact = not ref.is_floating_point()
        item_atol, item_rtol = element_tolerances(ref, atol, rtol)
        wide = torch.float64 if exact or ref.dtype == torch.float64 else torch.float32
        ref_w, new_w = ref.detach().to(wide), new.detach().to(wide)
        ref_bad, new_bad = ~torch.isfinite(ref_w), ~torch.isfinite(new_w)
        # Either side's NaN/Inf: the same positions and the same infinities, or wrong. Checked on the candidate's
        # side only, a reference's NaN let any finite value through there (red team, session 27: log of negatives).
        if bool(new_bad.any()) or bool(ref_bad.any()):
            same_pattern = torch.equal(ref_bad, new_bad) and torch.equal(
                torch.nan_to_num(ref_w[ref_bad], nan=0.0), torch.nan_to_num(new_w[new_bad], nan=0.0))
            if not same_pattern and failure is None:
                # The diffs below cover the positions where both are finite (JSON has no infinity).
                failure = (f"Output{where} has {int((ref_bad != new_bad).sum())} NaN/Inf value(s) where the reference "
                           "is finite, or finite values where it is not." if not torch.equal(ref_bad, new_bad) else
                           f"Output{where} has infinities of another sign than the reference's.")
        both_ok = ~(ref_bad | new_bad)
        diff = torch.where(both_ok, (new_w - ref_w).abs(), torch.zeros_like(ref_w))
        bound = item_atol + item_rtol * torch.where(both_ok, ref_w.abs(), torch.zeros_like(ref_w))
        if diff.numel():
            item_max = float(diff.max())
            mean_diffs.append(float(diff.mean()))
            max_diff = max(max_diff, item_max)
            outside = diff > bound
            if failure is None and bool(outside.any()):
                tolerance = "integers compared exactly" if exact else f"atol={atol:g}, rtol={rtol:g}"
                failure = (f"Output mismatch{where}: {int(outside.sum())} of {diff.numel()} elements outside tolerance "
                           f"({tolerance}); max abs diff {item_max:.4g}.")
    mean_diff = float(sum(mean_diffs) / len(mean_diffs)) if mean_diffs else 0.0
    if failure:
        return Comparison(Verdict.WRONG_OUTPUT, failure, max_diff, mean_diff)
    return Comparison(Verdict.CORRECT, "", max_diff, mean_diff)
