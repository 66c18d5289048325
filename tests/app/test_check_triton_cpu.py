"""`krl check` of a Triton kernel on a machine without a GPU runs it under the Triton interpreter: the command must
say that its timing means nothing there (issue 13, bug 9). Real CLI process, real evaluator on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CANDIDATE = Path(__file__).resolve().parents[1] / "evaluator" / "candidates" / "relu_triton.py"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.slow
@pytest.mark.skipif(_cuda(), reason="the note is for CPU machines")
def test_check_of_triton_on_cpu_says_timing_is_meaningless(workspace):
    proc = subprocess.run([sys.executable, "-m", "app", "check", "builtin/relu", str(CANDIDATE), "--devices", "cpu",
                           "--timing-trials", "3"], capture_output=True, text=True, timeout=240, cwd=workspace,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Triton interpreter" in proc.stderr and "meaningless" in proc.stderr, proc.stderr[-2000:]
