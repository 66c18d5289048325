"""CLI commands: `krl cache info` shows what the evaluator's caches hold, `krl cache prune` trims them to a budget.
Top-level imports stay light: the evaluator's cache module is imported inside the commands."""

from __future__ import annotations

import json
import os
from typing import Optional

import typer

cache_app = typer.Typer(help="The evaluator's build caches (CUDA extensions, Triton kernels) under $KRL_CACHE_DIR.")


def _cache_dir(path: Optional[str]) -> str:
    from evaluator.build.compile import default_cache_dir

    folder = path or default_cache_dir()
    if not os.path.isdir(folder):
        from core.errors import KrlError

        raise KrlError(f"no evaluator cache at {folder}. Pass --dir, or set KRL_CACHE_DIR to the cache folder.")
    return folder


def _gib(value: int) -> str:
    return f"{value / 2**30:.2f} GiB"


@cache_app.command("info")
def info(
    directory: Optional[str] = typer.Option(None, "--dir", help="Cache folder (default $KRL_CACHE_DIR or ~/.cache/kernelrl/evaluator)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
) -> None:
    """Entries and size per cache area, and the budget the evaluator prunes to."""
    from evaluator.build.cache import AREAS, cache_entries, max_cache_bytes

    folder = _cache_dir(directory)
    entries = cache_entries(folder)
    areas = {area: {"entries": sum(e.area == area for e in entries),
                    "bytes": sum(e.bytes for e in entries if e.area == area)} for area in AREAS}
    budget = max_cache_bytes()
    summary = {"dir": folder, "areas": areas, "bytes": sum(a["bytes"] for a in areas.values()), "budget_bytes": budget}
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    lines = [f"{folder}: {_gib(summary['bytes'])} in {len(entries)} entries "
             f"(budget {_gib(budget) if budget else 'off'}; set KRL_CACHE_MAX_GB)"]
    lines += [f"  {area:7s} {a['entries']:6d} entries  {_gib(a['bytes'])}" for area, a in areas.items()]
    typer.echo("\n".join(lines), err=True)


@cache_app.command("prune")
def prune(
    max_gb: float = typer.Option(..., "--max-gb", help="Keep at most this many GiB (least recently used go first)."),
    directory: Optional[str] = typer.Option(None, "--dir", help="Cache folder (default $KRL_CACHE_DIR or ~/.cache/kernelrl/evaluator)."),
    min_age_s: float = typer.Option(600.0, "--min-age-s", help="Never remove an entry used this recently."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
) -> None:
    """Remove least recently used entries until the caches fit (to 80% of --max-gb, for headroom)."""
    from core.errors import KrlError
    from evaluator.build.cache import prune_cache

    if max_gb <= 0:
        raise KrlError("--max-gb must be positive (the size to keep, in GiB).")
    report = prune_cache(_cache_dir(directory), int(max_gb * 2**30), min_age_s=min_age_s)
    result = {"entries": report.entries, "removed": len(report.removed), "bytes_before": report.bytes_before,
              "bytes_after": report.bytes_after, "skipped_in_use": report.skipped_in_use}
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(f"removed {result['removed']} of {report.entries} entries: {_gib(report.bytes_before)} → "
               f"{_gib(report.bytes_after)}" + (f" ({report.skipped_in_use} in use, kept)" if report.skipped_in_use else ""),
               err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")
