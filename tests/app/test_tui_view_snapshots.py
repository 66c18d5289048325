"""SVG snapshots of the views added for issue 13 (system, curves with log y/cursor/zoom, compare grid, grouped runs
table, distributions, alerts, the inspector at 80x24), over workspaces the real demo recorded and normalised
(tests/app/recorded.py). Sensor readings (the host now, the run's system/* samples) and timing-derived metrics are
fixed here (tests/app/view_fixtures.py): they differ on every machine and every second. Update with `pytest tests/app/test_tui_view_snapshots.py
--snapshot-update` and look at the SVGs."""

from __future__ import annotations

import json
import os
import time

import pytest

from app.widgets.curves_panel import SETTINGS_KEY
from core.system_metrics import GpuSample, HostSample, HostSampler
from tests.app.fixtures import FIXED_NOW, make_app, settle, settle_screen
from tests.app.recorded import RECORDED_RUN
from tests.app.view_fixtures import fix_timed_metrics, two_runs, two_runs_source  # noqa: F401 - fixtures

SIZE = (130, 38)


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    path = tmp_path / "config"
    path.mkdir()
    monkeypatch.setenv("KRL_CONFIG_DIR", str(path))
    return path


def remember(config_dir, workspace, run_id, panel, **choices) -> None:
    """Curve choices as a person would have left them (the settings file the TUI writes)."""
    path = config_dir / "settings.json"
    settings = json.loads(path.read_text()) if path.exists() else {}
    settings.setdefault(SETTINGS_KEY, {})[f"{workspace}#{run_id}#{panel}"] = choices
    path.write_text(json.dumps(settings))


def settled(*keys: str, then=None):
    async def run_before(pilot) -> None:
        await settle(pilot)
        if then is not None:
            await then(pilot)
            await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
        await settle_screen(pilot)  # a panel that got its keys before mounting sets them after a refresh (curves_panel)
    return run_before


def test_system_tab(snap_compare, recorded_demo, workspace, config_dir, monkeypatch):
    fixed = HostSample(37.0, 9.5, 23.5, None, [GpuSample(0, "NVIDIA H100 80GB HBM3", 91.0, 61.2, 79.6)])
    monkeypatch.setattr(HostSampler, "sample", lambda self: fixed)
    fix_timed_metrics(workspace)
    monkeypatch.setattr("socket.gethostname", lambda: "node-1")

    async def open_system_tab(pilot) -> None:
        await pilot.press("7")
        await settle(pilot)
        # On a loaded machine the tab's own focus call can land before the list is ready to show its cursor row:
        # focus it again once everything has settled, as a person arriving on the tab sees it.
        pilot.app.screen.query_one("#system-curves #metric-list").focus()
        await settle(pilot)

    assert snap_compare(make_app(workspace, open_run=RECORDED_RUN), terminal_size=SIZE,
                        run_before=settled(then=open_system_tab))


def test_curves_log_y_cursor_and_zoom(snap_compare, recorded_demo, workspace, config_dir):
    _reg, run = recorded_demo
    remember(config_dir, workspace, run["id"], "curves-panel", smoothing=0.0, x_axis="step", log_y=False,
             filter="*rate", selected=["env/all/correct_rate", "env/all/compile_rate", "env/all/solved_rate",
                                       "env/all/verdict/wrong_output"])
    app = make_app(workspace, open_run=RECORDED_RUN)
    assert snap_compare(app, terminal_size=SIZE, run_before=settled("y", "full_stop", "comma", "comma", "plus"))


def test_compare_grid(snap_compare, two_runs, config_dir):
    two_runs, ids = two_runs
    ids = sorted(ids)
    path = config_dir / "settings.json"
    path.write_text(json.dumps({SETTINGS_KEY: {f"{two_runs}#compare#{ids[0]},{ids[1]}": {
        "selected": ["env/all/correct_rate", "env/all/compile_rate", "env/all/format_rate", "env/all/hack_rate"],
        "smoothing": 0.0, "x_axis": "step", "log_y": False, "filter": ""}}}))

    async def open_compare(pilot) -> None:
        pilot.app.open_compare(ids)

    assert snap_compare(make_app(two_runs), terminal_size=SIZE, run_before=settled("full_stop", then=open_compare))


def test_runs_table_grouped_with_config_columns(snap_compare, two_runs, config_dir):
    two_runs, _ids = two_runs
    (config_dir / "settings.json").write_text(json.dumps({"runs_config_columns": ["max_steps", "seed"],
                                                          "runs_group_by": "max_steps"}))
    assert snap_compare(make_app(two_runs), terminal_size=(210, 14), run_before=settled())


def test_distributions_tab(snap_compare, recorded_demo, workspace, config_dir):
    fix_timed_metrics(workspace)
    assert snap_compare(make_app(workspace, open_run=RECORDED_RUN), terminal_size=(130, 44), run_before=settled("8"))


def test_alerts_screen(snap_compare, recorded_demo, workspace, config_dir, request):
    from core.alerts import Alert

    _reg, run = recorded_demo
    (config_dir / "settings.json").write_text(json.dumps({"alert_rules": ["crashed", "finished",
                                                                          "env/all/correct_rate > 0.5", "nonsense"]}))

    async def fire(pilot) -> None:
        pilot.app.bell = lambda: None
        watcher = pilot.app.alert_watcher
        watcher.ring([Alert(FIXED_NOW - 60, run["id"], RECORDED_RUN, "env/all/correct_rate > 0.5",
                            f"{RECORDED_RUN}: env/all/correct_rate = 0.5714 (> 0.5)", "warning"),
                      Alert(FIXED_NOW, run["id"], RECORDED_RUN, "finished", f"{RECORDED_RUN} finished",
                            "information")])
        pilot.app.clear_notifications()

    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"  # the alerts' clock times
    time.tzset()

    def restore() -> None:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()

    request.addfinalizer(restore)
    assert snap_compare(make_app(workspace), terminal_size=SIZE, run_before=settled("exclamation_mark", then=fire))


def test_trajectory_inspector_at_80x24(snap_compare, recorded_demo, workspace, config_dir):
    reg, run = recorded_demo
    trajectory = next(t for t in reg.trajectories(run["id"], order="step", limit=1000) if t["n_turns"] > 1)

    async def open_it(pilot) -> None:
        pilot.app.open_trajectory(trajectory["id"])

    assert snap_compare(make_app(workspace), terminal_size=(80, 24), run_before=settled("right", then=open_it))
