"""Mean ± standard deviation of several runs' curves, step by step: what a group of runs (grouped by a config key
or tags in the runs table) draws in the compare view instead of one line per run."""

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
