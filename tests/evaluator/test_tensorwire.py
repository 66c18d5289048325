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


def test_a_reused_buffer_gives_each_file_its_own_bytes(tmp_path):
    """A GPU runner builds every output in one buffer and a GPU judge reads every output into one: a smaller file after
    a larger one reads back alone, with the same bytes a fresh buffer gives."""
    built, read = tensorwire.ReusedBuffer(), tensorwire.ReusedBuffer()
    big, small = str(tmp_path / "big.krlt"), str(tmp_path / "small.krlt")
    tensorwire.write_values(big, [torch.full((1000,), 7.0), torch.arange(5)], built)
    tensorwire.write_values(small, (torch.tensor([1.5, 2.5, 3.0]),), built)
    plain = str(tmp_path / "plain.krlt")
    tensorwire.write_values(plain, (torch.tensor([1.5, 2.5, 3.0]),))
    assert open(small, "rb").read() == open(plain, "rb").read()  # no byte of the larger file left in the padding
    first = tensorwire.read_values(big, 1 << 20, read)
    assert torch.equal(first[0], torch.full((1000,), 7.0)) and torch.equal(first[1], torch.arange(5))
    kept = first[0].clone()
    second = tensorwire.read_values(small, 1 << 20, read)
    assert torch.equal(second[0], torch.tensor([1.5, 2.5, 3.0])) and torch.equal(kept, torch.full((1000,), 7.0))


def test_files_beyond_the_reuse_bound_get_a_buffer_of_their_own(monkeypatch):
    monkeypatch.setattr(tensorwire.ReusedBuffer, "REUSE_MAX_BYTES", 1024)
    scratch = tensorwire.ReusedBuffer()
    assert isinstance(scratch.get(4096), bytearray) and len(scratch.get(4096)) == 4096
    assert len(scratch.get(512)) == 512 and scratch.get(512).obj is scratch.get(100).obj


def test_the_runner_side_on_a_gpu_maps_inputs_and_builds_outputs_in_one_buffer(tmp_path):
    """The Exchange a GPU runner uses, on this CPU: mapped inputs, outputs from a reused buffer, the judge's files
    unchanged by a candidate that works in place on its inputs."""
    from evaluator.slot.order_loop import Exchange

    inputs_dir, outputs_dir = tmp_path / "in", tmp_path / "out"
    inputs_dir.mkdir(), outputs_dir.mkdir()
    tensorwire.write_values(str(inputs_dir / "trial-0.krlt"), [torch.ones(64)])
    exchange = Exchange(str(inputs_dir), str(outputs_dir), on_gpu=True)
    values = exchange.inputs("trial-0")
    values[0].add_(1)
    assert torch.equal(tensorwire.read_values(str(inputs_dir / "trial-0.krlt"), 1 << 20)[0], torch.ones(64))
    exchange.hand("trial-0", values[0] * 3)
    exchange.hand("trial-1", torch.zeros(2))
    assert torch.equal(tensorwire.read_values(str(outputs_dir / "trial-0.krlt"), 1 << 20), torch.full((64,), 6.0))
    assert torch.equal(tensorwire.read_values(str(outputs_dir / "trial-1.krlt"), 1 << 20), torch.zeros(2))


def test_a_large_file_written_through_its_mapping_holds_what_a_built_one_holds(tmp_path):
    """Past MAPPED_WRITE_BYTES the tensors go straight into the file's pages; the bytes (padding included) are the
    ones encode_values builds, and an existing larger file at the path is cut to the new size."""
    values = [torch.arange(300_001, dtype=torch.float32), 3, torch.ones(7, dtype=torch.float16)]
    path = str(tmp_path / "trial-0.krlt")
    with open(path, "wb") as handle:
        handle.write(b"\xff" * (4 << 20))  # a stale larger file there before
    written = tensorwire.write_values(path, values)
    assert written >= tensorwire.MAPPED_WRITE_BYTES
    assert open(path, "rb").read() == bytes(tensorwire.encode_values(values))
    back = tensorwire.read_values(path, 8 << 20)
    assert all(_same(a, b) for a, b in zip(values, back))


def test_a_pinned_buffer_grows_by_doubling_and_a_plain_one_by_a_quarter():
    """Torch keeps freed page-locked blocks for reuse: a pinned buffer that doubles leaves at most its own size there.
    (Without a GPU the pinned buffer is plain memory; the sizes are the same.)"""
    pinned, plain = tensorwire.ReusedBuffer(pinned=True), tensorwire.ReusedBuffer()
    assert [len(pinned.get(n)) for n in (100, 129, 300)] == [100, 129, 300]  # each view is the size asked
    assert len(pinned._bytes) == 512
    plain.get(100)
    plain.get(110)
    assert len(plain._bytes) == 125
