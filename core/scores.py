"""Model-evaluation scores as plain functions over stored per-sample, per-turn records: pass@k, fast_p in two named
conventions, per-turn and best-by-turn views, geometric-mean speedup and paired bootstrap confidence intervals.

A record is a mapping with at least problem_id, sample, turn, verdict and speedup (None unless measured); the export
of `krl evals export` is exactly these records, so every number here can be recomputed from an export."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

CORRECT = "correct"
FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0)
# KernelBench: the first sample of each problem, strictly faster than p x the baseline, missing problems fail.
KERNELBENCH = "kernelbench"
# Best of n: a problem counts when any of its samples is correct at >= p x the baseline.
BEST_OF_N = "best_of_n"
CONVENTIONS = (KERNELBENCH, BEST_OF_N)

Record = Mapping[str, Any]

# Every per-problem speedup is clipped to this range before fast_p, geomean and the reward see it, so one extreme
# shape (a 0.001x timeout-like result, or a 1000x measurement artefact) cannot drive a geometric mean to 0 or to
# infinity. fast_p thresholds (<= 3) lie inside it, so fast_p is unchanged; the clip is stamped in every summary.
SPEEDUP_CLIP = (0.1, 10.0)
# The record key of each timing convention's speedup (evaluator/api.py stamps both on a timed result).
TIMING_KEYS = {"judge": "speedup", "kernelbench": "speedup_kernelbench"}


def clip_speedup(value: Optional[float], clip: tuple[float, float] = SPEEDUP_CLIP) -> Optional[float]:
    """The speedup within [low, high]; None stays None (not timed), and so does a value that is not a number."""
    if value is None:
        return None
    value = float(value)
    if value != value:
        return None
    return min(max(value, clip[0]), clip[1])


@dataclass(frozen=True)
class Outcome:
    """What one sample achieved in a view (one turn, or the best turn so far)."""

    problem_id: str
    sample: int
    correct: bool
    speedup: Optional[float]  # against the view's baseline; None when not correct or not timed


def p_name(p: float) -> str:
    """fast_p keys: 1.0 -> '1', 1.2 -> '1.2' (the names papers use)."""
    return f"{p:g}"


# ---------------------------------------------------------------- pass@k

def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator 1 - C(n-c, k) / C(n, k) of the chance that k of n samples hold a correct one."""
    if not 0 < k <= n:
        raise ValueError(f"k must be in 1..n (n={n}), not {k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(outcomes: Iterable[Outcome], k: int, problems: Optional[Sequence[str]] = None) -> float:
    """pass@k averaged over problems (each problem's n = its samples; problems with fewer than k samples, or named in
    `problems` but absent, count 0)."""
    by_problem = _by_problem(outcomes)
    ids = list(problems) if problems is not None else sorted(by_problem)
    if not ids:
        return 0.0
    total = 0.0
    for pid in ids:
        samples = by_problem.get(pid, [])
        if len(samples) >= k:
            total += pass_at_k(len(samples), sum(o.correct for o in samples), k)
    return total / len(ids)


# ---------------------------------------------------------------- views: which turn counts

def _by_sample(records: Iterable[Record]) -> dict[tuple[str, int], list[Record]]:
    out: dict[tuple[str, int], list[Record]] = {}
    for record in records:
        out.setdefault((record["problem_id"], int(record["sample"])), []).append(record)
    for turns in out.values():
        turns.sort(key=lambda r: int(r["turn"]))
    return out


def _speedup(record: Record, key: str) -> Optional[float]:
    value = record.get(key)
    return clip_speedup(value) if value is not None and record["verdict"] == CORRECT else None


def at_turn(records: Iterable[Record], turn: int, speedup_key: str = "speedup") -> list[Outcome]:
    """Each sample's result at `turn` (0-based). An episode that ended earlier (early stop on a correct kernel) keeps
    its last turn's result: the model had that kernel in hand."""
    out = []
    for (pid, sample), turns in sorted(_by_sample(records).items()):
        reached = [r for r in turns if int(r["turn"]) <= turn]
        if not reached:
            continue
        last = reached[-1]
        out.append(Outcome(pid, sample, last["verdict"] == CORRECT, _speedup(last, speedup_key)))
    return out


def best_by_turn(records: Iterable[Record], turn: Optional[int] = None, speedup_key: str = "speedup") -> list[Outcome]:
    """Each sample's best result over turns 0..turn (all turns when None): correct if any was, at its best speedup."""
    out = []
    for (pid, sample), turns in sorted(_by_sample(records).items()):
        reached = [r for r in turns if turn is None or int(r["turn"]) <= turn]
        if not reached:
            continue
        correct = [r for r in reached if r["verdict"] == CORRECT]
        speeds = [s for s in (_speedup(r, speedup_key) for r in correct) if s is not None]
        out.append(Outcome(pid, sample, bool(correct), max(speeds) if speeds else None))
    return out


def _by_problem(outcomes: Iterable[Outcome]) -> dict[str, list[Outcome]]:
    out: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        out.setdefault(outcome.problem_id, []).append(outcome)
    for samples in out.values():
        samples.sort(key=lambda o: o.sample)
    return out


# ---------------------------------------------------------------- fast_p and speedups

def fast_p_per_problem(outcomes: Iterable[Outcome], p: float, convention: str,
                       problems: Optional[Sequence[str]] = None) -> dict[str, float]:
    """problem id -> 1.0 / 0.0: whether the problem counts as fast at p under the convention (see CONVENTIONS)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, not {convention!r}")
    by_problem = _by_problem(outcomes)
    ids = list(problems) if problems is not None else sorted(by_problem)
    out = {}
    for pid in ids:
        samples = by_problem.get(pid, [])
        if convention == KERNELBENCH:
            first = samples[0] if samples and samples[0].sample == 0 else None
            hit = first is not None and first.correct and first.speedup is not None and first.speedup > p
            if first is not None and first.correct and p == 0.0 and first.speedup is None:
                hit = True  # fast_0 is the correct rate even where timing was off
        else:
            hit = any(o.correct and ((o.speedup is not None and o.speedup >= p) or p == 0.0) for o in samples)
        out[pid] = 1.0 if hit else 0.0
    return out


def fast_p(outcomes: Iterable[Outcome], p: float, convention: str, problems: Optional[Sequence[str]] = None) -> float:
    """Share of problems that are fast at p; `problems` (the whole set) makes missing ones count as failures."""
    per_problem = fast_p_per_problem(list(outcomes), p, convention, problems)
    return sum(per_problem.values()) / len(per_problem) if per_problem else 0.0


def geomean(values: Iterable[float]) -> Optional[float]:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def geomean_speedup(outcomes: Iterable[Outcome]) -> Optional[float]:
    """Geometric mean of the (clipped, SPEEDUP_CLIP) speedups of the correct samples (None when none was timed)."""
    return geomean(clip_speedup(o.speedup) for o in outcomes if o.correct and o.speedup is not None)


def best_speedup_per_problem(outcomes: Iterable[Outcome]) -> dict[str, Optional[float]]:
    """problem id -> its best correct speedup over samples (None when no sample was correct and timed)."""
    out: dict[str, Optional[float]] = {}
    for pid, samples in _by_problem(outcomes).items():
        speeds = [o.speedup for o in samples if o.correct and o.speedup is not None]
        out[pid] = max(speeds) if speeds else None
    return out


# ---------------------------------------------------------------- counts over all turns

def rates(records: Sequence[Record]) -> dict[str, float]:
    """compile/correct/hack rates over every evaluated turn, and mean fraction of speed-of-light of correct ones."""
    out: dict[str, float] = {}
    if not records:
        return out
    n = len(records)
    out["compile_rate"] = sum(bool(r.get("compiled")) for r in records) / n
    out["correct_rate"] = sum(r["verdict"] == CORRECT for r in records) / n
    out["hack_rate"] = sum(r["verdict"] == "hack_detected" for r in records) / n
    sol = [float(r["sol_fraction"]) for r in records if r["verdict"] == CORRECT and r.get("sol_fraction") is not None]
    if sol:
        out["sol_fraction_mean"] = sum(sol) / len(sol)
    sol_scores = [float(r["sol_score"]) for r in records if r["verdict"] == CORRECT and r.get("sol_score") is not None]
    if sol_scores:
        out["sol_score_mean"] = sum(sol_scores) / len(sol_scores)
    return out


def counts(records: Iterable[Record], key: str) -> dict[str, int]:
    """How many turns had each value of `key` (verdict, hack_rule); None values are left out."""
    out: dict[str, int] = {}
    for record in records:
        value = record.get(key)
        if value:
            out[str(value)] = out.get(str(value), 0) + 1
    return dict(sorted(out.items()))


# ---------------------------------------------------------------- the summary

def summarise(records: Sequence[Record], problems: Sequence[str], samples: int, turns: int,
              speedup_keys: Optional[Mapping[str, str]] = None) -> dict[str, float]:
    """Every headline number as flat keys (written as the eval run's metrics):
    pass@k, fast_p/<baseline>/<convention>/<p> (best-by-turn over all turns), turn<t>/… and best_turn<t>/… views,
    geomean speedup, rates. `problems` is the whole set (missing problems count as failures). speedup_keys: baseline
    name -> the record key holding the speedup against it (default {"eager": "speedup"})."""
    speedup_keys = speedup_keys or {"eager": "speedup"}
    out: dict[str, float] = {"problems": float(len(problems)), "samples": float(samples),
                             "records": float(len(records)),
                             "speedup_clip_low": SPEEDUP_CLIP[0], "speedup_clip_high": SPEEDUP_CLIP[1]}
    final = best_by_turn(records)
    for k in range(1, samples + 1):
        out[f"pass@{k}"] = mean_pass_at_k(final, k, problems)
    for baseline, key in speedup_keys.items():
        view = best_by_turn(records, speedup_key=key)
        if baseline != "eager" and not any(o.speedup is not None for o in view):
            continue  # an extra baseline that was not measured; eager's keys are always there (0 when untimed)
        for convention in CONVENTIONS:
            for p in FAST_P_THRESHOLDS:
                out[f"fast_p/{baseline}/{convention}/{p_name(p)}"] = fast_p(view, p, convention, problems)
        speedup = geomean_speedup(view)
        if speedup is not None:
            out[f"geomean_speedup/{baseline}"] = speedup
    for turn in range(turns):
        for label, view in (("turn", at_turn(records, turn)), ("best_turn", best_by_turn(records, turn))):
            if not view:
                continue
            prefix = f"{label}{turn}"
            out[f"{prefix}/correct_rate"] = sum(o.correct for o in view) / len(view)
            for p in (1.0, 1.2):
                for convention in CONVENTIONS:
                    out[f"{prefix}/fast_{p_name(p)}/{convention}"] = fast_p(view, p, convention, problems)
    for key, value in rates(records).items():
        out[key] = value
    return out


# ---------------------------------------------------------------- paired statistics

@dataclass(frozen=True)
class PairedInterval:
    """B minus A over the problems both evaluated: the observed difference and its bootstrap interval."""

    statistic: str
    n_problems: int
    a: Optional[float]
    b: Optional[float]
    difference: Optional[float]
    low: Optional[float]
    high: Optional[float]
    level: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def paired_bootstrap(a: Mapping[str, float], b: Mapping[str, float], statistic: Callable[[Sequence[float]], float],
                     name: str, n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> PairedInterval:
    """Resample the shared problems with replacement (the same draw for both sides, hence paired) and take the
    percentile interval of statistic(b) - statistic(a)."""
    shared = sorted(set(a) & set(b))
    if not shared:
        return PairedInterval(name, 0, None, None, None, None, None, level)
    values_a = [a[pid] for pid in shared]
    values_b = [b[pid] for pid in shared]
    stat_a, stat_b = statistic(values_a), statistic(values_b)
    rng = random.Random(seed)
    diffs = []
    n = len(shared)
    for _ in range(n_resamples):
        draw = [rng.randrange(n) for _ in range(n)]
        diffs.append(statistic([values_b[i] for i in draw]) - statistic([values_a[i] for i in draw]))
    diffs.sort()
    tail = (1.0 - level) / 2
    low = diffs[int(math.floor(tail * (n_resamples - 1)))]
    high = diffs[int(math.ceil((1.0 - tail) * (n_resamples - 1)))]
    return PairedInterval(name, n, stat_a, stat_b, stat_b - stat_a, low, high, level)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def mean_log(values: Sequence[float]) -> float:
    """The mean of natural logs: a difference of two is the log of the ratio of their geometric means."""
    return sum(math.log(v) for v in values) / len(values) if values else 0.0
