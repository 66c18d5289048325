"""Issue 26, second pass: read-only commands in a folder with no workspace create nothing and say what to run;
the leftovers of item 20 and the missing plot features. `krl` runs in this process."""

from __future__ import annotations


import pytest


@pytest.fixture
def krl_in(monkeypatch, capsys):
    """`krl ARGS…` run through app.cli.main from a given folder, with no workspace named."""
    from tests.app.fixtures import run_krl

    monkeypatch.setenv("KRL_GPUS", "0")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("KRL_WORKSPACE", raising=False)

    def run(folder, *args):
        code, out, err = run_krl(capsys, monkeypatch, args, folder=folder)
        return code, out + err

    return run


def test_item17_reading_commands_create_no_workspace(tmp_path, krl_in):
    for args, want_code in ((("runs", "ls"), 0), (("evals", "ls"), 0), (("problems", "ls"), 0),
                            (("evals", "show", "x"), 2), (("evals", "export", "x"), 2), ((), 2)):
        code, text = krl_in(tmp_path, *args)
        assert code == want_code, (args, code, text)
        assert not (tmp_path / "runs").exists(), (args, text)
        if args[:1] != ("problems",):
            assert "krl demo" in text or "krl train demo" in text, (args, text)
    code, text = krl_in(tmp_path, "evals", "ls")
    assert "no workspace yet" in text


def test_item17_open_existing_never_creates(tmp_path):
    from core.registry import Registry

    assert Registry.open_existing(tmp_path / "nowhere") is None
    assert not (tmp_path / "nowhere").exists()
    Registry.for_workspace(tmp_path / "here").close()
    reg = Registry.open_existing(tmp_path / "here")
    assert reg is not None
    reg.close()


@pytest.fixture
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


async def test_item20_a_fired_alert_follows_its_run_through_a_rename(registry, workspace, _config_dir):
    from textual.widgets import DataTable

    from tests.app.fixtures import make_app, settle

    run = registry.create_run("old-name", kind="train", config={})
    app = make_app(workspace)
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        watcher = app.alert_watcher
        watcher.set_rules(["running"])
        watcher.check()
        await settle(pilot)
        registry.set_status(run["id"], "running")
        watcher.check()
        await settle(pilot)
        assert [a.run_name for a in watcher.fired] == ["old-name"]
        registry.rename_run(run["id"], "new-name")
        watcher.check()
        await settle(pilot)
        app.action_alerts()
        await settle(pilot)
        row = app.screen.query_one("#fired-table", DataTable).get_row_at(0)
    assert str(row[1]) == "new-name (was old-name)", row
    assert str(row[3]).startswith("new-name"), row


async def test_item20_the_curves_filter_narrows_the_plots(recorded_demo, workspace, _config_dir):
    from textual.widgets import Input

    from app.widgets.curves_panel import CurvesPanel
    from tests.app.fixtures import make_app, settle
    from tests.app.recorded import RECORDED_RUN

    app = make_app(workspace, open_run=RECORDED_RUN)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        panel = app.screen.query_one("#curves-panel", CurvesPanel)
        before = [p.plot_title for p in panel.plots()]
        wanted = [k for k in before if "reward" in k]
        assert wanted and len(wanted) < len(before), before
        panel.query_one("#metric-filter", Input).value = "reward"
        await settle(pilot)
        after = [p.plot_title for p in panel.plots()]
        assert after == wanted, (before, after)
        panel.query_one("#metric-filter", Input).value = ""
        await settle(pilot)
        assert [p.plot_title for p in panel.plots()] == before


def test_item20_a_narrow_time_plot_keeps_its_unit():
    from rich.style import Style

    from app.widgets.braille import Series, render_plot
    from app.widgets.reward_plot import short_unit

    xs = [i * 0.5 for i in range(60)]
    series = [Series(xs, [float(i % 7) for i in range(60)], Style())]
    wide = render_plot(series, 100, 12, "t", "minutes since start", x_unit=short_unit("minutes since start"))
    assert wide.plain.splitlines()[-1].endswith((" min", "minutes since start"))
    for width in (30, 22, 16):
        narrow = render_plot(series, width, 12, "t", "minutes since start", x_unit=short_unit("minutes since start"))
        last = narrow.plain.splitlines()[-1]
        assert last.endswith(" min") and len(last) <= width, (width, last)


def metric_runs(registry, names, steps=30):
    """Finished runs with a reward curve each (rows written as a job writes them), their ids."""
    ids = []
    for offset, name in enumerate(names):
        run = registry.create_run(name, status="finished")
        registry.insert_metric_rows(run["id"], (("reward/total", s, 0.1 * offset + s / steps, 1000.0 + 60 * s)
                                                for s in range(steps)))
        ids.append(run["id"])
    return ids


async def test_item20_compare_plots_draw_no_legend_over_the_curves(registry, workspace, _config_dir):
    from textual.widgets import Static

    from app.widgets.curves_panel import CurvesPanel
    from tests.app.fixtures import make_app, settle

    path, ids = workspace, metric_runs(registry, ["baseline-qwen3-8b-kernelbench-level1", "lr3e-5-long-name-run"])
    app = make_app(path)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        app.open_compare(ids)
        await settle(pilot)
        legend = str(app.screen.query_one("#compare-legend", Static).render())
        plots = app.screen.query_one(CurvesPanel).plots()
        drawn = [plot.render().plain for plot in plots]
    from core.registry import Registry

    with Registry.for_workspace(path) as reg:
        names = [reg.get_run(i)["name"] for i in ids]
    assert all(name in legend for name in names), legend  # the screen names each run's colour, whole
    assert drawn and not any("▬" in text for text in drawn), drawn[0]


async def test_item20_the_palette_screenshot_writes_an_svg_and_says_where(registry, workspace, _config_dir):
    from tests.app.fixtures import make_app, settle

    app = make_app(workspace)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        commands = [c for c in app.get_system_commands(app.screen) if c.title == "Screenshot"]
        assert len(commands) == 1
        commands[0].callback()
        await settle(pilot)
        messages = [n.message for n in app._notifications]
    svgs = list((workspace / "exports").glob("*.svg"))
    assert len(svgs) == 1 and svgs[0].read_text().lstrip().startswith("<svg"), svgs
    assert any(str(svgs[0]) in m for m in messages), messages


def test_item18_check_prints_plain_stages_not_phase_names():
    import io

    from rich.console import Console

    from app.commands.check import print_result
    from evaluator.api import EvalResult, Verdict

    internal = {"queue": 9.5, "judge_ready": 1.0, "compile": 1.2, "load": 0.2, "correctness": 0.5,
                "kernel_checks": 0.1, "recheck": 0.1, "timing": 0.4, "timing_retries": 1, "judge_fork": 0.3,
                "overhead": 0.2, "total": 3.0, "end_to_end": 13.5,
                # the timing's counts, ratios and per-call yardsticks: never summed into a stage
                "timing_extra_rounds": 4, "timing_spread": 0.3, "round_trip": 0.2, "kernelbench_ping": 0.4,
                # the judge's allocator counts and memory on a GPU (slot/device_memory.allocator_phases)
                "judge_cuda_mallocs": 412, "judge_cuda_frees": 400, "judge_reserved_peak_mib": 768.0,
                "judge_cuda_mallocs_timing": 390, "runner_cpu_weight": 100.0}
    result = EvalResult(request_id="r", problem_id="builtin/relu", verdict=Verdict.CORRECT, phase_times_s=internal)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    print_result(console, result)
    text = console.file.getvalue()
    line = next(line for line in text.splitlines() if line.startswith("took"))
    assert line.startswith("took 13.5 s: evaluator start-up 10.7 s · build 1.2 s")
    assert "checking 0.7 s" in line and "timing 0.4 s" in line and "other 0.3 s" in line
    import re

    for name in internal:
        if name != "timing":  # the one internal name that is also the plain word
            assert not re.search(rf"\b{name}\b", line), (name, line)


def test_item18_check_prints_plain_stages_for_results_the_real_evaluator_made(recorded_demo_source):
    # Every phase name the real evaluator wrote into the recorded demo's results (raw, not normalised) stays out of
    # `krl check`'s line, and the stages never add up to more than the whole.
    import io
    import json
    import re
    import sqlite3

    from rich.console import Console

    from app.commands.check import print_result
    from app.commands.phases import plain_stages
    from evaluator.api import EvalResult

    conn = sqlite3.connect(f"file:{recorded_demo_source / 'registry.db'}?mode=ro", uri=True)
    try:
        rows = [json.loads(text) for (text,) in conn.execute("SELECT eval_result FROM turns WHERE eval_result IS "
                                                               "NOT NULL AND verdict = 'correct' LIMIT 20")]
    finally:
        conn.close()
    assert rows
    for row in rows:
        result = EvalResult.from_dict(row)
        whole, stages = plain_stages(result.phase_times_s)
        assert sum(stages.values()) <= whole + 1e-6, (whole, stages, result.phase_times_s)
        console = Console(file=io.StringIO(), width=200, color_system=None)
        print_result(console, result)
        line = next(line for line in console.file.getvalue().splitlines() if line.startswith("took"))
        for name in result.phase_times_s:
            if name != "timing":
                assert not re.search(rf"\b{name}\b", line), (name, line)


def test_item26_readme_first_hour_and_serve_line():
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    needs = tomllib.loads((root / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f"Python {needs.lstrip('>=')}+" in readme
    first_hour = readme[readme.index("## The first hour"):readme.index("## What you get")]
    for words in ("make demo", "./runs", "`enter`", "`?`", ".venv/bin"):
        assert words in first_hour, words
    assert "[--ray [ADDRESS]]" not in readme and re.search(r"--ray ADDRESS", readme)
    assert "DESIGN.md" not in readme  # a clone has none


async def test_gap_a_resumed_run_marks_where_each_segment_began(registry, workspace, _config_dir):
    from app.widgets.curves_panel import CurvesPanel
    from tests.app.fixtures import make_app, settle

    (run_id,) = metric_runs(registry, ["resumed"], steps=40)
    segments = [{"index": 0, "started_at": 1000.0, "start_step": 0}, {"index": 1, "started_at": 2500.0,
                                                                      "start_step": 25}]
    registry.update_run(run_id, segments=segments)
    app = make_app(workspace, open_run="resumed")
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        panel = app.screen.query_one("#curves-panel", CurvesPanel)
        plot = next(p for p in panel.plots() if p.plot_title == "reward/total")
        assert plot.view.markers == (25.0,)
        canvas = plot.render().plain.splitlines()[1:-2]
        assert sum(line.count("\u2805") + line.count("\u2828") for line in canvas) >= len(canvas) // 2, canvas
        panel.toggle_x_axis()  # minutes since start: the resume came 25 minutes after the first point
        await settle(pilot)
        assert plot.view.markers == (25.0,)


def test_gap_markers_draw_dotted_and_only_inside_the_range():
    from rich.style import Style

    from app.widgets.braille import Series, render_plot

    series = [Series(list(range(20)), [float(i) for i in range(20)], Style())]
    plain = render_plot(series, 60, 12).plain
    marked = render_plot(series, 60, 12, markers=[10.0, 99.0]).plain
    dotted = sum(marked.count(c) for c in "\u2805\u2828") - sum(plain.count(c) for c in "\u2805\u2828")
    assert dotted >= 6, marked


def test_gap_mean_std_band_of_a_group():
    from app.widgets.bands import mean_std_band

    xs, mean, std, count = mean_std_band([([0, 1, 2], [1.0, 2.0, 3.0]), ([0, 1], [3.0, 4.0])])
    assert xs == [0.0, 1.0, 2.0] and mean == [2.0, 3.0, 3.0] and std == [1.0, 1.0, 0.0] and count == [2, 2, 1]


async def test_gap_grouped_runs_compare_as_mean_and_std_bands(registry, workspace, _config_dir):
    from textual.widgets import Static

    from app.widgets.curves_panel import CurvesPanel
    from tests.app.fixtures import make_app, settle

    ids = metric_runs(registry, ["lr-a-1", "lr-a-2", "lr-b-1"])
    app = make_app(workspace)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        app.open_compare(ids, {"lr = a": ids[:2], "lr = b": ids[2:]})
        await settle(pilot)
        panel = app.screen.query_one(CurvesPanel)
        plot = next(p for p in panel.plots() if p.plot_title == "reward/total")
        curves = plot.curves
        legend = str(app.screen.query_one("#compare-legend", Static).render())
        assert [c.label for c in curves] == ["lr = a (n=2)", "lr = b (n=1)"]
        assert curves[0].band is not None and curves[1].band is None
        low, high = curves[0].band
        assert all(abs((h - l) - 0.1) < 1e-9 for l, h in zip(low, high))  # the two runs lie 0.1 apart: std 0.05
        assert "lr = a: mean ± std of lr-a-1, lr-a-2" in legend
        filled = plot.render().plain
        await pilot.press("b")
        await settle(pilot)
        assert [c.label for c in plot.curves] == ["lr-a-1", "lr-a-2", "lr-b-1"]
        assert "lr-b-1 (finished)" in str(app.screen.query_one("#compare-legend", Static).render())
    assert filled.count("\u28ff") > 0  # the band fills whole braille cells


async def test_gap_e_exports_each_plot_as_png_too(registry, workspace, _config_dir):
    import struct
    import zlib

    from tests.app.fixtures import make_app, settle

    metric_runs(registry, ["png-run"])
    app = make_app(workspace, open_run="png-run")
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        written = app.screen.last_export
    pngs = [path for path in written if path.suffix == ".png"]
    assert pngs and any("reward_total" in p.name for p in pngs), written
    data = pngs[0].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height, depth, colour_type = struct.unpack(">IIBB", data[16:26])
    assert (depth, colour_type) == (8, 2) and width > 100 and height > 50
    start = data.index(b"IDAT") + 4
    length = struct.unpack(">I", data[start - 8:start - 4])[0]
    raw = zlib.decompress(data[start:start + length])
    rows = [raw[r * (3 * width + 1) + 1:(r + 1) * (3 * width + 1)] for r in range(height)]
    background = rows[0][:3]
    drawn = sum(1 for row in rows for i in range(0, len(row), 3) if row[i:i + 3] != background)
    assert drawn > 200  # the curve's dots and the axes


async def test_gap_the_runs_table_hands_its_groups_to_compare(registry, workspace, _config_dir):
    from app.screens.compare import CompareScreen
    from tests.app.fixtures import make_app, settle

    ids = metric_runs(registry, ["g-a-1", "g-a-2", "g-b-1"])
    registry.add_tags(ids[0], ["a"])
    registry.add_tags(ids[1], ["a"])
    registry.add_tags(ids[2], ["b"])
    app = make_app(workspace)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        screen.group_by = "tag"
        screen.selected = set(ids)
        screen.action_compare()
        await settle(pilot)
        assert isinstance(app.screen, CompareScreen)
        groups = {label: sorted(members) for label, members in app.screen.groups.items()}
        assert groups == {"tag a": ids[:2], "tag b": ids[2:]}, groups
        assert app.screen.panel.bands
