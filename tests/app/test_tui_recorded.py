"""The TUI over a workspace recorded by the real training loop and evaluator (tests/app/recorded.py): what the
demo produces must open — every turn of the trajectory inspector, the runs table, the run detail."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static

from app.screens.trajectory import TrajectoryScreen
from app.widgets.kernel_diff import KernelView
from tests.app.fixtures import make_app, settle


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


def _multi_turn_solved(reg, run_id: int) -> dict:
    for row in reg.trajectories(run_id, order="step", limit=1000):
        if row["n_turns"] >= 2 and row["solved"]:
            return row
    raise AssertionError("the recorded demo has no multi-turn solved trajectory")


async def test_inspector_steps_through_every_turn_of_a_recorded_trajectory(recorded_demo, workspace):
    reg, run = recorded_demo
    trajectory = _multi_turn_solved(reg, run["id"])
    turns = reg.trajectory_turns(trajectory["id"])
    assert isinstance(turns[-1]["eval_result"]["kernel_runtime"], dict)  # the shape the evaluator writes
    app = make_app(workspace)
    async with app.run_test(size=(150, 40)) as pilot:
        await settle(pilot)
        app.open_trajectory(trajectory["id"])
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TrajectoryScreen)
        for number in range(len(turns)):  # numbered from 0 as everywhere else (issue 26 item 6)
            assert screen.query_one(KernelView).border_title.startswith(f"turn {number} of 0–{len(turns) - 1}")
            await pilot.press("right")
            await settle(pilot)
        verdict = str(screen.query_one("#fb-verdict", Static).render())
        assert "correct" in verdict and "kernel" in verdict and " ms" in verdict, verdict
        first_column = [screen.query_one("#turn-list", DataTable).get_row_at(i)[0] for i in range(len(turns))]
        assert [str(c) for c in first_column] == [str(t["turn"]) for t in turns] == [str(i) for i in range(len(turns))]
        header = str(screen.query_one("#traj-header", Static).render())
        assert f"solved at turn {trajectory['solved_at_turn']} " in header, header


async def test_every_recorded_trajectory_opens(recorded_demo, workspace):
    reg, run = recorded_demo
    ids = [row["id"] for row in reg.trajectories(run["id"], order="step", limit=1000)]
    app = make_app(workspace)
    async with app.run_test(size=(150, 40)) as pilot:
        await settle(pilot)
        app.open_trajectory(ids[0])
        await settle(pilot)
        screen = app.screen
        for trajectory_id in ids:
            screen.load(trajectory_id)
            await settle(pilot)
            assert screen.trajectory_id == trajectory_id
            for _ in range(len(screen.detail.turns)):
                await pilot.press("right")
            await settle(pilot)


async def test_the_runs_table_and_krl_runs_ls_agree_on_a_recorded_run(recorded_demo, workspace, monkeypatch, capsys):
    """Steps done / total and the reward column read the same in the TUI and the CLI (issue 13, bugs 6 and 8)."""
    import sys

    from app.cli import main
    from app.widgets.format import fmt_float, fmt_steps
    from app.widgets.run_table import RunTable

    reg, run = recorded_demo
    steps = fmt_steps(run)
    assert steps == f"{run['total_steps']}/{run['total_steps']}"  # a finished run has done all its steps
    app = make_app(workspace)
    async with app.run_test(size=(160, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(RunTable)
        assert table.cell_text(run["id"], "step") == steps
        tui_reward = table.cell_text(run["id"], "reward").split()[0]
    monkeypatch.setattr(sys, "argv", ["krl", "runs", "ls"])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    line = next(line for line in capsys.readouterr().err.splitlines() if run["name"] in line).split()
    assert line[2] == steps
    assert float(line[6]) == pytest.approx(float(tui_reward), abs=5.1e-3) == pytest.approx(run["reward_value"], abs=5.1e-3)
    assert fmt_float(run["reward_value"]) == tui_reward
