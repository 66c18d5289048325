"""Module names and file paths of the evaluator written as text (`-m evaluator.slot.entry`, RUNNER_MODULES, worker
defaults, `evaluator/...py` in code comments and docs) must name modules that exist, so a move cannot leave them behind."""
from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ("app", "core", "evaluator", "rag", "tests", "docs")
DOCS = ("README.md", "ARCHITECTURE.md", "Makefile", "pyproject.toml")
# Recorded output of past runs (tracebacks, reprs), kept as it was measured; and the layer test, whose made-up
# projects name modules that exist only in its temporary folders.
SKIPPED = ("tests/bench/results/", "tests/test_layers.py")

DOTTED = re.compile(r"(?<![\w./])evaluator(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w/])evaluator/[\w/]+\.py\b")
DEFINED = r"^\s*(?:def|class|async def)\s+{0}\b|^\s*{0}\s*[:=]|import .*\b{0}\b"


def texts() -> list[tuple[str, str, bool]]:
    """(relative path, text, is_python) of every source and doc file that may name an evaluator module."""
    found = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if path.suffix in (".py", ".md", ".tcss") and not relative.startswith(SKIPPED) and path.is_file():
                found.append((relative, path.read_text(), path.suffix == ".py"))
    for name in DOCS:
        if (ROOT / name).exists():
            found.append((name, (ROOT / name).read_text(), False))
    return found


def python_strings(text: str) -> list[str]:
    """String constants (docstrings included) of a Python file: where module names as data live."""
    return [node.value for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Constant)
            and isinstance(node.value, str)]


def module_file(dotted: str) -> pathlib.Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def dotted_problem(name: str) -> str:
    """Why `name` (a dotted evaluator module, maybe with an attribute) names nothing, or "" when it names a module or one of its attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 1, -1):
        found = module_file(".".join(parts[:cut]))
        if found is None:
            continue
        rest = parts[cut:]
        if not rest or re.search(DEFINED.format(re.escape(rest[0])), found.read_text(), re.MULTILINE):
            return ""
        return f"{'.'.join(parts[:cut])} has no {rest[0]}"
    return f"no module {'.'.join(parts[:2])}"


def referenced_names() -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for relative, text, is_python in texts():
        for chunk in (python_strings(text) if is_python else [text]):
            for name in DOTTED.findall(chunk.replace(":", ".")):
                names.setdefault(name.rstrip("."), set()).add(relative)
    return names


def referenced_paths() -> dict[str, set[str]]:
    paths: dict[str, set[str]] = {}
    for relative, text, _ in texts():
        for path in PATH.findall(text):
            paths.setdefault(path, set()).add(relative)
    return paths


def test_every_evaluator_module_name_written_as_text_exists():
    names = referenced_names()
    assert "evaluator.slot.entry" in names and "evaluator.slot.worker" in names  # the scan sees the -m names
    wrong = {name: (problem, sorted(where)) for name, where in names.items() if (problem := dotted_problem(name))}
    assert not wrong, "module names that name nothing:\n" + "\n".join(
        f"  {name}: {problem} (in {', '.join(where)})" for name, (problem, where) in sorted(wrong.items()))


def test_every_evaluator_path_in_code_and_docs_exists():
    paths = referenced_paths()
    assert "evaluator/isolation/sandbox.py" in paths  # the scan sees the docs' paths
    missing = {path: sorted(where) for path, where in paths.items() if not (ROOT / path).exists()}
    assert not missing, "paths of files that do not exist:\n" + "\n".join(
        f"  {path} (in {', '.join(where)})" for path, where in sorted(missing.items()))


def test_runner_preloads_and_process_entries_are_real_modules():
    from evaluator.build import triton_cache
    from evaluator.local import pool
    from evaluator.slot import runner

    for name in runner.RUNNER_MODULES:
        assert name.startswith(("torch.", "triton")) or module_file(name) is not None, name
    assert module_file(pool.PoolConfig.__dataclass_fields__["worker_module"].default) is not None
    assert module_file(triton_cache.MANAGER.split(":")[0]) is not None
    source = (ROOT / "evaluator/local/pool.py").read_text()
    assert '"-m", "evaluator.slot.entry"' in source and module_file("evaluator.slot.entry") is not None
