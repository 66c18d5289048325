"""Issue 24 in core: the reward that doesn't pay for laziness (on results the real evaluator produced on an H100),
the timing convention the reward reads, clipped speedups in the summaries, and the unseen-shapes check."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from core import scores, unseen_shapes
from core.config import RewardConfig
from core.env import parse_response
from core.problems import load_builtin
from core.reward import chosen_speedup, lazy_factor, per_turn_advantages, score_turn
from evaluator.contract.types import EvalResult, Verdict
from tests.evaluator.candidates.harness import candidate, run_batch

GOOD = ("<think>Fused epilogue after the GEMM; one thread per output element.</think>\n"
        "<KERNEL>\n```python\nclass ModelNew: pass\n```\n</KERNEL>")
# tests/evaluator/test_fidelity_gpu.py's results on an H100 (KRL_GPU_RESULTS_DIR), as the real evaluator wrote them.
RECORDED = {r["request_id"]: EvalResult.from_dict(r)
            for r in json.loads((Path(__file__).parent / "data" / "fidelity_gpu_results.json").read_text())}


def _score(res: EvalResult, cfg: RewardConfig = RewardConfig()) -> float:
    return score_turn(parse_response(GOOD), res, cfg)[0]


def test_recorded_results_are_what_the_rule_is_about():
    lazy, honest_slower = RECORDED["lazy_token"], RECORDED["cuda_relu"]
    assert lazy.correct and lazy.speedup < RewardConfig().lazy_speedup_max and lazy.own_kernel_time_fraction < 0.01
    assert honest_slower.correct and 0.6 < honest_slower.speedup < 0.9 and honest_slower.own_kernel_time_fraction > 0.9
    assert RECORDED["wrong_relu"].verdict == Verdict.WRONG_OUTPUT


def test_grpo_advantages_order_fast_real_over_honest_slower_over_lazy_over_wrong():
    # The one constructed result: the recorded honest ReLU kernel as if it ran 1.5x (no fast custom kernel was recorded).
    fast_real = dataclasses.replace(RECORDED["cuda_relu"], speedup=1.5, speedup_kernelbench=1.4)
    group = [fast_real, RECORDED["cuda_relu"], RECORDED["lazy_token"], RECORDED["wrong_relu"]]
    advantages = per_turn_advantages([[_score(r)] for r in group]).advantages
    flat = [a[0] for a in advantages]
    assert flat == sorted(flat, reverse=True) and len(set(flat)) == 4, flat


def test_lazy_earns_less_than_an_honest_kernel_at_0_8x_and_an_honest_fusion_keeps_full_credit():
    lazy = RECORDED["lazy_token"]
    honest_08 = dataclasses.replace(RECORDED["cuda_relu"], speedup=0.8)
    assert _score(lazy) < _score(honest_08)
    assert lazy_factor(lazy, RewardConfig()) == pytest.approx(0.5, abs=0.01)
    # cuBLAS GEMM plus one fused epilogue kernel at 1.1-2x: a small own share, paid in full.
    for speedup in (1.1, 1.5, 2.0):
        fusion = dataclasses.replace(RECORDED["cublas_epilogue"], speedup=speedup)
        assert lazy_factor(fusion, RewardConfig()) == 1.0
    # Padding the token kernel with useless work raises its share but costs speed: never meaningfully above the
    # unpadded lazy one (the speed floor lets a deeply padded one tie it), and always below the honest 0.8x kernel.
    for share in (0.1, 0.25, 0.5, 0.8):
        padded = dataclasses.replace(lazy, own_kernel_time_fraction=share, speedup=lazy.speedup * (1 - share))
        assert _score(padded) <= _score(lazy) + 0.01 and _score(padded) < _score(honest_08)
    # No profile (CPU mode, torch backend): no evidence, no penalty; the rule can be switched off.
    assert lazy_factor(dataclasses.replace(lazy, own_kernel_time_fraction=None), RewardConfig()) == 1.0
    assert lazy_factor(lazy, RewardConfig(lazy_speedup_max=0)) == 1.0


def test_a_forged_share_buys_back_at_most_the_lazy_rules_cut():
    """own_kernel_time_fraction comes from the candidate's own process: forged to 1, a lazy kernel scores what a
    result without a profile scores, never more; the gain is (1 - lazy_min_credit) of the correctness weight."""
    cfg = RewardConfig()
    lazy = RECORDED["lazy_token"]
    forged = dataclasses.replace(lazy, own_kernel_time_fraction=1.0)
    unprofiled = dataclasses.replace(lazy, own_kernel_time_fraction=None)
    assert _score(forged, cfg) == pytest.approx(_score(unprofiled, cfg))
    gain = _score(forged, cfg) - _score(lazy, cfg)
    bound = (1 - cfg.lazy_min_credit) * cfg.weights.correctness
    assert 0 < gain <= bound + 1e-9
    assert _score(dataclasses.replace(lazy, own_kernel_time_fraction=50.0), cfg) == pytest.approx(_score(forged, cfg))
    fast = dataclasses.replace(lazy, speedup=1.5)  # above lazy_speedup_max the share changes nothing
    assert _score(dataclasses.replace(fast, own_kernel_time_fraction=1.0), cfg) == pytest.approx(_score(fast, cfg))


def test_the_reward_reads_the_configured_timing_convention_clipped():
    res = dataclasses.replace(RECORDED["masked_cumsum_0"])
    assert chosen_speedup(res, "judge") == pytest.approx(res.speedup)
    assert chosen_speedup(res, "kernelbench") == pytest.approx(res.speedup_kernelbench)
    assert RewardConfig().speedup_timing == "judge"
    assert chosen_speedup(dataclasses.replace(res, speedup=1e-6), "judge") == scores.SPEEDUP_CLIP[0]
    assert chosen_speedup(dataclasses.replace(res, speedup_kernelbench=None), "kernelbench") == pytest.approx(res.speedup)


def _record(pid: str, speedup: float, kb: float) -> dict:
    return {"problem_id": pid, "sample": 0, "turn": 0, "verdict": "correct", "speedup": speedup,
            "speedup_kernelbench": kb, "compiled": True}


def test_one_extreme_shape_cannot_drive_the_geomean_to_zero_and_both_conventions_are_reported():
    records = [_record("a", 2.0, 1.8), _record("b", 2.0, 1.9), _record("c", 1e-9, 1e-9)]
    summary = scores.summarise(records, ["a", "b", "c"], samples=1, turns=1,
                               speedup_keys={"eager": "speedup", "kbtime": "speedup_kernelbench"})
    assert summary["geomean_speedup/eager"] == pytest.approx(math.exp((2 * math.log(2.0) + math.log(0.1)) / 3))
    assert summary["speedup_clip_low"] == 0.1 and summary["speedup_clip_high"] == 10.0
    assert summary["fast_p/eager/kernelbench/1"] == pytest.approx(2 / 3)
    assert summary["fast_p/kbtime/kernelbench/1"] == pytest.approx(2 / 3)
    assert summary["geomean_speedup/kbtime"] < summary["geomean_speedup/eager"]
    assert scores.clip_speedup(None) is None and scores.clip_speedup(float("nan")) is None
    assert scores.clip_speedup(50.0) == 10.0


def test_scaled_sizes_change_sizes_and_leave_small_constants():
    relu = load_builtin("relu")[0]
    assert unseen_shapes.scaled_sizes(relu.source) == {"BATCH": 9, "DIM": 2049}
    conv = next(p for p in load_builtin() if p.id.endswith("conv2d"))
    sizes = unseen_shapes.scaled_sizes(conv.source)
    assert sizes and all(v % 2 == 1 for v in sizes.values())
    assert not any(name.lower().startswith(("kernel", "stride", "pad")) for name in sizes)


def test_unseen_shapes_report_which_kernels_only_work_for_the_timed_sizes():
    relu = load_builtin("relu")[0]
    general = candidate("relu_torch.py")
    hard_coded = candidate("hardcoded_shape_relu.py")
    requests = [unseen_shapes.unseen_request(relu, source, "torch", "fp32") for source in (general, hard_coded)]
    results = [EvalResult.from_dict(r) for r in run_batch([dict(r.to_dict(), request_id=f"u{k}")
                                                           for k, r in enumerate(requests)], timeout_s=240)]
    reports = [unseen_shapes.report_of(relu.id, k, 0, req, res) for k, (req, res) in enumerate(zip(requests, results))]
    assert [r.generalizes for r in reports] == [True, False], [r.message for r in reports]
    assert reports[1].sizes == {"BATCH": 9, "DIM": 2049}
    assert unseen_shapes.summary(reports)["only_timed_sizes"] == [f"{relu.id}#1"]
