"""The timed batch's projection (evaluator/slot/projection.py): the one-shape path agrees with the general path,
leaves the outputs alone, and moves when any one element of any output does."""

import torch

from evaluator.slot.projection import projections
from evaluator.slot.timing_phase import PROJECTION_SLACK


def general(outputs: list, seed: int) -> tuple:
    """The per-output path, forced by wrapping each output in a tuple."""
    return projections([(o,) for o in outputs], seed)


def test_the_one_shape_path_matches_the_general_one_and_leaves_the_outputs_alone():
    for outputs in ([torch.randn(64, 33) for _ in range(5)], [torch.randn(()) for _ in range(4)],
                    [torch.randn(16, 8).half() for _ in range(3)]):
        before = [o.clone() for o in outputs]
        fast, slow = projections(outputs, 7), general(outputs, 7)
        # The two paths sum in different orders (a matrix-vector product against a sum per output): within the
        # rounding the judge allows a projection (timing_phase.PROJECTION_SLACK of its magnitude)
        for got, want in zip(fast, slow):
            allowed = PROJECTION_SLACK * torch.tensor(slow[1]) + 1e-6
            assert bool(((torch.tensor(got) - torch.tensor(want)).abs() <= allowed).all()), (got, want)
        assert all(torch.equal(o, b) for o, b in zip(outputs, before))


def test_one_changed_element_moves_its_projection_only():
    outputs = [torch.randn(32, 32) for _ in range(4)]
    sums = projections(outputs, 3)[0]
    outputs[2][5, 7] += 1.0
    moved = projections(outputs, 3)[0]
    assert moved[2] != sums[2] and moved[:2] == sums[:2] and moved[3] == sums[3]


def test_a_hand_over_of_sums_alone_and_the_magnitudes_after_it_add_up_to_the_whole_projection():
    outputs = [torch.randn(4, 5) for _ in range(3)]
    whole = projections(outputs, 11)
    sums, no_sizes, no_weights = projections(outputs, 11, magnitudes=False)
    no_sums, sizes, weights = projections(outputs, 11, sums=False)
    assert (sums, sizes, weights) == whole and no_sizes == no_weights == no_sums == []
    mixed = [(o, o[:2]) for o in outputs]  # the general path too
    assert projections(mixed, 5, magnitudes=False)[0] == projections(mixed, 5)[0]
    assert projections(mixed, 5, sums=False)[1:] == projections(mixed, 5)[1:]


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
