"""The judge's tensor files: what write_values writes, read_values and map_values give back the same, and a runner's
writes into mapped inputs never reach the judge's file."""

import os

import pytest
import torch

from evaluator.judging import tensorwire

VALUES = (torch.arange(12, dtype=torch.float32).reshape(3, 4), torch.tensor([True, False]), 7, 2.5, None,
          torch.zeros(0, dtype=torch.int64), torch.tensor([1 + 2j], dtype=torch.complex64))


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("read", [tensorwire.read_values, tensorwire.map_values])
def test_values_come_back_as_written(tmp_path, read):
    path = str(tmp_path / "set.krlt")
    tensorwire.write_values(path, VALUES)
    back = read(path, 1 << 20)
    assert isinstance(back, tuple) and len(back) == len(VALUES)
    assert all(_same(a, b) for a, b in zip(VALUES, back))


def test_writes_into_mapped_values_stay_in_the_reader(tmp_path):
    path = str(tmp_path / "set.krlt")
    tensorwire.write_values(path, [torch.ones(1024)])
    before = open(path, "rb").read()
    mapped = tensorwire.map_values(path, 1 << 20)
    mapped[0].mul_(-3)  # a candidate working in place on its inputs
    assert open(path, "rb").read() == before
    assert torch.equal(tensorwire.read_values(path, 1 << 20)[0], torch.ones(1024))


@pytest.mark.parametrize("read", [tensorwire.read_values, tensorwire.map_values])
def test_files_beyond_their_bound_or_not_tensor_files_are_refused(tmp_path, read):
    path = str(tmp_path / "set.krlt")
    tensorwire.write_values(path, [torch.ones(1024)])
    with pytest.raises(tensorwire.WireError):
        read(path, 100)
    with open(path, "wb") as handle:
        handle.write(b"not a tensor file at all")
    with pytest.raises(tensorwire.WireError):
        read(path, 1 << 20)
    open(path, "wb").close()
    with pytest.raises(tensorwire.WireError):
        read(path, 1 << 20)
    os.unlink(path)
