"""The SOL-ExecBench-style score of one timed kernel: where its time lies between the baseline and the speed of light,
S = 1 / (1 + (T_kernel - T_sol) / (T_baseline - T_sol)): 0.5 at the baseline's time, 1 at the speed of light."""

from __future__ import annotations

import math
from typing import Optional


def sol_score(kernel_ms: Optional[float], baseline_ms: Optional[float], sol_ms: Optional[float]) -> Optional[float]:
    """None when any time is missing or the baseline is not slower than the speed of light (no room to score in).
    A kernel slower than the baseline scores below 0.5 and tends to 0; one at or below the limit scores 1."""
    if kernel_ms is None or baseline_ms is None or sol_ms is None:
        return None
    if not all(math.isfinite(v) for v in (kernel_ms, baseline_ms, sol_ms)) or kernel_ms <= 0 or sol_ms < 0:
        return None
    room = baseline_ms - sol_ms
    if room <= 0:
        return None
    excess = max(0.0, kernel_ms - sol_ms)
    return 1.0 / (1.0 + excess / room)
