"""The evaluator's on-disk caches (CUDA builds published by the trusted side, Triton kernels) kept under a size
budget: least recently used entries go first, never one being built or loaded, nor one used in the last minutes."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

DEFAULT_MAX_BYTES = 20 * 2**30
MIN_AGE_S = 600.0  # an entry used this recently is kept whatever the budget: a worker may be about to load it
# Pruning goes below the budget by this share, so that the next few builds do not trigger it again at once.
HEADROOM = 0.2
AREAS = ("cuda", "triton")


def max_cache_bytes() -> Optional[int]:
    """$KRL_CACHE_MAX_GB (default 20; 0 turns pruning off) in bytes, None when off."""
    text = os.environ.get("KRL_CACHE_MAX_GB", "").strip()
    try:
        gigabytes = float(text) if text else DEFAULT_MAX_BYTES / 2**30
    except ValueError:
        return DEFAULT_MAX_BYTES
    return int(gigabytes * 2**30) if gigabytes > 0 else None


@dataclass
class Entry:
    area: str
    path: str
    bytes: int
    last_used: float  # newest modification time inside it (the trusted side touches a CUDA hit's manifest.json)


@dataclass
class PruneReport:
    entries: int = 0
    bytes_before: int = 0
    removed: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    skipped_in_use: int = 0

    @property
    def bytes_after(self) -> int:
        return self.bytes_before - self.bytes_freed


def _tree_size_and_mtime(path: str) -> tuple[int, float]:
    size, newest = 0, 0.0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                info = os.stat(os.path.join(root, name), follow_symlinks=False)
            except OSError:
                continue
            size += info.st_blocks * 512 if info.st_blocks else info.st_size
            newest = max(newest, info.st_mtime)
    return size, newest


def cache_entries(cache_dir: str) -> list[Entry]:
    """Every prunable entry: finished CUDA builds (cuda/<key>/) and Triton kernels (triton/<hash>/)."""
    entries = []
    for area in AREAS:
        folder = os.path.join(cache_dir, area)
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if name.startswith(".") or not os.path.isdir(path):
                continue  # builds in progress (.build-*) and lock files are not entries
            size, newest = _tree_size_and_mtime(path)
            entries.append(Entry(area, path, size, newest))
    return entries


def prune_cache(cache_dir: str, max_bytes: int, min_age_s: float = MIN_AGE_S,
                now: Optional[float] = None) -> PruneReport:
    """Delete least recently used entries until the caches hold at most (1 - HEADROOM) × max_bytes, if they hold
    more than max_bytes. A CUDA entry whose lock is held (being built, or being loaded) is skipped."""
    now = time.time() if now is None else now
    entries = cache_entries(cache_dir)
    report = PruneReport(entries=len(entries), bytes_before=sum(e.bytes for e in entries))
    if report.bytes_before <= max_bytes:
        return report
    target = int(max_bytes * (1 - HEADROOM))
    for entry in sorted(entries, key=lambda e: e.last_used):
        if report.bytes_after <= target:
            break
        if now - entry.last_used < min_age_s:
            break  # everything after this one is newer still
        if _remove_entry(entry):
            report.removed.append(entry.path)
            report.bytes_freed += entry.bytes
        else:
            report.skipped_in_use += 1
    return report


def _remove_entry(entry: Entry) -> bool:
    if entry.area != "cuda":
        shutil.rmtree(entry.path, ignore_errors=True)
        return True
    # Builders hold <key>.lock exclusively and loaders share it: take it exclusively, without waiting.
    lock_path = entry.path + ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        # Move it out of the way first: a reader never sees half a folder, only a complete one or none.
        doomed = f"{entry.path}.pruned-{os.getpid()}"
        try:
            os.rename(entry.path, doomed)
        except OSError:
            return False
        shutil.rmtree(doomed, ignore_errors=True)
        return True  # the lock file stays: a builder may be waiting on it
    finally:
        os.close(fd)


class CacheJanitor:
    """Prunes a cache folder now and every `every_s` in a daemon thread, while an Evaluator lives."""

    def __init__(self, cache_dir: str, max_bytes: int, every_s: float = 900.0) -> None:
        self.cache_dir, self.max_bytes, self.every_s = cache_dir, max_bytes, every_s
        self.last_report: Optional[PruneReport] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="krl-cache-janitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.last_report = prune_cache(self.cache_dir, self.max_bytes)
                if self.last_report.removed:
                    logging.getLogger("krl.evaluator").info(
                        "build cache: removed %d least recently used entries (%.1f GiB) to stay under %.1f GiB",
                        len(self.last_report.removed), self.last_report.bytes_freed / 2**30, self.max_bytes / 2**30)
            except Exception:  # noqa: BLE001 - a failed prune must never disturb evaluation
                logging.getLogger("krl.evaluator").exception("build cache pruning failed")
            if self._stop.wait(self.every_s):
                return

    def stop(self) -> None:
        self._stop.set()
