"""RAG test fixtures: one embedding model per test session (loading takes seconds, encoding milliseconds)
and a small index built once from the project's own corpus under tests/rag/data/."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session", autouse=True)
def _environment():
    # The default model is bundled: nothing here may reach the network.
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")
    # CI runs `pytest -n 2` on 2 cores: two torch threads per worker oversubscribe the CPU and MiniLM then runs
    # about ten times slower. Embeddings use one thread (the setting is scoped to encode calls).
    mp.setenv("KRL_RAG_THREADS", "1")
    yield
    mp.undo()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def embedder():
    from rag.embed import Embedder

    return Embedder(device="cpu")


@pytest.fixture(scope="session")
def corpus(data_dir):
    """Every record of tests/rag/data (pairs.jsonl, KernelBook and Sakana samples, pair folders)."""
    from rag.sources import load_path

    return load_path(data_dir)


@pytest.fixture(scope="session")
def built_index(tmp_path_factory, corpus, embedder):
    """An index of the whole test corpus, no decontamination. Tests must not modify it (copy it first)."""
    from rag.build import build_index

    out = tmp_path_factory.mktemp("rag") / "index"
    report = build_index(corpus, out, embedder=embedder)
    assert report["added"] > 10
    return out


def problem_file(data_dir: Path, stem: str) -> tuple[str, str]:
    """(problem id, source) of a problem under tests/rag/data/problems/."""
    return f"problems/{stem}", (data_dir / "problems" / f"{stem}.py").read_text()
