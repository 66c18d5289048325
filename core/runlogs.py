"""A run's log file (<ws>/<name>/logs.log, where its job's stdout and stderr go): its path, its tail, and the error
lines a reconcile quotes when a job died without a final status."""

from __future__ import annotations

import os

from pathlib import Path

from core.registry import Registry


ERROR_LOG_LINES = 30


def log_path(registry: Registry, name: str) -> Path:
    return registry.run_dir(name) / "logs.log"


def _tail_file(path: Path, n: int, max_bytes: int = 1 << 20) -> list[str]:
    if n <= 0 or not path.exists():
        return []
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        block, data = 8192, b""
        while size > 0 and data.count(b"\n") <= n and len(data) < max_bytes:
            step = min(block, size)
            size -= step
            handle.seek(size)
            data = handle.read(step) + data
            block *= 2
    return data.decode("utf-8", "replace").splitlines()[-n:]


def tail_log(registry: Registry, name: str, n: int = 50) -> list[str]:
    """The last n lines of a run's logs.log (empty list when there is no log yet)."""
    row = registry.get_run(name)
    return _tail_file(log_path(registry, row["name"]), n)


def error_from_log(registry: Registry, name: str) -> str:
    lines = _tail_file(log_path(registry, name), ERROR_LOG_LINES)
    return "\n".join(lines)[-4000:]
