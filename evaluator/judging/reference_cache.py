"""The judge's memory of work it already did: built reference models and, per input set, the encoded inputs and the
reference output. Least recently used entries go first once the byte bound is passed; only the judge writes here."""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from typing import Any, Hashable, Optional

DEFAULT_BOUND_MIB = 1024  # host and device bytes together; KRL_WORKER_JUDGE_CACHE_MIB overrides, 0 turns the cache off


def bound_bytes() -> int:
    try:
        return max(0, int(os.environ.get("KRL_WORKER_JUDGE_CACHE_MIB", DEFAULT_BOUND_MIB))) * 2**20
    except ValueError:
        return DEFAULT_BOUND_MIB * 2**20


def problem_key(reference_source: str, size_overrides: dict, precision: str, seed: int, device: str) -> tuple:
    """What a built reference model depends on. The source is hashed here (a request's problem_hash is the caller's
    claim, and a stale one must not serve another problem's outputs)."""
    digest = hashlib.sha256(reference_source.encode()).hexdigest()
    return (digest, tuple(sorted((size_overrides or {}).items())), precision, seed, device)


def nbytes(value: Any) -> int:
    """Bytes held by a value: tensors (and those in tuples/lists), a module's parameters and buffers, bytes objects."""
    import torch

    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, torch.nn.Module):
        return sum(nbytes(t) for t in (*value.parameters(), *value.buffers()))
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    return 0


class ReferenceCache:
    """A byte-bounded LRU map. An entry larger than a quarter of the bound is not kept (it would evict the rest)."""

    def __init__(self, max_bytes: Optional[int] = None):
        self.max_bytes = bound_bytes() if max_bytes is None else max_bytes
        self.entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.used_bytes = 0
        self.hits = self.misses = 0

    def get(self, key: Hashable) -> Any:
        entry = self.entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self.entries.move_to_end(key)
        return entry[0]

    def keeps(self, size: int) -> bool:
        """Whether an entry of `size` bytes would be kept: at most a quarter of the bound, so one entry never empties
        the cache (put asks the same)."""
        return self.max_bytes > 0 and size <= self.max_bytes // 4

    def put(self, key: Hashable, value: Any, size: int) -> None:
        if key in self.entries:
            self.used_bytes -= self.entries.pop(key)[1]
        if not self.keeps(size):
            return
        self.entries[key] = (value, size)
        self.used_bytes += size
        while self.used_bytes > self.max_bytes and self.entries:
            _, (_, dropped) = self.entries.popitem(last=False)
            self.used_bytes -= dropped
