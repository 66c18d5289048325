"""A run's evaluator chosen by its config: eval.endpoint (a real `krl serve` app on loopback, token from the
environment) and eval.cluster (a local Ray) carry a real one-step training run; config mistakes are KrlErrors."""

from __future__ import annotations

import json

import pytest

from core.config import load_config
from core.errors import KrlError
from core.run_evaluator import open_run_evaluator
from core.train import execute
from tests.core.test_train import TINY_OVERRIDES
from tests.evaluator.pool_support import make_evaluator


@pytest.mark.parametrize("override,needle", [
    ("eval.cluster=http://host:1", "ray://"),
    ("eval.endpoint=ray://local", "http"),
])
def test_config_mistakes_are_clear_errors(override, needle):
    with pytest.raises(KrlError, match=needle):
        load_config("kevin", TINY_OVERRIDES + [override])
    with pytest.raises(KrlError, match="not both"):
        load_config("kevin", TINY_OVERRIDES + ["eval.cluster=ray://local", "eval.endpoint=http://h:1"])


def test_missing_token_names_the_variable(monkeypatch):
    monkeypatch.delenv("MY_TOKEN_VAR", raising=False)
    config = load_config("kevin", TINY_OVERRIDES + ["eval.endpoint=http://127.0.0.1:9", "eval.token_env=MY_TOKEN_VAR"])
    with pytest.raises(KrlError, match="MY_TOKEN_VAR"):
        open_run_evaluator(config.eval)


@pytest.mark.slow
def test_training_run_evaluates_through_a_remote_service(registry, monkeypatch, tmp_path):
    pytest.importorskip("uvicorn")
    from tests.evaluator.service_support import TOKEN, serving

    backing = make_evaluator(str(tmp_path / "cache"))
    try:
        with serving(backing) as (url, app):
            monkeypatch.setenv("KRL_EVAL_TOKEN", TOKEN)
            # The demo replays recorded kernels, so every turn reaches the evaluator.
            config = load_config("demo", ["max_steps=1", "eval.devices=cpu", "eval.run_timeout_s=600",
                                          f"eval.endpoint={url}"])
            stored = config.model_dump(mode="json")
            assert TOKEN not in json.dumps(stored)  # the config names the variable, never holds the token
            row = registry.create_run("remote", kind="replay", config=stored, backend="replay")
            assert execute(registry, row["id"], install_signals=False) == 0
            accepted = app.state.service.counters["accepted"]
    finally:
        backing.close()
    turns = [t for traj in registry.trajectories(row["id"]) for t in registry.trajectory_turns(traj["id"])]
    evaluated = [t for t in turns if t["eval_result"]]
    assert evaluated and accepted >= len(evaluated)
    assert {t["verdict"] for t in evaluated} & {"correct", "wrong_output", "hack_detected", "compile_error"}


@pytest.mark.slow
def test_training_run_evaluates_on_a_ray_cluster(registry):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("another test's Ray instance is running in this process")
    config = load_config("demo", ["max_steps=1", "eval.devices=cpu", "eval.run_timeout_s=600",
                                  "eval.cluster=ray://local"])
    row = registry.create_run("on-ray", kind="replay", config=config.model_dump(mode="json"), backend="replay")
    assert execute(registry, row["id"], install_signals=False) == 0
    assert not ray.is_initialized()  # the run's evaluator started Ray and shut it down
    turns = [t for traj in registry.trajectories(row["id"]) for t in registry.trajectory_turns(traj["id"])]
    results = [t["eval_result"] for t in turns if t["eval_result"]]
    assert results and all(":" in r["worker_id"].split("/")[0] for r in results)  # node:pid/worker: on an actor
