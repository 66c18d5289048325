"""CLI commands: the `krl runs …` group (ls, show, stop, resume, fork, rm, tag, note, rename, export) and the
top-level `krl logs NAME [-f]` and `krl watch NAME`. Top-level imports stay typer/stdlib; core is imported inside.

JSON schema (stable; `runs ls --json` prints a list of these objects, `runs show --json` one object with three more
keys): name, id, status, kind, pid, step (last step written or null), total_steps, backend, model, preset,
problem_set, created_at, started_at, ended_at, heartbeat_at (epoch seconds or null), host, gpus (list of GPU ids),
gpus_requested, exit_code, error, tags (list), notes, parent (parent run name or null), parent_step, segments (list,
see core/procman.py), summary ({"last": {metric: value}, "best_speedup": x}), command ({"argv", "cwd"} or null),
config (the fully resolved run config). `runs show --json` adds checkpoints ([{step, name, state_path, sampler_path,
created_at}]), events (last 50: [{time, kind, message}]) and log_path.

Exit codes: 0 success; 1 internal error; 2 user error (unknown run — with "did you mean" —, bad option, a run in the
wrong state); 3 a run this command waited on (`runs resume` without --detach) ended failed or crashed.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, List, Optional

import typer

from app.widgets.format import fmt_steps, printable

EXIT_RUN_FAILED = 3

def run_failed_error(name: str, status: str):
    """The error for a waited-on run that ended failed/crashed: printed like a KrlError, exit code 3."""
    from core.errors import KrlError

    error = KrlError(f"run '{name}' {status}. See `krl runs show {name}` and `krl logs {name}`; "
                     f"resume it with `krl runs resume {name}`.")
    error.exit_code = EXIT_RUN_FAILED  # cli.main exits with the error's own code
    return error


runs_app = typer.Typer(help="List, inspect and control runs (listing and control commands reconcile run status first).\n\n"
                       "Exit codes: 0 success; 1 internal error; 2 user error (unknown run, with 'did you mean'; bad "
                       "option; run in the wrong state); 3 a run the command waited on ended failed or crashed. "
                       "JSON (--json) goes to stdout, messages to stderr.",
                       no_args_is_help=True)


# ---------------------------------------------------------------- helpers

def complete_run_name(ctx: typer.Context, incomplete: str) -> List[str]:
    """Shell completion: run names from the registry of the workspace given on the command line (or the default)."""
    try:
        import os

        from core.registry import Registry

        workspace = None
        root = ctx.find_root() if ctx is not None else None
        if root is not None:
            workspace = root.params.get("workspace")
        reg = Registry.for_workspace(workspace or os.environ.get("KRL_WORKSPACE"), create=False)
        try:
            names = [row["name"] for row in reg.list_runs()]
        finally:
            reg.close()
        return [name for name in names if name.startswith(incomplete)]
    except Exception:  # completion must never print a traceback into the user's shell
        return []


def _err():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _registry(create: bool = False):
    from core.registry import Registry

    return Registry.for_workspace(create=create)


def _registry_or_none():
    """The workspace's registry, or None where there is none yet (reading never creates one)."""
    from core.registry import REGISTRY_FILENAME, workspace_path

    path = workspace_path()
    if not path.exists() or (path.is_dir() and not (path / REGISTRY_FILENAME).exists()):
        return None
    return _registry()  # KrlError for a workspace that is a file


def _say_why_empty(console, reg, statuses: Optional[list], tag: Optional[str]) -> None:
    """Why `runs ls` lists nothing: a workspace named but missing (exit 2), a filter nothing matches (and what
    would), or a workspace with no runs yet (how to start one)."""
    import os

    from core.errors import KrlError
    from core.registry import workspace_path

    if reg is None:
        path = workspace_path()
        if os.environ.get("KRL_WORKSPACE") and not path.exists():
            raise KrlError(f"workspace {path} does not exist. Check -w / KRL_WORKSPACE, or start a run there "
                           "to create it (`krl train demo --detach`).")
        console.print(f"no runs yet in {path}. Start one with `krl train demo --detach`, or try `krl demo`.")
        return
    everything = reg.list_runs(columns=("tags", "status"))
    if not everything:
        console.print(f"no runs yet in {reg.workspace}. Start one with `krl train demo --detach`, or try `krl demo`.")
        return
    wanted = " and ".join(part for part in (f"tag '{tag}'" if tag else "",
                                            f"status {','.join(statuses)}" if statuses else "") if part)
    tags = sorted({t for row in everything for t in (row.get("tags") or [])})
    console.print(f"no run has {wanted} ({len(everything)} run(s) in {reg.workspace}"
                  + (f"; tags in use: {', '.join(tags)}" if tags else "; no run has a tag") + ").")


def _age(seconds_ago: Optional[float]) -> str:
    if seconds_ago is None:
        return "-"
    s = max(0, int(seconds_ago))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d"


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


STATUS_STYLES = {"queued": "yellow", "running": "green", "stopping": "yellow", "stopped": "blue",
                 "finished": "bold green", "failed": "red", "crashed": "bold red"}


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """A copy of a run row whose text is safe to print (see printable); for display only, never for lookups."""
    out = dict(row)
    for key, value in row.items():
        if isinstance(value, str):
            out[key] = printable(value)
        elif key == "tags" and isinstance(value, list):
            out[key] = [printable(tag) for tag in value]
    return out


def _status_text(status: str) -> str:
    return f"[{STATUS_STYLES.get(status, 'white')}]{status}[/]"


SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: List[float], width: int = 40) -> str:
    values = [v for v in values if v is not None][-width:]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        return SPARK_BLOCKS[3] * len(values)
    return "".join(SPARK_BLOCKS[int((v - lo) / (hi - lo) * (len(SPARK_BLOCKS) - 1))] for v in values)


# ---------------------------------------------------------------- runs ls / show

# What `krl runs ls` shows; the reward and correct columns are the registry's headline columns (HEADLINE_COLUMNS),
# the metrics core.registry.reward_key/correct_key pick, as in the TUI.
LIST_COLUMNS = ("name", "status", "kind", "last_step", "total_steps", "backend", "model", "gpus", "gpus_requested",
                "reward_key", "reward_value", "correct_key", "correct_value", "best_speedup", "created_at", "tags")


# What `runs show` lists first after the run's reward and correct metrics (those present, in this order).
SHOWN_METRICS = ("env/all/solved_rate", "env/all/compile_rate", "env/all/format_rate", "env/all/hack_rate",
                 "env/all/fast_1", "env/all/speedup/mean", "env/all/speedup/max", "optim/loss", "optim/lr")


def headline_metric_keys(last: dict, most: int = 10) -> list[str]:
    """The last metrics worth a line: reward and correct as `runs ls` picks them, then SHOWN_METRICS, then others
    by name, at most `most`."""
    from core.registry import correct_key, reward_key

    keys = list(last)
    chosen = [k for k in (reward_key(keys), correct_key(keys), *SHOWN_METRICS) if k in last]
    chosen = list(dict.fromkeys(chosen))
    return (chosen + [k for k in sorted(keys) if k not in chosen])[:most]


def wrap_pairs(pairs: list[str], width: int) -> list[str]:
    """key=value pairs two spaces apart, in lines of at most `width` (a pair is never split)."""
    lines: list[str] = []
    for pair in pairs:
        if lines and len(lines[-1]) + 2 + len(pair) <= width:
            lines[-1] += "  " + pair
        else:
            lines.append(pair)
    return lines


@runs_app.command("ls")
def list_runs(
    status: Optional[str] = typer.Option(None, "--status", "-s", help="Only runs with this status (comma-separated for several)."),
    tag: Optional[str] = typer.Option(None, "--tag", "-t", help="Only runs carrying this tag."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list to stdout (schema: `krl runs --help`)."),
) -> None:
    """List runs, newest first."""
    from core import procman
    from core.errors import KrlError
    from core.registry import RUN_STATUSES

    statuses = [s.strip() for s in status.split(",")] if status else None
    for s in statuses or []:
        if s not in RUN_STATUSES:
            from core.errors import did_you_mean

            raise KrlError(f"unknown status '{s}'.{did_you_mean(s, RUN_STATUSES)} Statuses: {', '.join(RUN_STATUSES)}.")
    reg = _registry_or_none()
    rows = []
    if reg is not None:
        procman.reconcile(reg)
        # The table reads only what it shows (no config or summary JSON per run); --json reads everything.
        rows = reg.list_runs(status=statuses, tag=tag, columns=None if as_json else LIST_COLUMNS)
        # An evaluation's progress (finished samples) is in its summary: read it for those rows only.
        rows = [{**row, "summary": reg.get_run(row["id"]).get("summary")} if row.get("kind") == "eval"
                and "summary" not in row else row for row in rows]
    if as_json:
        typer.echo(json.dumps([procman.run_json(reg, row) for row in rows], indent=2))
        return
    console = _err()
    if not rows:
        _say_why_empty(console, reg, statuses, tag)
        return
    from app.commands.tables import Column, fitted_table

    # Names stay whole; at a narrow width gpus, backend, age, model, tags … go first (issue 26 item 8).
    columns = [Column("name", whole=True), Column("status", whole=True), Column("step", whole=True, justify="right"),
               Column("backend", drop=9), Column("model", drop=7), Column("gpus", drop=10),
               Column("reward", drop=3, justify="right"), Column("correct", drop=5, justify="right"),
               Column("best×", drop=4, justify="right"), Column("age", drop=8), Column("tags", drop=6)]
    now = time.time()
    cells = []
    for row in map(_shown, rows):
        gpus = ",".join(map(str, row.get("gpus") or [])) if row["status"] in ("running", "stopping") else \
            f"({row.get('gpus_requested') or 0})"
        cells.append([row["name"], _status_text(row["status"]), fmt_steps(row), row.get("backend") or "-",
                      (row.get("model") or "-")[-28:], gpus,
                      _fmt(row.get("reward_value")), _fmt(row.get("correct_value")),
                      _fmt(row.get("best_speedup")), _age(now - row["created_at"]),
                      ",".join(row.get("tags") or [])])
    console.print(fitted_table(columns, cells, console.width))


@runs_app.command("show")
def show_run(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object to stdout (schema: `krl runs --help`)."),
) -> None:
    """Everything about one run: status, process, segments, checkpoints, last metrics, error, log tail."""
    from core import procman

    reg = _registry()
    procman.reconcile(reg)
    row = reg.get_run(name)
    data = procman.run_json(reg, row, detail=True)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    tail = procman.tail_log(reg, row["name"], 8)
    row = _shown(row)
    console = _err()
    now = time.time()
    alive = procman.run_process_alive(row)
    console.print(f"[bold]{row['name']}[/]  {_status_text(row['status'])}  kind {row['kind']}  id {row['id']}")
    lines = [
        ("model", row.get("model")), ("backend", row.get("backend")), ("preset", row.get("preset")),
        ("problems", row.get("problem_set")),
        ("steps", fmt_steps(row)),
        ("process", f"pid {row.get('pid')} on {row.get('host')} ({'alive' if alive else 'not running'})"
         if row.get("pid") else "-"),
        ("gpus", f"{row.get('gpus') or []} (requested {row.get('gpus_requested') or 0})"),
        ("created", f"{_age(now - row['created_at'])} ago"),
        ("heartbeat", f"{_age(now - row['heartbeat_at'])} ago" if row.get("heartbeat_at") else "-"),
        ("parent", f"{data['parent']} at step {row.get('parent_step')}" if data["parent"] else "-"),
        ("tags", ", ".join(row.get("tags") or []) or "-"), ("notes", row.get("notes") or "-"),
        ("log", data["log_path"]),
    ]
    if row["status"] == "queued":
        usage = procman.gpu_usage(reg)
        ahead = [r["name"] for r in reg.list_runs(status="queued") if r["id"] < row["id"]]
        lines.append(("queue", f"waiting for {row.get('gpus_requested') or 0} GPU(s); free {usage['free'] or 'none'}"
                      f" of {usage['detected'] or 'none'}" + (f"; behind {', '.join(ahead)}" if ahead else "")))
    for key, value in lines:
        console.print(f"  [dim]{key:<10}[/] {printable(value) if value is not None else '-'}")
    last = (row.get("summary") or {}).get("last", {})
    if last:
        keys = headline_metric_keys(last)
        pairs = [f"{k}={_fmt(last[k])}" for k in keys]
        if len(last) > len(keys):
            pairs.append(f"(+{len(last) - len(keys)} more: krl runs export {row['name']})")
        for number, line in enumerate(wrap_pairs(pairs, max(40, console.width) - 15)):
            console.print(f"  [dim]{'metrics' if number == 0 else '':<10}[/] {line}", markup=True, highlight=False)
    for segment in data["segments"]:
        ended = segment.get("end_status") or ("running" if row["status"] in ("running", "stopping") else "?")
        console.print(f"  [dim]segment {segment.get('index')}[/] from step {segment.get('start_step')}, pid "
                      f"{segment.get('pid')}, gpus {segment.get('gpus')}: {ended} {segment.get('note') or ''}")
    if data["checkpoints"]:
        shown = data["checkpoints"][-5:]
        console.print("  [dim]checkpoints[/] " + ", ".join(f"{c['name']}@{c['step']}" for c in shown)
                      + (f" (+{len(data['checkpoints']) - 5} earlier)" if len(data["checkpoints"]) > 5 else ""))
    if row.get("error"):
        console.print("  [red]error[/]")
        for line in str(row["error"]).splitlines()[-12:]:
            console.print(f"    {line}", markup=False, soft_wrap=True)
    if tail:
        console.print("  [dim]log tail[/]")
        for line in tail:
            console.print(f"    {printable(line)}", markup=False, soft_wrap=True)


# ---------------------------------------------------------------- control

@runs_app.command("stop")
def stop(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    force: bool = typer.Option(False, "--force", help="SIGKILL at once (no final checkpoint)."),
    grace_s: Optional[float] = typer.Option(None, "--grace", help="Seconds to wait for the checkpoint before SIGKILL (default: $KRL_STOP_GRACE_S or 30)."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return after signalling; later reads escalate to SIGKILL."),
) -> None:
    """Stop a run: SIGTERM → the job checkpoints → stopped. A queued run leaves the queue."""
    from core import procman
    from core.segments import last_segment

    reg = _registry()
    console = _err()
    row = reg.get_run(name)
    if row["status"] == "running" and not force and not no_wait:
        console.print(f"stopping {row['name']} (waiting for its checkpoint)…")
    final = procman.stop_run(reg, name, force=force, grace_s=grace_s, wait=not no_wait)
    note = last_segment(final).get("note") or ""
    console.print(f"{final['name']}: {_status_text(final['status'])}" + (f" — {note}" if note else ""))


@runs_app.command("resume")
def resume(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    detach: bool = typer.Option(False, "--detach", "-d", help="Return at once; the run goes on in the background."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs for the new segment (default: as before)."),
) -> None:
    """Resume a stopped, failed or crashed run from its last checkpoint (a new segment of the same run).
    Without --detach, follows its log until it ends (Ctrl-C stops it with a checkpoint); exit 3 if it fails."""
    from core import procman

    reg = _registry()
    console = _err()
    log = procman.log_path(reg, reg.get_run(name)["name"])
    log_offset = log.stat().st_size if log.exists() else 0
    row = procman.resume_run(reg, name, detach=True, gpus=gpus)
    # Segments are numbered from 0, as the log's "segment N of run …" line and `runs show` number them.
    segment = (row.get("segments") or [{}])[-1].get("index", len(row.get("segments") or []) - 1)
    console.print(f"{row['name']}: {_status_text(row['status'])} (segment {segment}). "
                  f"Follow with `krl logs -f {row['name']}`.")
    if detach:
        return
    _wait_in_foreground(reg, row["name"], log_offset)


def _wait_in_foreground(reg, name: str, log_offset: int) -> None:
    from core import procman

    console = _err()
    try:
        final = procman.wait_run(reg, name, on_line=lambda line: print(line, file=sys.stderr, flush=True),
                                 log_offset=log_offset)
    except KeyboardInterrupt:
        console.print(f"\n{name}: {_status_text(reg.get_run(name)['status'])} (interrupted; resume with "
                      f"`krl runs resume {name}`)")
        raise SystemExit(130)  # typer.Exit codes are lost under cli.main's standalone_mode=False
    console.print(f"{name}: {_status_text(final['status'])}")
    if final["status"] in ("failed", "crashed"):
        raise run_failed_error(name, final["status"])


@runs_app.command("fork")
def fork(
    name: str = typer.Argument(..., help="Run to fork from.", autocompletion=complete_run_name),
    overrides: List[str] = typer.Argument(None, help="Config changes, e.g. optim.lr=1e-5 max_steps=200."),
    new_name: str = typer.Option(..., "--name", "-n", help="Name of the new run."),
    step: Optional[int] = typer.Option(None, "--step", help="Fork from the last checkpoint at or before this step (default: the last)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs for the new run (default: from the config)."),
    as_json: bool = typer.Option(False, "--json", help="Print the new run as JSON to stdout."),
) -> None:
    """Start a new run from another run's checkpoint with a changed config (runs detached)."""
    from core import procman

    reg = _registry()
    row = procman.fork_run(reg, name, new_name, overrides or [], step=step, gpus=gpus)
    if as_json:
        typer.echo(json.dumps(procman.run_json(reg, row), indent=2))
    _err().print(f"{row['name']}: {_status_text(row['status'])}, forked from {name} at step {row['parent_step']}. "
                 f"Follow with `krl logs -f {row['name']}`.")


@runs_app.command("rm")
def remove(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    keep_files: bool = typer.Option(False, "--keep-files", help="Keep the run folder (logs, config, checkpoints)."),
) -> None:
    """Delete a run from the registry and its folder (refuses a running run)."""
    from core import procman
    from core.errors import KrlError

    reg = _registry()
    row = reg.get_run(name)
    if row["status"] in ("running", "stopping"):
        raise KrlError(f"run '{row['name']}' is {row['status']}; stop it first with `krl runs stop {row['name']}`.")
    if not yes:
        if not sys.stdin.isatty():
            raise KrlError(f"deleting '{row['name']}' needs confirmation: pass --yes.")
        typer.confirm(f"delete run {row['name']} ({row['status']}, steps {fmt_steps(row)}) "
                      "and its folder?",
                      abort=True, err=True)
    procman.delete_run(reg, name, remove_files=not keep_files)
    _err().print(f"deleted {row['name']}")


@runs_app.command("tag")
def tag(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    tags: List[str] = typer.Argument(..., help="Tags to add."),
    remove_: bool = typer.Option(False, "--remove", "-r", help="Remove these tags instead."),
) -> None:
    """Add (or --remove) tags."""
    from core import procman

    reg = _registry()
    current = procman.tag_run(reg, name, tags, remove=remove_)
    _err().print(f"{name}: tags {', '.join(current) or '(none)'}")


@runs_app.command("note")
def note(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    text: str = typer.Argument(..., help="The note (replaces the previous one)."),
) -> None:
    """Set a run's note."""
    from core import procman

    procman.note_run(_registry(), name, text)
    _err().print(f"{name}: note saved")


@runs_app.command("rename")
def rename(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    new_name: str = typer.Argument(..., help="New name."),
) -> None:
    """Rename a run and its folder (not while it runs)."""
    from core import procman

    procman.rename_run(_registry(), name, new_name)
    _err().print(f"renamed {name} → {new_name}")


@runs_app.command("export")
def export(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    fmt: str = typer.Option("jsonl", "--format", "-f", help="csv | jsonl"),
    what: str = typer.Option("metrics", "--what", help="metrics (one row per step) | trajectories (jsonl: with turns)"),
) -> None:
    """Write a run's metrics or trajectories to stdout."""
    from core.errors import KrlError

    if fmt not in ("csv", "jsonl"):
        raise KrlError(f"--format must be csv or jsonl, not '{fmt}'.")
    if what not in ("metrics", "trajectories"):
        raise KrlError(f"--what must be metrics or trajectories, not '{what}'.")
    reg = _registry()
    row = reg.get_run(name)
    records = _metric_records(reg, row["id"]) if what == "metrics" else \
        _trajectory_records(reg, row["id"], with_turns=fmt == "jsonl")
    out = sys.stdout
    if fmt == "jsonl":
        for record in records:
            out.write(json.dumps(record) + "\n")
        return
    import csv

    records = list(records)
    columns: list[str] = []
    for record in records:
        columns += [k for k in record if k not in columns]
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in record.items()})


def _metric_records(reg, run_id: int):
    """One record per step: {"step", "wall_time", metric: value …}."""
    by_step: dict[int, dict[str, Any]] = {}
    for key in reg.metric_keys(run_id):
        series = reg.metric_series(run_id, key)
        for step, value, wall in zip(series["step"], series["value"], series["wall_time"]):
            record = by_step.setdefault(step, {"step": step, "wall_time": wall})
            record["wall_time"] = max(record["wall_time"], wall)
            record[key] = value
    return [by_step[s] for s in sorted(by_step)]


def _trajectory_records(reg, run_id: int, with_turns: bool):
    page, offset = 500, 0
    while True:
        rows = reg.trajectories(run_id, order="step", limit=page, offset=offset)
        for row in rows:
            row = dict(row)
            row["solved"], row["hack"] = bool(row["solved"]), bool(row["hack"])
            if with_turns:
                row["turns"] = reg.trajectory_turns(row["id"])
            yield row
        if len(rows) < page:
            return
        offset += page


# ---------------------------------------------------------------- logs and watch

def logs(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until the run ends (Ctrl-C to leave)."),
    lines: int = typer.Option(0, "--lines", "-n", help="Only the last N lines (default: all)."),
) -> None:
    """Print a run's log (stdout and stderr of its job). With -f, exit 3 when the run ends failed or crashed."""
    from core import procman

    reg = _registry()
    procman.reconcile(reg)
    row = reg.get_run(name)
    path = procman.log_path(reg, row["name"])
    if lines > 0:
        for line in procman.tail_log(reg, row["name"], lines):
            print(line)
    elif path.exists():
        with open(path, "r", errors="replace") as handle:
            shutil_copy(handle, sys.stdout)
    sys.stdout.flush()
    if not follow:
        return
    try:
        for line in procman.follow_log(reg, row["name"], from_start=False):
            print(line, flush=True)
    except KeyboardInterrupt:
        return
    final = reg.get_run(row["id"])
    _err().print(f"{final['name']}: {_status_text(final['status'])}")
    if final["status"] in ("failed", "crashed"):
        raise run_failed_error(final["name"], final["status"])


def shutil_copy(source, target) -> None:
    import shutil

    shutil.copyfileobj(source, target)


def watch(
    name: str = typer.Argument(..., help="Run name.", autocompletion=complete_run_name),
    interval_s: float = typer.Option(1.0, "--interval", help="Seconds between refreshes."),
) -> None:
    """A live terminal view of one run: status, step, reward and correct-rate sparklines, last verdicts.
    Ends when the run ends, or on Ctrl-C; exit 3 when the run failed or crashed."""
    from rich.live import Live

    from core import procman

    reg = _registry()
    procman.reconcile(reg)
    run_id = reg.get_run(name)["id"]
    console = _err()
    try:
        with Live(render_watch(reg, run_id), console=console, refresh_per_second=4, transient=False) as live:
            while True:
                procman.reconcile(reg)
                live.update(render_watch(reg, run_id))
                if reg.get_run(run_id)["status"] not in ("queued", "running", "stopping"):
                    break
                time.sleep(interval_s)
    except KeyboardInterrupt:
        return
    final = reg.get_run(run_id)
    if final["status"] in ("failed", "crashed"):
        raise run_failed_error(final["name"], final["status"])


def render_watch(reg, run_id: int):
    """The watch view of a run as a rich renderable (also used by tests)."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table

    row = _shown(reg.get_run(run_id))
    now = time.time()
    keys = reg.metric_keys(run_id)
    head = Table.grid(padding=(0, 2))
    head.add_row(f"[bold]{row['name']}[/]", _status_text(row["status"]),
                 f"step {fmt_steps(row)}",
                 f"{row.get('backend') or '-'} · {row.get('model') or '-'}",
                 f"heartbeat {_age(now - row['heartbeat_at']) if row.get('heartbeat_at') else '-'}",
                 f"gpus {row.get('gpus') or []}")
    curves = Table.grid(padding=(0, 2))
    from core.registry import correct_key, reward_key

    for label, choose in (("reward", reward_key), ("correct", correct_key)):
        key = choose(keys)
        if key is None:
            curves.add_row(label, "[dim]no data yet[/]", "")
            continue
        series = reg.metric_series(run_id, key, max_points=120)
        values = series["value"]
        curves.add_row(f"{label} [dim]({key})[/]", f"[cyan]{sparkline(values, 60)}[/]",
                       _fmt(values[-1] if values else None))
    verdicts = Table(box=None, header_style="dim", show_edge=False)
    for column in ("step", "problem", "turn", "verdict", "score"):
        verdicts.add_column(column)
    for v in reg.recent_turn_verdicts(run_id, 8):
        style = "green" if v["verdict"] == "correct" else "red" if v["verdict"] else "white"
        verdicts.add_row(str(v["step"]), printable(v["problem_id"]), str(v["turn"]), f"[{style}]{v['verdict'] or '-'}[/]",
                         _fmt(v["step_score"]))
    parts = [head, curves, verdicts]
    if row.get("error") and row["status"] in ("failed", "crashed"):
        parts.append(f"[red]{str(row['error']).splitlines()[-1] if row['error'] else ''}[/]")
    return Panel(Group(*parts), title="krl watch", border_style=STATUS_STYLES.get(row["status"], "white"))


def register(app: typer.Typer) -> None:
    """Add `krl runs …`, `krl logs` and `krl watch` to the `krl` app."""
    app.add_typer(runs_app, name="runs")
    app.command("logs")(logs)
    app.command("watch")(watch)
