"""Issue 13 bug 9, focus and keys, driven by keys alone over a workspace the real demo recorded: the tab a number
opens has focus, esc leaves a text box before the screen, the footer follows the tab, the inspector at 80x24."""

from __future__ import annotations

import pytest
from textual.widgets import Button, DataTable, Input, Select

from app.screens.new_run import NewRunScreen
from app.screens.run_detail import RunDetailScreen
from app.screens.runs import RunsScreen
from app.screens.trajectory import TrajectoryScreen
from app.widgets.key_bar import KeyBar
from tests.app.fixtures import make_app, settle
from tests.app.recorded import RECORDED_RUN


@pytest.fixture
def demo_ws(recorded_demo, workspace, tmp_path, monkeypatch):
    """The workspace with a normalised copy of the demo the real training loop recorded (tests/app/conftest.py)."""
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))
    return workspace


def key_bar_text(app) -> str:
    return str(app.screen.query_one(KeyBar).render())


async def test_demo_trajectory_inspected_by_keys_alone(demo_ws):
    app = make_app(demo_ws)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, RunDetailScreen) and app.screen.run["name"] == RECORDED_RUN
        await pilot.press("2")
        await settle(pilot)
        table = app.screen.query_one("#traj-table", DataTable)
        assert app.focused is table, app.focused  # no tabbing through the tab bar and filters
        # The first multi-turn trajectory, reached with the arrow keys.
        n_turns = [int(table.get_row_at(i)[5]) for i in range(table.row_count)]
        target = next(i for i, n in enumerate(n_turns) if n > 1)
        await pilot.press(*["down"] * target, "enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TrajectoryScreen)
        seen = [screen.turn_index]
        for _ in range(n_turns[target] - 1):
            await pilot.press("right")
            await settle(pilot)
            seen.append(screen.turn_index)
        assert seen == list(range(n_turns[target]))
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RunDetailScreen)


async def test_escape_in_a_text_box_leaves_the_box_not_the_screen(demo_ws):
    app = make_app(demo_ws, open_run=RECORDED_RUN)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("slash")  # search/filter: the step range box
        await settle(pilot)
        assert isinstance(app.focused, Input) and app.focused.id == "traj-steps"
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RunDetailScreen)
        assert app.focused is app.screen.query_one("#traj-table")
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)


async def test_key_bar_shows_the_keys_of_the_current_tab(demo_ws):
    app = make_app(demo_ws, open_run=RECORDED_RUN)
    async with app.run_test(size=(160, 36)) as pilot:
        await settle(pilot)
        assert "Smoother" in key_bar_text(app) and "x: step/time" in key_bar_text(app)
        await pilot.press("2")
        await settle(pilot)
        assert "Smoother" not in key_bar_text(app) and "Search/filter" in key_bar_text(app)
        await pilot.press("4")
        await settle(pilot)
        assert "Search/filter" not in key_bar_text(app)
        assert app.focused is app.screen.query_one("#config-scroll")


async def test_new_run_form_focuses_its_first_field_and_escape_leaves_fields(demo_ws):
    app = make_app(demo_ws)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, NewRunScreen)
        assert app.focused is screen.query_one("#new-preset", Select)
        screen.query_one("#new-name", Input).focus()
        await pilot.press("a", "escape")
        await settle(pilot)
        assert app.screen is screen and isinstance(app.focused, Button)
        assert screen.query_one("#new-name", Input).value == "a"
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)


async def test_trajectory_inspector_stacks_its_panes_at_80x24(recorded_demo, demo_ws):
    reg, run = recorded_demo
    trajectory = next(t for t in reg.trajectories(run["id"], order="step", limit=1000) if t["n_turns"] > 1)
    app = make_app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.open_trajectory(trajectory["id"])
        await settle(pilot)
        screen = app.screen
        turns, kernel, feedback = (screen.query_one(s).region for s in ("#turn-list", "#kernel-view",
                                                                          "#feedback-panel"))
        assert turns.bottom <= kernel.y and kernel.bottom <= feedback.y  # stacked, top to bottom
        assert kernel.width >= 76 and kernel.height >= 8 and feedback.height >= 6 and turns.height >= 3
        assert feedback.bottom <= 23  # above the key bar
        await pilot.press("right")
        await settle(pilot)
        assert screen.turn_index == 1
    async with make_app(demo_ws).run_test(size=(150, 40)) as pilot:  # wide: side by side as before
        await settle(pilot)
        pilot.app.open_trajectory(trajectory["id"])
        await settle(pilot)
        turns, kernel = (pilot.app.screen.query_one(s).region for s in ("#turn-list", "#kernel-view"))
        assert turns.right <= kernel.x and turns.y == kernel.y
