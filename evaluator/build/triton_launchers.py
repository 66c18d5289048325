"""Triton's C launchers in the trusted cache level: Triton 3.6 builds one with gcc per kernel signature in the runner,
~0.3 s of every Triton task (its cache level dies with the task). A runner names what it built; the judge builds it."""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional

# The runner's report is the candidate's to forge: only type names pass, from Triton's own vocabulary ("*fp32", "i32",
# "constexpr", ...), and Triton's template makes the C source from them: the judge compiles nothing a candidate wrote.
_TYPE = re.compile(r"^(\*?[a-z][a-z0-9]{0,15}|constexpr)$")
MAX_ARGUMENTS = 64
REPORTED_MAX = 8  # signatures a runner reports
BUILT_PER_TASK = 2  # launchers a judge tries after one task (gcc ~0.3 s each, after the reply)
BUILT_MAX = 256  # launchers a judge tries in its life: a candidate cannot keep it compiling


def launcher_types(reported: Any) -> Optional[tuple[str, ...]]:
    """One reported signature as Triton's type names, or None where it is not one (tuples and tensor descriptors are
    left to the runner: their launchers depend on more than the names)."""
    if not isinstance(reported, (list, tuple)) or len(reported) > MAX_ARGUMENTS:
        return None
    if not all(isinstance(name, str) and _TYPE.match(name) for name in reported):
        return None
    return tuple(reported)


def record_launched_signatures() -> list:
    """In a runner, before any candidate code: the signatures Triton builds a launcher for, as they come. [] where this
    Triton builds none (its launcher is generic) or is missing."""
    try:
        from triton.backends.nvidia import driver
    except Exception:  # noqa: BLE001 - no triton, or no NVIDIA backend
        return []
    if not hasattr(driver, "make_launcher"):
        return []
    seen: list = []
    build = driver.CudaLauncher.__init__

    def noting(launcher: Any, src: Any, metadata: Any) -> None:
        if not getattr(metadata, "tensordesc_meta", None) and len(seen) < REPORTED_MAX:
            types = launcher_types(list(getattr(src, "signature", {}).values()))
            if types is not None and list(types) not in seen:
                seen.append(list(types))
        build(launcher, src, metadata)

    driver.CudaLauncher.__init__ = noting
    return seen


class LauncherBuilder:
    """In the trusted judge host: builds the launchers its runners reported into the shared level, each once."""

    def __init__(self, shared_dir: str):
        self.shared_dir = shared_dir
        self.done: set = set()

    def build(self, reported: Iterable[Any]) -> int:
        """How many it built now, of BUILT_PER_TASK tries at most; a failed one is not tried again."""
        tried = built = 0
        if not isinstance(reported, (list, tuple)):  # the runner's own evidence: a number there ended the judge host
            return 0  # after its reply (red team, session 28)
        for types in filter(None, map(launcher_types, list(reported)[:REPORTED_MAX])):
            if tried >= BUILT_PER_TASK or len(self.done) >= BUILT_MAX:
                break
            if types in self.done:
                continue
            self.done.add(types)
            tried += 1
            built += build_launcher(types, self.shared_dir) == ""
        return built


def build_launcher(types: tuple[str, ...], shared_dir: str) -> str:
    """Triton's launcher for `types`, compiled from Triton's own template into `shared_dir` (a cache hit where it is
    there already). '' or why not."""
    from evaluator.build.triton_cache import trusted_level

    try:
        from triton.backends.nvidia import driver
        from triton.runtime.build import compile_module_from_src

        source = driver.make_launcher({}, dict(enumerate(types)), None)
        with trusted_level(shared_dir):
            compile_module_from_src(src=source, name="__triton_launcher", library_dirs=driver.library_dirs(),
                                    include_dirs=driver.include_dirs, libraries=driver.libraries)
        return ""
    except Exception as exc:  # noqa: BLE001 - an unknown type name, another Triton: the runner builds its own
        return f"{type(exc).__name__}: {exc}"[:300]
