"""`krl check PROBLEM KERNEL_FILE`: one verdict, JSON on stdout, exit 0 whatever the verdict, 2 when it cannot run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def krl(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=240)


WRONG_RELU = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x  # identity: fails on the negative half of the inputs
'''


@pytest.mark.slow
def test_wrong_kernel_prints_json_verdict_and_exits_zero(tmp_path, workspace):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(WRONG_RELU)
    done = krl("check", "builtin/relu", str(kernel), "--json", "--devices", "cpu", "--no-timing", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["verdict"] == "wrong_output"
    assert result["problem_id"] == "builtin/relu"
    assert result["correctness_trials_passed"] == 0 and result["max_abs_diff"] > 0


def test_unknown_problem_and_missing_file_are_user_errors(tmp_path, workspace):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(WRONG_RELU)
    unknown = krl("check", "builtin/relux", str(kernel), cwd=tmp_path)
    assert unknown.returncode == 2 and "Did you mean" in unknown.stderr and "Traceback" not in unknown.stderr
    missing = krl("check", "builtin/relu", str(tmp_path / "nope.py"), cwd=tmp_path)
    assert missing.returncode == 2 and "cannot read kernel file" in missing.stderr
    bad_precision = krl("check", "builtin/relu", str(kernel), "--precision", "fp64", cwd=tmp_path)
    assert bad_precision.returncode == 2 and "unknown precision" in bad_precision.stderr
