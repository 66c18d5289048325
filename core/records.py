"""Evaluation records: each stored or just-played turn reduced to what core/scores.py reads (problem, sample, turn,
verdict, speedups, tokens, device), and an eval run's samples as conversations for SFT export."""

from __future__ import annotations

import json
from typing import Any, Optional

from core.registry import Registry
from core.rollouts import Rollout


def _sol_fraction(result: dict[str, Any]) -> Optional[float]:
    # EvalResult.sol_fraction is a wave-2 field: older results do not have it.
    value = result.get("sol_fraction")
    return float(value) if isinstance(value, (int, float)) else None


def _median(stats: Any) -> Optional[float]:
    return float(stats["median_ms"]) if isinstance(stats, dict) and stats.get("median_ms") is not None else None


def record_of_turn(problem_id: str, sample: int, turn: int, verdict: str, result: Optional[dict[str, Any]],
                   tokens_in: int = 0, tokens_out: int = 0, trajectory_id: Optional[int] = None,
                   compile_baseline_ms: Optional[float] = None,
                   compile_over_eager: Optional[float] = None) -> dict[str, Any]:
    """One exported record: the stored turn reduced to what the scores need (and SFT filtering wants)."""
    result = result or {}
    kernel_ms = _median(result.get("kernel_runtime"))
    record: dict[str, Any] = {
        "problem_id": problem_id, "sample": sample, "turn": turn, "verdict": verdict,
        "speedup": result.get("speedup"), "compiled": bool(result.get("compiled")),
        "hack_rule": result.get("hack_rule"), "sol_fraction": _sol_fraction(result),
        "kernel_ms": kernel_ms, "eager_ms": _median(result.get("reference_runtime")),
        "tokens_in": tokens_in, "tokens_out": tokens_out,
        "device": result.get("gpu_name") or result.get("device_name") or "",
        # KernelBench's timing convention beside the judge's device time (both on every timed result since issue 24).
        "speedup_kernelbench": result.get("speedup_kernelbench"), "sol_score": result.get("sol_score"),
    }
    if compile_over_eager is not None and record["speedup"] is not None:
        # Both medians from one baseline process (interleaved): the ratio carries over to the worker's eager time.
        record["speedup_compile"] = record["speedup"] * compile_over_eager
    elif compile_baseline_ms is not None and kernel_ms:
        record["speedup_compile"] = compile_baseline_ms / kernel_ms
    if trajectory_id is not None:
        record["trajectory_id"] = trajectory_id
    return record


def rollout_records(rollout: Rollout) -> list[dict[str, Any]]:
    return [record_of_turn(rollout.problem.id, rollout.sample, t.turn, t.eval_result.verdict.value,
                           t.eval_result.to_dict(), t.tokens_in, t.tokens_out)
            for t in rollout.env.trajectory.transitions]


def eval_records(registry: Registry, run_id: int) -> list[dict[str, Any]]:
    """Every stored turn of an eval run as a record (problem, sample, turn order), in one query."""
    rows = registry.conn.execute(
        "SELECT t.id, t.problem_id, t.sample_index, u.turn, u.verdict, u.eval_result, u.tokens_in, u.tokens_out "
        "FROM trajectories t JOIN turns u ON u.trajectory_id = t.id WHERE t.run_id = ? "
        "ORDER BY t.problem_id, t.sample_index, u.turn", (run_id,)).fetchall()
    meta = (registry.get_run(run_id).get("summary") or {}).get("eval", {})
    compile_ms, ratios = meta.get("compile_baseline_ms", {}), meta.get("compile_over_eager", {})
    return [record_of_turn(pid, sample, turn, verdict, json.loads(result) if result else None, tokens_in or 0,
                           tokens_out or 0, trajectory_id, compile_ms.get(pid), ratios.get(pid))
            for trajectory_id, pid, sample, turn, verdict, result, tokens_in, tokens_out in rows]


def eval_conversations(registry: Registry, run_id: int) -> list[dict[str, Any]]:
    """One item per sample, for SFT or rejection sampling: each turn's full prompt (it already carries the earlier
    attempts and their feedback), the response, its verdict and speedup, and the feedback the model got."""
    out = []
    for trajectory in registry.trajectories(run_id, order="step", limit=1 << 30):
        turns = [{"turn": t["turn"], "prompt": t["prompt"], "response": t["response"], "verdict": t["verdict"],
                  "speedup": (t.get("eval_result") or {}).get("speedup"), "feedback": t["feedback"]}
                 for t in registry.trajectory_turns(trajectory["id"])]
        out.append({"problem_id": trajectory["problem_id"], "sample": trajectory["sample_index"],
                    "solved": bool(trajectory["solved"]), "solved_at_turn": trajectory["solved_at_turn"],
                    "best_speedup": trajectory["best_speedup"], "hack": bool(trajectory["hack"]), "turns": turns})
    return out
