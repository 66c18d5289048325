"""The first hour's pure pieces (issue 26): plot ranges and labels, smoothing, exports and formatting, checked
without starting the TUI. Screens that show them are covered by tests/app/test_first_hour_tui.py."""

from __future__ import annotations

from rich.style import Style

from app.widgets.braille import Series, render_plot
from app.widgets.reward_plot import debiased_ema


def _canvas_rows(text: str) -> list[str]:
    return [line for line in text.splitlines()[1:] if "│" in line or "┤" in line]


def test_item3_a_constant_series_is_a_flat_line_with_short_labels():
    values = [100.0] * 300  # system/cpu_percent on a busy machine
    smoothed = debiased_ema(values, 0.6)
    assert min(smoothed) == max(smoothed) == 100.0  # smoothing invents no drop
    xs = list(range(300))
    plot = render_plot([Series(xs, values, Style()), Series(xs, smoothed, Style())], 60, 14).plain
    rows = _canvas_rows(plot)
    drawn = [i for i, row in enumerate(rows) if any("\u2800" < c <= "\u28ff" for c in row)]
    assert len(drawn) == 1, plot  # one row of dots, not a cliff from top to bottom
    labels = [row.split("┤")[0].strip() for row in rows if "┤" in row]
    assert labels and all(len(label) <= 5 for label in labels), labels


def test_item20_help_names_keys_and_screens_as_people_do():
    from app.screens.help import key_label, screen_title
    from app.screens.run_detail import RunDetailScreen

    assert key_label("equals_sign") == "="
    assert key_label("left_square_bracket,right_square_bracket") == "[, ]"
    assert key_label("question_mark") == "?"
    assert screen_title(RunDetailScreen.__new__(RunDetailScreen)) == "Run detail"


def test_item20_step_ticks_are_whole_numbers():
    xs, ys = [0, 1, 2, 3], [0.1, 0.4, 0.2, 0.5]
    plot = render_plot([Series(xs, ys, Style())], 80, 12, x_label="step", integer_x=True).plain
    tick_line = plot.splitlines()[-1].replace("step", "")
    ticks = tick_line.split()
    assert ticks and all(t.isdigit() for t in ticks), tick_line


def test_item20_named_keys_stay_words():
    from app.screens.help import key_label

    for key in ("space", "escape", "tab", "enter"):
        label = key_label(key)
        assert label.strip() and label.isprintable(), (key, label)


def test_item20_group_by_tag_shows_every_tag_of_a_run():
    from app.screens.loaders import RunRow
    from app.screens.runs import group_rows

    def row(run_id, tags):
        return RunRow(id=run_id, name=f"r{run_id}", status="finished", kind="train", model="m", backend="replay",
                      preset="demo", step=0, total_steps=1, reward=None, correct=None, reward_key=None,
                      correct_key=None, best_speedup=None, created_at=0.0, started_at=None, ended_at=None,
                      heartbeat_at=None, gpus=[], gpus_requested=0, tags=tags)

    _, labels = group_rows([row(1, ["sweep", "baseline"]), row(2, ["baseline"]), row(3, [])], "tag", {})
    assert labels == ["tag baseline", "tag baseline + sweep", "tag (none)"]


def test_item20_histograms_carry_a_legend_for_their_shades():
    from app.screens.view_data import StepHistogram
    from app.widgets.distributions import histogram_text

    fields = StepHistogram.__dataclass_fields__
    values = {"title": "speedup", "steps": [(0, 0), (1, 1)], "edges": [0.0, 1.0, 2.0], "counts": [[1, 0], [3, 2]],
              "total": 6, "log2": False}
    text = histogram_text(StepHistogram(**{k: v for k, v in values.items() if k in fields}), 60).plain
    for shade in "░▒▓█":
        assert shade in text.splitlines()[-1], text
