"""The judges' and runners' own profiles for the benchmarks (slot/judge_profile.py), through a real pool in CPU mode:
written per judge and per runner with KRL_EVAL_PROFILE, merged by `summary`, and nothing at all without it."""

from __future__ import annotations

import os

import pytest

from evaluator.api import Verdict
from evaluator.slot.judge_profile import PROFILE_ENV, JudgeProfile, summary
from tests.evaluator.pool_support import GOOD, make_evaluator, request


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """The profile folder of one pool that evaluated one task with KRL_EVAL_PROFILE set (the pool passes KRL_EVAL_*
    on to its judges)."""
    folder = tmp_path_factory.mktemp("profiles")
    before = os.environ.get(PROFILE_ENV)
    os.environ[PROFILE_ENV] = str(folder)
    try:
        evaluator = make_evaluator(str(tmp_path_factory.mktemp("cache")), spare_per_device=0)
        try:
            assert evaluator.evaluate(request(GOOD)).verdict == Verdict.CORRECT
        finally:
            evaluator.close()
    finally:
        if before is None:
            os.environ.pop(PROFILE_ENV, None)
        else:
            os.environ[PROFILE_ENV] = before
    return str(folder)


def _written(folder: str, who: str) -> list[str]:
    return [name for name in os.listdir(folder) if name.startswith(who + "-") and name.endswith(".prof")]


def test_each_judge_profiles_its_tasks_when_asked(profiles):
    assert _written(profiles, "judge")
    assert "run_task" in summary(profiles)


def test_each_runner_profiles_its_task_when_asked(profiles):
    assert len(_written(profiles, "runner")) == 1  # one task, one runner
    assert "serve_orders" in summary(profiles, who="runner")


def test_without_the_setting_nothing_is_profiled(tmp_path, monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    profile = JudgeProfile()
    with profile.task():
        pass
    assert profile.profiler is None
    assert summary(str(tmp_path)) == "no judge profiles"
