"""The project's import arrows, enforced (issue 22): no circles, no upward import between evaluator layers, no wrong
package arrow, no private name taken across modules, no module over 800 lines. Imports inside functions count."""
from __future__ import annotations

import ast
import functools
import pathlib
import re
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("app", "core", "evaluator", "rag")
MAX_LINES = 800

# The evaluator's layers, top to bottom: a module may import only from its own layer or one listed before it.
# evaluator/__init__.py, api.py and factory.py (the public entry points) are the last layer.
EVALUATOR_LAYERS = ("contract", "isolation", "judging", "build", "slot", "local", "scale")
ENTRY_LAYER = len(EVALUATOR_LAYERS)

# Which top-level package may import which (besides itself). evaluator and rag stand alone: usable without a run.
ALLOWED_ARROWS = {"app": {"core", "evaluator", "rag"}, "core": {"evaluator", "rag"}, "evaluator": set(), "rag": set()}

@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # a module of the project
    line: int
    private_name: str = ""  # set when the statement takes a `_name` that is not a module


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            modules[module_name(path, root)] = path
    return modules


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def imports_of(name: str, path: pathlib.Path, modules: dict) -> list[Import]:
    """Every import statement of the module, at any depth, resolved to the project modules it loads."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.append(Import(name, alias.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                child = f"{base}.{alias.name}"
                if child in modules:
                    found.append(Import(name, child, node.lineno))
                elif base in modules:
                    found.append(Import(name, base, node.lineno, alias.name if is_private(alias.name) else ""))
    return sorted({i for i in found if i.target != name}, key=lambda i: (i.line, i.target, i.private_name))


def unresolved_imports(root: pathlib.Path = ROOT) -> list[str]:
    """Imports of a project package that name no module of it (a module left behind by a move), at any depth:
    a deferred import that no test runs would otherwise only fail in use."""
    modules = project_modules(root)
    wrong = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets = [node.module]
                package = modules.get(node.module)
                if package is not None and package.name == "__init__.py":  # `from evaluator import pool`
                    text = package.read_text()
                    targets += [f"{node.module}.{alias.name}" for alias in node.names
                                if not re.search(rf"\b{re.escape(alias.name)}\b", text)]
            else:
                continue
            for target in targets:
                if target.split(".")[0] in PACKAGES and target not in modules:
                    wrong.append(f"{name} (line {node.lineno}) imports {target}, which is no module of the project")
    return wrong


def import_graph(root: pathlib.Path = ROOT) -> list[Import]:
    modules = project_modules(root)
    return [i for name, path in modules.items() for i in imports_of(name, path, modules)]


def circles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set] = {}
    for e in edges:
        graph.setdefault(e.importer, set()).add(e.target)
        graph.setdefault(e.target, set())
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def evaluator_layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in EVALUATOR_LAYERS:
        return EVALUATOR_LAYERS.index(parts[1])
    return ENTRY_LAYER


def upward_imports(edges: list[Import]) -> list[str]:
    wrong = []
    for e in edges:
        if e.importer.startswith("evaluator") and e.target.startswith("evaluator"):
            if e.target == "evaluator":
                continue  # the package's docstring-only __init__
            if evaluator_layer(e.target) > evaluator_layer(e.importer):
                wrong.append(f"{e.importer} (line {e.line}) imports {e.target}, a layer above it")
    return wrong


def wrong_arrows(edges: list[Import]) -> list[str]:
    wrong = []
    for e in edges:
        source, target = e.importer.split(".")[0], e.target.split(".")[0]
        if source != target and target not in ALLOWED_ARROWS[source]:
            wrong.append(f"{e.importer} (line {e.line}) imports {e.target}: {source} may not import {target}")
    return wrong


def private_imports(edges: list[Import]) -> list[str]:
    return [f"{e.importer} (line {e.line}) takes {e.private_name} from {e.target}" for e in edges if e.private_name]


def oversized(root: pathlib.Path = ROOT) -> dict[str, int]:
    sizes = {name: len(path.read_text().splitlines()) for name, path in project_modules(root).items()}
    return {name: lines for name, lines in sizes.items() if lines > MAX_LINES}


# ---------------------------------------------------------------- the checks of the checker, on a made-up project

def write_project(tmp_path, files: dict[str, str]) -> pathlib.Path:
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
    return tmp_path


def test_the_checker_sees_deferred_circles_upward_imports_arrows_privates_and_size(tmp_path):
    root = write_project(tmp_path, {
        "evaluator/__init__.py": "",
        "evaluator/contract/__init__.py": "",
        "evaluator/contract/types.py": "def f():\n    from evaluator.local import pool\n",  # deferred, upward
        "evaluator/local/__init__.py": "",
        "evaluator/local/pool.py": "from ..contract.types import _secret\nfrom evaluator.contract import types\n",
        "evaluator/api.py": "import core.train\nfrom evaluator.pool import Pool\n" + "x = 1\n" * 801,
        "core/__init__.py": "",
        "core/train.py": "from evaluator import api\nfrom evaluator import pool\n",
    })
    edges = import_graph(root)
    assert ["evaluator.contract.types", "evaluator.local.pool"] in circles(edges)
    assert any("evaluator.contract.types" in w and "evaluator.local.pool" in w for w in upward_imports(edges))
    assert any("evaluator.api" in w and "core.train" in w for w in wrong_arrows(edges))
    assert private_imports(edges) == ["evaluator.local.pool (line 1) takes _secret from evaluator.contract.types"]
    assert list(oversized(root)) == ["evaluator.api"]
    assert sorted(unresolved_imports(root)) == [
        "core.train (line 2) imports evaluator.pool, which is no module of the project",
        "evaluator.api (line 2) imports evaluator.pool, which is no module of the project"]


def test_the_checker_passes_a_clean_project(tmp_path):
    root = write_project(tmp_path, {
        "evaluator/__init__.py": "",
        "evaluator/contract/__init__.py": "",
        "evaluator/contract/types.py": "import os\n",
        "evaluator/local/__init__.py": "",
        "evaluator/local/pool.py": "from evaluator.contract.types import Verdict\nfrom evaluator.contract import types\n",
        "evaluator/api.py": "def open():\n    from evaluator.local.pool import Pool\n",
        "core/__init__.py": "",
        "core/train.py": "from evaluator import api\nfrom evaluator.api import __doc__\n",
    })
    edges = import_graph(root)
    assert len(edges) == 5
    assert not circles(edges) and not upward_imports(edges) and not wrong_arrows(edges)
    assert not private_imports(edges) and not oversized(root) and not unresolved_imports(root)


# ---------------------------------------------------------------- the project itself

@functools.cache
def project_graph() -> tuple[Import, ...]:
    return tuple(import_graph())


def test_no_import_circles():
    found = circles(list(project_graph()))
    assert not found, "import circles (imports inside functions count):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_evaluator_layers_import_only_downwards():
    found = upward_imports(list(project_graph()))
    order = " > ".join(reversed(("contract", "isolation", "judging", "build", "slot", "local", "scale", "api/factory")))
    assert not found, f"upward imports between evaluator layers ({order}):\n" + "\n".join(found)


def test_package_arrows_point_one_way():
    found = wrong_arrows(list(project_graph()))
    assert not found, "imports against the package arrows (app -> core -> evaluator, core -> rag):\n" + "\n".join(found)


def test_no_private_name_is_imported_from_another_module():
    found = private_imports(list(project_graph()))
    assert not found, "private names taken across modules (make them public where they are shared):\n" + "\n".join(found)


def test_every_project_import_names_a_module():
    found = unresolved_imports()
    assert not found, "imports of modules that do not exist (moved? see ARCHITECTURE.md):\n" + "\n".join(found)


def test_no_module_over_800_lines():
    found = oversized()
    assert not found, "modules over 800 lines: " + ", ".join(f"{name} ({lines})" for name, lines in found.items())

