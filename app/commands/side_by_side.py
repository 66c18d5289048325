"""Independent checks run side by side, each timed: `krl doctor` waits for the slowest one instead of their sum,
and can say which check took how long."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Timed:
    """One check's answer, when it began (seconds after the first began) and how long it took."""

    value: Any
    started_s: float
    took_s: float


def run_side_by_side(checks: Mapping[str, Callable[[], Any]]) -> dict[str, Timed]:
    """Run every check in its own thread and return {name: Timed} in the given order. Checks that spend their time in
    a subprocess or a system call overlap fully; an exception in one is raised after all have finished."""
    origin = time.perf_counter()

    def timed(check: Callable[[], Any]) -> Timed:
        began = time.perf_counter()
        value = check()
        return Timed(value, began - origin, time.perf_counter() - began)

    with ThreadPoolExecutor(max_workers=max(1, len(checks)), thread_name_prefix="check") as pool:
        futures = {name: pool.submit(timed, check) for name, check in checks.items()}
        return {name: future.result() for name, future in futures.items()}


def timing_line(results: Mapping[str, Timed], whole_s: float) -> str:
    """'checks took 1.1 s, side by side: torch and triton 0.9 s · sandbox 0.1 s', slowest first."""
    parts = " · ".join(f"{name} {timed.took_s:.1f} s"
                       for name, timed in sorted(results.items(), key=lambda item: -item[1].took_s))
    return f"checks took {whole_s:.1f} s, side by side: {parts}"
