"""Fixtures of the app tests: a demo workspace recorded once per session by the real training loop and evaluator
(`krl demo --headless`), copied and normalised for each test that reads it (tests/app/recorded.py), and Tinker runs
the real loop made through failures and a resume (tests/app/loop_workspace.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.app.recorded import RECORDED_RUN, record_demo, recorded_workspace


@pytest.fixture(scope="session")
def recorded_demo_source(tmp_path_factory):
    """The raw recorded workspace (read it through `recorded_demo`; never write into this one)."""
    return record_demo(tmp_path_factory.mktemp("recorded-demo") / "ws")


@pytest.fixture
def recorded_demo(recorded_demo_source, workspace):
    """`workspace` filled with a normalised copy of the recorded demo; yields (registry, run row)."""
    from core.registry import Registry

    recorded_workspace(recorded_demo_source, workspace)
    reg = Registry.for_workspace(workspace)
    yield reg, reg.get_run(RECORDED_RUN)
    reg.close()


@pytest.fixture(scope="session")
def loop_runs(tmp_path_factory):
    """(workspace, {name: run id}) of runs the real training loop made against the Tinker SDK autospecs
    (tests/app/loop_workspace.py), once per session; tests only read it."""
    pytest.importorskip("tinker")
    from tests.app.loop_workspace import build_loop_workspace

    workspace = tmp_path_factory.mktemp("loop-runs") / "ws"
    workspace.mkdir()
    return workspace, build_loop_workspace(workspace)


@pytest.fixture
def make_read_only():
    """Make folders and files read-only even for root (chattr +i); undone after the test. Skips where the
    filesystem has no immutable flag."""
    done: list[Path] = []
    if not shutil.which("chattr"):
        pytest.skip("chattr is not installed")

    def apply(*paths: Path) -> None:
        for path in paths:
            result = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
            if result.returncode != 0:
                pytest.skip(f"cannot make {path} immutable here: {result.stderr.strip()}")
            done.append(path)

    yield apply
    for path in reversed(done):
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


REPO = Path(__file__).resolve().parents[2]


class Result:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.stderr = code, stdout, stderr


@pytest.fixture
def krl(workspace, monkeypatch, capsys):
    """`krl ARGS…` in this process through app.cli.main, as the console script runs it (COLUMNS=200 unless set);
    returns a Result with the exit code, stdout and stderr."""
    from tests.app.fixtures import run_krl

    monkeypatch.setenv("KRL_GPUS", "0")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.chdir(REPO)

    def run(*args, env=None):
        return Result(*run_krl(capsys, monkeypatch, args, env=env))

    return run
