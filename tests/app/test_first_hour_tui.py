"""The first hour in the TUI (issue 26), over the workspace the real training loop and evaluator recorded
(tests/app/recorded.py): exports, numbering, widths, dialogs and empty states a new user meets."""

from __future__ import annotations

import csv

import pytest

from tests.app.fixtures import make_app, settle
from tests.app.recorded import RECORDED_RUN


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


async def test_item4_a_single_runs_curve_export_names_the_run(recorded_demo, workspace):
    app = make_app(workspace, open_run=RECORDED_RUN)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        written = app.screen.last_export
    series = next(path for path in written if path.name.endswith("-series.csv"))
    rows = list(csv.DictReader(series.open()))
    assert rows and {row["run"] for row in rows} == {RECORDED_RUN}
    assert len({row["metric"] for row in rows}) > 1


async def test_item9_the_runs_table_fits_80_and_160_columns(recorded_demo, workspace):
    from app.widgets.run_table import GAP, RunTable

    reg, run = recorded_demo
    tags = ["baseline", "sweep-lr-3e-6", "qwen3-8b", "kernelbench-level1"]
    reg.add_tags(run["id"], tags)
    for size, wanted in (((80, 24), {"name", "status", "step", "reward", "best"}),
                         ((160, 48), {"name", "status", "step", "reward", "correct", "best", "model", "tags"})):
        app = make_app(workspace)
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            table = app.screen.query_one(RunTable)
            shown = {key: width for key, _h, width in table.shown_columns}
            assert wanted <= set(shown), (size, shown)
            assert sum(shown.values()) + GAP * len(shown) <= table.scrollable_content_region.width, (size, shown)
            line = "".join(segment.text for segment in table.render_line(1))
            assert table.cell_text(run["id"], "step") in line and RECORDED_RUN in line, line
            if size[0] == 160:  # whole tags, then how many more; never one cut in the middle
                shown_tags = line[line.index(" baseline"):].split()
                assert shown_tags[0] == "baseline" and shown_tags[-1].startswith("+"), line
                assert all(tag in tags for tag in shown_tags[:-1]) and "…" not in line, line


async def test_item9_curve_titles_stay_readable_at_80x24(recorded_demo, workspace):
    from app.widgets.reward_plot import RewardPlot

    app = make_app(workspace, open_run=RECORDED_RUN)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        plots = [p for p in app.screen.query(RewardPlot) if p.curves]
        assert plots
        for plot in plots:
            title = plot.title_text(plot.size.width).plain
            if len(plot.plot_title) + 2 <= plot.size.width:
                assert title.startswith(plot.plot_title), (title, plot.size.width)


async def test_item10_the_new_run_form_starts_from_what_this_machine_runs(workspace, monkeypatch):
    from textual.widgets import Input, Select, Static

    monkeypatch.setenv("KRL_GPUS", "0")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    app = make_app(workspace)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.open_new_run()
        await settle(pilot)
        screen = app.screen
        assert screen.query_one("#new-preset", Select).value == "demo", str(screen.query_one("#new-errors", Static).render())
        assert screen.query_one("#new-backend", Select).value == "replay"
        assert screen.query_one("#new-gpus", Input).value == "0"
        note = str(screen.query_one("#new-machine", Static).render())
        assert "TINKER_API_KEY" in note and "GPU" in note, note
        # Asking for the kevin preset here keeps the note and asks for the GPUs there are.
        screen.query_one("#new-preset", Select).value = "kevin"
        await settle(pilot)
        assert screen.query_one("#new-gpus", Input).value == "0"
        assert "TINKER_API_KEY" in str(screen.query_one("#new-machine", Static).render())


async def test_item13_ctrl_e_evaluates_while_a_text_box_has_focus(workspace, monkeypatch):
    from textual.widgets import Input, Static

    monkeypatch.setenv("KRL_GPUS", "0")
    app = make_app(workspace)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.open_new_run()
        await settle(pilot)
        screen = app.screen
        box = screen.query_one("#new-batch", Input)
        box.value = "0"  # invalid: the launch stops at validation, so no job starts
        box.focus()
        await pilot.press("ctrl+e")
        await settle(pilot)
        assert "need fixing" in str(screen.query_one("#new-errors", Static).render())
        assert box.has_class("-invalid")


async def test_item12_delete_of_a_running_run_is_refused_before_asking(recorded_demo, workspace):
    from app.screens.dialogs import ConfirmScreen
    from app.widgets.run_table import RunTable

    reg, run = recorded_demo
    reg.update_run(run["id"], status="running")
    app = make_app(workspace)
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        app.screen.query_one(RunTable).focus()
        await pilot.press("d")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        messages = [n.message for n in app._notifications]
    assert any("stop it first with s" in m and "krl " not in m for m in messages), messages


async def test_item12_form_errors_name_fields_and_keys_not_cli_options(recorded_demo, workspace, monkeypatch):
    from textual.widgets import Input, Static

    monkeypatch.setenv("KRL_GPUS", "0")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    app = make_app(workspace)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.open_new_run()
        await settle(pilot)
        screen = app.screen
        errors = screen.query_one("#new-errors", Static)
        screen.query_one("#new-name", Input).value = RECORDED_RUN  # a finished run's name
        await pilot.press("ctrl+s")
        await settle(pilot)
        duplicate = str(errors.render())
        screen.query_one("#new-name", Input).value = "fresh-name"
        screen.query_one("#new-gpus", Input).value = "3"
        await pilot.press("ctrl+s")
        await settle(pilot)
        too_many = str(errors.render())
    assert "already exists (finished)" in duplicate and "fork it from the runs screen (f)" in duplicate, duplicate
    assert "resume" not in duplicate and "--name" not in duplicate, duplicate
    assert "Set GPUs to 0" in too_many and "--gpus" not in too_many, too_many


async def test_item14_v_on_a_training_run_asks_before_evaluating(recorded_demo, workspace):
    from textual.widgets import Input

    from app.screens.dialogs import PromptScreen

    reg, run = recorded_demo
    app = make_app(workspace, open_run=RECORDED_RUN)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        assert isinstance(app.screen, PromptScreen) and "Samples per problem" in app.screen.question
        assert app.screen.query_one("#prompt-input", Input).value  # the run's own sample count, editable
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, PromptScreen)
    assert [r["name"] for r in reg.list_runs(kind="eval")] == []  # nothing started


async def test_item15_a_fork_with_nothing_left_to_train_is_refused_before_it_starts(recorded_demo, workspace):
    from textual.widgets import Input

    from app.screens.dialogs import PromptScreen
    from app.widgets.run_table import RunTable

    reg, run = recorded_demo
    app = make_app(workspace)
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        app.screen.query_one(RunTable).focus()
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, PromptScreen)
        app.screen.query_one("#prompt-input", Input).value = "fork-a"
        await pilot.press("enter")
        await settle(pilot)
        messages = [n.message for n in app._notifications]
    assert any("nothing left to train" in m and "max_steps=" in m for m in messages), messages
    assert reg.find_run("fork-a") is None


async def test_item17_an_empty_workspace_says_what_to_do(workspace):
    from textual.widgets import Static

    app = make_app(workspace)
    async with app.run_test(size=(100, 24)) as pilot:
        await settle(pilot)
        hint = app.screen.query_one("#runs-empty", Static)
        assert hint.display and "krl demo" in str(hint.render()) and "new run" in str(hint.render())


async def test_item20_the_trajectory_filter_counts_against_the_whole_run(recorded_demo, workspace):
    from textual.widgets import DataTable, Select

    reg, run = recorded_demo
    in_run = reg.count_trajectories(run["id"])
    problem = reg.trajectories(run["id"], order="step", limit=1)[0]["problem_id"]
    solved = reg.count_trajectories(run["id"], problem_id=problem)
    assert 0 < solved < in_run
    app = make_app(workspace, open_run=RECORDED_RUN)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        app.screen.query_one("#traj-problem", Select).value = problem
        await settle(pilot)
        count = str(app.screen.query_one("#traj-count").render())
        assert app.screen.query_one("#traj-table", DataTable).row_count == solved
    assert f"{solved} shown · {solved} match the filter of {in_run} in the run" in count, count


async def test_item20_a_misspelt_alert_metric_is_flagged(recorded_demo, workspace):
    from textual.widgets import Input

    reg, run = recorded_demo
    keys = reg.metric_keys(run["id"])
    key = next(k for k in keys if len(k) > 8)
    misspelt = key[:-1] + ("x" if key[-1] != "x" else "y")
    app = make_app(workspace)
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        app.action_alerts()
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        app.screen.query_one("#prompt-input", Input).value = f"{misspelt} > 0.5"
        await pilot.press("enter")
        await settle(pilot)
        messages = [n.message for n in app._notifications]
    assert any(f"no run logs a metric '{misspelt}'" in m and key in m for m in messages), messages


async def test_gap_the_inspector_shows_the_full_prompt_the_model_saw(recorded_demo, workspace):
    from textual.widgets import TextArea

    from app.screens.dialogs import TextScreen

    reg, run = recorded_demo
    trajectory = next(t for t in reg.trajectories(run["id"], order="step", limit=1000) if t["n_turns"] >= 2)
    turns = reg.trajectory_turns(trajectory["id"])
    app = make_app(workspace)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        app.open_trajectory(trajectory["id"])
        await settle(pilot)
        await pilot.press("right", "p")
        await settle(pilot)
        assert isinstance(app.screen, TextScreen)
        body = app.screen.query_one("#text-body", TextArea).text
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, TextScreen)
    assert turns[1]["prompt"] in body and turns[1]["response"] in body
    assert turns[0]["feedback"].splitlines()[0] in turns[1]["prompt"]  # earlier attempts' feedback is in it


async def test_item20_help_lists_no_cluster_tab_for_a_local_run(recorded_demo, workspace):
    from textual.widgets import Static

    from app.screens.help import HelpScreen

    app = make_app(workspace, open_run=RECORDED_RUN)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one(Static).render())
    assert "Run detail keys" in text and "Cluster" not in text, text


def _png_rows(path):
    """(width, rows of RGB triples) of an 8-bit RGB PNG written by app/widgets/png.py (one IDAT, filter 0)."""
    import struct
    import zlib

    data = path.read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    start = data.index(b"IDAT") + 4
    length = struct.unpack(">I", data[start - 8:start - 4])[0]
    raw = zlib.decompress(data[start:start + length])
    stride = 3 * width + 1
    return width, [[tuple(raw[r * stride + 1 + 3 * i:r * stride + 4 + 3 * i]) for i in range(width)]
                   for r in range(height)]


async def test_exported_pngs_carry_the_title_and_tick_labels(recorded_demo, workspace):
    # Each character of the plot's text (title, y and x tick labels) is drawn in its cell with the 5 x 7 font.
    from app.widgets.bitmap_font import GLYPH_H, glyph_pixels
    from app.widgets.export import PNG_SCALE

    app = make_app(workspace, open_run=RECORDED_RUN)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        written = app.screen.last_export
        plot = next(p for p in app.screen.query("RewardPlot") if p.plot_title == "env/all/reward/total")
        figure = plot.render().plain.split("\n")
    png = next(path for path in written if path.name.endswith("env_all_reward_total.png"))
    width, rows = _png_rows(png)
    background = rows[-1][-1]
    cell_w, cell_h = 6 * PNG_SCALE, 12 * PNG_SCALE
    assert width == max(len(line) for line in figure) * cell_w
    tick_row = next(i for i, line in enumerate(figure) if "└" in line) + 1
    checked = {}
    for row in (0, tick_row):  # the title line, and the x tick labels under the axis
        for column, char in enumerate(figure[row]):
            if not (char.isascii() and char.isalnum()):
                continue
            top = row * cell_h + (cell_h - GLYPH_H * PNG_SCALE) // 2
            lit = [(column * cell_w + dx * PNG_SCALE, top + dy * PNG_SCALE) for dx, dy in glyph_pixels(char)]
            assert all(rows[y][x] != background for x, y in lit), (row, column, char)
            checked[row] = checked.get(row, "") + char
    assert "reward" in checked[0] and any(c.isdigit() for c in checked[tick_row]), checked


async def test_item9_at_80_columns_the_headline_plots_keep_whole_titles(recorded_demo, workspace):
    # The metric picker narrows below 110 columns, so two plots abreast still name their metric in full.
    from app.widgets.reward_plot import RewardPlot

    app = make_app(workspace, open_run=RECORDED_RUN)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        titles = {p.plot_title: p.title_text(p.size.width).plain for p in app.screen.query(RewardPlot) if p.curves}
    for key in ("env/all/reward/total", "env/all/correct_rate"):
        assert titles[key].startswith(key), titles
