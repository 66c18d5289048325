"""The judges' own profile for the benchmarks (slot/judge_profile.py), through a real pool in CPU mode: written per
judge with KRL_EVAL_PROFILE, merged by `summary`, and nothing at all without it."""

from __future__ import annotations

import os

from evaluator.api import Verdict
from evaluator.slot.judge_profile import PROFILE_ENV, JudgeProfile, summary
from tests.evaluator.pool_support import GOOD, make_evaluator, request


def test_each_judge_profiles_its_tasks_when_asked(tmp_path, monkeypatch):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    monkeypatch.setenv(PROFILE_ENV, str(profiles))  # the pool passes KRL_EVAL_* on to its judges
    evaluator = make_evaluator(str(tmp_path / "cache"), spare_per_device=0)
    try:
        assert evaluator.evaluate(request(GOOD)).verdict == Verdict.CORRECT
    finally:
        evaluator.close()
    written = [name for name in os.listdir(profiles) if name.startswith("judge-") and name.endswith(".prof")]
    assert written
    assert "run_task" in summary(str(profiles))


def test_without_the_setting_nothing_is_profiled(tmp_path, monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    profile = JudgeProfile()
    with profile.task():
        pass
    assert profile.profiler is None
    assert summary(str(tmp_path)) == "no judge profiles"


def test_each_runner_profiles_its_task_when_asked(tmp_path, monkeypatch):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    monkeypatch.setenv(PROFILE_ENV, str(profiles))
    evaluator = make_evaluator(str(tmp_path / "cache"), spare_per_device=0)
    try:
        assert evaluator.evaluate(request(GOOD)).verdict == Verdict.CORRECT
    finally:
        evaluator.close()
    written = [name for name in os.listdir(profiles) if name.startswith("runner-") and name.endswith(".prof")]
    assert len(written) == 1  # one task, one runner
    assert "serve_orders" in summary(str(profiles), who="runner")
