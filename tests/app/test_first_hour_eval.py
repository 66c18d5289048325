"""The first hour with evaluations (issue 26): figures that agree between `krl runs`, `krl evals` and the TUI,
comparisons that say when they are partial, elapsed over segments. Evaluations come from the real job and the CPU
evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import load_config
from core.evaluation import evaluate_foreground
from core.registry import Registry

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = "builtin/relu,builtin/leaky_relu"
REPLAY = ["backend=replay", "replay.path=demo", f"problems={PROBLEMS}", "evaluation.samples=2", "max_turns=2",
          "eval.devices=cpu", "eval.cpu_workers=1"]


@pytest.fixture(scope="module")
def stopped_eval(tmp_path_factory):
    """A replay evaluation of 2 problems x 2 samples stopped after 2 samples (as SIGTERM stops it)."""
    workspace = tmp_path_factory.mktemp("stopped-eval")
    row = evaluate_foreground(load_config("demo", REPLAY), "partial", workspace, stop_after_samples=2)
    assert row["status"] == "stopped"
    return workspace


def test_item1_progress_counts_finished_samples_everywhere(stopped_eval, workspace, krl):
    from app.screens.loaders import load_runs
    from tests.app.recorded import copy_workspace

    copy_workspace(stopped_eval, workspace)
    with Registry.for_workspace(workspace) as reg:
        row = reg.get_run("partial")
        finished = reg.count_trajectories(row["id"])
        # Samples finish out of order: the highest step written is not the progress. Make that visible here
        # whatever order this machine finished them in, as a stop later in a long evaluation leaves it.
        reg.update_run(row["id"], last_step=3)
        tui_row = next(r for r in load_runs(reg) if r.name == "partial")
    assert 0 < finished < 4
    assert json.loads(krl("evals", "show", "partial", "--json").stdout)["samples_done"] == finished
    assert json.loads(krl("runs", "show", "partial", "--json").stdout)["steps_done"] == finished
    listed = krl("runs", "ls").stderr
    assert f"{finished}/4" in listed, listed
    assert tui_row.done == finished


def test_item2_compare_refuses_an_unfinished_evaluation_and_force_marks_it_partial(stopped_eval, workspace, krl):
    from tests.app.recorded import copy_workspace

    copy_workspace(stopped_eval, workspace)
    refused = krl("evals", "compare", "partial", "partial")
    assert refused.code == 2 and "not every sample is evaluated yet" in refused.stderr, refused.stderr
    assert "'partial' (" in refused.stderr and "stopped" in refused.stderr
    forced = krl("evals", "compare", "partial", "partial", "--force", "--json")
    assert forced.code == 0, forced.stderr
    result = json.loads(forced.stdout)
    assert list(result["partial"]) == ["partial"] and "WARNING: partial comparison" in forced.stderr
    with Registry.for_workspace(workspace) as reg:
        played = {}
        for t in reg.trajectories(reg.get_run("partial")["id"], order="step", limit=100):
            played.setdefault(t["problem_id"], set()).add(t["sample_index"])
    complete = sorted(pid for pid, samples in played.items() if len(samples) == 2)
    # Unrun problems are left out, not counted as unsolved.
    assert [row["problem_id"] for row in result["problems"]] == complete
    assert result["shared_problems"] == len(complete) and len(result["unfinished_problems"]) == 2 - len(complete)


async def test_item2_the_tui_compare_marks_an_unfinished_evaluation_partial(stopped_eval, workspace, tmp_path,
                                                                            monkeypatch):
    from textual.widgets import Static

    from app.screens.eval import EvalCompareScreen
    from tests.app.fixtures import make_app, settle
    from tests.app.recorded import copy_workspace

    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))
    copy_workspace(stopped_eval, workspace)
    app = make_app(workspace)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        app.push_screen(EvalCompareScreen("partial", "partial"))
        await settle(pilot)
        header = str(app.screen.query_one("#eval-compare-header", Static).render())
    assert "PARTIAL: not every sample is evaluated" in header and "partial (" in header, header


def test_item5_elapsed_after_a_resume_covers_every_segment(stopped_eval, workspace):
    from app.screens.loaders import load_runs
    from app.widgets.run_table import elapsed_s
    from tests.app.recorded import copy_workspace

    copy_workspace(stopped_eval, workspace)
    with Registry.for_workspace(workspace) as reg:
        first = reg.get_run("partial")
    resumed = evaluate_foreground(load_config("demo", REPLAY), workspace=workspace, resume="partial")
    assert resumed["status"] == "finished" and len(resumed["segments"]) == 2
    assert resumed["started_at"] == first["started_at"] == first["segments"][0]["started_at"]
    with Registry.for_workspace(workspace) as reg:
        row = next(r for r in load_runs(reg) if r.name == "partial")
    assert elapsed_s(row, now=0.0) == pytest.approx(resumed["ended_at"] - first["segments"][0]["started_at"])


def test_item8_evals_ls_and_compare_keep_names_whole_at_80_columns(stopped_eval, workspace, krl):
    from tests.app.recorded import copy_workspace

    copy_workspace(stopped_eval, workspace)
    long_name = "eval-qwen3-8b-kernelbench-level1-heldout"
    with Registry.for_workspace(workspace) as reg:
        reg.rename_run(reg.get_run("partial")["id"], long_name)
    listing = krl("evals", "ls", env={"COLUMNS": "80"}).stderr
    assert long_name in listing and all(len(line) <= 80 for line in listing.splitlines()), listing
    compared = krl("evals", "compare", long_name, long_name, "--force", env={"COLUMNS": "80"}).stderr
    assert f"A = {long_name}" in compared and f"B = {long_name}" in compared, compared
    assert all(len(line) <= 80 for line in compared.splitlines() if not line.startswith("WARNING")), compared


async def test_item16_an_evaluation_opens_on_its_summary_grid_and_histogram(stopped_eval, workspace, tmp_path,
                                                                           monkeypatch):
    from app.screens.eval import EvalScreen
    from app.screens.run_detail import RunDetailScreen
    from tests.app.fixtures import make_app, settle
    from tests.app.recorded import copy_workspace

    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))
    copy_workspace(stopped_eval, workspace)
    app = make_app(workspace)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        app.open_run_detail("partial")
        await settle(pilot)
        assert isinstance(app.screen, EvalScreen)
        assert "pass@1" in str(app.screen.query_one("#eval-header").render())
        assert app.screen.query_one("#eval-grid").row_count == 2
        await pilot.press("o")  # the run's logs, config and events are one key away
        await settle(pilot)
        assert isinstance(app.screen, RunDetailScreen)


async def test_gap_compare_picks_the_other_evaluation_from_a_list(stopped_eval, workspace, tmp_path, monkeypatch):
    from app.screens.dialogs import PickScreen
    from app.screens.eval import EvalScreen
    from tests.app.fixtures import make_app, settle
    from tests.app.recorded import copy_workspace

    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))
    copy_workspace(stopped_eval, workspace)
    app = make_app(workspace)
    picked = []
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        app.push_screen(EvalScreen("partial"))
        await settle(pilot)
        await pilot.press("c")  # the only evaluation here: nothing to pick, and it says so
        await settle(pilot)
        assert not isinstance(app.screen, PickScreen)
        assert any("no other evaluation" in n.message for n in app._notifications)
        app.push_screen(PickScreen("which?", [("first · finished", "first"), ("second · stopped", "second")]),
                        picked.append)
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)
    assert picked == ["second"]
