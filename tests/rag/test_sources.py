"""Corpus loaders: every file format and row layout, and the errors a user sees for bad input."""

from __future__ import annotations

import importlib.util
import json

import pytest

from rag import RagError
from rag.sources import load_hub, load_path, load_source


def test_pairs_jsonl(data_dir):
    records = load_path(data_dir / "pairs.jsonl")
    assert len(records) == 15
    softmax = next(r for r in records if r.name == "RowSoftmax")
    assert (softmax.backend, softmax.speedup, softmax.correct, softmax.language) == ("triton", 2.1, True, "python")
    broken = next(r for r in records if r.name == "BrokenTranspose")
    assert broken.correct is False
    assert {r.backend for r in records} == {"triton", "cuda"}


def test_kernelbook_rows(data_dir):
    records = load_path(data_dir / "kernelbook_sample.json")
    assert [r.id for r in records] == ["kernelbook/101", "kernelbook/102"]
    assert {r.backend for r in records} == {"triton"}
    assert records[0].name == "Swish" and records[0].source == "kernelbook"
    assert "x * torch.sigmoid(x)" in records[0].pytorch_code and "@triton.jit" in records[0].kernel_code


def test_sakana_rows(data_dir):
    records = load_path(data_dir / "sakana_sample.jsonl")
    by_name = {r.name: r for r in records}
    relu = by_name["19_ReLU"]
    assert (relu.backend, relu.speedup, relu.correct, relu.language) == ("cuda", 1.67, True, "cpp")
    assert relu.id == "sakana/L1/T19/relu_vectorized"
    broken = by_name["23_Softmax"]
    assert broken.correct is False and broken.speedup is None  # NaN speedup
    assert by_name["88_MinGPTNewGelu"].correct is True  # "True" as a string


def test_pair_folders(data_dir):
    records = {r.name: r for r in load_path(data_dir / "pairs_dir")}
    assert records["HardTanh"].backend == "triton" and records["HardTanh"].speedup == 1.1
    add = records["vector_add_cuda"]
    assert add.backend == "cuda" and add.language == "cpp" and "add_kernel" in add.kernel_code


def test_folder_reads_every_file_and_pair_folder(data_dir):
    records = load_path(data_dir)
    assert {r.source for r in records} == {"pairs.jsonl", "kernelbook", "sakana", "data"}
    assert len(records) == 15 + 2 + 3 + 2
    assert len(load_source(str(data_dir), limit=5)) == 5


def test_json_lines_in_a_json_file(tmp_path, data_dir):
    lines = (data_dir / "pairs.jsonl").read_text()
    path = tmp_path / "dump.json"
    path.write_text(lines)
    assert len(load_path(path)) == 15


def test_bad_json_line_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"pytorch_code": "x", "kernel_code": "y", "backend": "triton"}\n{not json\n')
    with pytest.raises(RagError, match=r"bad.jsonl:2"):
        load_path(path)


def test_unknown_columns_are_explained(tmp_path):
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    with pytest.raises(RagError, match="pytorch_code, kernel_code"):
        load_path(path)


def test_pairs_need_a_backend(tmp_path):
    path = tmp_path / "nobackend.jsonl"
    path.write_text(json.dumps({"pytorch_code": "a", "kernel_code": "b"}) + "\n")
    with pytest.raises(RagError, match="backend"):
        load_path(path)


def test_missing_path(tmp_path):
    with pytest.raises(RagError, match="not 'kernelbook', 'sakana', 'runs'"):
        load_source(str(tmp_path / "nowhere"))


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow is installed")
def test_parquet_without_pyarrow_says_what_to_install(tmp_path):
    path = tmp_path / "level_1.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(RagError, match="pip install pyarrow"):
        load_path(path)


def test_parquet_with_pyarrow(tmp_path, data_dir):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (data_dir / "sakana_sample.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "level_1.parquet")
    records = load_path(tmp_path / "level_1.parquet")
    assert [r.name for r in records] == ["19_ReLU", "23_Softmax", "88_MinGPTNewGelu"]


@pytest.mark.skipif(importlib.util.find_spec("datasets") is not None, reason="datasets is installed")
def test_hub_without_datasets_says_what_to_do():
    with pytest.raises(RagError, match=r"pip install datasets.*--source PATH"):
        load_hub("kernelbook")
    with pytest.raises(RagError, match="SakanaAI/AI-CUDA-Engineer-Archive"):
        load_source("sakana")
