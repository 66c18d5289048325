"""Unit tests of the TUI's pure pieces: EMA smoothing, sparklines, diff rendering helpers, form validation,
step ranges, config comparison and the runs screen's active-only refresh."""

from __future__ import annotations

import pytest

from app.screens.loaders import compare_configs, default_curve_keys, load_runs, refresh_active, reward_key
from app.screens.new_run import build_overrides, form_defaults
from app.screens.run_detail import parse_step_range
from app.screens.runs import row_matches, sort_rows
from app.widgets.kernel_diff import kernel_language, split_diff_texts
from rich.style import Style

from app.widgets.braille import Series, nice_ticks, render_plot, tick_label
from app.widgets.reward_plot import debiased_ema
from app.widgets.sparkline import BLOCKS, sparkline_text
from tests.app.fixtures import FIXED_NOW, populate


def test_debiased_ema_starts_at_the_first_value_and_smooths():
    values = [10.0, 0.0, 10.0, 0.0]
    smoothed = debiased_ema(values, 0.6)
    assert smoothed[0] == pytest.approx(10.0)  # no pull toward zero at the start
    assert max(smoothed[1:]) < 10.0 and min(smoothed[1:]) > 0.0
    assert debiased_ema(values, 0.0) == values
    assert debiased_ema([3.0] * 50, 0.9) == pytest.approx([3.0] * 50)


def test_sparkline_scales_to_range_and_width():
    line = sparkline_text([0, 1, 2, 3, 4, 5, 6, 7], 8)
    assert line == BLOCKS
    assert len(sparkline_text(list(range(100)), 8)) == 8
    assert sparkline_text([], 4) == "    "
    assert set(sparkline_text([2, 2, 2], 3)) == {BLOCKS[3]}


def test_parse_step_range():
    assert parse_step_range("") == (None, None)
    assert parse_step_range("10-20") == (10, 20)
    assert parse_step_range("10-") == (10, None)
    assert parse_step_range("-20") == (None, 20)
    assert parse_step_range("7") == (7, 7)
    with pytest.raises(ValueError):
        parse_step_range("a-b")


def test_build_overrides_only_changed_fields_and_errors():
    config = {"model": "m", "backend": "tinker", "problems": "builtin", "max_turns": 4, "max_steps": 100, "gpus": 1,
              "dataset": {"batch_size": 8, "group_size": 4}, "reward": {"weights": {"correct": 1.0, "speed": 0.5}}}
    defaults = form_defaults(config)
    values = dict(defaults, steps="50", backend="replay", extra="optim.lr=1e-5")
    overrides, errors = build_overrides(values, defaults)
    assert not errors
    assert sorted(overrides) == ["backend=replay", "max_steps=50", "optim.lr=1e-5"]
    values = dict(defaults, batch="-1", weights="correct=abc", name="a b", extra="novalue", model="")
    overrides, errors = build_overrides(values, defaults)
    assert set(errors) == {"batch", "weights", "name", "extra", "model"}
    weights = dict(defaults, weights="correct=2 speed=0.5")
    assert build_overrides(weights, defaults)[0] == ["reward.weights.correct=2", "reward.weights.speed=0.5"]


def test_kernel_language():
    assert kernel_language("#include <cuda.h>\n__global__ void k() {}") == "cuda"
    assert kernel_language("__global__ void k(float* x) {}") == "cuda"
    assert kernel_language("import torch\nsrc = '__global__ void k() {}'") == "python"
    assert kernel_language("import triton\n@triton.jit\ndef k(): pass") == "python"


def test_compare_configs_keeps_only_differences():
    diff = compare_configs([{"a": 1, "b": {"c": 2, "d": 3}}, {"a": 1, "b": {"c": 5, "d": 3}, "e": 1}])
    assert diff == {"b.c": [2, 5], "e": [None, 1]}


def test_metric_key_choice_prefers_training_names():
    keys = ["env/all/reward/format", "env/all/reward/total", "env/all/correct_rate", "env/all/turn0/correct_rate",
            "env/all/compile_rate", "time/eval_mean", "optim/lr"]
    assert reward_key(keys) == "env/all/reward/total"
    chosen = default_curve_keys(keys)
    assert chosen[:3] == ["env/all/reward/total", "env/all/correct_rate", "env/all/compile_rate"]
    assert "time/eval_mean" in chosen and "optim/lr" not in chosen
    trained = keys + ["optim/kl_sample_train_v1", "optim/kl_sample_train_v2", "optim/entropy", "env/all/hack_rate"]
    assert default_curve_keys(trained)[3] == "optim/kl_sample_train_v1"


def test_refresh_active_rereads_only_active_runs(registry):
    ids = populate(registry)
    rows = load_runs(registry)
    registry.set_status(ids["kevin-8b-lr3e-5"], "finished")
    registry.create_run("newcomer")
    registry.delete_run(ids["kevin-32b-queued"])
    refreshed = {r.name: r for r in refresh_active(registry, rows)}
    assert refreshed["kevin-8b-lr3e-5"].status == "finished"
    assert "newcomer" in refreshed and "kevin-32b-queued" not in refreshed
    assert len(refreshed) == 6


def test_filter_and_sort_rows(registry):
    populate(registry)
    rows = load_runs(registry)
    assert {r.name for r in rows if row_matches(r, ["replay"])} == {"demo-replay"}
    by_reward = sort_rows(rows, "reward", False, FIXED_NOW)
    rewards = [r.reward for r in by_reward if r.reward is not None]
    assert rewards == sorted(rewards, reverse=True) and by_reward[-1].reward is None


def test_nice_ticks_are_round_and_inside_the_range():
    assert nice_ticks(0.0, 1.0, 5) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert nice_ticks(0.0012, 0.0031, 4) == pytest.approx([0.0015, 0.002, 0.0025, 0.003])
    assert nice_ticks(-7.0, 93.0, 4) == pytest.approx([0.0, 20.0, 40.0, 60.0, 80.0])
    assert tick_label(150_000.0, 50_000.0) == "150k" and tick_label(0.25, 0.05) == "0.25"


def test_braille_plot_fills_its_box_and_draws_each_series_in_its_colour():
    red, blue = Style(color="red"), Style(color="blue")
    xs = list(range(100))
    text = render_plot([Series(xs, [x * 0.01 for x in xs], red), Series(xs, [1 - x * 0.01 for x in xs], blue, "b")],
                       60, 14, "reward/total", "step")
    lines = text.plain.split("\n")
    assert len(lines) == 14 and max(len(line) for line in lines) <= 60
    assert lines[0].strip() == "reward/total" and lines[-1].endswith("step")
    assert "▬ b" in lines[1]
    canvas = "\n".join(lines[1:-2])
    assert sum("\u2800" < ch <= "\u28ff" for ch in canvas) > 60  # two diagonal lines of dots
    styles = {span.style for span in text.spans}
    assert red in styles and blue in styles
    # The rising line starts bottom left and the falling one top left.
    first_column = [line.split("┤" if "┤" in line else "│", 1)[1][:1] for line in lines[1:-2]]
    assert first_column[0] != " " and first_column[-1] != " "


def test_braille_plot_copes_with_empty_flat_and_non_finite_data():
    empty = render_plot([], 40, 8, "loss")
    assert "(no data yet)" in empty.plain and len(empty.plain.split("\n")) == 8
    flat = render_plot([Series([0, 1, 2], [3.0, 3.0, 3.0], Style())], 40, 8, "flat")
    assert "3.0" in flat.plain or "3" in flat.plain
    holes = render_plot([Series([0, 1, 2, 3], [1.0, float("nan"), float("inf"), 2.0], Style())], 40, 8, "holes")
    assert len(holes.plain.split("\n")) == 8


class _Palette:
    theme_variables = {"success": "#00ff00", "error": "#ff0000", "background": "#000000"}


def test_split_diff_wraps_long_lines_and_keeps_rows_level():
    old = "x = 1\nshort\ny = torch.relu(" + "a" * 50 + ")\nz = 3\n"
    new = "x = 1\ny = torch.relu(" + "a" * 50 + " + b)\nadded line\nz = 3\n"
    left, right = split_diff_texts(old, new, _Palette(), width=24)
    left_rows, right_rows = left.plain.split("\n"), right.plain.split("\n")
    assert len(left_rows) == len(right_rows)
    assert all(len(row) <= 24 for row in left_rows + right_rows)
    assert any(row.startswith("↪ ") for row in right_rows)  # the long line wrapped instead of being cut
    assert "".join(r[2:] for r in right_rows if r.startswith(("+ y", "↪ "))).endswith(" + b)")
    # Unchanged lines face each other on the same row.
    assert left_rows.index("  x = 1") == right_rows.index("  x = 1")
    assert left_rows.index("  z = 3") == right_rows.index("  z = 3")


def test_split_diff_emphasises_the_changed_characters_of_a_replaced_line():
    left, right = split_diff_texts("y = a * 2\n", "y = a * 3\n", _Palette(), width=40)
    emphasised = [right.plain[span.start:span.end] for span in right.spans if "reverse" in str(span.style)]
    assert emphasised == ["3"]
    assert [left.plain[s.start:s.end] for s in left.spans if "reverse" in str(s.style)] == ["2"]


@pytest.mark.parametrize("size", [(0, 0), (5, 3), (12, 5), (20, 6), (200, 60)])
def test_braille_plot_never_overflows_its_box(size):
    cases = [([0], [1.0]), ([0, 0, 0], [1, 2, 3]), ([1, 2], [float("nan")] * 2), (list(range(5)), [1e12, 2e12, 0, 1, 3]),
             ([1e9, 1e9 + 1], [0, 1]), (list(range(3)), [-5, -5, -5])]
    width, height = max(size[0], 12), max(size[1], 5)
    for xs, ys in cases:
        text = render_plot([Series(xs, ys, Style()), Series(xs, ys, Style(), "a label")], *size, "title", "step")
        lines = text.plain.split("\n")
        assert len(lines) <= height and all(len(line) <= width for line in lines), (size, xs, ys)
    assert tick_label(2e12, 5e11) == "2.0T" and tick_label(2e-9, 1e-9) == "2.0e-09"
