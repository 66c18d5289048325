"""Mean ± standard deviation of several runs' curves: what a group of runs (grouped by a config key or tags in the
runs table) draws in the compare view instead of one line per run; step by step, or resampled on the time axis."""

from __future__ import annotations

import math
from typing import Sequence


def mean_std_band(curves: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[list[float], list[float],
                                                                                       list[float], list[int]]:
    """(xs, mean, std, count) over the xs any curve has, each x from the runs that logged it (population std: the
    spread of these runs, not an estimate of another's); non-finite values are left out."""
    by_x: dict[float, list[float]] = {}
    for xs, ys in curves:
        for x, y in zip(xs, ys):
            if math.isfinite(y):
                by_x.setdefault(float(x), []).append(float(y))
    out_x, means, stds, counts = [], [], [], []
    for x in sorted(by_x):
        values = by_x[x]
        mean = sum(values) / len(values)
        out_x.append(x)
        means.append(mean)
        stds.append(math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))
        counts.append(len(values))
    return out_x, means, stds, counts


def mean_std_band_resampled(curves: Sequence[tuple[Sequence[float], Sequence[float]]],
                            points: int = 0) -> tuple[list[float], list[float], list[float], list[int]]:
    """(xs, mean, std, count) on evenly spaced xs across all curves, for an x no two runs share (minutes since each
    run began): each curve is read at every x by linear interpolation between its own points, and only inside its
    own span (never extrapolated), so the count at an x is the runs that had reached it. points: how many xs
    (default: as many as the longest curve has)."""
    import numpy as np

    clean = []
    for xs, ys in curves:
        pairs = sorted((float(x), float(y)) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y))
        if pairs:
            clean.append((np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])))
    if not clean:
        return [], [], [], []
    low, high = min(xs[0] for xs, _ in clean), max(xs[-1] for xs, _ in clean)
    size = max(2, points or max(len(xs) for xs, _ in clean)) if high > low else 1
    grid = np.linspace(low, high, size)
    out_x, means, stds, counts = [], [], [], []
    for x in grid:
        values = [float(np.interp(x, xs, ys)) for xs, ys in clean if xs[0] <= x <= xs[-1]]
        if not values:
            continue
        mean = sum(values) / len(values)
        out_x.append(float(x))
        means.append(mean)
        stds.append(math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))
        counts.append(len(values))
    return out_x, means, stds, counts
