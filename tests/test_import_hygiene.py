"""Import hygiene, checked in a fresh interpreter: the evaluator's public modules pull in no Ray, no web framework
and nothing of core/ (the arrows point app → core → evaluator), and the CLI's start-up loads no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _loaded_after(statement: str) -> set[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return {name.split(".")[0] for name in json.loads(done.stdout.strip().splitlines()[-1])}


@pytest.mark.parametrize("module", ["evaluator.api", "evaluator.factory"])
def test_evaluator_entry_points_load_no_cluster_web_or_core(module):
    loaded = _loaded_after(f"import {module}")
    assert not loaded & {"ray", "fastapi", "starlette", "uvicorn", "httpx", "core", "app", "torch"}


def test_cli_start_up_loads_no_torch_and_no_evaluator_extras():
    loaded = _loaded_after("import app.cli")
    assert not loaded & {"torch", "ray", "starlette", "uvicorn"}


def test_the_check_fails_when_a_module_is_loaded():
    """The probe itself can fail: importing json loads json."""
    assert "json" in _loaded_after("import json")
