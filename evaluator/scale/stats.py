"""Views of any evaluator's stats(): the compile figures a cluster carries and one row per node/device.
Plain functions over dicts, shared by the service, the HTTP client, the CLI and the TUI."""

from __future__ import annotations

from typing import Any


# A cluster's compile figures (evaluator/scale/cluster.py), passed through the service's /v1/workers and the HTTP client.
COMPILE_STATS_KEYS = ("compile_queue_depth", "compiles_in_flight", "compiles_per_min", "compile_nodes")


def compile_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """The compile figures an evaluator's stats() carries (none for a local pool)."""
    return {key: stats[key] for key in COMPILE_STATS_KEYS if key in stats}


def worker_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per node/device from any evaluator's stats(): state, queue, done, failures, evals per minute.
    The local pool reports processes; a cluster or a service already reports rows ("nodes")."""
    if "nodes" in stats:
        return list(stats["nodes"])
    broken = stats.get("broken") or {}
    devices: dict[str, dict[str, Any]] = {}
    for worker in stats.get("workers", []):
        if worker.get("role") != "eval":
            continue
        row = devices.setdefault(worker["device"], {"node": "local", "device": worker["device"], "gpu_name": "",
                                                   "ready": 0, "busy": 0, "starting": 0})
        if worker["state"] in ("idle", "busy") and not worker.get("spare"):
            row["ready"] += 1
            row["busy"] += worker["state"] == "busy"
        elif worker["state"] == "starting":
            row["starting"] += 1
    for device in broken:
        if device != "compile":
            devices.setdefault(device, {"node": "local", "device": device, "gpu_name": "", "ready": 0, "busy": 0,
                                        "starting": 0})
    rows = []
    for device, row in devices.items():
        state = "broken" if device in broken else ("ready" if row["ready"] else "starting")
        rows.append({"node": row["node"], "device": device, "gpu_name": row["gpu_name"], "state": state,
                     "in_flight": row["busy"], "done": None, "failures": None,  # the pool counts per pool, not device
                     "evals_per_min": None, "why": broken.get(device, "")})
    return rows
