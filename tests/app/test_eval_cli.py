"""`krl eval` and `krl evals …` as real processes over a real workspace: the demo recordings through the CPU
evaluator, JSON and export formats, a detached evaluation through procman, a training run's checkpoint, bad input."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import procman
from core.registry import Registry

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = "builtin/relu,builtin/leaky_relu"
CPU = ["eval.devices=cpu", "eval.cpu_workers=2"]


@pytest.fixture
def krl(workspace):
    env = dict(os.environ, KRL_WORKSPACE=str(workspace), KRL_GPUS="0", COLUMNS="200",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("KRL_JOB_MODULE", None)

    def run(*args, rc=0, timeout=300):
        done = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=REPO, env=env,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        assert done.returncode == rc, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
        return done

    return run


def test_eval_json_show_ls_and_exports_agree(krl):
    done = krl("eval", *CPU, "--backend", "replay", "--replay", "demo", "--problems", PROBLEMS, "--samples", "2",
               "--turns", "3", "--name", "e1", "--json", "--unseen-shapes")
    summary = json.loads(done.stdout)
    assert summary["name"] == "e1" and summary["status"] == "finished" and summary["samples_done"] == 4
    assert "pass@1" in done.stderr and "verdicts:" in done.stderr  # the human summary goes to stderr
    # Which speedup is which, the clip, and the generalisation check over each sample's first correct kernel.
    assert "KernelBench's timing convention" in done.stderr and "unseen shapes:" in done.stderr
    unseen = summary["unseen_shapes"]
    assert unseen["checked"] == len(unseen["reports"]) > 0
    assert all(r["sizes"] == {"BATCH": 9, "DIM": 2049} for r in unseen["reports"])
    shown = json.loads(krl("evals", "show", "e1", "--json").stdout)
    assert shown["scores"] == summary["scores"]
    listed = json.loads(krl("evals", "ls", "--json").stdout)
    assert [item["name"] for item in listed] == ["e1"] and listed[0]["pass@1"] == summary["scores"]["pass@1"]

    records = [json.loads(line) for line in krl("evals", "export", "e1", "--format", "jsonl").stdout.splitlines()]
    assert len(records) == summary["scores"]["records"]
    assert {"problem_id", "sample", "turn", "verdict", "speedup", "sol_fraction", "hack_rule",
            "tokens_out"} <= set(records[0])
    rows = list(csv.DictReader(io.StringIO(krl("evals", "export", "e1", "--format", "csv").stdout)))
    assert len(rows) == len(records) and rows[0]["problem_id"] == records[0]["problem_id"]
    # KernelBench fast_1 by hand from the export: sample 0's best turn strictly faster than eager.
    problems = PROBLEMS.split(",")
    fast = [max([r["speedup"] or 0.0 for r in records if r["problem_id"] == p and r["sample"] == 0
                 and r["verdict"] == "correct"], default=0.0) > 1.0 for p in problems]
    assert summary["scores"]["fast_p/eager/kernelbench/1"] == pytest.approx(sum(fast) / len(problems))
    conversations = krl("evals", "export", "e1", "--format", "conversations").stdout.splitlines()
    assert len(conversations) == 4 and json.loads(conversations[0])["turns"][0]["prompt"]


def test_detached_evaluation_runs_through_procman(krl, workspace):
    done = krl("eval", *CPU, "--backend", "replay", "--replay", "demo", "--problems", "builtin/relu", "--samples",
               "2", "--turns", "2", "--name", "bg", "--detach", "--json")
    assert json.loads(done.stdout)["kind"] == "eval"
    with Registry.for_workspace(workspace) as reg:
        final = procman.wait_run(reg, "bg", timeout_s=240)
        assert final["status"] == "finished", reg.events(final["id"])
        assert final["command"]["argv"][2] == "core.evaluation"
        assert reg.count_trajectories(final["id"]) == 2
    assert json.loads(krl("evals", "show", "bg", "--json").stdout)["samples_done"] == 2


def test_eval_of_a_training_run_checkpoint_uses_its_config(krl, workspace):
    krl("train", "demo", "max_steps=1", "problems=builtin/relu", "dataset.batch_size=1", "dataset.group_size=1",
        "max_turns=2", *CPU, "--name", "trained")
    done = krl("eval", "--run", "trained", "--checkpoint", "0", "--samples", "1", "--name", "of-trained", "--json")
    summary = json.loads(done.stdout)
    assert summary["source_run"] == "trained" and summary["source_step"] == 0
    assert summary["turns"] == 2 and summary["problem_set"] == "builtin/relu"  # the run's own settings
    failed = krl("eval", "--run", "trained", "--checkpoint", "7", rc=2)
    assert "no checkpoint at step 7" in failed.stderr and "Traceback" not in failed.stderr


def test_bad_input_exits_2_without_traceback(krl):
    for args, needle in [(("evals", "show", "nope"), "nope"),
                         (("eval", "--checkpoint", "3"), "--checkpoint needs --run"),
                         (("evals", "compare", "a", "b"), "'a'")]:
        done = krl(*args, rc=2)
        assert needle in done.stderr and "Traceback" not in done.stderr


async def test_eval_screen_grid_distribution_inspector_and_compare(workspace, monkeypatch):
    from app.screens.eval import EvalCompareScreen, EvalScreen, speedup_histogram
    from app.screens.run_detail import RunDetailScreen
    from app.screens.trajectory import TrajectoryScreen
    from core.config import load_config
    from core.evaluation import evaluate_foreground
    from tests.app.fixtures import make_app, settle

    monkeypatch.setenv("KRL_CONFIG_DIR", str(workspace / "config"))
    cfg = load_config("demo", ["backend=replay", "replay.path=demo", "problems=builtin/relu", "evaluation.samples=2",
                               "max_turns=2", *CPU])
    row = evaluate_foreground(cfg, "grid", workspace)
    app = make_app(workspace)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        app.push_screen(RunDetailScreen(row["id"]))
        await settle(pilot)
        await pilot.press("v")  # on an eval run: its grid
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, EvalScreen)
        header = str(screen.query_one("#eval-header").render())
        assert "grid" in header and "pass@1" in header
        grid = screen.query_one("#eval-grid")
        assert grid.row_count == 1 and len(grid.columns) == 1 + 2 * 2
        assert "x" in str(screen.query_one("#eval-distribution").render())
        grid.focus()
        grid.cursor_coordinate = grid.cursor_coordinate._replace(row=0, column=1)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, TrajectoryScreen)
        app.pop_screen()
        app.push_screen(EvalCompareScreen("grid", "grid"))
        await settle(pilot)
        text = str(app.screen.query_one("#eval-compare-header").render())
        assert "fast_1" in text and "95% CI" in text
    assert speedup_histogram([0.4, 1.0, 1.1, 5.0])[0] == ("0–0.5x", 1)


def test_a_detached_evaluation_stops_on_sigterm_and_resumes_without_replaying(krl, workspace):
    import time

    krl("eval", *CPU, "--backend", "replay", "--replay", "demo", "--problems", "builtin", "--samples", "2",
        "--turns", "3", "--name", "long", "--detach")
    with Registry.for_workspace(workspace) as reg:
        run_id = reg.get_run("long")["id"]
        deadline = time.monotonic() + 180
        while reg.count_trajectories(run_id) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        stopped = procman.stop_run(reg, "long", grace_s=60)
        assert stopped["status"] == "stopped", reg.events(run_id)[-5:]
        before = {(t["problem_id"], t["sample_index"]): t["id"] for t in reg.trajectories(run_id, limit=1000)}
    assert 3 <= len(before) < 50
    summary = json.loads(krl("evals", "resume", "long", "--json").stdout)
    assert summary["status"] == "finished" and summary["samples_done"] == 50
    with Registry.for_workspace(workspace) as reg:
        after = {(t["problem_id"], t["sample_index"]): t["id"] for t in reg.trajectories(run_id, limit=1000)}
    assert len(after) == 50 and all(after[key] == tid for key, tid in before.items())
