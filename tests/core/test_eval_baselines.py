"""The torch.compile baseline in a real evaluation: a replay eval on the CPU evaluator with the compile baseline
switched on measures it through the evaluator's trusted baseline process and scores every sample against it too."""

from __future__ import annotations

import pytest

from core.config import load_config
from core.evaluation import eval_records, eval_summary, evaluate_foreground
from core.registry import Registry

REPLAY = ["backend=replay", "replay.path=demo", "problems=builtin/relu", "evaluation.samples=2", "max_turns=2",
          "eval.devices=cpu", "eval.cpu_workers=2"]


@pytest.mark.slow
def test_replay_evaluation_scores_against_eager_and_torch_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_BASELINE_COMPILE_ON_CPU", "1")
    monkeypatch.setenv("KRL_CACHE_DIR", str(tmp_path / "cache"))
    row = evaluate_foreground(load_config("demo", REPLAY), "with-compile", tmp_path / "ws")
    assert row["status"] == "finished"
    with Registry.for_workspace(tmp_path / "ws") as reg:
        summary = eval_summary(reg, "with-compile")
        records = eval_records(reg, row["id"])
        meta = reg.get_run(row["id"])["summary"]["eval"]
    stored = meta["baselines"]["builtin/relu"]
    assert stored["unavailable"] == {} and stored["eager_ms"] > 0 and stored["compile_ms"] > 0
    assert stored["compile_s"] > 0 and not stored["compile_record_hit"]
    ratio = meta["compile_over_eager"]["builtin/relu"]
    assert ratio == pytest.approx(stored["compile_ms"] / stored["eager_ms"])
    assert summary["baselines"]["compile"]["measured"] == ["builtin/relu"]
    assert summary["stamp"]["baseline"]["compile"].startswith("torch.compile(mode='default')")
    # Every timed turn is also scored against torch.compile: its eager speedup times the baseline's ratio.
    timed = [r for r in records if r["speedup"] is not None]
    assert timed and all(r["speedup_compile"] == pytest.approx(r["speedup"] * ratio) for r in timed)
    # By hand: geomean over correct samples (each sample's best turn) of the speedup against compile.
    best: dict[int, float] = {}
    for r in records:
        if r["verdict"] == "correct" and r["speedup_compile"] is not None:
            best[r["sample"]] = max(best.get(r["sample"], 0.0), r["speedup_compile"])
    product = 1.0
    for value in best.values():
        product *= value
    assert summary["scores"]["geomean_speedup/compile"] == pytest.approx(product ** (1 / len(best)))
    assert "fast_p/compile/kernelbench/1" in summary["scores"]
