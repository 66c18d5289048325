"""Pilot-driven tests of the TUI over a real registry: runs table, filtering, sorting, run detail tabs,
trajectory inspector, compare, new-run validation, and keys that go through the real process manager."""

from __future__ import annotations

import json
import time

import pytest
from textual.widgets import DataTable, Input, SelectionList

from app.screens.compare import CompareScreen
from app.screens.new_run import NewRunScreen
from app.screens.run_detail import RunDetailScreen
from app.screens.runs import RunsScreen
from app.screens.trajectory import TrajectoryScreen
from app.widgets.curves_panel import CurvesPanel
from app.widgets.kernel_diff import KernelView
from app.widgets.log_tail import LogTail
from app.widgets.reward_plot import RewardPlot
from app.widgets.run_table import RunTable
from tests.app.fixtures import filled_workspace, make_app, multi_turn_trajectory, settle


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def filled(workspace):
    reg, ids = filled_workspace(workspace)
    yield reg, ids
    reg.close()


def table_names(app) -> list[str]:
    return app.screen.query_one(RunTable).names()


def move_to(app, name: str) -> None:
    table = app.screen.query_one(RunTable)
    table.move_cursor(table_names(app).index(name))


async def test_runs_table_filter_and_sort(filled, workspace):
    app = make_app(workspace)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert table_names(app)[0] == "kevin-32b-queued"  # newest first
        assert len(table_names(app)) == 6
        await pilot.press("slash", *"lr-sweep")
        await settle(pilot)
        assert app.screen.filter_text == "lr-sweep", app.screen.filter_text
        assert sorted(table_names(app)) == ["kevin-32b-queued", "kevin-8b-lr3e-5"]
        await pilot.press("escape")
        await settle(pilot)
        assert len(table_names(app)) == 6
        await pilot.press("o")  # sort by name
        await settle(pilot)
        assert table_names(app) == sorted(table_names(app))
        await pilot.press("O")
        await settle(pilot)
        assert table_names(app) == sorted(table_names(app), reverse=True)


async def test_open_run_renders_downsampled_curves(filled, workspace):
    reg, ids = filled
    app = make_app(workspace)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        move_to(app, "kevin-8b-baseline")
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunDetailScreen) and screen.run["name"] == "kevin-8b-baseline"
        plots = list(screen.query(RewardPlot))
        assert plots and plots[0].plot_title == "reward/total"
        panel = screen.query_one(CurvesPanel)
        assert len(panel._series["reward/total"][0].steps) == 40
        # The metric picker filters by regex.
        screen.query_one("#metric-filter", Input).focus()
        await pilot.press(*"^rate/")
        await settle(pilot)
        listing = screen.query_one(SelectionList)
        shown = [str(listing.get_option_at_index(i).value) for i in range(listing.option_count)]
        assert shown and all(k.startswith("rate/") for k in shown)
        await pilot.press("escape")


async def test_curves_downsample_to_plot_width(workspace):
    from core.registry import Registry

    reg = Registry.for_workspace(workspace)
    run = reg.create_run("long", status="finished")
    reg.insert_metric_rows(run["id"], (("reward/total", s, float(s % 97), 1000.0 + s) for s in range(20_000)))
    reg.close()
    app = make_app(workspace, open_run="long")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        panel = app.screen.query_one(CurvesPanel)
        points = len(panel._series["reward/total"][0].steps)
        assert 0 < points <= 2 * panel.plot_width()
        await pilot.press("x")  # time axis
        await settle(pilot)
        assert panel.x_axis == "time"


async def open_trajectories_tab(pilot) -> DataTable:
    """Settle the run detail screen, switch to its Trajectories tab and return the table once filled."""
    await settle(pilot)
    await pilot.press("2")
    await settle(pilot)
    return pilot.app.screen.query_one("#traj-table", DataTable)


async def test_trajectories_tab_filters_and_opens_inspector(filled, workspace):
    reg, ids = filled
    app = make_app(workspace, open_run="kevin-8b-baseline")
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trajectories_tab(pilot)
        assert table.row_count == 160
        app.screen.query_one("#traj-outcome").value = "hack"
        await settle(pilot)
        assert 0 < table.row_count < 160
        assert all(str(table.get_row_at(i)[10]) == "HACK" for i in range(table.row_count))
        app.screen.query_one("#traj-outcome").value = "all"
        app.screen.query_one("#traj-steps", Input).value = "5-6"
        await settle(pilot)
        assert table.row_count == 8
        table.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, TrajectoryScreen)


async def test_trajectories_table_pages_through_a_long_run(workspace):
    import random

    from core.registry import Registry
    from tests.app.fixtures import _trajectories

    reg = Registry.for_workspace(workspace)
    run = reg.create_run("long", status="finished")
    rng = random.Random(3)
    for step in range(150):  # 8 trajectories a step: 1,200 in all
        reg.write_step(run["id"], step, {"reward/total": 0.5}, _trajectories(rng, step, 2, 4, 2))
    reg.close()
    app = make_app(workspace, open_run="long")
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trajectories_tab(pilot)
        assert table.row_count == 500
        assert "500 shown · 1,200 in the run" in str(app.screen.query_one("#traj-count").render())
        table.focus()
        for expected in (1000, 1200, 1200):
            await pilot.press("ctrl+end")  # the cursor on the last loaded row asks for the next page
            await settle(pilot)
            assert table.row_count == expected
        ids = [int(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert len(set(ids)) == 1200  # no page loaded twice
        assert "1,200 shown · 1,200 in the run" in str(app.screen.query_one("#traj-count").render())


async def test_problems_tab_jumps_to_problem_trajectories(filled, workspace):
    app = make_app(workspace, open_run="kevin-8b-baseline")
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await settle(pilot)
        problems = app.screen.query_one("#problems-table", DataTable)
        assert problems.row_count == 4
        problems.focus()
        await pilot.press("enter")
        await settle(pilot)
        table = app.screen.query_one("#traj-table", DataTable)
        chosen = {str(table.get_row_at(i)[4]) for i in range(table.row_count)}
        assert len(chosen) == 1 and table.row_count == 40


async def test_trajectory_inspector_steps_turns_and_toggles_diff(filled, workspace):
    reg, ids = filled
    trajectory_id = multi_turn_trajectory(reg, ids["kevin-8b-baseline"])
    app = make_app(workspace)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        app.open_trajectory(trajectory_id)
        await settle(pilot)
        screen = app.screen
        view = screen.query_one(KernelView)
        assert screen.turn_index == 0 and view.mode == "code"
        await pilot.press("right")
        await settle(pilot)
        assert screen.turn_index == 1
        await pilot.press("v")
        assert view.mode == "unified"
        rendered = str(screen.query_one("#kernel-code").render())
        previous, current = (t["kernel"] for t in screen.detail.turns[:2])
        removed = next(line for line in previous.splitlines() if line.strip() and line not in current.splitlines())
        assert "+++ this turn" in rendered and f"-{removed}" in rendered
        await pilot.press("v")
        assert view.mode == "split" and screen.query_one("#kernel-split").display
        left = str(screen.query_one("#kernel-left").render())
        right = str(screen.query_one("#kernel-right").render())
        assert left.count("\n") == right.count("\n")  # columns stay aligned
        feedback = str(screen.query_one("#fb-feedback").render())
        assert feedback.startswith("Your kernel")
        problem = screen.detail.trajectory["problem_id"]
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert screen.trajectory_id != trajectory_id
        assert screen.detail.trajectory["problem_id"] == problem
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert screen.trajectory_id == trajectory_id


async def test_compare_two_runs_shows_config_diff(filled, workspace):
    app = make_app(workspace)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        move_to(app, "kevin-8b-baseline")
        await pilot.press("space")
        move_to(app, "kevin-8b-lr3e-5")
        await pilot.press("space", "c")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        diff = screen.query_one("#config-diff", DataTable)
        keys = [str(diff.get_row_at(i)[0]) for i in range(diff.row_count)]
        assert "optim.lr" in keys and "model" not in keys
        assert screen.colour_of(screen.run_ids[0]) == "series-1"
        assert all(len(per_run) == 2 for per_run in screen.panel._series.values())


async def test_compare_needs_two_selected(filled, workspace):
    app = make_app(workspace)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)


async def test_new_run_form_shows_validation_errors(filled, workspace):
    reg, _ = filled
    app = make_app(workspace)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, NewRunScreen)
        assert screen.query_one("#new-batch", Input).value  # filled from the preset
        screen.query_one("#new-batch", Input).value = "0"
        screen.query_one("#new-weights", Input).value = "correct=lots"
        screen.query_one("#new-name", Input).value = "bad name"
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert "≥ 1" in str(screen.query_one("#err-batch").render())
        assert "name=number" in str(screen.query_one("#err-weights").render())
        assert screen.query_one("#new-name").has_class("-invalid")
        assert len(reg.list_runs()) == 6  # nothing launched
        # A key the config does not know is caught by core.config, not launched either.
        screen.query_one("#new-batch", Input).value = "2"
        screen.query_one("#new-weights", Input).value = screen.defaults["weights"]
        screen.query_one("#new-name", Input).value = "ok-name"
        screen.query_one("#new-extra", Input).value = "optim.nonsense=1"
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert "nonsense" in str(screen.query_one("#new-errors").render())
        assert len(reg.list_runs()) == 6


async def test_delete_key_goes_through_procman(filled, workspace):
    reg, ids = filled
    app = make_app(workspace)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        move_to(app, "tiny-local-smoke")
        await pilot.press("d")
        await settle(pilot)
        await pilot.press("y")
        assert await _wait_for(pilot, lambda: reg.find_run("tiny-local-smoke") is None
                               and "tiny-local-smoke" not in table_names(app), 10)


async def test_stop_key_dequeues_a_queued_run_through_procman(filled, workspace, monkeypatch):
    reg, ids = filled
    monkeypatch.setenv("KRL_GPUS", "0")  # no GPUs: the 4-GPU run cannot start, it stays queued
    app = make_app(workspace)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        move_to(app, "kevin-32b-queued")
        await pilot.press("s")
        assert await _wait_for(pilot, lambda: reg.get_run("kevin-32b-queued")["status"] == "stopped", 10)
        assert await _wait_for(pilot, lambda: next(r for r in app.screen.rows if r.name == "kevin-32b-queued")
                               .status == "stopped", 5)


async def test_tag_key_adds_and_removes_tags(filled, workspace):
    reg, ids = filled
    app = make_app(workspace)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        move_to(app, "kevin-8b-lr3e-5")
        await pilot.press("t")
        await settle(pilot)
        prompt = app.screen.query_one("#prompt-input", Input)
        prompt.value = "keep -lr-sweep"
        await pilot.press("enter")
        assert await _wait_for(pilot, lambda: reg.get_run("kevin-8b-lr3e-5")["tags"] == ["keep"], 10)


async def test_status_change_appears_within_a_second(filled, workspace):
    reg, ids = filled
    app = make_app(workspace, live=True, refresh_s=0.25)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        reg.set_status(ids["kevin-8b-lr3e-5"], "crashed", "heartbeat lost")
        created = reg.create_run("brand-new", status="queued")
        started = time.monotonic()
        while time.monotonic() - started < 1.0:
            await pilot.pause(0.05)
            rows = {r.name: r.status for r in app.screen.rows}
            if rows["kevin-8b-lr3e-5"] == "crashed" and "brand-new" in rows:
                break
        assert rows["kevin-8b-lr3e-5"] == "crashed" and rows["brand-new"] == "queued"
        assert "crashed" in app.screen.query_one(RunTable).cell_text(ids["kevin-8b-lr3e-5"], "status")
        assert table_names(app)[0] == "brand-new"
        assert created["id"] not in app.screen.selected
        # Changes to runs that already ended, made by another process, show as quickly.
        reg.rename_run(ids["kevin-8b-baseline"], "baseline-renamed")
        reg.add_tags(ids["single-turn-ablation"], ["paper"])
        reg.delete_run(ids["demo-replay"])
        started = time.monotonic()
        while time.monotonic() - started < 1.0:
            await pilot.pause(0.05)
            rows = {r.name: r for r in app.screen.rows}
            if "baseline-renamed" in rows and "demo-replay" not in rows and "paper" in rows[
                    "single-turn-ablation"].tags:
                break
        assert "baseline-renamed" in rows and "kevin-8b-baseline" not in rows and "demo-replay" not in rows
        assert "paper" in rows["single-turn-ablation"].tags


async def test_logs_tab_tails_live_and_searches(filled, workspace):
    reg, ids = filled
    app = make_app(workspace, open_run="kevin-8b-baseline", live=True, refresh_s=0.2, tab=None) \
        if False else make_app(workspace, live=True, refresh_s=0.2)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        app.open_run_detail("kevin-8b-baseline", tab="logs")
        await settle(pilot)
        tail = app.screen.query_one(LogTail)
        assert tail.line_count == 32
        with open(reg.run_dir("kevin-8b-baseline") / "logs.log", "a") as handle:
            handle.write("step 99: a brand new line\n")
        for _ in range(40):
            await pilot.pause(0.05)
            if tail.line_count == 33:
                break
        assert tail.line_count == 33
        app.screen.query_one("#log-search", Input).value = "warning"
        await settle(pilot)
        assert tail.line_count == 1


async def test_config_tab_highlights_overrides(workspace):
    from core.config import load_config
    from core.registry import Registry

    config = load_config("kevin", ["optim.lr=0.00123", "max_turns=2"]).model_dump(mode="json")
    reg = Registry.for_workspace(workspace)
    reg.create_run("cfg-run", config=config, preset="kevin", status="finished")
    reg.close()
    app = make_app(workspace, open_run="cfg-run")
    async with app.run_test(size=(140, 60)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        text = str(app.screen.query_one("#config-view").render())
        marked = [line for line in text.splitlines() if line.startswith("● ")]
        assert any("optim.lr" in line and "0.00123" in line for line in marked)
        assert any(line.startswith("● max_turns") for line in marked)
        assert not any("dataset.batch_size" in line for line in marked)


async def test_theme_switch_is_remembered(filled, workspace, tmp_path):
    from themes.settings import settings_path

    app = make_app(workspace, remember_theme=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+t")
        await settle(pilot)
        assert app.theme == "krl-light"
    assert json.loads(settings_path().read_text())["theme"] == "krl-light"
    again = make_app(workspace, theme=None)
    assert again.theme == "krl-light"


async def test_help_lists_screen_keys(filled, workspace):
    app = make_app(workspace)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        text = str(app.screen.query_one("#help-box Static").render())
        for description in ("New", "Stop", "Resume", "Fork", "Delete", "Compare", "Logs", "Tag", "Filter"):
            assert description in text


async def _wait_for(pilot, condition, timeout_s: float, poll_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await pilot.pause(poll_s)
    return condition()


@pytest.mark.slow
async def test_stop_and_resume_real_cpu_run_through_keys(workspace):
    """A real demo run (replay backend, CPU evaluator) started through procman, stopped with `s` and resumed
    with `r` from the runs table; the resumed segment continues after the stop checkpoint."""
    from core import procman
    from core.config import load_config
    from core.registry import Registry

    reg = Registry.for_workspace(workspace)
    procman.start_run(load_config("demo", ["max_steps=60"]), name="live-demo", preset="demo", detach=True,
                      registry=reg)
    app = make_app(workspace, live=True, refresh_s=0.3, reconcile=True)
    try:
        async with app.run_test(size=(140, 36)) as pilot:
            await settle(pilot)
            status = lambda: reg.get_run("live-demo")["status"]  # noqa: E731
            assert await _wait_for(pilot, lambda: (reg.get_run("live-demo")["last_step"] or -1) >= 1, 90)
            # The table shows it running, and the step column moves without any key press.
            assert await _wait_for(pilot, lambda: any(r.name == "live-demo" and r.status == "running"
                                                      for r in app.screen.rows), 3)
            # Its detail screen says the data is recorded and the curves fill from the live run.
            move_to(app, "live-demo")
            await pilot.press("enter")
            assert await _wait_for(pilot, lambda: isinstance(app.screen, RunDetailScreen) and app.screen.run
                                   and app.screen.query(CurvesPanel)
                                   and app.screen.query_one(CurvesPanel)._series, 20)
            assert "RECORDED" in str(app.screen.query_one("#run-header").render())
            await pilot.press("escape")
            await settle(pilot)
            move_to(app, "live-demo")
            await pilot.press("s")
            assert await _wait_for(pilot, lambda: status() == "stopped", 60), status()
            stopped_at = reg.get_run("live-demo")["last_step"]
            assert reg.last_checkpoint(reg.get_run("live-demo")["id"]) is not None
            assert await _wait_for(pilot, lambda: any(r.name == "live-demo" and r.status == "stopped"
                                                      for r in app.screen.rows), 3)
            # The job writes `stopped` before its process has exited; procman refuses to resume until it has.
            assert await _wait_for(pilot, lambda: not procman.run_process_alive(reg.get_run("live-demo")), 60)
            await pilot.press("r")
            # Resumed: a new segment with a new live process that starts after the stop checkpoint.
            assert await _wait_for(pilot, lambda: len(reg.get_run("live-demo")["segments"]) >= 2
                                   and procman.run_process_alive(reg.get_run("live-demo")), 30)
            assert reg.get_run("live-demo")["status"] in ("queued", "running")
            assert reg.get_run("live-demo")["segments"][-1]["start_step"] == stopped_at + 1
            assert await _wait_for(pilot, lambda: any(r.name == "live-demo" and r.status == "running"
                                                      for r in app.screen.rows), 5)
    finally:
        row = reg.get_run("live-demo")
        if row["status"] in ("queued", "running", "stopping") or procman.run_process_alive(row):
            procman.stop_run(reg, "live-demo", force=True)
        procman.wait_run(reg, "live-demo", timeout_s=30)
        reg.close()


@pytest.mark.slow
async def test_new_run_form_launches_through_procman(workspace):
    """The form's changed fields become overrides of the chosen preset; launch registers and starts the run."""
    from core import procman
    from core.registry import Registry
    from textual.widgets import Select

    reg = Registry.for_workspace(workspace)
    app = make_app(workspace)
    try:
        async with app.run_test(size=(140, 50)) as pilot:
            await settle(pilot)
            await pilot.press("n")
            await settle(pilot)
            screen = app.screen
            screen.query_one("#new-preset", Select).value = "demo"
            await settle(pilot)
            assert screen.query_one("#new-backend", Select).value == "replay"
            screen.query_one("#new-name", Input).value = "from-form"
            screen.query_one("#new-steps", Input).value = "2"
            await pilot.press("ctrl+s")
            for _ in range(100):
                await pilot.pause(0.1)
                if reg.find_run("from-form"):
                    break
            run = reg.get_run("from-form")
            assert run["preset"] == "demo" and run["config"]["max_steps"] == 2 and run["total_steps"] == 2
            assert run["status"] in ("queued", "running", "finished")
            await settle(pilot)
            assert not isinstance(app.screen, NewRunScreen)  # back on the runs screen
    finally:
        row = reg.find_run("from-form")
        if row and row["status"] in ("queued", "running", "stopping"):
            procman.stop_run(reg, "from-form", force=True)
        if row:
            procman.wait_run(reg, "from-form", timeout_s=30)
        reg.close()


async def test_command_palette_offers_screen_actions_and_runs(filled, workspace):
    app = make_app(workspace)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        for title in ("Stop", "Resume", "Fork", "Compare", "New run", "Theme: krl-light", "Open run: demo-replay"):
            assert title in titles
        opener = next(c for c in app.get_system_commands(app.screen) if c.title == "Open run: demo-replay")
        opener.callback()
        await settle(pilot)
        assert isinstance(app.screen, RunDetailScreen) and app.screen.run["name"] == "demo-replay"
