"""Timing helpers: statistics, interleaved CPU timing, budgets, cache keys (GPU timing is in test_gpu_worker.py).
Nothing here runs candidate code, so it runs in the test process."""

from __future__ import annotations

import time

import pytest

from evaluator import timing


def test_summarize_statistics():
    stats = timing.summarize([4.0, 1.0, 3.0, 2.0, 100.0])
    assert stats.n == 5
    assert stats.median_ms == 3.0
    assert stats.min_ms == 1.0 and stats.max_ms == 100.0
    assert stats.mean_ms == pytest.approx(22.0)
    assert stats.iqr_ms == pytest.approx(2.0)  # inclusive quartiles 2 and 4
    assert stats.std_ms > 30


def test_summarize_edge_cases():
    assert timing.summarize([]).n == 0
    one = timing.summarize([0.5])
    assert (one.median_ms, one.iqr_ms, one.std_ms, one.n) == (0.5, 0.0, 0.0, 1)


def test_cpu_timing_interleaves_in_abba_order():
    calls = []
    settings = timing.TimingSettings(trials=4, warmup=0, flush_l2=False)
    samples = timing.time_cpu({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, settings)
    assert len(samples["a"]) == len(samples["b"]) == 4
    assert calls[-8:] == ["a", "b", "b", "a", "a", "b", "b", "a"]


def test_cpu_timing_measures_and_orders():
    settings = timing.TimingSettings(trials=5, warmup=1, flush_l2=False)
    samples = timing.time_cpu({"fast": lambda: time.sleep(0.001), "slow": lambda: time.sleep(0.006)}, settings)
    fast, slow = timing.summarize(samples["fast"]), timing.summarize(samples["slow"])
    assert fast.min_ms >= 1.0 and slow.min_ms >= 6.0
    assert slow.median_ms > fast.median_ms


def test_cpu_timing_stops_at_budget_with_at_least_three_samples():
    settings = timing.TimingSettings(trials=1000, warmup=0, flush_l2=False, budget_s=0.05)
    samples = timing.time_cpu({"x": lambda: time.sleep(0.02)}, settings)
    assert 3 <= len(samples["x"]) < 10


def test_settings_key_changes_with_every_field():
    base = timing.TimingSettings()
    assert base.key() == timing.TimingSettings().key()
    assert base.key() != timing.TimingSettings(trials=101).key()
    assert base.key() != timing.TimingSettings(sample_min_ms=0.1).key()
    assert base.key()[0] == timing.PROTOCOL_VERSION


def test_synchronized_wall_time_on_cpu():
    wall_ms, issue_ms = timing.synchronized_wall_ms(lambda: time.sleep(0.002), 3, cuda=False)
    assert wall_ms >= 2.0 and issue_ms >= 2.0
    assert wall_ms >= issue_ms
