"""Snapshots of a run's remote evaluator (a Ray cluster or a `krl serve` service) for the TUI's Cluster tab: per node
and GPU state, load, throughput and failures, written every few seconds as `cluster.json` in the run's folder."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "cluster.json"
RECORD_EVERY_S = float(os.environ.get("KRL_CLUSTER_EVERY_S", "5"))
# A snapshot older than this many recording periods (and never less than MIN_STALE_S) is shown as stale: the job
# stopped recording (killed, frozen) or its evaluator's stats call hangs.
STALE_PERIODS = 3
MIN_STALE_S = 15.0
# What a row may carry; a key the evaluator does not report stays None (shown as "–"). `role` is "eval" for an
# evaluation actor (a node's GPU or CPU share) and "compile" for a Ray cluster's compile actor (stats "compile_nodes").
ROW_KEYS = ("role", "node", "device", "gpu_name", "gpu_util_percent", "state", "in_flight", "done", "failures",
            "evals_per_min", "compile_queue_depth", "compiles_in_flight", "compiles_per_min", "why")
COMPILE_KEYS = ("compile_queue_depth", "compiles_in_flight", "compiles_per_min")


def _sum(values: list[Any]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def take_snapshot(stats: dict[str, Any], address: str, every_s: float = RECORD_EVERY_S,
                  now: Optional[float] = None) -> dict[str, Any]:
    """A JSON-ready snapshot of an evaluator's stats(): one row per node/device and the cluster's totals."""
    from evaluator.factory import worker_rows

    rows = [{key: row.get(key) for key in ROW_KEYS} | {"role": "eval"} for row in worker_rows(stats)]
    compile_rows = [{key: row.get(key) for key in ROW_KEYS} | {"role": "compile", "device": _compile_device(row)}
                    for row in stats.get("compile_nodes") or []]
    counters = dict(stats.get("stats") or {})
    done = _sum([row["done"] for row in rows])
    totals = {
        "nodes": len({row["node"] for row in rows + compile_rows}),
        "devices": len(rows),
        "ready": sum(row["state"] == "ready" for row in rows),
        "queue_depth": stats.get("queue_depth"),
        "in_flight": _sum([row["in_flight"] for row in rows]),
        "done": done if done is not None else counters.get("results"),
        "failures": _sum([row["failures"] for row in rows]),
        "evals_per_min": _sum([row["evals_per_min"] for row in rows]),
        "compile_actors": len(compile_rows),
    }
    for key in COMPILE_KEYS:  # the cluster's own figure where it gives one, else the rows' sum
        totals[key] = stats[key] if stats.get(key) is not None else _sum([row[key] for row in rows + compile_rows])
    rows += compile_rows
    return {"address": address, "kind": stats.get("kind", ""), "taken_at": time.time() if now is None else now,
            "every_s": every_s, "rows": rows, "totals": totals, "counters": counters, "error": "", "final": False}


def _compile_device(row: dict[str, Any]) -> str:
    return f"compile x{row['workers']}" if row.get("workers") else "compile"


def write_snapshot(run_dir: Path, snapshot: dict[str, Any]) -> Path:
    """Replace the run's snapshot atomically (a reader sees the previous one or this one, never a part)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / SNAPSHOT_FILE
    tmp = run_dir / f".{SNAPSHOT_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(snapshot))
    os.replace(tmp, path)
    return path


def read_snapshot(run_dir: Path) -> Optional[dict[str, Any]]:
    """The run's latest snapshot, or None when it has none (a local evaluator, or none written yet)."""
    try:
        return json.loads((Path(run_dir) / SNAPSHOT_FILE).read_text())
    except FileNotFoundError:
        return None


def snapshot_age_s(snapshot: dict[str, Any], now: float) -> float:
    return max(0.0, now - float(snapshot.get("taken_at") or 0.0))


def is_stale(snapshot: dict[str, Any], now: float) -> bool:
    """True when the job should have written a newer one by now (a final snapshot is never stale: it is the last)."""
    if snapshot.get("final"):
        return False
    every_s = float(snapshot.get("every_s") or RECORD_EVERY_S)
    return snapshot_age_s(snapshot, now) > max(MIN_STALE_S, STALE_PERIODS * every_s)


class ClusterRecorder:
    """Writes the snapshot of one run's remote evaluator every `every_s` seconds, and soon after each step, from a
    thread of its own: a stats() call to a slow or unreachable service never holds up the training loop."""

    def __init__(self, evaluator: Any, address: str, run_dir: Path, every_s: float = RECORD_EVERY_S) -> None:
        self.evaluator = evaluator
        self.address = address
        self.run_dir = Path(run_dir)
        self.every_s = every_s
        self._wake = threading.Event()
        self._stopping = False
        self._last: Optional[dict[str, Any]] = None
        self._thread = threading.Thread(target=self._loop, name="krl-cluster-snapshot", daemon=True)

    def start(self) -> "ClusterRecorder":
        self._wake.set()  # the first snapshot at once, from the thread
        self._thread.start()
        return self

    def record_soon(self) -> None:
        """Ask for a snapshot now (at the end of a step) without waiting for it."""
        self._wake.set()

    def record(self, final: bool = False) -> dict[str, Any]:
        """Take and write one snapshot. A failing stats() call is recorded as the snapshot's error, with the last
        good rows kept, so the view says why the figures stopped moving."""
        try:
            snapshot = take_snapshot(self.evaluator.stats(), self.address, self.every_s)
        except Exception as exc:  # noqa: BLE001 - watching the evaluator must never fail the run
            snapshot = dict(self._last or take_snapshot({}, self.address, self.every_s))
            snapshot.update(taken_at=time.time(), error=f"{type(exc).__name__}: {exc}"[:500])
        else:
            self._last = snapshot
        snapshot["final"] = final
        try:
            write_snapshot(self.run_dir, snapshot)
        except OSError as exc:  # a full disk must not stop training either; the view will show it stale
            log.warning("could not write the cluster snapshot: %s", exc)
        return snapshot

    def stop(self, timeout_s: float = 10.0) -> None:
        """Write a last snapshot (marked final) and end the thread; call it before the evaluator is closed."""
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.every_s)
            self._wake.clear()
            stopping = self._stopping
            self.record(final=stopping)
            if stopping:
                return


def start_recording(evaluator: Any, address: str, run_dir: Path) -> Optional[ClusterRecorder]:
    """A started recorder when the run evaluates on a cluster or a service (`address` non-empty); None for this
    machine's pool, whose workers the System tab already shows."""
    if not address:
        return None
    return ClusterRecorder(evaluator, address, run_dir).start()
