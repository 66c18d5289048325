"""Pure parts of the views: the metric filter (glob or regex), per-step histograms and best kernel per problem over
the outcomes the real demo recorded, the host bar text, the desktop-notification escape, and log-y/cursor plots."""

from __future__ import annotations

import math

import pytest
from rich.style import Style

from app.screens.alerts import desktop_escape
from app.screens.view_data import best_per_problem, distributions, step_histogram
from app.widgets.braille import Series, render_plot
from app.widgets.metric_filter import is_glob, metric_matcher
from app.widgets.system_panel import host_text
from core.system_metrics import GpuSample, HostSample

KEYS = ["env/all/reward/total", "env/all/reward/speed", "env/all/correct_rate", "rate/correct", "system/cpu_percent"]


def test_metric_filter_reads_globs_and_regexes():
    assert is_glob("env/*/reward*") and is_glob("*rate") and not is_glob("^rate/") and not is_glob("reward.*")
    assert [k for k in KEYS if metric_matcher("env/*/reward*")(k)] == KEYS[:2]
    assert [k for k in KEYS if metric_matcher("*correct*")(k)] == KEYS[2:4]
    assert [k for k in KEYS if metric_matcher("^rate/")(k)] == ["rate/correct"]
    assert [k for k in KEYS if metric_matcher("reward/(total|speed)$")(k)] == KEYS[:2]
    assert all(metric_matcher("")(k) for k in KEYS)
    with pytest.raises(ValueError):
        metric_matcher("reward(")


def test_distributions_of_the_recorded_demo(recorded_demo):
    reg, run = recorded_demo
    outcomes = reg.trajectory_outcomes(run["id"])
    trajectories = reg.trajectories(run["id"], order="step", limit=10_000)
    assert len(outcomes) == len(trajectories) > 0
    data = distributions(outcomes, bins=6, columns=4)
    assert sum(map(sum, data.reward.counts)) == len(trajectories)  # every return lands in one bin
    assert len(data.reward.steps) <= 4 and data.reward.steps[0][0] == 0
    solved_with_speedup = [t for t in trajectories if t["solved"] and t["best_speedup"]]
    assert sum(map(sum, data.speedup.counts)) == len(solved_with_speedup)
    assert data.speedup.log2 and data.speedup.edges[0] > 0
    by_problem = {p.problem_id: p for p in data.problems}
    for problem in reg.problem_summary(run["id"]):
        row = by_problem[problem["problem_id"]]
        assert row.attempts == problem["attempts"] and row.solved == problem["solved"]
        if problem["best_speedup"] is not None:
            assert row.best_speedup == pytest.approx(problem["best_speedup"])
            assert reg.trajectory(row.trajectory_id)["best_speedup"] == pytest.approx(row.best_speedup)
            assert row.over_time[-1] == pytest.approx(row.best_speedup)
            known = [v for v in row.over_time if v is not None]
            assert known == sorted(known)  # best so far never falls


def test_best_per_problem_and_histogram_edges():
    outcomes = [(0, "a", 0.1, None, 0, 1), (0, "a", 0.5, 1.5, 1, 2), (1, "b", 0.2, 0.8, 1, 3), (2, "a", 0.9, 3.0, 1, 4),
                (2, "a", 0.3, 2.0, 1, 5)]
    steps, rows = best_per_problem(outcomes)
    assert steps == [0, 1, 2] and [r.problem_id for r in rows] == ["a", "b"]
    assert (rows[0].best_speedup, rows[0].best_step, rows[0].trajectory_id) == (3.0, 2, 4)
    assert rows[0].over_time == [1.5, 1.5, 3.0] and rows[1].over_time == [None, 0.8, 0.8]
    hist = step_histogram("x", [(0, 1.0), (0, 4.0), (1, 2.0)], bins=2, columns=10, log2=True)
    assert hist.edges == [1.0, 2.0, 4.0] and hist.counts == [[1, 0], [1, 1]]
    assert step_histogram("empty", [], 4, 4).counts == []


def test_host_text_and_desktop_escape():
    sample = HostSample(50.0, 6.0, 24.0, None, [GpuSample(0, "NVIDIA H100", 95.0, 70.0, 80.0)])
    text = host_text(sample, "node1").plain
    assert "CPU ██████░░░░░░  50%" in text and "6.0/24.0 GiB" in text and "GPU0 NVIDIA H100 util" in text
    assert "70.0/80.0 GiB" in text
    assert "no GPU" in host_text(HostSample(1.0, 1.0, 2.0), "n").plain
    assert desktop_escape("kernelrl", "run crashed", {"TERM": "foot"}) == "\x1b]777;notify;kernelrl;run crashed\x07"
    assert desktop_escape("k", "a;b\x1b]0;x\x07", {"TERM": "xterm-256color"}) == "\x1b]9;k: ab]0x\x07"


def test_log_y_plot_and_cursor_line():
    style = Style(color="red")
    plot = render_plot([Series([1, 2, 3], [0.01, 1, 100], style)], 40, 10, "t", log_y=True, cursor_x=2)
    lines = plot.plain.splitlines()
    labels = [line.split("┤")[0].strip() for line in lines if "┤" in line]
    assert labels[0] == "100" and labels[-1] == "0.01" and len(labels) >= 3
    assert all(math.log10(float(label)).is_integer() for label in labels)  # decades only
    cursor_column = {line.index("⡇") if "⡇" in line else line.index("⢸") for line in lines[1:-2]
                     if "⡇" in line or "⢸" in line}
    assert len(cursor_column) == 1  # one vertical line
    zoomed = render_plot([Series([1, 2, 3, 4], [1, 2, 3, 4], style)], 40, 10, "t", x_range=(3, 4))
    assert float(zoomed.plain.splitlines()[-1].split()[0]) == 3.0  # the x axis starts where the zoom does
    assert "-" not in "".join(render_plot([Series([1, 2], [-1, math.nan], style)], 30, 8, log_y=True).plain)
