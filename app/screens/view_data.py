"""What the distribution and best-kernel views show, computed from a run's trajectory outcomes (per-step histograms
of return and speedup, each problem's best correct kernel over time), and series read for a zoom. Plain functions."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from app.screens.loaders import Series

# (step, problem id, total return, best speedup, solved, trajectory id), as Registry.trajectory_outcomes returns
Outcome = tuple


@dataclass
class StepHistogram:
    """Counts of values per (value bin, step bucket): `counts[bin][column]`, bin 0 at the bottom (lowest values).
    `log2`: bins are equal in log2 of the value (speedups); `edges` are in the value's own units."""

    title: str
    steps: list[tuple[int, int]]  # first and last step of each column
    edges: list[float]  # bins + 1 edges
    counts: list[list[int]]
    total: int
    log2: bool = False


def step_histogram(title: str, pairs: Sequence[tuple[int, float]], bins: int, columns: int,
                   log2: bool = False) -> StepHistogram:
    """Histogram of the values of each step (steps grouped into at most `columns` buckets)."""
    clean = [(s, math.log2(v) if log2 else v) for s, v in pairs
             if v is not None and math.isfinite(v) and (v > 0 or not log2)]
    if not clean:
        return StepHistogram(title, [], [], [], 0, log2)
    steps = sorted({s for s, _ in clean})
    per_column = max(1, math.ceil(len(steps) / max(1, columns)))
    buckets = [steps[i:i + per_column] for i in range(0, len(steps), per_column)]
    column_of = {s: i for i, bucket in enumerate(buckets) for s in bucket}
    low = min(v for _, v in clean)
    high = max(v for _, v in clean)
    if high == low:
        low, high = low - 0.5, high + 0.5
    width = (high - low) / bins
    counts = [[0] * len(buckets) for _ in range(bins)]
    for step, value in clean:
        counts[min(bins - 1, int((value - low) / width))][column_of[step]] += 1
    edges = [low + i * width for i in range(bins + 1)]
    if log2:
        edges = [2.0 ** e for e in edges]
    return StepHistogram(title, [(b[0], b[-1]) for b in buckets], edges, counts, len(clean), log2)


@dataclass
class ProblemBest:
    """One problem's best correct kernel: its speedup, the step and trajectory that reached it, and the best
    speedup reached by the end of each step (None before the first correct kernel)."""

    problem_id: str
    best_speedup: Optional[float]
    best_step: Optional[int]
    trajectory_id: Optional[int]
    attempts: int
    solved: int
    over_time: list[Optional[float]] = field(default_factory=list)


def best_per_problem(outcomes: Sequence[Outcome]) -> tuple[list[int], list[ProblemBest]]:
    """(the run's steps, one ProblemBest per problem, best first)."""
    steps = sorted({o[0] for o in outcomes})
    index_of = {s: i for i, s in enumerate(steps)}
    table: dict[str, ProblemBest] = {}
    per_step: dict[str, list[Optional[float]]] = {}
    for step, problem, _return, speedup, solved, trajectory_id in outcomes:
        row = table.get(problem)
        if row is None:
            row = table[problem] = ProblemBest(problem, None, None, None, 0, 0)
            per_step[problem] = [None] * len(steps)
        row.attempts += 1
        row.solved += 1 if solved else 0
        if solved and speedup is not None and math.isfinite(speedup):
            column = per_step[problem]
            at = index_of[step]
            column[at] = speedup if column[at] is None else max(column[at], speedup)
            if row.best_speedup is None or speedup > row.best_speedup:
                row.best_speedup, row.best_step, row.trajectory_id = speedup, step, trajectory_id
    for problem, row in table.items():
        best: Optional[float] = None
        for value in per_step[problem]:
            if value is not None and (best is None or value > best):
                best = value
            row.over_time.append(best)
    ordered = sorted(table.values(), key=lambda r: (r.best_speedup is None, -(r.best_speedup or 0), r.problem_id))
    return steps, ordered


@dataclass
class Distributions:
    reward: StepHistogram
    speedup: StepHistogram
    steps: list[int]
    problems: list[ProblemBest]


def distributions(outcomes: Sequence[Outcome], bins: int = 8, columns: int = 60) -> Distributions:
    reward = step_histogram("return per trajectory", [(o[0], o[2]) for o in outcomes], bins, columns)
    speedup = step_histogram("best speedup per solved trajectory (log2 bins)",
                             [(o[0], o[3]) for o in outcomes if o[4]], bins, columns, log2=True)
    steps, problems = best_per_problem(outcomes)
    return Distributions(reward, speedup, steps, problems)


def load_series_range(reg, run_id: int, keys: Sequence[str], max_points: int,
                      step_range: Optional[tuple[int, int]]) -> dict[str, Series]:
    """Like loaders.load_series, limited to a step range (a zoom) when one is given."""
    low, high = step_range or (None, None)
    out = {}
    for key in keys:
        data = reg.metric_series(run_id, key, max_points=max_points, step_min=low, step_max=high)
        points = [(s, v, w) for s, v, w in zip(data["step"], data["value"], data["wall_time"]) if v is not None]
        out[key] = Series(key, [p[0] for p in points], [p[1] for p in points], [p[2] for p in points])
    return out
