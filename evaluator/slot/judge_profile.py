"""Where a judge's own CPU goes, for the benchmarks: with KRL_EVAL_PROFILE=<folder>, each judge host profiles its
tasks (cProfile, the judge's thread only) and keeps the running total in <folder>/judge-<pid>.prof."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

PROFILE_ENV = "KRL_EVAL_PROFILE"


class JudgeProfile:
    """`with profile.task():` around each task; nothing at all without the setting."""

    def __init__(self) -> None:
        self.folder = os.environ.get(PROFILE_ENV, "")
        self.profiler = None
        if self.folder:
            import cProfile

            self.profiler = cProfile.Profile()

    @contextlib.contextmanager
    def task(self) -> Iterator[None]:
        if self.profiler is None:
            yield
            return
        self.profiler.enable()
        try:
            yield
        finally:
            self.profiler.disable()
            # Rewritten after every task, so a judge stopped at any point leaves every task it finished counted.
            self.profiler.dump_stats(os.path.join(self.folder, f"judge-{os.getpid()}.prof"))


def summary(folder: str, top: int = 25, order: str = "cumulative") -> str:
    """The judges' profiles in `folder` merged: the `top` entries by `order` (a pstats key), as pstats prints them."""
    import io
    import pstats

    paths = sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".prof"))
    if not paths:
        return "no judge profiles"
    out = io.StringIO()
    stats = pstats.Stats(*paths, stream=out)
    stats.sort_stats(order).print_stats(top)
    return out.getvalue()
