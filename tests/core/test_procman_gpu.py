"""The process manager on a machine with real GPUs (skipped with fewer than two): runs asking for one GPU each get
distinct devices, a third waits in the queue, and each job's evaluator runs on the GPU it was given."""

from __future__ import annotations

import pytest

from core import procman
from tests.core.test_procman import demo_config, kill_all_runs, wait_for

pytestmark = pytest.mark.gpu


@pytest.fixture
def gpu_pm(registry, monkeypatch):
    from tests.core.test_procman import REPO

    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        count = 0
    if count < 2:
        pytest.skip("needs at least two GPUs")
    for name in ("KRL_GPUS", "KRL_JOB_MODULE", "KRL_HOST_GPUS", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(REPO)
    yield registry
    kill_all_runs(registry)


def test_runs_share_the_machines_gpus_and_queue_for_them(gpu_pm):
    reg = gpu_pm
    gpus = procman.detect_gpus()
    assert len(gpus) >= 2
    config = demo_config(max_steps=3, **{"eval.devices": "auto"})
    rows = [procman.start_run(config, name=f"gpu-run-{i}", gpus=1, registry=reg) for i in range(len(gpus) + 1)]
    running, queued = rows[:-1], rows[-1]
    assert all(r["status"] == "running" for r in running) and queued["status"] == "queued"
    assert sorted(r["gpus"][0] for r in running) == sorted(gpus)  # one GPU each, none shared

    def all_ended() -> bool:
        procman.reconcile(reg)
        return all(reg.get_run(r["name"])["status"] in ("finished", "failed", "crashed") for r in rows)

    wait_for(all_ended, timeout_s=400, poll_s=1.0)
    for row in rows:
        final = reg.get_run(row["name"])
        assert final["status"] == "finished", final["error"]
        log = (reg.run_dir(row["name"]) / "logs.log").read_text()
        # Inside the job CUDA_VISIBLE_DEVICES holds only its GPU, so its evaluator sees it as cuda:0.
        assert "evaluator on cuda:0" in log and f"gpus [{final['gpus'][0]}]" in log
    assert reg.get_run(queued["name"])["started_at"] >= min(reg.get_run(r["name"])["ended_at"] for r in running)
