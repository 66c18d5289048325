"""`krl demo --headless` end to end in a subprocess: a replay run through procman, the real evaluator (CPU here),
and a summary with steps, verdict counts, solve rate and best speedups."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.registry import Registry


@pytest.mark.slow
def test_demo_headless_runs_and_summarises(workspace):
    env = {**os.environ, "KRL_WORKSPACE": str(workspace)}
    proc = subprocess.run([sys.executable, "-m", "app", "demo", "--headless", "--json"], env=env,
                          capture_output=True, text=True, timeout=240, cwd=workspace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    with Registry.for_workspace(workspace) as reg:
        run = reg.get_run(summary["name"])
        assert run["status"] == "finished" and run["backend"] == "replay" and run["preset"] == "demo"
        assert summary["steps"] == run["config"]["max_steps"] == run["last_step"] + 1
        assert sum(summary["verdicts"].values()) == summary["turns"] > 0
        assert summary["verdicts"].get("correct", 0) > 0
        assert set(summary["verdicts"]) - {"correct"}, "the recordings also carry failing turns"
        assert 0 < summary["solve_rate"] <= 1
        assert summary["best_speedups"] and all(v > 0 for v in summary["best_speedups"].values())
        assert reg.checkpoints(run["id"])


def test_demo_summary_from_registry(registry):
    from app.commands.demo import summarise
    from tests.app.fixtures import populate

    ids = populate(registry)
    summary = summarise(registry, ids["demo-replay"])
    assert summary["steps"] == 12 and summary["trajectories"] == 48
    assert summary["turns"] == sum(summary["verdicts"].values())
    assert set(summary["verdicts"]) <= {"correct", "wrong_output", "compile_error", "hack_detected"}
    assert 1.4 < summary["best_speedups"]["builtin/relu"] <= 1.51


def test_the_demo_writes_where_a_bare_krl_looks(tmp_path, monkeypatch):
    """After `make demo`, `krl` typed in the same folder opens the demo's workspace (issue 13, bug 10)."""
    from app.commands.demo import demo_workspace, open_hint
    from core.registry import workspace_path

    monkeypatch.delenv("KRL_WORKSPACE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert demo_workspace() == workspace_path() == tmp_path / "runs"
    assert open_hint(demo_workspace()) == "open it in the TUI: krl"
    assert open_hint(tmp_path / "elsewhere") == f"open it in the TUI: krl --workspace {tmp_path / 'elsewhere'}"
