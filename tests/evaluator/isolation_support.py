"""Helpers for the isolation unit tests: a child Python that waits for a go line before it runs its code, so a test
can put it into a cgroup first."""

from __future__ import annotations

import subprocess
import sys

WAIT_THEN_RUN = "import sys\nsys.stdin.readline()\n"


def waiting_child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WAIT_THEN_RUN + code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def go(process: subprocess.Popen) -> None:
    process.stdin.write("go\n")
    process.stdin.flush()
