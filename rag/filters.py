"""Corpus filters: backend, verified-correct only, size limits, dedup by normalised code hash, a cap per program.
Each returns the records it kept and counts of what it dropped and why, for the build report."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from rag.corpus import Record

DEFAULT_MAX_PYTORCH_CHARS = 20_000
DEFAULT_MAX_KERNEL_CHARS = 30_000
DEFAULT_MIN_KERNEL_CHARS = 40


@dataclass
class FilterOptions:
    backends: Optional[Sequence[str]] = None  # None: all
    correct_only: bool = True
    max_pytorch_chars: int = DEFAULT_MAX_PYTORCH_CHARS
    max_kernel_chars: int = DEFAULT_MAX_KERNEL_CHARS
    min_kernel_chars: int = DEFAULT_MIN_KERNEL_CHARS
    max_per_program: Optional[int] = None  # keep the fastest N kernels per PyTorch program


def filter_records(records: Iterable[Record], options: FilterOptions) -> tuple[list[Record], Counter]:
    dropped: Counter = Counter()
    kept = []
    for record in records:
        if options.backends and record.backend not in options.backends:
            dropped["backend"] += 1
        elif options.correct_only and record.correct is not True:
            dropped["not_verified_correct"] += 1
        elif not record.pytorch_code.strip() or not record.kernel_code.strip():
            dropped["empty"] += 1
        elif len(record.pytorch_code) > options.max_pytorch_chars or len(record.kernel_code) > options.max_kernel_chars:
            dropped["too_large"] += 1
        elif len(record.kernel_code.strip()) < options.min_kernel_chars:
            dropped["too_small"] += 1
        else:
            kept.append(record)
    if options.max_per_program:
        kept, capped = cap_per_program(kept, options.max_per_program)
        if capped:
            dropped["over_per_program_cap"] += capped
    return kept, dropped


def dedup(records: Iterable[Record], existing_pair_hashes: Iterable[str] = ()) -> tuple[list[Record], int]:
    """Drop pairs whose normalised (backend, PyTorch, kernel) hash was seen before (in this batch or the index).
    Records also get unique ids here: a repeated id gets a numeric suffix."""
    seen = set(existing_pair_hashes)
    ids: Counter = Counter()
    kept, dropped = [], 0
    for record in records:
        key = record.pair_hash
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        ids[record.id] += 1
        if ids[record.id] > 1:
            record.id = f"{record.id}#{ids[record.id]}"
        kept.append(record)
    return kept, dropped


def cap_per_program(records: Sequence[Record], max_per_program: int) -> tuple[list[Record], int]:
    """Keep the fastest `max_per_program` kernels of each PyTorch program (unknown speedups rank last)."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        groups[(record.backend, record.pytorch_hash)].append(record)
    keep_ids = set()
    for group in groups.values():
        group.sort(key=lambda r: -(r.speedup if r.speedup is not None else float("-inf")))
        keep_ids.update(id(r) for r in group[:max_per_program])
    kept = [r for r in records if id(r) in keep_ids]
    return kept, len(records) - len(kept)
