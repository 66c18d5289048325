"""A second look at a near miss: when a handful of elements fall just outside the tolerance, the reference is run again
in float64 on the same inputs, and the candidate passes if it is as close to that exact answer as the tolerance plus
the reference's own rounding error allows. Deterministic for given inputs, and never a global loosening."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from evaluator.judging import judge
from evaluator.contract.types import Verdict

# At most this share of a comparison's elements may be outside the tolerance for the miss to be "near": a real
# dependence on the nudged values (a memo, an approximation) moves far more elements than rounding does.
NEAR_MISS_MAX_FRACTION = 1e-3
# The candidate may be this many times as far from the float64 answer as the float32 reference is, per element, on top
# of the tolerance: two honest summation orders each carry the reference's own rounding error.
REFERENCE_ERROR_FACTOR = 2.0
# A near miss that the float64 look does not clear is accepted up to this many times the largest difference the
# correctness trials accepted (see within_accepted_error).
ACCEPTED_ERROR_FACTOR = 2.0


def near_miss(reference_output: Any, candidate_output: Any, atol: float, rtol: float) -> bool:
    """Same structure, shapes, dtypes and NaN/Inf pattern, every element finite where the reference is, and no more
    than NEAR_MISS_MAX_FRACTION of the elements outside the tolerance."""
    refs, news = judge.flatten_output(reference_output), judge.flatten_output(candidate_output)
    if len(refs) != len(news):
        return False
    outside = total = 0
    for ref, new in zip(refs, news):
        if not (isinstance(ref, torch.Tensor) and isinstance(new, torch.Tensor)):
            return False
        if ref.shape != new.shape or ref.dtype != new.dtype or ref.device != new.device or not ref.is_floating_point():
            return False
        ref_w, new_w = ref.detach().double(), new.detach().double()
        if not torch.equal(torch.isfinite(ref_w), torch.isfinite(new_w)):
            return False
        finite = torch.isfinite(ref_w)
        diff = (new_w - ref_w).abs()
        outside += int(((diff > atol + rtol * ref_w.abs()) & finite).sum())
        total += ref.numel()
    return 0 < outside <= max(1, int(NEAR_MISS_MAX_FRACTION * total))


def float64_output(model: Any, inputs: list) -> Optional[Any]:
    """The reference model's output with its parameters and floating inputs in float64; None where it cannot run so
    (an op without a float64 kernel): then the first look stands."""
    try:
        wide_model = copy.deepcopy(model).double()
        wide_inputs = [v.detach().double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                       for v in inputs]
        with torch.no_grad():
            output = wide_model(*wide_inputs)
        if any(isinstance(t, torch.Tensor) and t.is_cuda for t in judge.flatten_output(output)):
            torch.cuda.synchronize()
        return output
    except Exception:
        return None


def within_reference_error(exact: Any, reference_output: Any, candidate_output: Any, atol: float, rtol: float) -> bool:
    """Every element: |new - exact| <= atol + rtol * |exact| + REFERENCE_ERROR_FACTOR * |ref - exact|."""
    for wide, ref, new in zip(judge.flatten_output(exact), judge.flatten_output(reference_output),
                              judge.flatten_output(candidate_output)):
        if not isinstance(wide, torch.Tensor) or wide.shape != ref.shape:
            return False
        wide = wide.detach().to(device=ref.device, dtype=torch.float64)
        ref_w, new_w = ref.detach().double(), new.detach().double()
        finite = torch.isfinite(wide) & torch.isfinite(new_w)
        bound = atol + rtol * wide.abs() + REFERENCE_ERROR_FACTOR * (ref_w - wide).abs()
        if bool(((new_w - wide).abs() > bound)[finite].any()):
            return False
    return True


@dataclass(frozen=True)
class Look:
    """A comparison after the second look. near_miss: it still fails, but only on a handful of elements; the judge may
    then accept it when its size is no larger than the error the correctness trials already accepted."""

    comparison: judge.Comparison
    near_miss: bool = False
    second_look: bool = False  # the float64 look ran (and decided the comparison when it is ok)


def look_twice(model: Any, inputs: Callable[[], list], reference_output: Any, candidate_output: Any, atol: float,
               rtol: float) -> Look:
    """judge.compare, then on a near miss the float64 second look. `inputs` makes the very inputs the outputs came
    from (called only on a near miss, so the common path costs nothing extra)."""
    first = judge.compare(reference_output, candidate_output, atol, rtol)
    if first.ok or first.verdict != Verdict.WRONG_OUTPUT:
        return Look(first)
    if not near_miss(reference_output, candidate_output, atol, rtol):
        return Look(first)
    try:
        values = judge.clone_inputs(inputs())
    except Exception:
        return Look(first, near_miss=True)
    exact = float64_output(model, values)
    if exact is not None and within_reference_error(exact, reference_output, candidate_output, atol, rtol):
        return Look(judge.Comparison(Verdict.CORRECT, "", first.max_abs_diff, first.mean_abs_diff), second_look=True)
    return Look(first, near_miss=True, second_look=exact is not None)


def within_accepted_error(look: Look, accepted_max_abs_diff: Optional[float]) -> bool:
    """A near miss no larger than ACCEPTED_ERROR_FACTOR x the largest difference the correctness trials accepted: the
    same rounding, met on other values. A real dependence on the nudged values (a memo of un-nudged inputs, an
    approximation switched on when timed) differs by far more than the trials' rounding and stays wrong."""
    diff = look.comparison.max_abs_diff
    return (look.near_miss and accepted_max_abs_diff is not None and diff is not None
            and diff <= ACCEPTED_ERROR_FACTOR * accepted_max_abs_diff)
