"""Where a judge's own CPU goes, and its runners', for the benchmarks: with KRL_EVAL_PROFILE=<folder>, each judge host
profiles its tasks (cProfile) into <folder>/judge-<pid>.prof, and each runner its task into <folder>/runner-*.prof."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

PROFILE_ENV = "KRL_EVAL_PROFILE"
# What a profiled runner leaves in its outputs folder as it finishes (slot/runner.py); its judge moves it to the folder.
# Written by the candidate's process, so it is read only by the benchmarks' summary, never by a verdict.
RUNNER_PROFILE_FILE = "runner-profile.prof"


def runners_profiled() -> bool:
    """Whether the task order asks the runner for its profile."""
    return bool(os.environ.get(PROFILE_ENV, ""))


def keep_runner_profile(outputs_dir: str, task_id: object) -> None:
    """The finished runner's profile copied out of its outputs folder (wiped next) into the profile folder: a plain
    file only (the candidate names what lies there), and a failure costs the profile, never the task."""
    folder = os.environ.get(PROFILE_ENV, "")
    source = os.path.join(outputs_dir, RUNNER_PROFILE_FILE)
    if not folder or os.path.islink(source) or not os.path.isfile(source):
        return
    import shutil

    try:
        shutil.copyfile(source, os.path.join(folder, f"runner-{os.getpid()}-{task_id}.prof"), follow_symlinks=False)
    except OSError:
        pass


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


def summary(folder: str, top: int = 25, order: str = "cumulative", who: str = "judge") -> str:
    """The profiles of `who` ("judge" or "runner") in `folder` merged: the `top` entries by `order` (a pstats key), as
    pstats prints them."""
    import io
    import pstats

    paths = sorted(os.path.join(folder, name) for name in os.listdir(folder)
                   if name.startswith(who + "-") and name.endswith(".prof"))
    if not paths:
        return f"no {who} profiles"
    out = io.StringIO()
    stats = pstats.Stats(*paths, stream=out)
    stats.sort_stats(order).print_stats(top)
    return out.getvalue()
