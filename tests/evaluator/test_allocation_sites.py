"""The opt-in record of where a judge's device allocations are made (evaluator/slot/allocation_sites.py): its switch
reaches the judges and is inert without CUDA here; on a GPU, the caching allocator's own history, task by task."""

from __future__ import annotations

import json

import pytest

from evaluator.isolation.environment import worker_environment
from evaluator.slot import allocation_sites


def test_the_switch_reaches_the_judges_and_does_nothing_without_cuda(tmp_path, monkeypatch):
    """The judges' environment passes it (KRL_WORKER_*, the allow-list); without CUDA initialised no history is kept
    and nothing is written."""
    folder = tmp_path / "sites"
    env = worker_environment({allocation_sites.ALLOC_HISTORY_ENV: str(folder)}, str(tmp_path / "private"), {})
    assert env[allocation_sites.ALLOC_HISTORY_ENV] == str(folder)
    monkeypatch.delenv(allocation_sites.ALLOC_HISTORY_ENV, raising=False)
    assert allocation_sites.AllocationSites.from_env() is None
    monkeypatch.setenv(allocation_sites.ALLOC_HISTORY_ENV, str(folder))
    assert allocation_sites.AllocationSites.from_env() is None  # torch here has no CUDA
    assert not folder.exists()


def _allocated_in_a_known_place(mib: int):
    import torch

    return torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")


@pytest.mark.gpu
def test_each_tasks_device_allocations_are_summed_by_the_evaluators_call_site(tmp_path):
    """Two tasks: each line counts only its own task's device allocations, by the innermost frames of evaluator code
    (this test module's path has the evaluator folder in it too), with their MiB."""
    import torch

    torch.cuda.init()
    torch.cuda.empty_cache()
    sites = allocation_sites.AllocationSites(str(tmp_path))
    try:
        kept = _allocated_in_a_known_place(64)
        sites.note("first")
        del kept
        torch.cuda.empty_cache()
        kept = [_allocated_in_a_known_place(32), _allocated_in_a_known_place(32)]
        sites.note("second")
    finally:
        torch.cuda.memory._record_memory_history(None)
    first, second = [json.loads(line) for line in open(sites.path)]
    assert first["task"] == "first" and first["segment_alloc"] == 1
    site, count, mib = first["sites"][0]
    assert "_allocated_in_a_known_place" in site and "test_allocation_sites.py" in site
    assert count == 1 and mib == 64.0
    assert second["segment_alloc"] == 2 and second["segment_free"] >= 1  # the empty_cache between them
    assert sum(count for _, count, _ in second["sites"]) == 2
    del kept
