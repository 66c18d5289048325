"""`krl doctor` reports the sandbox candidate code would run in, and exits 1 when there is no isolation at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def doctor(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, KRL_WORKSPACE=str(tmp_path / "ws"), COLUMNS="200", **env)
    return subprocess.run([sys.executable, "-m", "app", "doctor", *args], capture_output=True, text=True, cwd=REPO,
                          env=full_env, timeout=120, stdin=subprocess.DEVNULL)


def test_doctor_reports_the_sandbox_in_force(tmp_path):
    from evaluator.isolation.sandbox import isolation_report

    expected = isolation_report()
    done = doctor(tmp_path, "--json")
    report = json.loads(done.stdout)["isolation"]
    assert report["kind"] == expected.kind and report["missing"] == list(expected.missing)
    assert done.returncode == (1 if expected.kind == "none" else 0), done.stderr
    human = doctor(tmp_path)
    assert f"sandbox: {expected.kind}" in human.stderr


def test_doctor_fails_loudly_without_isolation(tmp_path):
    done = doctor(tmp_path, KRL_SANDBOX="none")
    assert done.returncode == 1
    assert "sandbox: none" in done.stderr and "no OS isolation" in done.stderr and "MISSING: no network" in done.stderr
    broken = doctor(tmp_path, "--json", KRL_SANDBOX="chroot")
    assert broken.returncode == 1 and "unknown sandbox kind" in json.loads(broken.stdout)["isolation"]["error"]
