"""Triton's cache for sandboxed runners in two levels: a shared folder that only the trusted judge host writes (read-only
inside the sandbox), over the runner's private folder (wiped per task), where everything a candidate compiles goes."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Dict, Iterator, Optional

from triton.runtime.cache import FileCacheManager

SHARED_VARIABLE = "KRL_WORKER_TRITON_SHARED"
MANAGER = "evaluator.build.triton_cache:TwoLevelCacheManager"  # the value of TRITON_CACHE_MANAGER in a runner


class TwoLevelCacheManager(FileCacheManager):
    """Reads the trusted shared level first, then the private one; writes only the private one (TRITON_CACHE_DIR).

    Why a candidate cannot poison a later candidate through it: the shared level is written by the judge host alone
    (it never runs candidate code) and is a read-only bind inside the sandbox; the private level belongs to one runner
    and is wiped before the next. A cubin planted under another kernel's key lands in the planter's private folder and
    dies with it. A shared group file may only name files inside the shared level."""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override=override, dump=dump)
        shared = os.environ.get(SHARED_VARIABLE, "")
        self.shared_dir = os.path.join(shared, key) if shared and not (override or dump) else ""

    def _shared_file(self, filename: str) -> Optional[str]:
        if not self.shared_dir or os.sep in filename or filename.startswith("."):
            return None
        path = os.path.join(self.shared_dir, filename)
        return path if os.path.isfile(path) and not os.path.islink(path) else None

    # put() and put_group() are FileCacheManager's: they write under TRITON_CACHE_DIR, the private level only.
    def get_file(self, filename) -> Optional[str]:
        return self._shared_file(filename) or super().get_file(filename)

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        return self._shared_group(filename) or super().get_group(filename)

    def _shared_group(self, filename: str) -> Optional[Dict[str, str]]:
        path = self._shared_file(f"__grp__{filename}")
        if path is None:
            return None
        try:
            with open(path) as handle:
                children = json.load(handle).get("child_paths")
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(children, dict):
            return None
        found = {}
        for child, child_path in children.items():
            inside = isinstance(child_path, str) and os.path.dirname(child_path) == self.shared_dir
            if not inside or self._shared_file(os.path.basename(child_path)) is None:
                return None  # a trusted group names only trusted files
            found[child] = child_path
        return found


def runner_environment(shared_dir: str) -> dict[str, str]:
    """What a runner's environment needs for the two levels (TRITON_CACHE_DIR stays the private folder)."""
    return {"TRITON_CACHE_MANAGER": MANAGER, SHARED_VARIABLE: shared_dir}


@contextlib.contextmanager
def trusted_level(shared_dir: str) -> Iterator[None]:
    """In the trusted judge host only: what Triton compiles inside this context goes to the shared level."""
    os.makedirs(shared_dir, mode=0o755, exist_ok=True)
    os.chmod(shared_dir, 0o755)
    old = {name: os.environ.get(name) for name in ("TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER")}
    os.environ["TRITON_CACHE_DIR"] = shared_dir
    os.environ.pop("TRITON_CACHE_MANAGER", None)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def warm_shared_cache(shared_dir: str) -> str:
    """In the trusted judge host (CUDA initialised, no candidate code): compile and run a tiny kernel with Triton's
    cache in shared_dir, so Triton's driver utilities (gcc-built) and the kernel's launcher exist there for every
    runner. Once per machine and Triton version; later starts are cache hits. Returns '' or why it did not work.
    Other signatures' launchers follow as runners report them (build/triton_launchers.py)."""
    try:
        import torch

        from evaluator.build.triton_warm import add_one

        with trusted_level(shared_dir):
            x = torch.zeros(64, device="cuda")
            add_one[(1,)](x, x.numel(), BLOCK=64)
            torch.cuda.synchronize()
        if float(x.sum()) != 64.0:
            return "the warm-up kernel computed a wrong result"
        return ""
    except Exception as exc:  # noqa: BLE001 - runners then compile everything privately, as without this level
        return f"{type(exc).__name__}: {exc}"[:500]
