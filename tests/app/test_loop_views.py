"""Compare over runs the real training loop made (tests/app/loop_workspace.py: Tinker SDK autospecs, a run that
failed and was resumed by procman, two runs of one config): segment markers where a run was resumed, and mean ± std
bands of a group on the time axis (issue 26, "Missing, compared with the tools researchers already use")."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("tinker")  # the runs are made against its SDK's autospecs

from tests.app.fixtures import make_app, open_registry, settle  # noqa: E402

DOTTED = {chr(0x2805), chr(0x2828)}  # the two braille cells a segment marker draws with


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


async def test_compare_marks_where_a_resumed_run_began_again(loop_runs):
    from textual.widgets import Static

    from app.widgets.curves_panel import CurvesPanel

    workspace, ids = loop_runs
    with open_registry(workspace) as reg:
        flaky = reg.get_run(ids["flaky"])
    resumed = flaky["segments"][1]
    assert resumed["start_step"] == 2
    app = make_app(workspace)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        app.open_compare([ids["flaky"], ids["steady-a"]])
        await settle(pilot)
        screen = app.screen
        plot = next(p for p in screen.query_one(CurvesPanel).plots() if p.plot_title == "env/all/reward/total")
        colour = screen.colour_of(ids["flaky"])
        assert plot.view.markers == ((2.0, colour),)
        assert DOTTED & set(plot.render().plain)
        assert "where a run was resumed" in str(screen.query_one("#compare-legend", Static).render())
        plotted = screen.query_one(CurvesPanel).plotted()
        await pilot.press("x")
        await settle(pilot)
        (at, marked_colour), = plot.view.markers
    with open_registry(workspace) as reg:  # time is minutes since the run's first point on the plots shown
        first_wall = min(reg.metric_series(ids["flaky"], key)["wall_time"][0] for key in plotted
                         if reg.metric_series(ids["flaky"], key)["wall_time"])
    assert marked_colour == colour
    assert math.isclose(at, (resumed["started_at"] - first_wall) / 60, rel_tol=1e-6, abs_tol=1e-9)


def _interpolated(series: dict, x: float) -> float | None:
    xs = [(w - series["wall_time"][0]) / 60 for w in series["wall_time"]]
    return float(np.interp(x, xs, series["value"])) if xs[0] <= x <= xs[-1] else None


async def test_group_bands_on_the_time_axis_read_every_run_at_each_x(loop_runs):
    from app.widgets.curves_panel import SETTINGS_KEY, CurvesPanel
    from themes.settings import save_setting

    workspace, ids = loop_runs
    group = [ids["steady-a"], ids["steady-b"]]
    key = "time/total"  # wall-clock figures: the two runs' values differ at every step
    with open_registry(workspace) as reg:
        series = [reg.metric_series(run_id, key) for run_id in group]
    # The user's remembered choices for this compare: this metric, on the time axis.
    save_setting(SETTINGS_KEY, {f"{workspace}#compare#{','.join(map(str, sorted(group)))}":
                                {"selected": [key], "x_axis": "time", "smoothing": 0.0}})
    app = make_app(workspace)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        app.open_compare(group, {"same config": group})
        await settle(pilot)
        panel = app.screen.query_one(CurvesPanel)
        assert panel.x_axis == "time" and panel.bands
        plot = next(p for p in panel.plots() if p.plot_title == key)
        (curve,) = plot.curves
    assert curve.band is not None and len(curve.xs) >= 2
    low, high = curve.band
    spread = 0.0
    for x, mean, lo, hi in zip(curve.xs, curve.ys, low, high):
        values = [v for v in (_interpolated(s, x) for s in series) if v is not None]
        expected = sum(values) / len(values)
        std = math.sqrt(sum((v - expected) ** 2 for v in values) / len(values))
        assert math.isclose(mean, expected, rel_tol=1e-9, abs_tol=1e-12), (x, mean, values)
        assert math.isclose(hi - lo, 2 * std, rel_tol=1e-9, abs_tol=1e-12), (x, lo, hi, values)
        spread = max(spread, hi - lo)
    assert spread > 0  # both runs are read at every x, not one run per x


async def test_a_compare_plots_exported_files_name_its_runs(loop_runs):
    # On screen the compare legend above the plots names the colours; a plot's own SVG and PNG carry a legend.
    import html

    from app.widgets.curves_panel import CurvesPanel

    workspace, ids = loop_runs
    app = make_app(workspace)  # the export lands in <workspace>/exports: the only write into the shared workspace
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        app.open_compare([ids["flaky"], ids["steady-a"]])
        await settle(pilot)
        plot = next(p for p in app.screen.query_one(CurvesPanel).plots() if p.plot_title == "env/all/reward/total")
        on_screen = plot.render().plain
        await pilot.press("e")
        await settle(pilot)
        written = app.screen.last_export
    svg = next(path for path in written if path.name.endswith("env_all_reward_total.svg"))
    text = html.unescape(svg.read_text()).replace("\u00a0", " ")
    assert "flaky" in text and "steady-a" in text
    assert "flaky" not in on_screen  # the screen's plots stay free of a legend over the curves
    assert any(path.name.endswith("env_all_reward_total.png") for path in written)
