"""A random projection of every output of a timed batch, with weights drawn after the batch: the runner cannot answer
it without every call's output, and the judge checks it against the same projection of its own reference outputs."""

# What is projected is sin(output / scale), not the output: a projection linear in the output can be moved onto the
# values of a linear problem (sum(w * (x @ W)) = sum(x * (w @ W^T)): one product a batch, then a dot product a call),
# and a runner that skipped its batch answered it that way at 3.3-3.7x where honest code read 1.1
# (slot_attacks/fused_projection.py, CPU mode). sin moves no further than its argument (|sin a - sin b| <= |a - b|), so
# the judge's tolerance on the raw outputs, over the scale (timing_phase.check), still bounds an honest difference.

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
# Beyond the tolerance, a projection's rounding (relative to the sum of its terms' magnitudes, sum |w sin(x / scale)|,
# taken at most sum |w| min(|x / scale|, 1), which costs the judge no pass of its own): each term's sine and product in
# float32 (a few units of 2^-24) and their sum (_weighted_sums: ~1e-8 of it). It was 1e-4 until session 27, which
# grows with the output's size where an error spread over every element grows with its square root: a batch run in
# bfloat16 (~0.3% off an element) fitted inside it from ~30k elements (red team, session 27). And each argument's own
# rounding (x / scale in float32, both sides: a few units of 2^-24 of |x / scale|).
PROJECTION_SLACK = 1e-6
ARGUMENT_ROUNDING = 4 * 2.0 ** -24
# What is projected is sin(output / scale). The scale is 1 for outputs whose mean magnitude is within SCALED_BEYOND of
# a standard normal's (ARGUMENT_SPREAD); others are brought to that magnitude. Unscaled, sin saw outputs of large
# magnitude through a tolerance wider than its reach (a 512-wide matrix product at 1e-2: every element allowed ~0.2,
# an output of zeros inside the bound on every draw; slot_attacks/guessed_projection.py on a matrix product read correct at
# 2.2-2.4x on a CPU), and outputs of small magnitude in its linear part, where a projection folds onto a linear
# problem's values again. Not scaled further: a smaller argument is checked more tightly (the tolerance over the scale
# grows as the scale shrinks, the projection's spread does not), until sin is nearly linear.
ARGUMENT_SPREAD = math.sqrt(2 / math.pi)
SCALED_BEYOND = 4.0


def output_scale(output: Any) -> float:
    """The scale for projections of outputs like `output` (a reference output): 1.0, or where its floating-point
    elements' mean magnitude is more than SCALED_BEYOND times from ARGUMENT_SPREAD (either way), that magnitude over
    ARGUMENT_SPREAD. 1.0 where there is no finite magnitude."""
    import torch

    from evaluator.judging import judge

    total, count = 0.0, 0
    for tensor in _projected(output, judge, torch):
        if not tensor.is_floating_point():  # a boolean output has no magnitude (its abs() raised: every candidate of
            continue  # a problem returning a mask ended crashed, red team, session 29)
        total += float(_finite(tensor.detach()).abs().sum(dtype=torch.float64))
        count += tensor.numel()
    scale = total / count / ARGUMENT_SPREAD if count else 0.0
    if not (math.isfinite(scale) and scale > 0) or 1 / SCALED_BEYOND <= scale <= SCALED_BEYOND:
        return 1.0
    return scale


def projections(outputs: list, seed: int, scale: float = 1.0) -> list[float]:
    """Per output: the sum of w * sin(output / scale) over its tensors (_projected; NaN and infinities as 0), w uniform
    in [-1, 1) drawn from `seed` (the same w for every output of one shape and device): what a timed hand-over answers,
    on both sides' charge."""
    import torch

    from evaluator.judging import judge

    inverse = 1.0 / scale
    rows = stacked(outputs, torch)
    if rows is not None:  # the usual case: one tensor per call, one shape: a few whole-batch ops, not a few per call
        # One row per call: reshape, not flatten(1), which a stack of 0-dim outputs (a loss) does not have; each row's
        # sum a matrix-vector product (fresh pages cost: on a CPU the hand-over of six 1 MiB outputs took 2-9 ms where
        # the batch took 4). The scale's product in float32 (in half precision it would round each argument by 2^-11),
        # in place in the stack, which is the hand-over's own.
        values = _arguments(rows, torch, in_place=True).reshape(len(outputs), -1)
        if scale != 1.0:
            values = values.mul_(inverse)
        weights = _weights(rows.shape[1:], rows.device, seed).reshape(-1).to(values.dtype)
        return _weighted_sums(values.sin_(), weights, torch).cpu().tolist()
    drawn: dict[Any, Any] = {}
    sums = []
    for output in outputs:
        total = 0.0
        for tensor in _projected(output, judge, torch):
            arguments = _arguments(tensor, torch)
            if scale != 1.0:
                arguments.mul_(inverse)
            total += float((arguments.sin_() * _drawn(drawn, tensor, seed)).sum(dtype=torch.float64))
        sums.append(total)
    return sums


def allowed_differences(outputs: list, seed: int, atol: float, rtol: float, near_miss_diff: float = 0.0,
                        scale: float = 1.0) -> list[float]:
    """Per reference output x: how far a candidate's projection (`projections`, same `seed` and `scale`) may be from
    x's. Each element may move its term by b_i = min((atol + rtol |x_i|) / scale, 2) (|sin a - sin b| <= min(|a - b|,
    2)). The smaller of the worst case (every element off by its whole b_i, in the direction of its weight:
    sum |w_i| b_i) and Hoeffding's bound (HOEFFDING_Z sqrt(sum b_i^2)); the near misses the judge accepts (a share
    of second_look.NEAR_MISS_MAX_FRACTION of the elements, each off by up to `near_miss_diff`: near_miss_allowance);
    plus the rounding slack (PROJECTION_SLACK min(sum |w_i x_i / scale|, sum |w_i|) + ARGUMENT_ROUNDING
    sum |w_i x_i / scale|). Computed by the judge after the timed window, one pass over the batch."""
    import torch

    from evaluator.judging import judge

    inverse = 1.0 / scale
    rows = stacked(outputs, torch)
    if rows is not None:  # one pass over the batch (a per-output loop synchronised a GPU once an output)
        arguments = _arguments(rows, torch, in_place=True).reshape(len(outputs), -1)
        if scale != 1.0:
            arguments = arguments.mul_(inverse)
        drawn = _weights(rows.shape[1:], rows.device, seed).reshape(-1).abs_().to(arguments.dtype)
        sizes = torch.mv(arguments.abs_(), drawn).double()  # sum |w x / scale|, in place of the arguments
        atol_, rtol_ = judge.element_tolerances(rows, atol, rtol)
        bounds = arguments.mul_(rtol_).add_(atol_ * inverse).clamp_(max=2.0)
        worst = torch.mv(bounds, drawn)
        spreads = bounds.square_().sum(1, dtype=torch.float64).sqrt_()
        rounded = torch.minimum(sizes, drawn.sum(dtype=torch.float64))  # bounds sum |w sin(x / scale)|
        terms = torch.stack([worst.double(), spreads, rounded, sizes], 1).cpu().tolist()
        elements = [rows[0].numel() if rows.is_floating_point() else 0] * len(outputs)
    else:
        terms, weights, elements = [], {}, []
        for output in outputs:
            worst = spread = rounded = size = 0.0
            tensors = _projected(output, judge, torch)
            elements.append(sum(tensor.numel() for tensor in tensors if tensor.is_floating_point()))
            for tensor in tensors:
                magnitude = _arguments(tensor, torch).mul_(inverse).abs_()  # a new tensor: the output stays as it is
                drawn = _drawn(weights, tensor, seed).abs().to(magnitude.dtype)
                atol_, rtol_ = judge.element_tolerances(tensor, atol, rtol)
                bounds = (magnitude * rtol_).add_(atol_ * inverse).clamp_(max=2.0)
                part = float((magnitude * drawn).sum(dtype=torch.float64))
                size += part
                rounded += min(part, float(drawn.sum(dtype=torch.float64)))
                worst += float((bounds * drawn).sum(dtype=torch.float64))
                spread += float(bounds.square_().sum(dtype=torch.float64))
            terms.append([worst, math.sqrt(spread), rounded, size])
    return [min(worst, HOEFFDING_Z * spread) + near_miss_allowance(count, near_miss_diff * inverse)
            + PROJECTION_SLACK * rounded + ARGUMENT_ROUNDING * size + 1e-6
            for (worst, spread, rounded, size), count in zip(terms, elements)]


def near_miss_allowance(elements: int, scaled_diff: float) -> float:
    """What the near misses the judge accepts on a timed output (second_look: at most NEAR_MISS_MAX_FRACTION of its
    `elements` outside the tolerance, each off by up to `scaled_diff` over the scale) may move its projection: each
    term by min(scaled_diff, 2). Until session 28 that difference was a floor on every element's tolerance: a candidate
    whose trials moved its largest element by its whole tolerance widened every element's to it, and a batch run in
    bfloat16 fitted inside (red team)."""
    from evaluator.judging.second_look import NEAR_MISS_MAX_FRACTION

    if elements <= 0 or scaled_diff <= 0:  # integer outputs have no near misses: they are compared exactly
        return 0.0
    return max(1, int(NEAR_MISS_MAX_FRACTION * elements)) * min(scaled_diff, 2.0)


def _weights(shape: Any, device: Any, seed: int) -> Any:
    """The projection's weights for outputs of `shape` on `device`: uniform in [-1, 1), from `seed`."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.rand(shape, generator=generator, device=device).mul_(2).sub_(1)


def _drawn(weights: dict, tensor: Any, seed: int) -> Any:
    """`_weights` for `tensor`'s shape and device, drawn once per pair into `weights`."""
    key = (tuple(tensor.shape), tensor.device)
    if key not in weights:
        weights[key] = _weights(tensor.shape, tensor.device, seed)
    return weights[key]


def _weighted_sums(values: Any, weights: Any, torch: Any) -> Any:
    """Each row of `values` (float32) dotted with `weights`, in float64, to within ~1e-7 of the sum of its terms'
    magnitudes (PROJECTION_SLACK is 1e-6 of it). On a CPU a float32 matrix-vector product: BLAS sums in blocks, 2-5e-8
    off on 256 to 1M elements (session 27, this VM), and 3-7x faster than a float32 or float64 sum over the products.
    On a GPU the products summed in float64 (a matrix-vector product there may add long strides in sequence, in
    float32); `values` is overwritten."""
    if values.is_cuda:
        return values.mul_(weights).sum(1, dtype=torch.float64)
    return torch.mv(values, weights).double()


def _projected(output: Any, judge: Any, torch: Any) -> list:
    """An output's non-empty tensors as the projection sees them: floating-point, integer and boolean ones as they are,
    complex ones as their real and imaginary parts, Python numbers as 0-dim tensors. Integer outputs were left out
    before session 27, so a batch of argmax calls went unchecked: a runner that skipped it read 22x; Python numbers
    (a loss read out with .item()) before session 28: 12-27x (red teams)."""
    tensors = [torch.as_tensor(t) if isinstance(t, (bool, int, float)) else t for t in judge.flatten_output(output)]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor) and t.numel()]
    return [torch.view_as_real(t.resolve_conj()) if t.is_complex() else t for t in tensors]


def _arguments(tensor: Any, torch: Any, in_place: bool = False) -> Any:
    """`tensor` as the projection's arguments: float64 outputs in float64 (in float32 everything past 3.4e38 read as an
    infinity, which is 0 on both sides: a float64 output wrong only there passed, red team, session 28), others in
    float32; NaN and infinities as 0 (_finite). A new tensor unless `in_place` (and already of that dtype)."""
    wide = torch.float64 if tensor.dtype == torch.float64 else torch.float32
    converted = tensor.to(wide)
    return _finite(converted, in_place=in_place or converted is not tensor)


def _finite(tensor: Any, in_place: bool = False) -> Any:
    """NaN and infinities as 0, on both sides alike: sin(NaN) is NaN, and a reference with NaN where its definition
    has them (a log of negatives) failed every honest candidate's projection. judge.compare checks their positions."""
    return tensor.nan_to_num_(0.0, 0.0, 0.0) if in_place else tensor.nan_to_num(0.0, 0.0, 0.0)


def stacked(outputs: list, torch: Any) -> Any:
    """Every output in one tensor, a row per call, when each is a plain real tensor of one shape on one device (dtypes
    promoted); else None. Stacked first and checked after: checking each output's shape, dtype and device in Python
    took ~0.4 ms of a 756-call hand-over's ~1.1 ms (2-core VM)."""
    if not outputs or type(outputs[0]) is not torch.Tensor:
        return None
    try:
        stacked = torch.stack(outputs)
    except (TypeError, RuntimeError):  # another shape or device, or not a tensor: the general path
        return None
    if type(stacked) is not torch.Tensor or stacked.is_complex() or not stacked.numel():
        return None
    return stacked
