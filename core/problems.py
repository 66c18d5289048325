"""Problem sets in KernelBench format: the built-in set, a KernelBench checkout, or any path.
Problems are read and checked statically here; their code only ever runs inside evaluator workers."""

from __future__ import annotations

import ast
import hashlib
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from core.errors import KrlError, did_you_mean

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
KERNELBENCH_ENV = "KERNELBENCH_ROOT"

# Op tags inferred from a problem's name when no metadata says otherwise.
_TAG_PATTERNS = {
    "activation": r"relu|gelu|silu|swish|sigmoid|tanh|elu|selu|softplus|softsign|hardtanh|mish|leaky",
    "elementwise": r"relu|gelu|silu|swish|sigmoid|tanh|elu|selu|softplus|softsign|hardtanh|mish|leaky|add|mul|scale|clamp|bias",
    "reduction": r"sum|mean|max|min|argmax|argmin|prod|reduction|norm",
    "softmax": r"softmax",
    "norm": r"norm",
    "matmul": r"matmul|gemm|mm\b|bmm|linear|matrix",
    "conv": r"conv",
    "pool": r"pool",
    "loss": r"loss|entropy",
    "attention": r"attention|attn",
}


@dataclass(frozen=True)
class Problem:
    """One reference program: `Model`, `get_inputs`, `get_init_inputs` and size constants."""

    id: str  # stable: "builtin/relu", "kernelbench/level1/19_ReLU", "<folder>/<stem>"
    set: str  # "builtin", "kernelbench/level1", or the path it came from
    level: int
    name: str
    source: str
    hash: str
    path: str
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def tags(self) -> list[str]:
        return list(self.metadata.get("tags", []))

    @property
    def gpu_sizes(self) -> dict[str, int]:
        """Size constants that make GPU timing meaningful (empty: the file's own sizes are fine)."""
        return dict(self.metadata.get("gpu_sizes", {}))

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "set": self.set,
            "level": self.level,
            "name": self.name,
            "hash": self.hash,
            "tags": self.tags,
            "path": self.path,
            "size_constants": self.metadata.get("size_constants", {}),
            "gpu_sizes": self.gpu_sizes,
        }


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def infer_tags(name: str) -> list[str]:
    lowered = name.lower()
    return [tag for tag, pattern in _TAG_PATTERNS.items() if re.search(pattern, lowered)]


def check_problem_source(source: str, path: str) -> dict[str, Any]:
    """Parse without running; raise KrlError naming what is missing. Returns the size constants found."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise KrlError(f"{path}: not valid Python (line {exc.lineno}: {exc.msg}). Fix the file or remove it from the set.") from None
    defined: set[str] = set()
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    defined.add(target.id)
                    value = _number(node.value)
                    if value is not None:
                        constants[target.id] = value
        elif isinstance(node, ast.ImportFrom):
            defined.update(alias.asname or alias.name for alias in node.names)
    missing = [name for name in REQUIRED_NAMES if name not in defined]
    if missing:
        raise KrlError(
            f"{path}: a KernelBench problem must define {', '.join(REQUIRED_NAMES)}; missing: {', '.join(missing)}."
        )
    return constants


def _number(node: ast.AST | None) -> int | float | None:
    """The value of a numeric literal (also `-3`), else None; bools are not sizes."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


def load_problem_file(path: Path, set_name: str, problem_id: str, level: int = 0, metadata: dict[str, Any] | None = None) -> Problem:
    try:
        source = path.read_text()
    except OSError as exc:
        raise KrlError(f"cannot read problem file {path}: {exc.strerror}.") from None
    constants = check_problem_source(source, str(path))
    meta = dict(metadata or {})
    name = meta.pop("name", None) or _name_from_stem(path.stem)
    meta.setdefault("tags", infer_tags(name))
    meta["size_constants"] = constants
    return Problem(
        id=problem_id,
        set=set_name,
        level=int(meta.pop("level", level) or level),
        name=name,
        source=source,
        hash=source_hash(source),
        path=str(path),
        metadata=meta,
    )


def _name_from_stem(stem: str) -> str:
    # KernelBench files are "19_ReLU.py": drop the number.
    return re.sub(r"^\d+_", "", stem)


def _sort_key(path: Path) -> tuple[int, str]:
    match = re.match(r"^(\d+)_", path.stem)
    return (int(match.group(1)) if match else 10**9, path.stem)


# ---------------------------------------------------------------- built-in set

def builtin_dir() -> Path:
    return Path(str(resources.files("core") / "data" / "problems" / "builtin"))


def _builtin_index() -> dict[str, dict[str, Any]]:
    index_path = builtin_dir() / "index.yaml"
    if not index_path.exists():
        return {}
    return yaml.safe_load(index_path.read_text()) or {}


def load_builtin(name: str | None = None) -> list[Problem]:
    index = _builtin_index()
    # index.yaml's order is the curated order (simple ops first); unindexed files go last.
    position = {stem: i for i, stem in enumerate(index)}
    files = sorted(builtin_dir().glob("*.py"),
                   key=lambda p: (index.get(p.stem, {}).get("level", 9), position.get(p.stem, len(position)), p.stem))
    problems = [
        load_problem_file(path, "builtin", f"builtin/{path.stem}", metadata=index.get(path.stem, {}))
        for path in files
        if not path.name.startswith("_")
    ]
    if name is None:
        return problems
    chosen = [p for p in problems if p.id == f"builtin/{name}" or p.name == name]
    if not chosen:
        raise KrlError(f"no built-in problem '{name}'.{did_you_mean(name, [p.id.split('/', 1)[1] for p in problems])} "
                       "List them with `krl problems ls`.")
    return chosen


# ---------------------------------------------------------------- KernelBench checkout

def kernelbench_root() -> Path:
    root = os.environ.get(KERNELBENCH_ENV)
    if not root:
        raise KrlError(f"{KERNELBENCH_ENV} is not set. Point it at a KernelBench checkout, e.g. "
                       f"`export {KERNELBENCH_ENV}=~/KernelBench` (it must contain KernelBench/level1… or level1…).")
    base = Path(root).expanduser()
    if not base.is_dir():
        raise KrlError(f"{KERNELBENCH_ENV}={root} is not a folder. Set it to the root of a KernelBench checkout "
                       "(the folder holding KernelBench/level1… or level1…).")
    for candidate in (base / "KernelBench", base):
        if (candidate / "level1").is_dir():
            return candidate
    raise KrlError(f"{KERNELBENCH_ENV}={root} holds no level1 folder (looked in {base / 'KernelBench'} and {base}). "
                   "Set it to the root of a KernelBench checkout.")


def load_kernelbench(rest: str) -> list[Problem]:
    """rest: '' (all levels), 'level1', or 'level1/19_ReLU' (also '19' or '19_ReLU.py')."""
    root = kernelbench_root()
    parts = [p for p in rest.split("/") if p]
    levels = [parts[0]] if parts else sorted(d.name for d in root.iterdir() if re.fullmatch(r"level\d+", d.name))
    problems: list[Problem] = []
    for level_name in levels:
        level_dir = root / level_name
        if not level_dir.is_dir():
            have = sorted(d.name for d in root.iterdir() if d.is_dir())
            raise KrlError(f"KernelBench has no '{level_name}' under {root}.{did_you_mean(level_name, have)}")
        level = int(level_name.removeprefix("level"))
        files = sorted((p for p in level_dir.glob("*.py") if not p.name.startswith("_")), key=_sort_key)
        if len(parts) > 1:
            wanted = parts[1].removesuffix(".py")
            matches = [p for p in files if p.stem == wanted or p.stem.split("_", 1)[0] == wanted]
            if not matches:
                raise KrlError(f"no problem '{wanted}' in kernelbench/{level_name}."
                               f"{did_you_mean(wanted, [p.stem for p in files])}")
            files = matches
        problems += [load_problem_file(p, f"kernelbench/{level_name}", f"kernelbench/{level_name}/{p.stem}", level=level)
                     for p in files]
    return problems


# ---------------------------------------------------------------- paths

def load_path(path: Path) -> list[Problem]:
    path = path.expanduser()
    if path.is_file():
        return [load_problem_file(path, str(path.parent), f"{path.parent.name}/{path.stem}", level=_level_of(path))]
    if path.is_dir():
        files = sorted((p for p in path.rglob("*.py") if not p.name.startswith("_")), key=_sort_key)
        if not files:
            raise KrlError(f"{path} holds no problem files (*.py).")
        return [load_problem_file(p, str(path), f"{path.name}/{p.relative_to(path).with_suffix('').as_posix()}",
                                  level=_level_of(p)) for p in files]
    hint = did_you_mean(str(path).split("/", 1)[0], ["builtin", "kernelbench"])
    raise KrlError(f"problem set '{path}' is neither 'builtin', 'kernelbench/…', nor an existing file or folder.{hint}")


def _level_of(path: Path) -> int:
    match = re.search(r"level(\d+)", str(path.parent))
    return int(match.group(1)) if match else 0


# ---------------------------------------------------------------- entry points

def load_problem_set(ref: str) -> list[Problem]:
    """Resolve 'builtin', 'builtin/relu', 'kernelbench/level1[/19_ReLU]', a path, or a comma-separated list."""
    problems: list[Problem] = []
    for part in (p.strip() for p in ref.split(",")):
        if not part:
            continue
        if part == "builtin" or part.startswith("builtin/"):
            problems += load_builtin(part.split("/", 1)[1] if "/" in part else None)
        elif part == "kernelbench" or part.startswith("kernelbench/"):
            problems += load_kernelbench(part.split("/", 1)[1] if "/" in part else "")
        else:
            problems += load_path(Path(part))
    if not problems:
        raise KrlError(f"problem set '{ref}' is empty.")
    seen: dict[str, Problem] = {}
    for problem in problems:
        seen.setdefault(problem.id, problem)
    return list(seen.values())


def resolve_problem(ref: str) -> Problem:
    """One problem by id or path; error if the reference names several."""
    problems = load_problem_set(ref)
    if len(problems) != 1:
        raise KrlError(f"'{ref}' names {len(problems)} problems; give one (e.g. {problems[0].id}).")
    return problems[0]
