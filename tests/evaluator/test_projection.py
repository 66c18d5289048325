"""The timed batch's projection (evaluator/slot/projection.py): the one-shape path agrees with the general path,
leaves the outputs alone, and moves when any one element of any output does; the judge's bound on it lets honest
outputs within the tolerance through and stops wrong ones of every size."""

import torch

from evaluator.slot.projection import (ARGUMENT_SPREAD, PROJECTION_SLACK, allowed_differences, output_scale,
                                       projections)


def general(outputs: list, seed: int) -> list:
    """The per-output path, forced by wrapping each output in a tuple."""
    return projections([(o,) for o in outputs], seed)


def _worst_case(reference: torch.Tensor, seed: int, atol: float, rtol: float) -> float:
    """The bound the judge allowed before session 17: every element off by its whole tolerance, in its weight's
    direction (atol sum|w| + rtol sum|w x|), plus the rounding slack; w drawn as slot/projection.py draws it."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    weights = torch.rand(reference.shape, generator=generator).mul_(2).sub_(1).abs_()
    size = float((weights * reference.abs()).sum())
    return atol * float(weights.sum()) + (rtol + PROJECTION_SLACK) * size + 1e-6


def test_the_one_shape_path_matches_the_general_one_and_leaves_the_outputs_alone():
    for outputs in ([torch.randn(64, 33) for _ in range(5)], [torch.randn(()) for _ in range(4)],
                    [torch.randn(16, 8).half() for _ in range(3)]):
        before = [o.clone() for o in outputs]
        fast, slow = projections(outputs, 7), general(outputs, 7)
        # The two paths sum in different orders (a matrix-vector product against a sum per output): within the
        # rounding the judge allows a projection (projection.PROJECTION_SLACK of its magnitude: no tolerance here)
        rounding = allowed_differences(outputs, 7, 0.0, 0.0)
        assert all(abs(got - want) <= bound for got, want, bound in zip(fast, slow, rounding)), (fast, slow)
        assert torch.allclose(torch.tensor(rounding), torch.tensor(allowed_differences([(o,) for o in outputs], 7,
                                                                                       0.0, 0.0)), rtol=1e-5)
        assert all(torch.equal(o, b) for o, b in zip(outputs, before))


def test_one_changed_element_moves_its_projection_only():
    outputs = [torch.randn(32, 32) for _ in range(4)]
    sums = projections(outputs, 3)
    outputs[2][5, 7] += 1.0
    moved = projections(outputs, 3)
    assert moved[2] != sums[2] and moved[:2] == sums[:2] and moved[3] == sums[3]


def test_packed_projections_come_back_whole_and_anything_else_is_refused():
    from evaluator.contract.framing import pack_floats, unpack_floats

    values = [0.0, -1.5, 1e300, float("inf"), 3.141592653589793]
    back = unpack_floats(pack_floats(values), 5)
    assert back == values
    nan = unpack_floats(pack_floats([float("nan")]), 1)
    assert nan is not None and nan[0] != nan[0]  # NaN comes back as NaN (the check fails it, not the unpacking)
    assert unpack_floats(pack_floats([]), 0) == []
    packed = pack_floats(values)
    for bad in (values, packed, packed[:-4], packed + "AAAA", "!" * len(packed), None, 5, "é" * len(packed)):
        assert unpack_floats(bad, 5 if bad is not packed else 4) is None


ATOL = RTOL = 1e-2  # KernelBench's float32 tolerances
# The outputs' own seeds stay clear of the projections' (0-19): weights drawn from a generator seeded as the one that
# made the values would be correlated with them (the judge's seeds are secret 30-bit draws, its inputs' seeds others).


def _off_by(reference: torch.Tensor, candidate: torch.Tensor, seed: int, scale: float = 1.0) -> tuple[float, float]:
    """(how far the candidate's projection is from the reference's, how far the judge allows), at `scale`."""
    got, want = projections([candidate], seed, scale)[0], projections([reference], seed, scale)[0]
    return abs(got - want), allowed_differences([reference], seed, ATOL, RTOL, scale=scale)[0]


def test_a_wrong_output_of_a_million_elements_is_stopped_though_the_worst_case_bound_let_it_through():
    """Every element off by its whole tolerance, in the direction of its weight, is the worst case the judge allowed
    before: on a million elements an output of zeros, or one with half its elements left at zero, stayed inside it."""
    reference = torch.randn(1 << 20, generator=torch.Generator().manual_seed(12345))
    for wrong in (torch.zeros_like(reference), torch.where(torch.arange(reference.numel()) % 2 == 0, reference, 0.0)):
        caught = 0
        for seed in range(20):
            off, allowed = _off_by(reference, wrong, seed)
            assert off < _worst_case(reference, seed, ATOL, RTOL)  # the old bound: never caught
            caught += off > allowed
        assert caught >= 8, caught  # each call of a batch is a fresh chance (~50-70% each)


def test_honest_outputs_anywhere_within_the_tolerance_pass_every_draw():
    """Errors up to each element's whole tolerance, in patterns fixed before the weights are drawn (all one way,
    following the reference's sign, at random), at a million elements and at 256, unscaled and at the scale the judge
    draws from outputs of magnitude 1, 30 (a matrix product's) and 1e-3."""
    for count, magnitude, scaled in ((256, 1.0, False), (1 << 20, 1.0, False), (256, 1.0, True),
                                     (1 << 20, 30.0, True), (4096, 1e-3, True)):
        reference = torch.randn(count, generator=torch.Generator().manual_seed(12346)) * magnitude
        scale = output_scale(reference) if scaled else 1.0
        bound = ATOL + RTOL * reference.abs()
        signs = torch.randint(0, 2, (count,), generator=torch.Generator().manual_seed(12347)) * 2 - 1
        for errors in (bound, bound * reference.sign(), bound * signs, bound * 0.999 * torch.rand(count)):
            for seed in range(20):
                off, allowed = _off_by(reference, reference + errors, seed, scale)
                assert off <= allowed, (count, magnitude, seed, off, allowed)


def test_the_allowed_difference_is_the_same_on_the_one_shape_path_and_the_general_one():
    outputs = [torch.randn(64, 33) for _ in range(5)]
    before = [o.clone() for o in outputs]
    fast = allowed_differences(outputs, 3, ATOL, RTOL, 0.02)
    slow = allowed_differences([(o,) for o in outputs], 3, ATOL, RTOL, 0.02)
    assert torch.allclose(torch.tensor(fast), torch.tensor(slow), rtol=1e-5)
    assert all(torch.equal(o, b) for o, b in zip(outputs, before))
    mixed = [(o, o[:2]) for o in outputs]  # two tensors an output: the terms of both add up
    alone = allowed_differences([(o,) for o in outputs], 3, ATOL, RTOL)
    assert all(both > one for both, one in zip(allowed_differences(mixed, 3, ATOL, RTOL), alone))


def test_outputs_of_large_magnitude_are_checked_at_their_scale():
    """A 512-wide matrix product's outputs (magnitude ~20) at 1e-2 let each element move ~0.2, wider than sin's reach
    unscaled: an output of zeros stayed inside the bound on every draw (slot_attacks/guessed_projection.py on a matrix product read
    correct at 2.2-2.4x). At the scale drawn from the reference itself it is stopped as at magnitude 1."""
    reference = torch.randn(16 * 512, generator=torch.Generator().manual_seed(12348)) * 22.0
    scale = output_scale(reference)
    assert abs(scale - float(reference.abs().mean()) / ARGUMENT_SPREAD) < 1e-3 * scale
    wrong = torch.zeros_like(reference)
    unscaled = [_off_by(reference, wrong, seed) for seed in range(20)]
    assert not any(off > allowed for off, allowed in unscaled)
    caught = sum(off > allowed for off, allowed in (_off_by(reference, wrong, seed, scale) for seed in range(20)))
    assert caught >= 8, caught


def test_the_scale_of_an_output_without_magnitude_is_one():
    assert output_scale(torch.zeros(16)) == 1.0 and output_scale(torch.arange(4)) == 1.0  # no floating elements
    assert output_scale(torch.rand(8) > 0.5) == 1.0  # a mask: its abs() raised before session 29
    assert output_scale((torch.full((3,), 40.0), torch.ones(2) > 0)) == 40.0 / ARGUMENT_SPREAD
    assert output_scale((torch.full((4,), float("inf")),)) == 1.0
    assert output_scale((torch.ones(3), torch.full((1,), 5.0))) == 1.0  # magnitude 2: within SCALED_BEYOND
    assert output_scale((torch.full((3,), 40.0), torch.full((1,), 80.0))) == 50.0 / ARGUMENT_SPREAD

