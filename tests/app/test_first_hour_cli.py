"""The first hour at the command line (issue 26): output that stays whole when piped or narrow, exit codes that say
a user's mistake before anything is created, empty results that say why. `krl` runs in this process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


class Result:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.stderr = code, stdout, stderr


@pytest.fixture
def krl(workspace, monkeypatch, capsys):
    """`krl ARGS…` in this process through app.cli.main, as the console script runs it (COLUMNS=200 unless set)."""
    from app.cli import main

    monkeypatch.setenv("KRL_GPUS", "0")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.chdir(REPO)

    def run(*args, env=None):
        capsys.readouterr()
        with monkeypatch.context() as patch:
            for key, value in (env or {}).items():
                patch.setenv(key, value)
            patch.setattr(sys, "argv", ["krl", *args])
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def test_item7_problems_show_piped_is_the_whole_plain_source(krl):
    from core.problems import resolve_problem

    for problem in ("builtin/relu", "builtin/conv2d_bias_tanh_scale"):
        source = resolve_problem(problem).source
        done = krl("problems", "show", problem, env={"COLUMNS": "60"})
        assert done.code == 0 and done.stdout == source.rstrip("\n") + "\n", done.stdout[:400]
        assert "\x1b[" not in done.stdout
