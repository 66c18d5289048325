"""What the judge keeps of earlier outputs to recognise a replayed one: fingerprints equal exactly where
judge.outputs_identical calls two outputs identical, across chunks too."""

import pytest
import torch

from evaluator.judging import fingerprint as fingerprints
from evaluator.judging.judge import outputs_identical

BASE = torch.randn(4, 5)


def _cases() -> list:
    nan_zero = torch.tensor([0.0, float("nan"), 1.5])
    flipped = BASE.clone()
    flipped[0, 0] = -flipped[0, 0]
    return [
        (BASE, BASE.clone()),
        (BASE, flipped),
        (BASE, BASE.t().contiguous()),  # the same values, another shape
        (BASE, BASE.double()),  # another dtype
        (BASE, BASE.flatten().flip(0).reshape(4, 5)),  # the same values, other places
        (nan_zero, torch.tensor([-0.0, float("nan"), 1.5])),  # NaN equal to NaN, -0.0 to 0.0
        (nan_zero, torch.tensor([0.0, 2.0, 1.5])),
        ((BASE, torch.arange(3)), (BASE.clone(), torch.arange(3))),
        ((BASE, torch.arange(3)), (BASE.clone(), torch.arange(1, 4))),
        (torch.tensor([True, False]), torch.tensor([True, False])),
        (torch.tensor([1 + 2j]), torch.tensor([1 - 2j])),
    ]


@pytest.mark.parametrize("chunk", [fingerprints.CHUNK, 3])
def test_fingerprints_agree_with_outputs_identical(monkeypatch, chunk):
    monkeypatch.setattr(fingerprints, "CHUNK", chunk)  # 3: every tensor hashed over several chunks
    for a, b in _cases():
        assert (fingerprints.fingerprint(a) == fingerprints.fingerprint(b)) == outputs_identical(a, b), (a, b)


def test_an_output_holding_anything_but_tensors_has_none():
    assert fingerprints.fingerprint((BASE, 3)) is None and fingerprints.fingerprint("text") is None
