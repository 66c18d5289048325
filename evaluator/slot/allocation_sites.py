"""Where a judge's device allocations are made (opt-in diagnostic, KRL_WORKER_ALLOC_HISTORY=<folder>): the caching
allocator's history with Python stacks, summed per task by the evaluator's own call site, one JSON line per task."""

# Why: a small Triton task's judge makes ~220 cudaMalloc calls, ~210 of them in the timing (sessions 20-21), each under
# the driver's host-wide lock where several GPUs' slots queue; carving the staged sets from one allocation took only
# ~18 off, so where the rest are made is the question this answers. Recording stacks costs every allocation a Python
# stack walk, so it is never on by default, and nothing in it enters a verdict.

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any, Optional

ALLOC_HISTORY_ENV = "KRL_WORKER_ALLOC_HISTORY"  # KRL_WORKER_*: passed to the judges (isolation/environment.py)
MAX_ENTRIES = 200_000  # the allocator's ring of trace entries; a task makes a few thousand
SITES_KEPT = 20  # the busiest call sites written per task
FRAMES_KEPT = 3  # the evaluator's innermost frames that name a site
OWN_CODE = f"{os.sep}evaluator{os.sep}"
ACTIONS = ("segment_alloc", "segment_free", "alloc")


class AllocationSites:
    """The history switched on in this process; `note(task)` appends the device allocations since the last note."""

    def __init__(self, folder: str):
        import torch

        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, f"judge-{os.getpid()}.jsonl")
        self.torch = torch
        self._record()

    def _record(self) -> None:
        """The history on, emptied: the next snapshot holds only what came after."""
        self.torch.cuda.memory._record_memory_history("all", context="alloc", stacks="python",
                                                      max_entries=MAX_ENTRIES, clear_history=True)

    @classmethod
    def from_env(cls) -> Optional["AllocationSites"]:
        """One where ALLOC_HISTORY_ENV names a folder and CUDA is initialised here; else None (the usual case)."""
        folder = os.environ.get(ALLOC_HISTORY_ENV, "").strip()
        if not folder:
            return None
        try:
            import torch

            return cls(folder) if torch.cuda.is_initialized() else None
        except Exception:  # noqa: BLE001 - a diagnostic never stops a judge
            return None

    def note(self, task: Any) -> None:
        """The entries since the last note (or the start) summed by site, appended to this judge's file."""
        try:
            snapshot = self.torch.cuda.memory._snapshot()
            self._record()
        except Exception:  # noqa: BLE001 - a diagnostic never stops a judge
            return
        entries = [entry for trace in snapshot.get("device_traces", []) for entry in trace]
        with open(self.path, "a") as handle:
            handle.write(json.dumps({"task": str(task), **summarize(entries)}) + "\n")


def summarize(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per action of ACTIONS, how many entries there were; per site of the device allocations (segment_alloc), their
    count and MiB, the busiest SITES_KEPT."""
    actions = Counter(entry.get("action") for entry in entries)
    counts: Counter = Counter()
    sizes: Counter = Counter()
    for entry in entries:
        if entry.get("action") == "segment_alloc":
            site = call_site(entry.get("frames") or [])
            counts[site] += 1
            sizes[site] += int(entry.get("size", 0))
    return {**{action: actions.get(action, 0) for action in ACTIONS},
            "sites": [[site, count, round(sizes[site] / 2**20, 1)] for site, count in counts.most_common(SITES_KEPT)]}


def call_site(frames: list[dict[str, Any]]) -> str:
    """The evaluator's innermost FRAMES_KEPT frames of a stack (innermost first), as `file.py:line function` joined by
    ' < '; the innermost frame of all where none is the evaluator's."""
    own = [frame for frame in frames if OWN_CODE in str(frame.get("filename", ""))][:FRAMES_KEPT]
    chosen = own or frames[:1]
    return " < ".join(f"{_short(frame.get('filename', '?'))}:{frame.get('line', '?')} {frame.get('name', '?')}"
                      for frame in chosen) or "?"


def _short(filename: str) -> str:
    """A path from the evaluator package on (`evaluator/slot/timing_phase.py`), else its last two parts."""
    at = filename.rfind(OWN_CODE)
    return filename[at + 1:] if at >= 0 else os.sep.join(filename.split(os.sep)[-2:])
