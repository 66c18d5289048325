"""How far the trainer's logprobs drift from the sampler's, and the loss settings each loss kind takes.
Pure functions over plain lists; metric names follow tinker-cookbook (optim/kl_sample_train_v1, _v2, optim/entropy)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from core.backends.base import Datum

# Sums a backend reports per forward_backward chunk, so chunks of any size combine exactly.
KL_V1_SUM = "kl_sample_train_v1:sum"
KL_V2_SUM = "kl_sample_train_v2:sum"
SAMPLING_LOGPROB_SUM = "sampling_logprob:sum"
ACTION_TOKENS = "action_tokens"


def sample_train_sums(sampling_logprobs: Sequence[float], training_logprobs: Sequence[float],
                      mask: Sequence[float]) -> dict[str, float]:
    """Sums over one datum's sampled tokens of d = logp_sample - logp_train (v1: d, v2: d²/2) and of logp_sample.

    A gap here means the sampler and the trainer disagree about the same tokens (numerics, stale weights, a
    tokenisation mismatch): the importance ratio is then off before any update."""
    if not (len(sampling_logprobs) == len(training_logprobs) == len(mask)):
        raise ValueError(f"logprob lengths differ: sampling {len(sampling_logprobs)}, training "
                         f"{len(training_logprobs)}, mask {len(mask)}")
    v1 = v2 = lp = 0.0
    tokens = 0
    for sampled, trained, keep in zip(sampling_logprobs, training_logprobs, mask):
        if keep <= 0:
            continue
        diff = float(sampled) - float(trained)
        v1 += diff
        v2 += 0.5 * diff * diff
        lp += float(sampled)
        tokens += 1
    return {KL_V1_SUM: v1, KL_V2_SUM: v2, SAMPLING_LOGPROB_SUM: lp, ACTION_TOKENS: float(tokens)}


def add_sums(total: dict[str, float], part: Mapping[str, float]) -> dict[str, float]:
    for key in (KL_V1_SUM, KL_V2_SUM, SAMPLING_LOGPROB_SUM, ACTION_TOKENS):
        if key in part:
            total[key] = total.get(key, 0.0) + float(part[key])
    return total


def sample_train_metrics(sums: Mapping[str, float]) -> dict[str, float]:
    """The cookbook's optim/kl_sample_train_v1, _v2 and optim/entropy (per sampled token); {} without tokens."""
    tokens = float(sums.get(ACTION_TOKENS, 0.0))
    if tokens <= 0 or KL_V1_SUM not in sums:
        return {}
    return {"optim/kl_sample_train_v1": sums[KL_V1_SUM] / tokens,
            "optim/kl_sample_train_v2": sums[KL_V2_SUM] / tokens,
            "optim/entropy": -sums[SAMPLING_LOGPROB_SUM] / tokens}


def apply_kl_penalty(datums: Sequence["Datum"], base_logprobs: Sequence[Sequence[float]],
                     coef: float) -> dict[str, float]:
    """Pull the policy towards the base model, as tinker-cookbook does: each sampled token's advantage gains
    coef * (mean d - d), d = logp_sample - logp_base, the mean over every sampled token of the batch (so the
    penalty sums to zero and only redistributes). Changes the datums' advantages in place; returns kl_policy_base
    (the mean d: an estimate of KL[policy || base])."""
    diffs, total, tokens = [], 0.0, 0.0
    for datum, base in zip(datums, base_logprobs, strict=True):
        mask = datum.action_mask()
        if len(base) != len(mask):
            raise ValueError(f"base logprobs: {len(base)} for {len(mask)} targets")
        diff = [(lp - b) * m for lp, b, m in zip(datum.logprobs, base, mask)]
        diffs.append(diff)
        total += sum(diff)
        tokens += sum(mask)
    if tokens == 0:
        return {}
    mean = total / tokens
    for datum, diff in zip(datums, diffs):
        datum.advantages = [a + coef * m * (mean - d) for a, d, m in zip(datum.advantages, diff, datum.action_mask())]
    return {"kl_policy_base": mean}


def loss_fn_config(loss: Any) -> dict[str, float] | None:
    """The loss_fn_config a LossConfig asks for (Tinker's keys), None where the loss kind takes none."""
    if loss.kind == "ppo":
        return {"clip_low_threshold": 1.0 - loss.clip_epsilon, "clip_high_threshold": 1.0 + loss.clip_epsilon}
    if loss.kind == "cispo":
        return {"clip_low_threshold": loss.cispo_clip_low, "clip_high_threshold": loss.cispo_clip_high}
    return None


def post_update_kl(datums: Sequence["Datum"], new_logprobs: Sequence[Sequence[float]]) -> dict[str, float]:
    """tinker-cookbook's kl_pre_post_v1/_v2: how far the update moved the policy on the tokens it trained on
    (d = logp_sampled - logp_after_update per sampled token; v1 mean d, v2 mean d²/2); {} without tokens."""
    v1 = v2 = 0.0
    tokens = 0
    for datum, after in zip(datums, new_logprobs):
        for before, now, keep in zip(datum.logprobs, after, datum.action_mask()):
            if keep > 0:
                diff = float(before) - float(now)
                v1 += diff
                v2 += 0.5 * diff * diff
                tokens += 1
    return {"kl_pre_post_v1": v1 / tokens, "kl_pre_post_v2": v2 / tokens} if tokens else {}
