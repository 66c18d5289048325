"""Fixtures shared by the view tests: the recorded demo plus a second real demo run in one workspace (compare,
grouping), recorded once per session and normalised like the recorded demo (tests/app/recorded.py)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys

import pytest

from core.registry import REGISTRY_FILENAME

try:  # schema v4 keeps the runs table's headline values in columns
    from core.registry import HEADLINE_COLUMNS, headline_values
except ImportError:
    HEADLINE_COLUMNS, _headline = (), None
from tests.app.recorded import RECORDED_RUN, copy_workspace, normalise

SECOND_RUN = "demo-short"
# Step metrics that follow from measured times (speedups, the speed reward and the totals that include it, timings,
# sensor samples): they differ between two recordings, so snapshots replace them with fixed values.
TIMED_METRIC = re.compile(r"reward/(speed|total|score_sum|turn_mean)|speedup|fast_|^time/|^system/")


def fix_timed_metrics(workspace) -> None:
    """Replace timing-derived step metrics (and the runs' last values of them) with values fixed by key and step."""
    conn = sqlite3.connect(str(workspace / REGISTRY_FILENAME))
    conn.create_function("timed", 1, lambda key: 1 if TIMED_METRIC.search(key) else 0)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    with conn:
        conn.execute("UPDATE metrics SET value = round(0.2 + ((step * 7 + length(key)) % 11) / 10.0, 2) "
                     "WHERE timed(key)")
        conn.execute("DELETE FROM metric_blocks")
        for run_id, summary in conn.execute("SELECT id, summary FROM runs").fetchall():
            summary = json.loads(summary or "{}")
            for key, value in conn.execute("SELECT key, value FROM metrics m WHERE run_id = ? AND timed(key) AND "
                                           "step = (SELECT max(step) FROM metrics WHERE run_id = m.run_id)",
                                           (run_id,)).fetchall():
                summary.setdefault("last", {})[key] = value
            conn.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(summary), run_id))
            if set(HEADLINE_COLUMNS) <= columns:  # the runs table's headline columns follow the summary
                conn.execute(f"UPDATE runs SET {', '.join(c + ' = ?' for c in HEADLINE_COLUMNS)} WHERE id = ?",
                             (*headline_values(summary), run_id))
    conn.close()


@pytest.fixture(scope="session")
def two_runs_source(recorded_demo_source, tmp_path_factory):
    """The recorded demo and a second real demo run (3 steps, seed 7) in one workspace, normalised, with the
    timing-derived metrics fixed."""
    path = copy_workspace(recorded_demo_source, tmp_path_factory.mktemp("two-runs") / "ws")
    proc = subprocess.run([sys.executable, "-m", "app", "demo", "--headless", "--json", "--name", SECOND_RUN,
                           "max_steps=3", "seed=7"], env={**os.environ, "KRL_WORKSPACE": str(path)},
                          capture_output=True, text=True, timeout=300, cwd=path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    normalise(path)
    fix_timed_metrics(path)
    return path


@pytest.fixture
def two_runs(two_runs_source, tmp_path):
    """A private copy: (workspace, [id of the recorded demo, id of the second run])."""
    from core.registry import Registry

    path = copy_workspace(two_runs_source, tmp_path / "two")
    with Registry.for_workspace(path) as reg:
        ids = [reg.get_run(RECORDED_RUN)["id"], reg.get_run(SECOND_RUN)["id"]]
    return path, ids
