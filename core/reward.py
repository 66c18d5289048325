"""Rewards and credit assignment: weighted per-turn score components, stage schedules that switch the weights,
per-turn discounted returns and group-relative per-turn advantages (each turn is its own training datum)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from core.config import WEIGHT_NAMES, RewardConfig, RewardWeights, RunConfig, StageConfig
from core.scores import clip_speedup
from evaluator.contract.types import EvalResult, Verdict

if TYPE_CHECKING:
    from core.response import ParsedResponse

CHARS_PER_TOKEN_ESTIMATE = 4  # only when the backend gave no token count
CONSTANT_EPS = 1e-9


# ---------------------------------------------------------------- components

def speed_value(speedup: Optional[float], mode: str, clip: float, floor: float = -0.5) -> float:
    """The speed component before weighting: log(speedup) | min(speedup, clip) | speedup - 1, with the speedup
    capped at `clip` and the value kept >= `floor` (so slowness never outweighs being correct)."""
    if speedup is None or not math.isfinite(speedup) or speedup <= 0:
        return 0.0
    capped = min(speedup, clip)
    if mode == "log":
        value = math.log(capped)
    elif mode == "clipped":
        value = capped
    elif mode == "minus_one":
        value = capped - 1.0
    else:
        raise ValueError(f"unknown speed_mode {mode!r}")
    return max(value, floor)


def chosen_speedup(result: Optional[EvalResult], timing: str = "judge") -> Optional[float]:
    """The speedup the reward uses: the judge's device-time speedup, or KernelBench's convention when configured (and
    measured), clipped to scores.SPEEDUP_CLIP so one extreme value cannot dominate."""
    if result is None:
        return None
    value = result.speedup_kernelbench if timing == "kernelbench" else result.speedup
    if value is None and timing == "kernelbench":
        value = result.speedup  # not measured in that convention (an older result): the judge's
    return clip_speedup(value)


def lazy_factor(result: Optional[EvalResult], cfg: RewardConfig) -> float:
    """The share of correctness credit a correct kernel keeps. Lazy optimisation (Dr. Kernel): call the library op and
    add a token kernel; it is correct at speed ~1. When the speedup is at most lazy_speedup_max and the profiler saw
    the candidate's own kernels take a share s of the GPU time, the credit is
    lazy_min_credit + (1 - lazy_min_credit) * min(1, s / lazy_share_full). Faster kernels keep it all (an honest
    cuBLAS GEMM plus a fused epilogue at 1.1-2x has a small share and is paid in full), as do results without a
    profile (CPU mode, torch backend): no evidence, no penalty. Padding the own kernels with useless work to raise s
    costs speed: at the defaults a padded lazy kernel never earns more than the unpadded one.
    The share is candidate-reported (see reported_share), so the rule only ever lowers the credit: a forged share
    buys back at most (1 - lazy_min_credit) of the correctness weight, at speedups <= lazy_speedup_max, and never
    more than a result without a profile keeps."""
    if result is None or result.verdict != Verdict.CORRECT or cfg.lazy_speedup_max <= 0:
        return 1.0
    share = reported_share(result)
    speedup = chosen_speedup(result, cfg.speedup_timing)
    if share is None or speedup is None or speedup > cfg.lazy_speedup_max:
        return 1.0
    return cfg.lazy_min_credit + (1.0 - cfg.lazy_min_credit) * min(1.0, share / cfg.lazy_share_full)


def reported_share(result: Optional[EvalResult]) -> Optional[float]:
    """own_kernel_time_fraction in [0, 1], or None. The number comes from the profiler in the candidate's own process
    (the slot's runner, or the in-process worker): no judge can measure it, so a candidate can forge it (the slot's
    judge only zeroes it for sources without kernels of their own, evaluator/slot/evidence.py). Everything the reward
    pays on it is bounded by a weight: the lazy rule's (1 - lazy_min_credit) * weights.correctness, and
    weights.own_kernel_share (0 by default) for the shaping term."""
    if result is None or result.own_kernel_time_fraction is None:
        return None
    return min(1.0, max(0.0, result.own_kernel_time_fraction))


def component_values(parsed: "ParsedResponse", result: Optional[EvalResult], cfg: RewardConfig,
                     response_tokens: Optional[int] = None, response_text: str = "") -> dict[str, float]:
    """Unweighted components in [0, 1] (speed: see speed_value; length: <= 0). Shaping ones ignore correctness."""
    if parsed.format_ok:
        fmt = 1.0
    elif parsed.kernel:
        fmt = cfg.fallback_format_credit  # code found, but not in the asked-for <KERNEL> form (or truncated after it)
    else:
        fmt = 0.0
    compiled = 1.0 if (result is not None and result.compiled) else 0.0
    correct = result is not None and result.verdict == Verdict.CORRECT
    if correct:
        correctness = lazy_factor(result, cfg)
    elif cfg.partial_credit and result is not None and result.correctness_trials_total > 0 \
            and result.verdict in (Verdict.WRONG_OUTPUT,):
        correctness = result.correctness_trials_passed / result.correctness_trials_total
    else:
        correctness = 0.0
    speed = speed_value(chosen_speedup(result, cfg.speedup_timing), cfg.speed_mode, cfg.speed_clip, cfg.speed_floor) \
        if (correct and result is not None) else 0.0
    thinking = 1.0 if len((parsed.thought or "").strip()) >= max(1, cfg.thinking_min_chars) else 0.0
    if response_tokens is None:
        response_tokens = len(response_text) // CHARS_PER_TOKEN_ESTIMATE
    over = max(0, response_tokens - cfg.length_budget_tokens)
    length = -1.0 if parsed.truncated else 0.0 - min(1.0, over / cfg.length_budget_tokens)
    own_share = (reported_share(result) or 0.0) if correct else 0.0  # candidate-reported: bounded by its weight
    return {"format": fmt, "compile": compiled, "correctness": correctness, "speed": speed,
            "thinking": thinking, "length": length, "own_kernel_share": own_share}


def score_turn(parsed: "ParsedResponse", result: Optional[EvalResult], cfg: RewardConfig,
               weights: Optional[RewardWeights | Mapping[str, float]] = None,
               response_tokens: Optional[int] = None, response_text: str = "") -> tuple[float, dict[str, float]]:
    """(step score, breakdown). breakdown: weighted contribution per component, 'hack' (<= 0) and 'total'.
    A hack_detected verdict scores exactly -hack_penalty: no shaping credit for a kernel that cheats."""
    w = _weights_dict(weights if weights is not None else cfg.weights)
    if result is not None and result.verdict == Verdict.HACK_DETECTED:
        breakdown = {name: 0.0 for name in WEIGHT_NAMES}
        breakdown["hack"] = -cfg.hack_penalty
        breakdown["total"] = -cfg.hack_penalty
        return -cfg.hack_penalty, breakdown
    values = component_values(parsed, result, cfg, response_tokens, response_text)
    breakdown = {name: w[name] * values[name] for name in WEIGHT_NAMES}
    breakdown["hack"] = 0.0
    total = sum(breakdown[name] for name in WEIGHT_NAMES)
    breakdown["total"] = total
    return total, breakdown


def _weights_dict(weights: RewardWeights | Mapping[str, float]) -> dict[str, float]:
    if isinstance(weights, RewardWeights):
        return weights.model_dump()
    out = RewardWeights().model_dump()
    out.update(weights)
    return out


# ---------------------------------------------------------------- stages

@dataclass(frozen=True)
class Stage:
    index: int
    name: str
    start_step: int
    weights: RewardWeights


class StageSchedule:
    """Reward weights by training step. Without stages, one stage ('default') with reward.weights from step 0."""

    def __init__(self, base: RewardWeights, stages: Sequence[StageConfig] = ()):
        self.stages: list[Stage] = []
        base_dict = base.model_dump()
        if not stages or stages[0].start_step > 0:
            self.stages.append(Stage(0, "default", 0, base))
        for spec in stages:
            merged = dict(base_dict, **spec.weights)
            index = len(self.stages)
            self.stages.append(Stage(index, spec.name or f"stage{index}", spec.start_step, RewardWeights(**merged)))

    @classmethod
    def from_config(cls, config: RunConfig) -> "StageSchedule":
        return cls(config.reward.weights, config.stages)

    def stage_at(self, step: int) -> Stage:
        current = self.stages[0]
        for stage in self.stages:
            if stage.start_step <= step:
                current = stage
        return current

    def weights_at(self, step: int) -> RewardWeights:
        return self.stage_at(step).weights

    def switched_at(self, step: int) -> Optional[Stage]:
        """The stage that begins exactly at `step` (for a 'stage switch' event), else None. Step 0 never switches."""
        stage = self.stage_at(step)
        return stage if step > 0 and stage.start_step == step else None

    def metrics(self, step: int) -> dict[str, float]:
        stage = self.stage_at(step)
        out = {"reward/stage": float(stage.index)}
        out.update({f"reward/weight/{k}": v for k, v in stage.weights.model_dump().items()})
        return out


# ---------------------------------------------------------------- returns and advantages

def discounted_returns(scores: Sequence[float], gamma: float = 0.4) -> list[float]:
    """R_t = s_t + gamma * R_{t+1}, with R after the last turn = 0."""
    returns = [0.0] * len(scores)
    running = 0.0
    for t in range(len(scores) - 1, -1, -1):
        running = float(scores[t]) + gamma * running
        returns[t] = running
    return returns


@dataclass
class GroupAdvantages:
    """Per-sample, per-turn returns and advantages of one group. dropped: no learning signal (all equal)."""

    returns: list[list[float]]
    advantages: list[list[float]]
    dropped: bool = False
    reason: str = ""

    @property
    def n_datums(self) -> int:
        return 0 if self.dropped else sum(len(a) for a in self.advantages)


@dataclass
class BatchAdvantages:
    groups: list[GroupAdvantages] = field(default_factory=list)

    @property
    def n_dropped(self) -> int:
        return sum(1 for g in self.groups if g.dropped)

    @property
    def n_kept(self) -> int:
        return len(self.groups) - self.n_dropped

    def metrics(self) -> dict[str, float]:
        total = len(self.groups)
        return {"env/all/groups_dropped": float(self.n_dropped),
                "env/all/frac_groups_dropped": self.n_dropped / total if total else 0.0,
                "env/all/n_datums": float(sum(g.n_datums for g in self.groups))}


def per_turn_advantages(group_scores: Sequence[Sequence[float]], gamma: float = 0.4, normalise_std: bool = False,
                        leave_one_out: bool = False, eps: float = 1e-6) -> GroupAdvantages:
    """Each sample's turn t gets A = R_t - baseline_t, baseline_t over the group's samples that reached turn t
    (their mean, or the mean of the others with leave_one_out); optionally divided by their std (+eps).
    A group whose returns are equal at every turn carries no signal: dropped, advantages all 0."""
    returns = [discounted_returns(s, gamma) for s in group_scores]
    advantages = [[0.0] * len(r) for r in returns]
    max_turns = max((len(r) for r in returns), default=0)
    constant = True
    for t in range(max_turns):
        reached = [i for i, r in enumerate(returns) if len(r) > t]
        values = [returns[i][t] for i in reached]
        if max(values) - min(values) > CONSTANT_EPS:
            constant = False
        n = len(values)
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
        for i in reached:
            r = returns[i][t]
            if leave_one_out:
                # With one sample there is nobody to compare with: no signal.
                adv = r - (sum(values) - r) / (n - 1) if n > 1 else 0.0
            else:
                adv = r - mean
            if normalise_std:
                adv = adv / (std + eps)
            advantages[i][t] = adv
    if constant:
        return GroupAdvantages(returns, [[0.0] * len(r) for r in returns], True,
                               "all returns equal at every turn" if returns else "empty group")
    return GroupAdvantages(returns, advantages)


def batch_advantages(groups: Sequence[Sequence[Sequence[float]]], cfg: RewardConfig) -> BatchAdvantages:
    """per_turn_advantages for every group with the run's reward settings."""
    return BatchAdvantages([per_turn_advantages(g, cfg.gamma, cfg.normalise_std, cfg.leave_one_out) for g in groups])
