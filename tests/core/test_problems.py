"""Tests for the problem loader: the built-in set, a KernelBench checkout, paths, bad files, and the CLI.
Built-in problems are executed for real (defaults and size overrides) to check they obey the size-knob rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from core.errors import KrlError
from core.problems import (
    KERNELBENCH_ENV,
    builtin_dir,
    load_problem_set,
    resolve_problem,
)

REPO = Path(__file__).resolve().parents[2]

GOOD_PROBLEM = '''"""A test problem."""
import torch
import torch.nn as nn

BATCH = 4
DIM = 8


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
'''


def _exec_problem(problem, overrides: dict | None = None) -> types.ModuleType:
    """What the evaluator does: exec the source, then set size overrides as module globals."""
    module = types.ModuleType(f"problem_{problem.hash}")
    exec(compile(problem.source, problem.path, "exec"), module.__dict__)
    for name, value in (overrides or {}).items():
        setattr(module, name, value)
    return module


def _shapes(values) -> list:
    return [tuple(v.shape) if hasattr(v, "shape") else v for v in values]


# ---------------------------------------------------------------- built-in set

BUILTIN = load_problem_set("builtin")


def test_builtin_set_is_large_and_spread_like_kernelbench():
    assert len(BUILTIN) >= 18
    levels = {p.level for p in BUILTIN}
    assert levels == {1, 2}
    assert sum(p.level == 2 for p in BUILTIN) >= 4
    tags = {t for p in BUILTIN for t in p.tags}
    for needed in ("activation", "reduction", "softmax", "norm", "matmul", "conv", "pool", "fused"):
        assert needed in tags, needed
    # Curated order: level 1 before level 2, ReLU first.
    assert BUILTIN[0].id == "builtin/relu"
    assert [p.level for p in BUILTIN] == sorted(p.level for p in BUILTIN)


def test_builtin_index_and_files_match():
    import yaml

    index = yaml.safe_load((builtin_dir() / "index.yaml").read_text())
    stems = {p.stem for p in builtin_dir().glob("*.py") if not p.name.startswith("_")}
    assert set(index) == stems
    for stem, entry in index.items():
        assert set(entry) >= {"level", "name", "tags", "gpu_sizes"}, stem


def test_builtin_ids_names_hashes_and_metadata():
    ids = [p.id for p in BUILTIN]
    assert len(ids) == len(set(ids))
    for problem in BUILTIN:
        assert problem.id == f"builtin/{Path(problem.path).stem}"
        assert problem.set == "builtin"
        assert len(problem.hash) == 16
        assert problem.metadata["size_constants"], f"{problem.id} has no module-level size constants"
        # gpu_sizes override existing constants and only ever make the problem bigger.
        for name, value in problem.gpu_sizes.items():
            default = problem.metadata["size_constants"].get(name)
            assert default is not None, f"{problem.id}: gpu_sizes names unknown constant {name}"
            assert value >= default, f"{problem.id}: gpu size {name}={value} is below the default {default}"
        assert problem.gpu_sizes, f"{problem.id} has no gpu_sizes"


def test_ids_and_hashes_are_stable_across_loads():
    again = load_problem_set("builtin")
    assert [(p.id, p.hash) for p in again] == [(p.id, p.hash) for p in BUILTIN]
    relu = resolve_problem("builtin/relu")
    assert relu.hash == next(p.hash for p in BUILTIN if p.id == "builtin/relu")
    # The same problem by name or file path has the same hash.
    assert resolve_problem("builtin/ReLU").id == "builtin/relu"
    assert resolve_problem(relu.path).hash == relu.hash


@pytest.mark.parametrize("problem", BUILTIN, ids=lambda p: p.id)
def test_builtin_problem_runs_fast_at_default_size(problem):
    import torch

    module = _exec_problem(problem)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    with torch.no_grad():
        model(*inputs)  # warm-up: first calls allocate and pick kernels
        start = time.perf_counter()
        output = model(*inputs)
        elapsed_s = time.perf_counter() - start
    assert isinstance(output, torch.Tensor)
    assert torch.isfinite(output).all(), problem.id
    assert elapsed_s < 0.5, f"{problem.id} forward took {elapsed_s:.3f}s on CPU at the default size"


@pytest.mark.parametrize("problem", BUILTIN, ids=lambda p: p.id)
def test_builtin_problem_reads_size_constants_at_call_time(problem):
    """Each gpu_sizes constant, set as a module global after exec, changes the inputs or init args,
    and the model still runs at the new size (so init and inputs stay consistent)."""
    import torch

    base = _exec_problem(problem)
    base_shapes, base_init = _shapes(base.get_inputs()), list(base.get_init_inputs())
    for name, default in problem.metadata["size_constants"].items():
        if name not in problem.gpu_sizes:
            continue
        # A small odd change keeps CPU cost low and catches code that ignores the constant.
        new_value = default + 1 if isinstance(default, int) else default * 1.5
        module = _exec_problem(problem, {name: new_value})
        inputs, init = module.get_inputs(), list(module.get_init_inputs())
        assert _shapes(inputs) != base_shapes or init != base_init, (
            f"{problem.id}: setting {name}={new_value} changed neither inputs nor init inputs")
        with torch.no_grad():
            module.Model(*init)(*inputs)


@pytest.mark.parametrize("problem", [p for p in BUILTIN if p.level == 1 and "activation" in p.tags],
                         ids=lambda p: p.id)
def test_activation_output_differs_from_input(problem):
    """An identity 'kernel' must not pass: inputs have negatives and the op changes them."""
    import torch

    module = _exec_problem(problem)
    torch.manual_seed(1)
    (x,) = module.get_inputs()
    assert (x < 0).float().mean() > 0.2, f"{problem.id} inputs need negative values"
    with torch.no_grad():
        y = module.Model(*module.get_init_inputs())(x.clone())
    assert y.shape == x.shape
    assert not torch.allclose(y, x, atol=1e-3, rtol=1e-3), f"{problem.id}: identity would pass"


def test_unknown_builtin_suggests_close_names():
    with pytest.raises(KrlError, match="no built-in problem 'rellu'.*relu"):
        load_problem_set("builtin/rellu")


# ---------------------------------------------------------------- KernelBench checkout

def _fake_kernelbench(root: Path, nested: bool) -> Path:
    base = root / "KernelBench" if nested else root
    for level, names in ((1, ("19_ReLU", "1_Square_matrix_multiplication_", "23_Softmax")),
                         (2, ("12_Gemm_Multiply_LeakyReLU",))):
        folder = base / f"level{level}"
        folder.mkdir(parents=True)
        for name in names:
            (folder / f"{name}.py").write_text(GOOD_PROBLEM.replace("A test problem", name))
    return root


@pytest.mark.parametrize("nested", [True, False], ids=["KernelBench-subfolder", "levels-at-root"])
def test_kernelbench_checkout_both_layouts(tmp_path, monkeypatch, nested):
    monkeypatch.setenv(KERNELBENCH_ENV, str(_fake_kernelbench(tmp_path, nested)))
    level1 = load_problem_set("kernelbench/level1")
    # Numeric order, like KernelBench's own numbering.
    assert [p.id for p in level1] == ["kernelbench/level1/1_Square_matrix_multiplication_",
                                      "kernelbench/level1/19_ReLU", "kernelbench/level1/23_Softmax"]
    assert all(p.level == 1 and p.set == "kernelbench/level1" for p in level1)
    relu = resolve_problem("kernelbench/level1/19_ReLU")
    assert relu.name == "ReLU" and "activation" in relu.tags
    assert resolve_problem("kernelbench/level1/19").id == relu.id
    assert resolve_problem("kernelbench/level1/19_ReLU.py").id == relu.id
    everything = load_problem_set("kernelbench")
    assert {p.level for p in everything} == {1, 2}
    assert len(everything) == 4


def test_kernelbench_ids_and_hashes_do_not_depend_on_the_checkout_location(tmp_path, monkeypatch):
    first = _fake_kernelbench(tmp_path / "a", nested=True)
    second = _fake_kernelbench(tmp_path / "b", nested=False)
    monkeypatch.setenv(KERNELBENCH_ENV, str(first))
    a = [(p.id, p.hash) for p in load_problem_set("kernelbench/level1")]
    monkeypatch.setenv(KERNELBENCH_ENV, str(second))
    b = [(p.id, p.hash) for p in load_problem_set("kernelbench/level1")]
    assert a == b


def test_kernelbench_root_unset_names_the_variable(monkeypatch):
    monkeypatch.delenv(KERNELBENCH_ENV, raising=False)
    with pytest.raises(KrlError, match=f"{KERNELBENCH_ENV} is not set"):
        load_problem_set("kernelbench/level1/19_ReLU")


def test_kernelbench_root_wrong(tmp_path, monkeypatch):
    monkeypatch.setenv(KERNELBENCH_ENV, str(tmp_path))  # exists, but holds no level folders
    with pytest.raises(KrlError, match=f"{KERNELBENCH_ENV}=.*holds no level1"):
        load_problem_set("kernelbench/level1")
    monkeypatch.setenv(KERNELBENCH_ENV, str(tmp_path / "missing"))
    with pytest.raises(KrlError, match=f"{KERNELBENCH_ENV}=.*is not a folder"):
        load_problem_set("kernelbench/level1")


def test_kernelbench_unknown_level_or_problem(tmp_path, monkeypatch):
    monkeypatch.setenv(KERNELBENCH_ENV, str(_fake_kernelbench(tmp_path, nested=True)))
    with pytest.raises(KrlError, match="no 'level7'"):
        load_problem_set("kernelbench/level7")
    with pytest.raises(KrlError, match="no problem '19_Relu'.*19_ReLU"):
        load_problem_set("kernelbench/level1/19_Relu")


# ---------------------------------------------------------------- paths

def test_single_file_path(tmp_path):
    path = tmp_path / "mine" / "swish.py"
    path.parent.mkdir()
    path.write_text(GOOD_PROBLEM)
    problem = resolve_problem(str(path))
    assert problem.id == "mine/swish"
    assert problem.name == "swish"
    assert problem.metadata["size_constants"] == {"BATCH": 4, "DIM": 8}
    assert problem.source == GOOD_PROBLEM


def test_folder_path_loads_every_file_recursively(tmp_path):
    folder = tmp_path / "set"
    (folder / "level2").mkdir(parents=True)
    (folder / "2_b.py").write_text(GOOD_PROBLEM)
    (folder / "10_a.py").write_text(GOOD_PROBLEM)
    (folder / "level2" / "c.py").write_text(GOOD_PROBLEM)
    (folder / "_helpers.py").write_text("x = 1\n")  # private files are not problems
    problems = load_problem_set(str(folder))
    assert sorted(p.id for p in problems) == ["set/10_a", "set/2_b", "set/level2/c"]
    assert next(p for p in problems if p.id == "set/level2/c").level == 2


def test_comma_separated_sets_are_merged_without_duplicates(tmp_path):
    path = tmp_path / "x.py"
    path.write_text(GOOD_PROBLEM)
    problems = load_problem_set(f"builtin/relu, {path}, builtin/relu")
    assert [p.id for p in problems] == ["builtin/relu", f"{tmp_path.name}/x"]
    with pytest.raises(KrlError, match="names 2 problems"):
        resolve_problem(f"builtin/relu,{path}")


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(KrlError, match="neither 'builtin'"):
        load_problem_set(str(tmp_path / "nope.py"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(KrlError, match="holds no problem files"):
        load_problem_set(str(tmp_path / "empty"))


def test_content_hash_follows_the_source(tmp_path):
    path = tmp_path / "p.py"
    path.write_text(GOOD_PROBLEM)
    first = resolve_problem(str(path))
    assert resolve_problem(str(path)).hash == first.hash
    path.write_text(GOOD_PROBLEM.replace("DIM = 8", "DIM = 9"))
    second = resolve_problem(str(path))
    assert second.id == first.id and second.hash != first.hash


# ---------------------------------------------------------------- bad files

@pytest.mark.parametrize("missing", ["Model", "get_inputs", "get_init_inputs"])
def test_file_missing_a_required_name_says_which(tmp_path, missing):
    renamed = {"Model": "class Model(", "get_inputs": "def get_inputs(", "get_init_inputs": "def get_init_inputs("}
    source = GOOD_PROBLEM.replace(renamed[missing], renamed[missing].replace(missing, missing + "_x"))
    path = tmp_path / "bad.py"
    path.write_text(source)
    with pytest.raises(KrlError, match=f"missing: {missing}$|missing: {missing}\\.") as info:
        resolve_problem(str(path))
    others = {"Model", "get_inputs", "get_init_inputs"} - {missing}
    assert all(f"missing: {o}" not in str(info.value) for o in others)
    assert str(path) in str(info.value)


def test_file_with_syntax_error(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(GOOD_PROBLEM.replace("def get_inputs():", "def get_inputs(:"))
    with pytest.raises(KrlError, match=r"broken.py: not valid Python \(line \d+"):
        resolve_problem(str(path))


def test_names_imported_from_elsewhere_count_as_defined(tmp_path):
    path = tmp_path / "reexport.py"
    path.write_text("from somewhere import Model, get_inputs\n\ndef get_init_inputs():\n    return []\n")
    assert resolve_problem(str(path)).id == f"{tmp_path.name}/reexport"


# ---------------------------------------------------------------- CLI

def _krl(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != KERNELBENCH_ENV}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)


def test_cli_problems_ls_json():
    result = _krl("problems", "ls", "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert [p["id"] for p in listed] == [p.id for p in BUILTIN]
    relu = listed[0]
    assert relu["id"] == "builtin/relu" and relu["level"] == 1
    assert relu["size_constants"] and relu["gpu_sizes"] and len(relu["hash"]) == 16


def test_cli_problems_ls_filters_and_paths(tmp_path):
    path = tmp_path / "one.py"
    path.write_text(GOOD_PROBLEM)
    fused = json.loads(_krl("problems", "ls", "--tag", "fused", "--json").stdout)
    assert fused and all(p["level"] == 2 for p in fused)
    mine = json.loads(_krl("problems", "ls", "--set", str(path), "--json").stdout)
    assert [p["id"] for p in mine] == [f"{tmp_path.name}/one"]


def test_cli_user_errors_exit_2_without_traceback():
    result = _krl("problems", "ls", "--set", "kernelbench/level1", "--json")
    assert result.returncode == 2
    assert KERNELBENCH_ENV in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""
