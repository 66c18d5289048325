"""Per-step metrics of a batch of episodes: rewards, verdict rates, fast_p, speedups, per-turn correctness, tokens.
Names follow tinker-cookbook where it has one (env/all/reward/total, ...); kernel metrics live under env/all/ too."""

from __future__ import annotations

from typing import Optional, Sequence

from core.config import RunConfig
from core.env import Trajectory
from evaluator.api import Verdict

FAST_THRESHOLDS = (1.0, 1.2)  # KernelBench fast_p: correct and faster than p x the reference


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def rollout_metrics(trajectories: Sequence[Trajectory], config: RunConfig) -> dict[str, float]:
    """Kernel and reward metrics of one step's episodes (tinker-cookbook names where they exist); keys without a
    value this step (e.g. speedups when nothing was correct) are left out rather than written as null."""
    transitions = [t for traj in trajectories for t in traj.transitions]
    metrics: dict[str, Optional[float]] = {}
    n_turns = len(transitions)
    verdicts = [t.eval_result.verdict for t in transitions]
    gamma = config.reward.gamma
    # The cookbook's reward/total is the plain sum of an episode's rewards; the discounted return is beside it.
    metrics["env/all/reward/total"] = _mean([sum(traj.scores) for traj in trajectories])
    metrics["env/all/return/discounted"] = _mean([discounted_total(traj.scores, gamma) for traj in trajectories])
    metrics["env/all/reward/turn_mean"] = _mean([t.score for t in transitions])
    for component in ("format", "compile", "correctness", "speed", "thinking", "length", "hack"):
        metrics[f"env/all/reward/{component}"] = _mean([t.breakdown.get(component, 0.0) for t in transitions])
    if n_turns:
        metrics["env/all/format_rate"] = sum(t.parsed.format_ok for t in transitions) / n_turns
        metrics["env/all/kernel_found_rate"] = sum(t.parsed.kernel is not None for t in transitions) / n_turns
        metrics["env/all/compile_rate"] = sum(bool(t.eval_result.compiled) for t in transitions) / n_turns
        metrics["env/all/correct_rate"] = sum(v == Verdict.CORRECT for v in verdicts) / n_turns
        metrics["env/all/hack_rate"] = sum(v == Verdict.HACK_DETECTED for v in verdicts) / n_turns
        metrics["env/all/truncation_rate"] = sum(t.parsed.truncated for t in transitions) / n_turns
        metrics["env/all/thinking_rate"] = sum(t.parsed.has_thinking for t in transitions) / n_turns
        for verdict in Verdict:
            metrics[f"env/all/verdict/{verdict.value}"] = sum(v == verdict for v in verdicts) / n_turns
    if trajectories:
        metrics["env/all/solved_rate"] = sum(traj.solved for traj in trajectories) / len(trajectories)
        metrics["env/all/turns_per_episode"] = n_turns / len(trajectories)
        for threshold in FAST_THRESHOLDS:
            fast = sum(1 for traj in trajectories if traj.best_speedup is not None and traj.best_speedup > threshold)
            metrics[f"env/all/fast_{threshold:g}"] = fast / len(trajectories)
    for turn in range(config.max_turns):
        reached = [traj.transitions[turn] for traj in trajectories if len(traj.transitions) > turn]
        if reached:
            metrics[f"env/all/turn{turn}/correct_rate"] = (
                sum(t.eval_result.verdict == Verdict.CORRECT for t in reached) / len(reached))
    speedups = [traj.best_speedup for traj in trajectories if traj.best_speedup is not None]
    metrics["env/all/speedup/mean"] = _mean(speedups)
    metrics["env/all/speedup/max"] = max(speedups) if speedups else None
    metrics["env/all/ac_tokens_per_turn"] = _mean([t.tokens_out for t in transitions])
    metrics["env/all/ob_tokens_per_turn"] = _mean([t.tokens_in for t in transitions])
    metrics["env/all/total_ac_tokens"] = float(sum(t.tokens_out for t in transitions))
    eval_times = [t.eval_result.phase_times_s.get("total") for t in transitions if t.eval_result.request_id]
    eval_times = [x for x in eval_times if isinstance(x, (int, float))]
    metrics["time/eval_mean"] = _mean(eval_times)
    metrics["time/eval_sum"] = float(sum(eval_times))
    metrics["env/all/evaluated"] = float(sum(1 for t in transitions if t.eval_result.request_id))
    return {k: float(v) for k, v in metrics.items() if v is not None}


def discounted_total(scores: Sequence[float], gamma: float) -> float:
    total = 0.0
    for score in reversed(scores):
        total = score + gamma * total
    return total


def group_outcome_fractions(solved_by_group: dict[int, list[bool]]) -> dict[str, float]:
    """tinker-cookbook's env/all/by_group/frac_all_good, frac_all_bad and frac_mixed, 'good' meaning a solved
    episode: the share of groups where every, no, or only some samples solved their problem."""
    groups = list(solved_by_group.values())
    if not groups:
        return {}
    good = sum(1 for g in groups if g and all(g))
    bad = sum(1 for g in groups if not any(g))
    return {"env/all/by_group/frac_all_good": good / len(groups), "env/all/by_group/frac_all_bad": bad / len(groups),
            "env/all/by_group/frac_mixed": (len(groups) - good - bad) / len(groups)}
