"""The FAISS + SQLite index: recorded model, refusing other models, incremental add, HNSW switch, persistence."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

from rag import DEFAULT_MODEL, RagError
from rag.build import build_index
from rag.corpus import Record
from rag.index import KernelIndex
from rag.retriever import IndexRetriever

from tests.rag.conftest import problem_file


def _unit(rows: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _records(count: int, backend: str = "triton", offset: int = 0) -> list[Record]:
    return [Record(id=f"r{i}", source="synthetic", backend=backend, pytorch_code=f"y = x + {i}\n",
                   kernel_code=f"import triton\nz = {i}\n", name=f"op{i}") for i in range(offset, offset + count)]


def test_index_records_model_dimension_and_normalisation(built_index):
    with KernelIndex.open(built_index) as index:
        stats = index.stats()
    assert stats["model"] == DEFAULT_MODEL and stats["dimension"] == 384 and stats["normalized"] is True
    assert stats["metric"] == "inner_product" and stats["index_type"] == "flat"
    # 22 records read: 2 not verified correct, 1 duplicate.
    assert stats["records"] == stats["vectors"] == 19
    assert stats["by_backend"] == {"triton": 13, "cuda": 6}
    # Metadata lives in SQLite (never pickle): a plain sqlite3 client can read it.
    with sqlite3.connect(built_index / "meta.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == 19
        assert conn.execute("SELECT value FROM info WHERE key = 'model'").fetchone()[0] == f'"{DEFAULT_MODEL}"'


def test_querying_with_another_model_is_refused(built_index):
    with pytest.raises(RagError, match=r"built with embedding model 'sentence-transformers/all-MiniLM-L6-v2'.*"
                                       r"cannot be used with 'intfloat/e5-small-v2'"):
        IndexRetriever(built_index, model="intfloat/e5-small-v2")
    # The bundled model's short names are the same model.
    IndexRetriever(built_index, model="all-MiniLM-L6-v2").close()


def test_vectors_of_another_dimension_are_refused(tmp_path):
    index = KernelIndex.create(tmp_path / "i", "some/model", 8)
    with pytest.raises(RagError, match="8-dimensional"):
        index.add(_records(2), _unit(2, 16, 0))
    index.close()


def test_appending_with_another_model_is_refused(tmp_path, corpus, embedder):
    out = tmp_path / "index"
    build_index(corpus[:3], out, embedder=embedder)
    with pytest.raises(RagError, match="cannot be used with 'other/model'"):
        build_index(corpus[3:6], out, model="other/model", append=True, embedder=embedder)


def test_existing_index_needs_append_or_replace(tmp_path, corpus, embedder):
    out = tmp_path / "index"
    build_index(corpus[:3], out, embedder=embedder)
    with pytest.raises(RagError, match="--append"):
        build_index(corpus[3:6], out, embedder=embedder)
    report = build_index(corpus[3:6], out, embedder=embedder, replace=True)
    assert report["stats"]["records"] == 3


def test_incremental_add(tmp_path, built_index, data_dir, embedder):
    out = tmp_path / "index"
    shutil.copytree(built_index, out)
    problem_id, source = problem_file(data_dir, "online_softmax")
    new = Record(id="runs/demo/s3/g0.1/t0", source="runs", backend="cuda", name="BlockSoftmax", speedup=3.5,
                 pytorch_code="import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                              "        return torch.softmax(x, dim=0)\n",
                 kernel_code="#include <torch/extension.h>\n// column softmax\n__global__ void col_softmax() {}\n")
    report = build_index([new], out, append=True, embedder=embedder)
    assert report["added"] == 1 and report["appended"] and report["stats"]["records"] == 20
    again = build_index([new], out, append=True, embedder=embedder)
    assert again["added"] == 0 and again["duplicates"] == 1
    retriever = IndexRetriever(out, embedder=embedder)
    found = retriever.examples(source, problem_id, "cuda", k=5)
    assert "BlockSoftmax" in [e["name"] for e in found]
    retriever.close()


def test_switches_to_hnsw_above_the_threshold_and_still_finds_neighbours(tmp_path):
    index = KernelIndex.create(tmp_path / "i", "some/model", 32, hnsw_threshold=50)
    vectors = _unit(80, 32, 1)
    index.add(_records(40), vectors[:40])
    assert index.index_type == "flat"
    index.add(_records(40, backend="cuda", offset=40), vectors[40:])
    assert index.index_type == "hnsw"
    index.close()
    reopened = KernelIndex.open(tmp_path / "i")
    assert reopened.index_type == "hnsw" and len(reopened) == 80
    for row in (3, 60):
        hits = reopened.search(vectors[row], 3)
        assert hits[0][0] == row and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    # Backend restriction works on HNSW too.
    assert all(row >= 40 for row, _ in reopened.search(vectors[3], 5, backend="cuda"))
    assert reopened.search(vectors[3], 5, backend="torch") == []
    reopened.close()


def test_missing_index_explains_how_to_build_one(tmp_path):
    with pytest.raises(RagError, match="krl rag build"):
        KernelIndex.open(tmp_path / "nothing")


def test_a_damaged_index_is_reported_not_crashed_on(tmp_path, built_index):
    out = tmp_path / "index"
    shutil.copytree(built_index, out)
    (out / "index.faiss").write_bytes(b"not faiss")
    with pytest.raises(RagError, match="not a readable FAISS index"):
        KernelIndex.open(out)
    (out / "meta.sqlite").write_bytes(b"not sqlite either, but long enough to look like a file" * 4)
    with pytest.raises(RagError, match="not a RAG index database"):
        KernelIndex.open(out)
