"""The training loop end to end on CPU: local tiny-random + the real CPU evaluator + a real registry, the demo replay
and failure handling (SIGTERM on a real job process is in test_resume.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from core.config import load_config
from core.registry import Registry
from core.train import batch_for_step, derive_seed, execute, lr_at, split_even

TINY_OVERRIDES = [
    "backend=local", "model=tiny-random", "local.device=cpu", "local.lora_rank=4",
    "problems=builtin/relu,builtin/softmax", "dataset.batch_size=1", "dataset.group_size=2", "max_turns=2",
    "early_stop.mode=never", "sampling.max_tokens=24", "kernel.backend=torch", "eval.devices=cpu",
    "eval.correctness_trials=1", "eval.timing_trials=2", "eval.warmup_trials=0", "eval.cpu_workers=1", "optim.lr=1e-2",
    "optim.warmup_steps=0", "gpus=0", "seed=3",
]


def tiny_config(*extra: str):
    return load_config("kevin", TINY_OVERRIDES + list(extra))


# ---------------------------------------------------------------- pure helpers

def test_problem_order_is_a_seeded_permutation_per_epoch():
    steps = [batch_for_step(5, step, 2, seed=1) for step in range(5)]
    flat = [index for batch in steps for index, _ in batch]
    assert sorted(flat[:5]) == list(range(5)) and sorted(flat[5:10]) == list(range(5))
    assert [epoch for batch in steps for _, epoch in batch] == [0] * 5 + [1] * 5
    assert steps == [batch_for_step(5, step, 2, seed=1) for step in range(5)]  # pure function of the seed
    assert flat != [index for step in range(5) for index, _ in batch_for_step(5, step, 2, seed=2)]
    assert [i for i, _ in batch_for_step(3, 0, 3, seed=1, shuffle=False)] == [0, 1, 2]


def test_learning_rate_schedule_with_warmup():
    cosine = load_config("kevin", ["optim.lr=1e-3", "optim.warmup_steps=2", "optim.schedule=cosine", "max_steps=12"])
    assert lr_at(0, cosine) == pytest.approx(5e-4)
    assert lr_at(1, cosine) == pytest.approx(1e-3)
    assert lr_at(2, cosine) == pytest.approx(1e-3)
    assert lr_at(7, cosine) == pytest.approx(5e-4)
    assert lr_at(11, cosine) < lr_at(7, cosine)
    linear = load_config("kevin", ["optim.lr=1e-3", "optim.schedule=linear", "max_steps=10", "optim.warmup_steps=0"])
    assert lr_at(5, linear) == pytest.approx(5e-4)


def test_substep_split_and_seeds():
    assert split_even(list(range(5)), 2) == [[0, 1, 2], [3, 4]]
    assert split_even([1], 3) == [[1]]
    assert derive_seed("a", 1) == derive_seed("a", 1) != derive_seed("a", 2)


# ---------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("ws")
    registry = Registry.for_workspace(workspace)
    config = tiny_config("max_steps=3", "checkpoint_every=2")
    row = registry.create_run("e2e", config=config.model_dump(mode="json"), backend="local")
    code = execute(registry, row["id"], install_signals=False)
    yield registry, registry.get_run(row["id"]), code
    registry.close()


@pytest.mark.slow
def test_three_step_run_finishes_with_status_and_files(finished_run):
    registry, row, code = finished_run
    assert code == 0
    assert row["status"] == "finished" and row["exit_code"] == 0 and row["error"] is None
    assert row["started_at"] and row["ended_at"] and row["heartbeat_at"]
    assert row["last_step"] == 2
    run_dir = registry.run_dir("e2e")
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"] == "tiny-random"
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2]
    statuses = [e["message"].split(":")[0] for e in registry.events(row["id"]) if e["kind"] == "status"]
    assert statuses[-2:] == ["running", "finished"]


@pytest.mark.slow
def test_metrics_are_written_per_step_with_cookbook_names(finished_run):
    registry, row, _ = finished_run
    keys = set(registry.metric_keys(row["id"]))
    for key in ("env/all/reward/total", "optim/lr", "time/total", "time/rollout", "env/all/format_rate",
                "env/all/compile_rate", "env/all/correct_rate", "env/all/hack_rate", "env/all/fast_1",
                "env/all/fast_1.2", "env/all/truncation_rate", "env/all/turn0/correct_rate",
                "env/all/groups_dropped", "env/all/ac_tokens_per_turn", "reward/stage", "time/eval_sum"):
        assert key in keys, key
    series = registry.metric_series(row["id"], "optim/lr")
    assert series["step"] == [0, 1, 2] and series["value"] == [pytest.approx(1e-2)] * 3
    trained = registry.metric_series(row["id"], "optim/num_datums")["value"]
    assert sum(trained) > 0, "tiny-random rewards never varied: no update happened"


@pytest.mark.slow
def test_trajectories_and_turns_are_recorded(finished_run):
    registry, row, _ = finished_run
    trajectories = registry.trajectories(row["id"], order="step")
    assert len(trajectories) == 3 * 1 * 2
    assert {t["problem_id"] for t in trajectories} == {"builtin/relu", "builtin/softmax"}
    assert {(t["step"], t["group_index"], t["sample_index"]) for t in trajectories} == {
        (s, 0, i) for s in range(3) for i in range(2)}
    turns = registry.trajectory_turns(trajectories[0]["id"])
    assert [t["turn"] for t in turns] == [0, 1]
    first = turns[0]
    assert "Reference program (builtin/" in first["prompt"]
    assert first["eval_result"]["verdict"] == first["verdict"]
    assert first["feedback"].startswith(("Verdict", "Note"))
    assert set(first["reward_breakdown"]) >= {"format", "compile", "correctness", "speed", "thinking", "total"}
    assert first["tokens_in"] > 0 and first["tokens_out"] > 0
    assert "Your attempt on turn 1" in turns[1]["prompt"]
    # Per-turn advantages sum to zero over the group's samples at each turn (or the group was dropped).
    step0 = [t for t in trajectories if t["step"] == 0 and t["group_index"] == 0]
    advs = [[u["advantage"] for u in registry.trajectory_turns(t["id"])] for t in step0]
    assert sum(a[0] for a in advs) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.slow
def test_checkpoints_are_recorded_in_registry_and_jsonl(finished_run):
    registry, row, _ = finished_run
    checkpoints = registry.checkpoints(row["id"])
    assert [c["step"] for c in checkpoints] == [1, 2]
    for checkpoint in checkpoints:
        assert Path(checkpoint["state_path"]).is_file() and Path(checkpoint["sampler_path"]).is_file()
    jsonl = [json.loads(line) for line in (registry.run_dir("e2e") / "checkpoints.jsonl").read_text().splitlines()]
    # batch: the batch to run next (tinker-cookbook's convention), one past the checkpoint's step.
    assert [(c["name"], c["batch"]) for c in jsonl] == [("step-000001", 2), ("step-000002", 3)]
    state = json.loads(Path(jsonl[-1]["trainer_state_path"]).read_text())
    assert state["step"] == 2 and state["problem_ids"] and state["rng"]


@pytest.mark.slow
def test_demo_preset_replays_recordings_through_the_evaluator(registry):
    config = load_config("demo", ["max_steps=3", "eval.devices=cpu", "eval.run_timeout_s=600"])
    row = registry.create_run("demo", kind="replay", config=config.model_dump(mode="json"), backend="replay")
    assert execute(registry, row["id"], install_signals=False) == 0
    assert registry.get_run(row["id"])["status"] == "finished"
    turns = [t for traj in registry.trajectories(row["id"]) for t in registry.trajectory_turns(traj["id"])]
    verdicts = {t["verdict"] for t in turns}
    assert {"correct", "hack_detected", "compile_error"} <= verdicts
    assert verdicts & {"wrong_output", "shape_mismatch"}
    speedups = [t["eval_result"]["speedup"] for t in turns if t["verdict"] == "correct"]
    assert speedups and all(s is not None and s > 0 for s in speedups)
    hack = next(t for t in turns if t["verdict"] == "hack_detected")
    assert hack["step_score"] < 0 and "Hack rule" in hack["feedback"]
    assert registry.metric_series(row["id"], "env/all/solved_rate")["value"]


def test_a_user_error_marks_the_run_failed(registry):
    config = tiny_config("max_steps=1")
    data = config.model_dump(mode="json")
    data["problems"] = "builtin/not_a_problem"
    row = registry.create_run("bad", config=data, backend="local")
    assert execute(registry, row["id"], install_signals=False) == 1
    failed = registry.get_run(row["id"])
    assert failed["status"] == "failed" and failed["exit_code"] == 1
    assert "not_a_problem" in failed["error"]


def test_rollout_metrics_fast_p_speedups_and_per_turn_rates():
    from core.env import Trajectory, Transition, parse_response
    from core.train_metrics import rollout_metrics
    from evaluator.api import EvalResult, Verdict

    parsed = parse_response("<think>plan</think>\n<KERNEL>\n```python\nx = 1\n```\n</KERNEL>")

    def turn(index, verdict, speedup=None, score=0.0):
        result = EvalResult(request_id=f"r{index}", problem_id="p", verdict=verdict, speedup=speedup,
                            compiled=verdict != Verdict.COMPILE_ERROR, phase_times_s={"total": 0.5})
        return Transition(turn=index, prompt=[], response="", parsed=parsed, eval_result=result, score=score,
                          breakdown={"correctness": score}, feedback="", done=False, tokens_in=10, tokens_out=4)

    fast = Trajectory("p", [turn(0, Verdict.COMPILE_ERROR), turn(1, Verdict.CORRECT, 1.5, 1.0)])
    slow = Trajectory("p", [turn(0, Verdict.CORRECT, 1.1, 1.0)])
    hack = Trajectory("p", [turn(0, Verdict.HACK_DETECTED, score=-1.0), turn(1, Verdict.WRONG_OUTPUT)])
    metrics = rollout_metrics([fast, slow, hack], tiny_config())
    assert metrics["env/all/fast_1"] == pytest.approx(2 / 3)
    assert metrics["env/all/fast_1.2"] == pytest.approx(1 / 3)
    assert metrics["env/all/speedup/max"] == pytest.approx(1.5)
    assert metrics["env/all/speedup/mean"] == pytest.approx(1.3)
    assert metrics["env/all/turn0/correct_rate"] == pytest.approx(1 / 3)
    assert metrics["env/all/turn1/correct_rate"] == pytest.approx(1 / 2)
    assert metrics["env/all/hack_rate"] == pytest.approx(1 / 5)
    assert metrics["env/all/compile_rate"] == pytest.approx(4 / 5)
    assert metrics["env/all/solved_rate"] == pytest.approx(2 / 3)
    assert metrics["time/eval_sum"] == pytest.approx(2.5)
    # gamma 0.4: returns 0 + 0.4 * 1, 1, -1 + 0.4 * 0
    assert metrics["env/all/return/discounted"] == pytest.approx((0.4 + 1.0 - 1.0) / 3)
    assert metrics["env/all/reward/total"] == pytest.approx((1.0 + 1.0 - 1.0) / 3)  # the cookbook's: a plain sum
    assert "env/all/speedup/mean" not in rollout_metrics([hack], tiny_config())


def test_constant_reward_groups_are_trained_only_when_kept_under_a_kl_penalty():
    from types import SimpleNamespace

    from core.backends.base import Prompt, SampledSequence
    from core.reward import BatchAdvantages, per_turn_advantages
    from core.rollouts import Rollout, TurnSample
    from core.train import Trainer

    rollouts = [Rollout(0, i, problem=None, env=None,
                        samples=[TurnSample(Prompt([], [1, 2]), SampledSequence("x", [3, 4], [-0.5, -0.5]))])
                for i in range(2)]
    advantages = BatchAdvantages([per_turn_advantages([[1.0], [1.0]])])  # equal rewards: dropped, advantages 0
    assert advantages.groups[0].dropped
    for coef, remove, kept in ((0.0, False, 0), (0.5, True, 0), (0.5, False, 2)):
        config = load_config("single-turn", [f"loss.kl_penalty_coef={coef}",
                                             f"loss.remove_constant_reward_groups={str(remove).lower()}"])
        datums = Trainer._datums(SimpleNamespace(config=config), rollouts, advantages)
        assert len(datums) == kept, (coef, remove)
