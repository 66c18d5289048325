"""Filters (backend, verified-correct, size, per-program cap) and dedup by normalised code hash."""

from __future__ import annotations

from rag.corpus import Record
from rag.filters import FilterOptions, dedup, filter_records
from rag.sources import load_path


def _record(name, backend="triton", kernel="import triton\n" + "# body\n" * 10 + "x = 1\n", speedup=None,
            correct=True, program="import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                  "        return x\n"):
    return Record(id=name, source="t", backend=backend, pytorch_code=program, kernel_code=kernel, name=name,
                  speedup=speedup, correct=correct)


def test_dedup_catches_the_reformatted_copy(data_dir):
    records = load_path(data_dir / "pairs.jsonl")
    kept, dropped = dedup(records)
    assert dropped == 1
    assert "ReLU_copy" not in {r.name for r in kept} and "ReLU" in {r.name for r in kept}


def test_dedup_against_existing_hashes_and_unique_ids():
    a, b = _record("same"), _record("same", kernel="import triton\nx = 2\n" + "#\n" * 40)
    kept, dropped = dedup([a, b], existing_pair_hashes=set())
    assert dropped == 0 and [r.id for r in kept] == ["same", "same#2"]
    kept, dropped = dedup([_record("again")], existing_pair_hashes={a.pair_hash})
    assert kept == [] and dropped == 1


def test_verified_only_by_default(data_dir):
    records = load_path(data_dir)
    kept, dropped = filter_records(records, FilterOptions())
    assert dropped["not_verified_correct"] == 2  # BrokenTranspose, the failed Sakana softmax
    kept_all, _ = filter_records(records, FilterOptions(correct_only=False))
    assert len(kept_all) == len(kept) + 2


def test_backend_and_size_filters(data_dir):
    records = load_path(data_dir)
    kept, dropped = filter_records(records, FilterOptions(backends=["cuda"]))
    assert kept and {r.backend for r in kept} == {"cuda"} and dropped["backend"] > 0
    kept, dropped = filter_records(records, FilterOptions(max_kernel_chars=700))
    assert dropped["too_large"] > 0 and all(len(r.kernel_code) <= 700 for r in kept)
    tiny = _record("tiny", kernel="pass")
    assert filter_records([tiny], FilterOptions())[1]["too_small"] == 1


def test_cap_per_program_keeps_the_fastest():
    records = [_record(f"k{i}", kernel=f"import triton\nx = {i}\n" + "#\n" * 40, speedup=s)
               for i, s in enumerate([1.1, None, 3.0, 2.0])]
    kept, dropped = filter_records(records, FilterOptions(max_per_program=2))
    assert [r.name for r in kept] == ["k2", "k3"] and dropped["over_per_program_cap"] == 2
