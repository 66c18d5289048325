"""Triton's launchers in the trusted cache level (evaluator/build/triton_launchers.py): only Triton's type names pass
from a runner's report, a judge builds few, each once; on a GPU a later runner finds the launcher and builds none."""

from __future__ import annotations

import glob
import os
import pstats

import pytest

from evaluator.build import triton_launchers
from evaluator.build.triton_launchers import LauncherBuilder, launcher_types


def test_only_tritons_type_names_pass():
    assert launcher_types(["*fp32", "*fp32", "i32", "constexpr"]) == ("*fp32", "*fp32", "i32", "constexpr")
    assert launcher_types(["*bf16", "fp32", "i64", "u8"]) == ("*bf16", "fp32", "i64", "u8")
    assert launcher_types([]) == ()
    for forged in (["i32); system(\"id\"); (int"], ["*fp32", ("i32", "i32")], ["tensordesc<fp16[64, 64]>"], ["I32"],
                   ["*" + "f" * 40], "i32", None, {"0": "i32"}, [3], ["i32"] * (triton_launchers.MAX_ARGUMENTS + 1)):
        assert launcher_types(forged) is None, forged


def test_a_judge_builds_few_a_task_each_once_and_never_what_fails(monkeypatch):
    built = []

    def build(types, shared_dir):
        built.append(types)
        return "" if types[0] != "i8" else "gcc failed"
    monkeypatch.setattr(triton_launchers, "build_launcher", build)
    builder = LauncherBuilder("/nonexistent")
    reported = [["i8"], ["i32"], ["i32"], ["i64"], ["*fp32"], ["not a type;"]]
    assert builder.build(reported) == 1  # i8 failed, i32 built: two tries a task at most
    assert builder.build(reported) == 2  # i64 and *fp32; i8 and i32 not again
    assert builder.build(reported) == 0
    assert built == [("i8",), ("i32",), ("i64",), ("*fp32",)]
    monkeypatch.setattr(triton_launchers, "BUILT_MAX", 4)
    assert builder.build([["u8"], ["u16"]]) == 0  # the judge's lifetime cap


def test_a_runner_that_names_launchers_with_anything_but_a_list_gets_none_built(monkeypatch):
    """The list is the runner's evidence: a number there ended the judge host after its reply (red team, session 28)."""
    monkeypatch.setattr(triton_launchers, "build_launcher", lambda types, shared_dir: "")
    builder = LauncherBuilder("/nonexistent")
    assert [builder.build(value) for value in (5, 2.5, True, "i32", {"i32": 1}, None)] == [0] * 6


def test_only_the_finish_may_name_launchers():
    """The list rides on the `evidence` answer alone; on any other answer it is a field nobody asked for."""
    from evaluator.slot.evidence import check_answer
    from evaluator.slot.outcome import ProtocolBreach

    assert check_answer({"type": "evidence", "triton_launchers": [["i32"]]}, "evidence")["triton_launchers"]
    with pytest.raises(ProtocolBreach):
        check_answer({"type": "ran", "triton_launchers": [["i32"]]}, "ran")


def test_a_runner_without_per_signature_launchers_reports_none():
    """Tritons whose launcher is generic (no make_launcher, as 3.9 here) leave nothing to build: none noted."""
    try:
        from triton.backends.nvidia import driver
    except Exception:  # noqa: BLE001 - no NVIDIA backend: nothing to note either
        driver = None
    if driver is not None and hasattr(driver, "make_launcher"):
        pytest.skip("this Triton builds a launcher per signature (the GPU test covers it)")
    assert triton_launchers.record_launched_signatures() == []


@pytest.mark.gpu
def test_a_later_runner_loads_the_launcher_the_judge_built(tmp_path, monkeypatch):
    """Two Triton tasks on one slot: after the first, the judge has built its kernel's launcher into the trusted level;
    the second task's runner (profiled) runs no compiler for it."""
    import torch

    from evaluator.contract.types import EvalRequest, Verdict
    from evaluator.slot.judge_profile import PROFILE_ENV
    from tests.evaluator.candidates.harness import candidate
    from tests.evaluator.pool_support import RELU_REFERENCE, make_evaluator

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from triton.backends.nvidia import driver
    if not hasattr(driver, "make_launcher"):
        pytest.skip("this Triton's launcher is generic: nothing to build")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    monkeypatch.setenv(PROFILE_ENV, str(profiles))
    request = EvalRequest(reference_source=RELU_REFERENCE.format(n=1 << 18),
                          candidate_source=candidate("relu_triton.py"), problem_id="launchers/relu", backend="triton",
                          timing_trials=3, run_timeout_s=120.0)
    with make_evaluator(str(tmp_path / "cache"), devices="cuda:0", workers_per_device=1, spare_per_device=0) as ev:
        first = ev.evaluate(request)
        second = ev.evaluate(request)
    assert first.verdict == Verdict.CORRECT == second.verdict, (first.error_message, second.error_message)
    launchers = glob.glob(str(tmp_path / "**" / "triton-trusted" / "*" / "__triton_launcher*"), recursive=True)
    assert len(launchers) >= 2  # the warm-up kernel's and the ReLU's
    runs = sorted(glob.glob(str(profiles / "runner-*.prof")), key=os.path.getmtime)
    assert len(runs) == 2
    built = [name for name in pstats.Stats(runs[1]).stats if name[2] == "_build" and "triton" in name[0]]
    assert not built, built
