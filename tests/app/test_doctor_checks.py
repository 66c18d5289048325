"""`krl doctor` runs its checks side by side and says which took how long (issue 26 item 18): a slow nvidia-smi and
a slow nvcc cost the slower of the two, not their sum, and a torch that fails to import is still reported."""

from __future__ import annotations

import json
import re


def _slow_tool(folder, name: str, seconds: float) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\nsleep {seconds}\nexit 1\n")
    path.chmod(0o755)


def test_doctor_checks_run_side_by_side_and_are_timed(krl, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    _slow_tool(tools, "nvidia-smi", 3)
    _slow_tool(tools, "nvcc", 3)
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise RuntimeError('this torch is broken on purpose')\n")
    import os

    env = {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(tmp_path / "site")}
    done = krl("doctor", "--json", env=env)
    report = json.loads(done.stdout)
    checks = report["checks"]
    assert set(checks) >= {"nvidia-smi", "nvcc", "torch", "triton", "sandbox", "workspace"}
    smi, nvcc = checks["nvidia-smi"], checks["nvcc"]
    assert smi["took_s"] >= 2.5 and nvcc["took_s"] >= 2.5, checks
    # Side by side: each began before the other ended.
    assert smi["started_s"] < nvcc["started_s"] + nvcc["took_s"] and \
        nvcc["started_s"] < smi["started_s"] + smi["took_s"], checks
    assert report["torch"] is None and "broken on purpose" in report["torch_error"]
    assert report["gpus"]["devices"] == [] and report["nvcc"] == "present"

    human = krl("doctor", env=env)
    assert "broken on purpose" in human.stderr
    line = next(line for line in human.stderr.splitlines() if line.startswith("checks took"))
    assert re.search(r"nvidia-smi [3-9]\.\d s", human.stderr) and re.search(r"nvcc [3-9]\.\d s", human.stderr), line


CHECK_IN_A_CHILD = """
import runpy, sys
sys.argv = ["krl", "check", "builtin/relu", sys.argv[1], "--no-timing", "--json"]
try:
    runpy.run_module("app", run_name="__main__")
except SystemExit:
    pass
print("TORCH_IMPORTED_HERE", "torch" in sys.modules, file=sys.stderr)
"""


def test_check_on_a_cpu_machine_never_imports_torch_in_the_cli_process(tmp_path, workspace):
    # The Evaluator counts GPUs with torch when it is told "auto" and finds no nvidia-smi; krl check says "cpu" itself
    # when this machine shows no GPU, so its own process starts no torch (a second or more on a CPU machine).
    import os
    import subprocess
    import sys

    from tests.app.conftest import REPO

    kernel = tmp_path / "relu.py"
    kernel.write_text("import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                      "        return torch.relu(x)\n")
    env = {**os.environ, "KRL_GPUS": "0", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", CHECK_IN_A_CHILD, str(kernel)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300, stdin=subprocess.DEVNULL)
    result = json.loads(done.stdout)
    assert result["verdict"] == "correct" and result["device_name"] == "cpu", done.stderr[-2000:]
    assert "TORCH_IMPORTED_HERE False" in done.stderr, done.stderr[-2000:]


def test_doctor_bounds_the_registry_page_check_and_full_reads_every_page(krl, workspace, monkeypatch):
    # SQLite reads a few hundred MB a second: a registry of many GB would make doctor that slow. Past the budget
    # doctor says the pages were not all read and how to read them all; --full does.
    from app.commands import doctor
    from core.registry import Registry

    Registry.for_workspace(workspace).close()
    monkeypatch.setattr(doctor, "INTEGRITY_BUDGET_S", 0.0)
    bounded = krl("doctor", "--json")
    assert json.loads(bounded.stdout)["workspace"]["pages_checked"] is False, bounded.stdout
    human = krl("doctor")
    assert "registry pages: not all read within 0 s" in human.stderr and "krl doctor --full" in human.stderr
    full = krl("doctor", "--full", "--json")
    assert json.loads(full.stdout)["workspace"]["pages_checked"] is True, full.stdout
    assert "registry pages" not in krl("doctor", "--full").stderr
