"""A workspace of Tinker-backend runs made by the real training loop (core.train.execute) against autospecs of the
Tinker SDK (tests/core/tinker_sdk_fakes.py): steps whose answers hold no kernel, so they take milliseconds.

- `flaky`: the service fails both tries of its step 2 update; core/step_recovery.py records the retry and the
  resume point, the run fails, and `krl runs resume`'s procman path resumes it to the end in a job process
  (tests/app/loop_job.py): two segments, the second from step 2;
- `steady-a`, `steady-b`: two plain runs of the same config (a group for mean ± std bands)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

STEPS = 4


def _config(name: str, *extra: str) -> dict:
    from core.config import load_config

    config = load_config("single-turn", [
        "backend=tinker", "model=Qwen/Qwen3-8B", "problems=builtin", "dataset.batch_size=1", "dataset.group_size=2",
        f"max_steps={STEPS}", "kernel.backend=torch", "eval.devices=cpu", "eval.cpu_workers=1", "gpus=0",
        "sampling.max_tokens=512", "loss.kl_penalty_coef=0.5", "loss.remove_constant_reward_groups=false",
        "recovery.backoff_s=0", "rag.index=null", "checkpoint_every=10", *extra]).model_dump(mode="json")
    config["name"] = name
    return config


def build_loop_workspace(workspace: Path) -> dict[str, int]:
    """Fill `workspace` with the runs above; returns name -> run id."""
    import tinker

    from core import procman
    from core.job import start_foreground
    from core.registry import Registry
    from core.train import execute
    from tests.core.tinker_sdk_fakes import NO_KERNEL_RESPONSE, FakeTinker, http_error

    ids: dict[str, int] = {}
    with pytest.MonkeyPatch.context() as patch, Registry.for_workspace(workspace) as registry:
        patch.delenv("TINKER_CREDENTIAL_CMD", raising=False)
        patch.delenv("TINKER_BASE_URL", raising=False)
        patch.setenv("HOME", str(workspace.parent))
        patch.setenv("KRL_JOB_MODULE", "tests.app.loop_job")
        patch.setenv("KRL_GPUS", "0")
        patch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        plans = (("flaky", ("recovery.max_attempts=2",)), ("steady-a", ()), ("steady-b", ()))
        # One fake service per run, all made before any is installed (an autospec of an installed fake fails).
        fakes = [FakeTinker(responses=[NO_KERNEL_RESPONSE, "sorry, no kernel"]) for _ in plans]
        for (name, extra), fake in zip(plans, fakes):
            fake.install(patch)
            run_id = ids[name] = registry.create_run(name, config=_config(name, *extra), backend="tinker")["id"]
            start_foreground(registry, registry.get_run(run_id))  # as `krl train` without --detach
            if name != "flaky":
                assert execute(registry, run_id, install_signals=False) == 0, registry.get_run(run_id)["error"]
                continue
            failed = http_error(tinker.InternalServerError, 500, "the service failed")
            fake.fail_calls("forward_backward", {2: failed, 3: http_error(tinker.InternalServerError, 500,
                                                                          "the service failed again")})
            assert execute(registry, run_id, install_signals=False) == 1  # gave up at step 2
            row = procman.resume_run(registry, name, detach=False)
            assert row["status"] == "finished", (row["error"], registry.run_dir(name).joinpath("logs.log").read_text())
    return ids
