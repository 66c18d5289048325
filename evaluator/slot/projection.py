"""A random projection of every output of a timed batch, with weights drawn after the batch: the runner cannot answer
it without every call's output, and the judge checks it against the same projection of its own reference outputs."""

# What is projected is sin(output), not the output: a projection linear in the output can be moved onto the values of a
# linear problem (sum(w * (x @ W)) = sum(x * (w @ W^T)): one product a batch, then a dot product a call), and a runner
# that skipped its batch answered it that way at 3.3-3.7x where honest code read 1.1 (slot_attacks/fused_projection.py,
# CPU mode). sin moves no further than its argument (|sin a - sin b| <= |a - b|), so the judge's tolerance on the raw
# outputs' magnitudes (timing_phase.check) still bounds an honest difference.

from __future__ import annotations

import math
from typing import Any

# How far an honest projection may be off. Its weights are drawn after the batch, so for outputs that are each within
# the tolerance b_i of the reference (|sin a - sin b| <= |a - b| <= b_i), sum(w_i * e_i) is a sum of independent terms
# bounded by b_i: Hoeffding's inequality puts it beyond HOEFFDING_Z * sqrt(sum(b_i^2)) with a chance under 1e-9 a call.
# That bound grows as the square root of the output's size where the worst case (every element off by its whole
# tolerance, in the direction of its weight) grows with the size: on a million elements the worst case let an output of
# zeros through (237 off against 9,464 allowed), the statistical bound does not (124 allowed).
HOEFFDING_Z = math.sqrt(2 * math.log(2 / 1e-9))
# Beyond the tolerance, the summation order's rounding of a projection (relative to its magnitude).
PROJECTION_SLACK = 1e-4


def projections(outputs: list, seed: int, sums: bool = True,
                magnitudes: bool = True) -> tuple[list[float], list[float], list[float]]:
    """Per output: (sum of w * sin(output), sum of |w * output|, sum of |w|) over its floating-point tensors, w uniform
    in [-1, 1) drawn from `seed` (the same w for every output of one shape and device). Without `sums` or `magnitudes`
    that part comes back empty: a timed hand-over answers the sums alone, and the judge projects the magnitudes its
    tolerance needs after the timed window (on an H100 they were 3 of the 8 passes over a batch's outputs)."""
    import torch

    from evaluator.judging import judge

    stacked = _stacked(outputs, torch)
    if stacked is not None:  # the usual case: one tensor per call, one shape: a few whole-batch ops, not a few per call
        generator = torch.Generator(device=stacked.device)
        generator.manual_seed(seed)
        drawn = torch.rand(stacked.shape[1:], generator=generator, device=stacked.device).mul_(2).sub_(1)
        # One row per call: reshape, not flatten(1), which a stack of 0-dim outputs (a loss) does not have. Two
        # temporaries the batch's size (the stack's copy, its magnitudes), each row's sums a matrix-vector product
        # (fresh pages cost: on a CPU the hand-over of six 1 MiB outputs took 2-9 ms where the batch took 4).
        values = stacked.float().reshape(len(outputs), -1)
        weights = drawn.reshape(-1)
        sizes = torch.mv(values.abs(), weights.abs()).double().cpu().tolist() if magnitudes else []
        projected = torch.mv(values.sin_(), weights).double().cpu().tolist() if sums else []
        return projected, sizes, [float(drawn.abs().sum())] * len(outputs) if magnitudes else []
    weights: dict[Any, Any] = {}
    rows = []
    for output in outputs:
        parts = []
        for tensor in judge.flatten_output(output):
            if not (isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel()):
                continue
            key = (tuple(tensor.shape), tensor.device)
            if key not in weights:
                generator = torch.Generator(device=tensor.device)
                generator.manual_seed(seed)
                drawn = torch.rand(tensor.shape, generator=generator, device=tensor.device) * 2 - 1
                weights[key] = (drawn, drawn.abs().sum())
            drawn, drawn_abs = weights[key]
            value = tensor.float()
            parts.append(torch.stack([(value.sin() * drawn).sum(), (value * drawn).abs().sum(), drawn_abs]).double()
                         .cpu())
        rows.append(torch.stack(parts).sum(0) if parts else torch.zeros(3, dtype=torch.float64))
    if not rows:
        return [], [], []
    table = torch.stack(rows).tolist()
    return ([r[0] for r in table] if sums else [], [r[1] for r in table] if magnitudes else [],
            [r[2] for r in table] if magnitudes else [])


def _stacked(outputs: list, torch: Any) -> Any:
    """Every output in one floating-point tensor, a row per call, when each is a plain tensor of one shape on one
    device (floating dtypes promoted, as .float() would); else None. Stacked first and checked after: checking each
    output's shape, dtype and device in Python took ~0.4 ms of a 756-call hand-over's ~1.1 ms (2-core VM)."""
    if not outputs or type(outputs[0]) is not torch.Tensor:
        return None
    try:
        stacked = torch.stack(outputs)
    except (TypeError, RuntimeError):  # another shape or device, or not a tensor: the general path
        return None
    if type(stacked) is not torch.Tensor or not stacked.is_floating_point() or not stacked.numel():
        return None
    return stacked


def tolerance_spreads(outputs: list, atol: float, rtol: float, floor: float = 0.0) -> list[float]:
    """Per output: sqrt(sum(b_i^2)) over its floating-point elements, b_i = max(atol + rtol * |x_i|, floor) around the
    reference output x (the spread allowed_difference needs)."""
    import torch

    from evaluator.judging import judge

    stacked = _stacked(outputs, torch)
    if stacked is not None:  # one pass over the batch (a per-output loop synchronised a GPU once an output)
        bound = stacked.float().reshape(len(outputs), -1).abs_().mul_(rtol).add_(atol).clamp_min_(floor)
        return bound.square_().sum(1, dtype=torch.float64).sqrt_().cpu().tolist()
    spreads = []
    for output in outputs:
        total = 0.0
        for tensor in judge.flatten_output(output):
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel():
                bound = tensor.float().abs().mul_(rtol).add_(atol).clamp_min_(floor)
                total += float(bound.square_().sum(dtype=torch.float64))
        spreads.append(math.sqrt(total))
    return spreads


def allowed_difference(size: float, scale: float, spread: float, atol: float, rtol: float) -> float:
    """How far a candidate's projection may be from the reference's: the smaller of the worst case (every element off by
    atol + rtol * |x|: atol * sum|w| + rtol * sum|w x|) and Hoeffding's bound on the spread, plus the rounding slack."""
    worst = atol * scale + rtol * size
    return min(worst, HOEFFDING_Z * spread) + PROJECTION_SLACK * size + 1e-6
