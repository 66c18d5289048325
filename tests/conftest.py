"""Shared test setup: GPU tests skip without CUDA, and every test gets its own workspace folder.
Real SQLite files and real processes throughout; no test touches ./runs."""

from __future__ import annotations

import os

import pytest


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """An empty workspace folder, also exported as KRL_WORKSPACE for subprocesses."""
    path = tmp_path / "ws"
    path.mkdir()
    monkeypatch.setenv("KRL_WORKSPACE", str(path))
    return path


@pytest.fixture
def registry(workspace):
    from core.registry import Registry

    reg = Registry.for_workspace(workspace)
    yield reg
    reg.close()
