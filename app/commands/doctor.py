"""CLI command: `krl doctor` reports what this machine offers kernelrl (GPUs, CUDA/nvcc, torch/triton, Tinker key,
the sandbox candidate code runs in) and the workspace's health (registry, schema version, stale runs). Never prints
secrets; exits 1 when candidate code would run with no OS isolation at all."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import socket
import subprocess
import time
from typing import Any

import typer

from app.commands.side_by_side import run_side_by_side, timing_line


def _run(argv: list[str], timeout_s: float = 10.0) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _gpus() -> dict[str, Any]:
    info: dict[str, Any] = {"nvidia_smi": None, "devices": [], "driver": None}
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"])
        info["nvidia_smi"] = out is not None
        for line in (out or "").strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 4:
                info["devices"].append({"index": int(parts[0]), "name": parts[1], "memory": parts[2]})
                info["driver"] = parts[3]
    return info


def _nvcc() -> str | None:
    path = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                    if os.environ.get("CUDA_HOME") else None)
    if not path or not os.path.exists(path):
        return None
    out = _run([path, "--version"]) or ""
    for line in out.splitlines():
        if "release" in line:
            return line.split("release", 1)[1].split(",")[0].strip()
    return "present"


# Run in child Pythons so torch's import (the slowest check) overlaps the others, and a torch that crashes on import
# is reported instead of taking doctor down with it. os._exit skips tearing torch down (a quarter of a second).
TORCH_PROBE = """
import json
import os
out = {}
try:
    import torch

    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    out["torch_devices"] = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                            if out["cuda_available"] else [])
except Exception as exc:
    out["torch"] = None
    out["torch_error"] = str(exc)[:200]
print(json.dumps(out), flush=True)
os._exit(0)
"""
TRITON_PROBE = """
import json
import os
try:
    import triton

    out = {"triton": triton.__version__}
except Exception:
    out = {"triton": None}
print(json.dumps(out), flush=True)
os._exit(0)
"""
PROBE_TIMEOUT_S = 180.0  # a cold torch import on a loaded machine can take a minute


def _probe_in_child(script: str, name: str) -> dict[str, Any]:
    """The JSON line a child Python prints after importing `name`, or {name: None, name_error: why}."""
    import sys

    failed = {name: None}
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {**failed, f"{name}_error": f"importing {name} took over {PROBE_TIMEOUT_S:.0f} s"}
    except OSError as exc:
        return {**failed, f"{name}_error": f"cannot start {sys.executable}: {exc}"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {**failed, f"{name}_error": f"importing {name} killed its process: {tail}"[:200]}


def _torch() -> dict[str, Any]:
    return _probe_in_child(TORCH_PROBE, "torch")


def _triton() -> dict[str, Any]:
    return {"triton": _probe_in_child(TRITON_PROBE, "triton")["triton"]}


def _isolation() -> dict[str, Any]:
    """The sandbox evaluation workers would get here (KRL_SANDBOX respected), with what it holds and lacks."""
    from evaluator.isolation.sandbox import SandboxUnavailable, isolation_report

    try:
        report = isolation_report()
    except SandboxUnavailable as exc:
        return {"kind": None, "error": str(exc), "protections": [], "missing": [], "notes": [], "strong": False,
                "lines": [f"sandbox: cannot start: {exc}"]}
    return dict(report.to_dict(), lines=report.lines())


# How long the registry's page check may take before doctor says it did not finish (`--full`: no limit). SQLite reads
# a few hundred MB a second here, so a registry of several GB would otherwise make doctor take that long.
INTEGRITY_BUDGET_S = 2.0


def _workspace(budget_s: float | None = INTEGRITY_BUDGET_S) -> dict[str, Any]:
    from core import procman
    from core.registry import REGISTRY_FILENAME, Registry, registry_damaged_error, workspace_path

    path = workspace_path()
    info: dict[str, Any] = {"path": str(path), "registry": str(path / REGISTRY_FILENAME), "exists": False}
    if path.exists() and not path.is_dir():
        info.update(exists=True, error=f"{path} is a file, not a folder")
        return info
    if not (path / REGISTRY_FILENAME).exists():
        return info
    info["exists"] = True
    try:
        reg = Registry.for_workspace(path, create=False)
    except Exception as exc:
        info["error"] = str(exc)
        return info
    try:
        integrity = reg.integrity_problems(budget_s=budget_s)
        info["pages_checked"] = integrity is not None
        info["size_bytes"] = reg.path.stat().st_size
        if integrity:
            info["error"] = registry_damaged_error(reg.path, "; ".join(integrity)).args[0]
            return info
        info["schema_version"] = reg.schema_version
        limit_s = procman.heartbeat_limit_s()
        now = time.time()
        stale = [r["name"] for r in reg.list_runs(status=("running", "stopping"))
                 if now - max(r.get("heartbeat_at") or 0, r.get("started_at") or 0) > limit_s
                 or (r.get("pid") and r.get("host") == socket.gethostname() and not procman.run_process_alive(r))]
        info["stale_runs"] = stale
        info["reconciled"] = procman.reconcile(reg)
        counts: dict[str, int] = {}
        for row in reg.list_runs():
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        info["runs"] = counts
        usage = procman.gpu_usage(reg)
        info["gpus"] = {"detected": usage["detected"], "held": {str(k): v for k, v in usage["held"].items()},
                        "free": usage["free"]}
    except sqlite3.DatabaseError as exc:
        info["error"] = registry_damaged_error(reg.path, exc).args[0]
    finally:
        reg.close()
    return info


def doctor(as_json: bool = typer.Option(False, "--json", help="Print the report as JSON to stdout."),
           full: bool = typer.Option(False, "--full", help="Check every page of the registry however long it takes "
                                                          f"(default: stop after {INTEGRITY_BUDGET_S:g} s).")) -> None:
    """What this machine has: GPUs, CUDA/nvcc, torch/triton versions, Tinker key present, the sandbox, workspace
    health. The checks run side by side; the last line says how long each took."""
    from core.registry import SCHEMA_VERSION

    started = time.perf_counter()
    checks = run_side_by_side({"nvidia-smi": _gpus, "nvcc": _nvcc, "torch": _torch, "triton": _triton,
                               "sandbox": _isolation,
                               "workspace": lambda: _workspace(None if full else INTEGRITY_BUDGET_S)})
    report = {
        "gpus": checks["nvidia-smi"].value,
        "nvcc": checks["nvcc"].value,
        **checks["torch"].value,
        **checks["triton"].value,
        "tinker_api_key": bool(os.environ.get("TINKER_API_KEY")),
        "isolation": checks["sandbox"].value,
        "workspace": checks["workspace"].value,
        "schema_version_supported": SCHEMA_VERSION,
        "checks": {name: {"started_s": round(timed.started_s, 3), "took_s": round(timed.took_s, 3)}
                   for name, timed in checks.items()},
    }
    whole_s = time.perf_counter() - started
    unisolated = report["isolation"]["kind"] in (None, "none")
    workspace_broken = bool(report["workspace"].get("error"))
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        if unisolated:
            raise typer.Exit(1)
        if workspace_broken:
            raise typer.Exit(2)
        return
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    ok, warn, bad = "[green]ok[/]", "[yellow]--[/]", "[red]!![/]"
    devices = report["gpus"]["devices"]
    console.print(f"{ok if devices else warn} GPUs (nvidia-smi): " + (", ".join(
        f"{d['index']}: {d['name']} {d['memory']}" for d in devices) + f" (driver {report['gpus']['driver']})"
        if devices else "none (CPU mode: torch kernels, Triton under the interpreter)"))
    console.print(f"{ok if report['nvcc'] else warn} nvcc: {report['nvcc'] or 'not found (CUDA kernels need it)'}")
    if report.get("torch"):
        console.print(f"{ok} torch {report['torch']} (CUDA {report.get('torch_cuda') or 'none'}, "
                      f"available: {report.get('cuda_available')})")
    else:
        console.print(f"{bad} torch: {report.get('torch_error', 'not installed')}")
    console.print(f"{ok if report.get('triton') else warn} triton: {report.get('triton') or 'not installed'}")
    console.print(f"{ok if report['tinker_api_key'] else warn} TINKER_API_KEY: "
                  f"{'set' if report['tinker_api_key'] else 'not set (needed for backend tinker)'}")
    isolation = report["isolation"]
    mark = bad if unisolated else ok if isolation["strong"] else warn
    first, *rest = isolation["lines"]
    console.print(f"{mark} {first}")
    for line in rest:
        console.print(f"   {line.strip()}", style="red" if unisolated else None)
    ws = report["workspace"]
    if not ws["exists"]:
        console.print(f"{warn} workspace {ws['path']}: no registry yet (created by the first run)")
    elif ws.get("error"):
        console.print(f"{bad} workspace {ws['path']}: {ws['error']}")
    else:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(ws["runs"].items())) or "no runs"
        console.print(f"{ok} workspace {ws['path']}: registry schema v{ws['schema_version']} "
                      f"(this kernelrl: v{report['schema_version_supported']}), {counts}")
        if not ws["pages_checked"]:
            console.print(f"{warn} registry pages: not all read within {INTEGRITY_BUDGET_S:g} s (a "
                          f"{ws['size_bytes'] / 1e9:.1f} GB file); `krl doctor --full` reads every page")
        gpus = ws["gpus"]
        console.print(f"{ok} GPU slots: detected {gpus['detected'] or 'none'}, free {gpus['free'] or 'none'}"
                      + (f", held {gpus['held']}" if gpus["held"] else ""))
        for change in ws["reconciled"]:
            console.print(f"{bad if change['to'] in ('crashed', 'failed') else ok} {change['name']}: "
                          f"{change['from']} → {change['to']} ({change['message']})")
        if ws["stale_runs"] and not ws["reconciled"]:
            console.print(f"{warn} runs with stale heartbeats: {', '.join(ws['stale_runs'])}")
    console.print(f"[dim]{timing_line(checks, whole_s)}[/]")
    if unisolated:
        raise typer.Exit(1)
    if workspace_broken:
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    """Add `krl doctor` to the `krl` app."""
    app.command("doctor")(doctor)
