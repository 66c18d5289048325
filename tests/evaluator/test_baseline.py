"""Baselines of a problem (evaluator/local/baseline.py): the reference timed eagerly and under a real torch.compile in a
trusted process, the compile-time record reused by a second measurement, and every failure turned into "unavailable"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evaluator.api import Evaluator, EvaluatorError
from evaluator.local.baseline import BaselineRequest, CompileTimeRecord, cache_folder, run_baseline

ROOT = Path(__file__).resolve().parents[2]
RELU = (ROOT / "core/data/problems/builtin/relu.py").read_text()
SMALL = {"BATCH": 4, "DIM": 256}  # tiny, so inductor's C++ build is the cost, not the timing

BROKEN_REFERENCE = RELU.replace("return torch.relu(x)", "return torch.relu(x, 3, 4)")


def request(source: str = RELU, **fields) -> BaselineRequest:
    fields.setdefault("size_overrides", SMALL)
    fields.setdefault("timing_trials", 20)
    fields.setdefault("warmup_trials", 3)
    return BaselineRequest(problem_id=fields.pop("problem_id", "relu"), reference_source=source, **fields)


@pytest.mark.slow
def test_compile_baseline_is_measured_then_served_from_the_caches(tmp_path):
    """Two evaluations of one problem through the Evaluator's API: the first compiles cold and records the compile
    time, the second finds the record (and inductor's cache) and reports the same cold compile time."""
    with Evaluator(devices="cpu", cpu_workers=1, cache_dir=str(tmp_path)) as evaluator:
        first = evaluator.measure_baseline(request()).result(timeout=900)
        second = evaluator.measure_baseline(request()).result(timeout=900)
    assert first.unavailable == {}, first.unavailable
    assert first.device == "cpu" and first.device_name == "cpu" and first.timing_clock == "monotonic"
    assert first.eager.median_ms > 0 and first.compiled.median_ms > 0 and first.eager.n >= 3
    assert first.compile_s > 0 and first.compile_s == first.compile_s_now and not first.compile_record_hit
    assert second.compile_record_hit and second.compile_s == pytest.approx(first.compile_s, abs=1e-3)
    assert second.compile_s_now is not None and second.compiled.median_ms > 0
    assert first.compile_over_eager == pytest.approx(first.compiled.median_ms / first.eager.median_ms)
    folder = cache_folder(str(tmp_path))
    entries = json.loads(Path(folder, "compile_times.json").read_text())
    assert len(entries) == 1 and next(iter(entries.values()))["problem_id"] == "relu"
    assert any(Path(folder, "inductor").rglob("*")), "inductor wrote no on-disk cache in the trusted folder"


def test_a_problem_torch_compile_cannot_compile_is_unavailable_with_the_reason(tmp_path, monkeypatch):
    """A real inductor failure: the C++ compiler it is given does not work (what the candidate sandbox hit)."""
    monkeypatch.setenv("CXX", "/bin/false")
    first = run_baseline(request(), "cpu", str(tmp_path))
    assert first.eager is not None and first.eager.median_ms > 0  # eager still measured
    assert first.compiled is None and first.compile_over_eager is None
    assert "torch.compile failed" in first.unavailable["compile"]
    assert "C++ compiler" in first.unavailable["compile"]
    # Recorded: the next evaluation does not try the compile again (for FAILURE_RETRY_S).
    second = run_baseline(request(), "cpu", str(tmp_path))
    assert second.compile_record_hit and "recorded earlier" in second.unavailable["compile"]
    assert second.eager is not None


def test_a_broken_reference_or_a_timeout_makes_every_mode_unavailable(tmp_path):
    broken = run_baseline(request(BROKEN_REFERENCE), "cpu", str(tmp_path))
    assert broken.eager is None and broken.compiled is None
    assert set(broken.unavailable) == {"eager", "compile"} and "the reference failed" in broken.unavailable["eager"]
    late = run_baseline(request(timeout_s=0.5), "cpu", str(tmp_path))
    assert late.eager is None and "ran past" in late.unavailable["compile"]


def test_eager_only_needs_no_compile_and_records_nothing(tmp_path):
    result = run_baseline(request(modes=("eager",)), "cpu", str(tmp_path))
    assert result.unavailable == {} and result.eager.median_ms > 0 and result.compiled is None
    assert result.compile_s is None
    assert CompileTimeRecord(cache_folder(str(tmp_path))).get("anything") is None
    assert not os.path.exists(os.path.join(cache_folder(str(tmp_path)), "compile_times.json"))


def test_bad_arguments_are_evaluator_errors(tmp_path):
    with Evaluator(devices="cpu", cpu_workers=1, cache_dir=str(tmp_path)) as evaluator:
        with pytest.raises(EvaluatorError, match="precision"):
            evaluator.measure_baseline(request(precision="fp8"))
        with pytest.raises(EvaluatorError, match="device"):
            evaluator.measure_baseline(request(), device="cuda:3")


@pytest.mark.gpu
def test_gpu_eager_and_compile_baselines(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    with Evaluator(devices=[0], cache_dir=str(tmp_path)) as evaluator:
        result = evaluator.measure_baseline(request(size_overrides={})).result(timeout=900)
        again = evaluator.measure_baseline(request(size_overrides={})).result(timeout=900)
    assert result.unavailable == {}, result.unavailable
    assert result.timing_clock == "cuda_events" and result.device_name and result.device_name != "cpu"
    assert result.eager.median_ms > 0 and result.compiled.median_ms > 0 and result.compile_s > 0
    assert again.compile_record_hit and again.compile_s == pytest.approx(result.compile_s, abs=1e-3)
