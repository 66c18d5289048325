"""SVG snapshot tests of every screen over the fixed fixture registry, at a fixed terminal size and a frozen clock.
Update baselines with `pytest tests/app/test_tui_snapshots.py --snapshot-update` and look at the SVGs."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from tests.app.fixtures import filled_workspace, make_app, multi_turn_trajectory, settle, settle_screen

SIZE = (130, 38)


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def filled(workspace):
    reg, ids = filled_workspace(workspace)
    yield reg, ids
    reg.close()


def settled(*keys: str, then=None):
    async def run_before(pilot) -> None:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
        if then is not None:
            await then(pilot)
            await settle(pilot)
        await settle_screen(pilot)  # the screen stopped changing: what the snapshot takes
    return run_before


@pytest.mark.parametrize("theme", ["krl-dark", "krl-light", "krl-high-contrast"])
def test_runs_screen(snap_compare, filled, workspace, theme):
    assert snap_compare(make_app(workspace, theme=theme), terminal_size=SIZE, run_before=settled())


def test_runs_screen_filtered_with_selection(snap_compare, filled, workspace):
    assert snap_compare(make_app(workspace), terminal_size=SIZE,
                        run_before=settled("down", "space", "down", "space", "slash", "k", "e", "v"))


@pytest.mark.parametrize("tab", ["1", "2", "3", "4", "5", "6"])
def test_run_detail_tabs(snap_compare, filled, workspace, tab):
    app = make_app(workspace, open_run="kevin-8b-baseline")
    assert snap_compare(app, terminal_size=SIZE, run_before=settled(tab))


def test_replay_run_is_labelled_recorded(snap_compare, filled, workspace):
    app = make_app(workspace, open_run="demo-replay")
    assert snap_compare(app, terminal_size=SIZE, run_before=settled())


@pytest.mark.parametrize("view_presses", [0, 1, 2], ids=["code", "unified", "split"])
def test_trajectory_inspector(snap_compare, recorded_demo, workspace, view_presses):
    """A trajectory the real training loop and evaluator recorded (the demo), on its last, correct turn."""
    reg, run = recorded_demo
    trajectory_id = multi_turn_trajectory(reg, run["id"], turns=2)

    async def open_it(pilot) -> None:
        pilot.app.open_trajectory(trajectory_id)

    async def keys(pilot) -> None:
        await open_it(pilot)
        await settle(pilot)
        await pilot.press("right", *["v"] * view_presses)

    assert snap_compare(make_app(workspace), terminal_size=(150, 40), run_before=settled(then=keys))


def test_compare_screen(snap_compare, filled, workspace):
    reg, ids = filled

    async def open_compare(pilot) -> None:
        pilot.app.open_compare([ids["kevin-8b-baseline"], ids["kevin-8b-lr3e-5"], ids["single-turn-ablation"]])

    assert snap_compare(make_app(workspace), terminal_size=SIZE, run_before=settled(then=open_compare))


def test_new_run_form_with_errors(snap_compare, filled, workspace, monkeypatch):
    # The form opens on what the machine can run (issue 26 item 10): pin the machine, a CPU one without Tinker.
    monkeypatch.setenv("KRL_GPUS", "0")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)

    async def fill(pilot) -> None:
        pilot.app.open_new_run()
        await settle(pilot)
        # Fixed values, so the snapshot does not follow edits to the preset files.
        values = {"name": "my run", "model": "Qwen/Qwen3-8B", "problems": "builtin", "batch": "0", "group": "8",
                  "turns": "4", "steps": "100", "weights": "correct=1.0 speed=fast", "gpus": "1", "extra": ""}
        for field_id, value in values.items():
            pilot.app.screen.query_one(f"#new-{field_id}", Input).value = value
        await pilot.press("ctrl+s")

    assert snap_compare(make_app(workspace), terminal_size=(130, 50), run_before=settled(then=fill))


def test_help_screen(snap_compare, filled, workspace):
    assert snap_compare(make_app(workspace), terminal_size=SIZE, run_before=settled("question_mark"))
