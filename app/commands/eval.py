"""CLI commands: `krl eval` (evaluate a model, a run's checkpoint or recordings over a problem set) and the
`krl evals …` group (ls, show, compare, export, resume). Top-level imports stay typer/stdlib; core is imported inside.

JSON: `krl eval --json` and `evals show --json` print core.evaluation.eval_summary (name, status, model, backend,
problem_set, samples, turns, source_run, source_step, problems_total, samples_done, scores {key: value}, verdicts,
hack_rules, stamp, throughput); `evals compare --json` prints core.evaluation.compare_evals; `evals ls --json` a list.
Exit codes: 0 success; 1 internal error; 2 user error; 3 the evaluation this command ran failed."""

from __future__ import annotations

import csv
import json
import sys
from typing import Any, List, Optional

import typer

evals_app = typer.Typer(help="List, inspect, compare and export model evaluations (runs of kind 'eval').",
                        no_args_is_help=True)

HEADLINE_KEYS = ("pass@1", "fast_p/eager/kernelbench/0", "fast_p/eager/kernelbench/1",
                 "fast_p/eager/best_of_n/1", "fast_p/eager/kernelbench/1.5", "geomean_speedup/eager",
                 "fast_p/compile/kernelbench/1", "geomean_speedup/compile",  # when the compile baseline was measured
                 "fast_p/kbtime/kernelbench/0", "fast_p/kbtime/kernelbench/1", "fast_p/kbtime/best_of_n/1",
                 "fast_p/kbtime/kernelbench/1.5", "geomean_speedup/kbtime",  # KernelBench's timing convention
                 "compile_rate", "correct_rate", "hack_rate", "sol_fraction_mean", "sol_score_mean")
EXPORT_FIELDS = ("problem_id", "sample", "turn", "verdict", "speedup", "sol_fraction", "hack_rule", "tokens_in",
                 "tokens_out", "compiled", "kernel_ms", "eager_ms", "device", "trajectory_id")


def _console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def build_eval_config(*, config: Optional[str], run: Optional[str], checkpoint: Optional[int], backend: Optional[str],
                      model: Optional[str], replay: Optional[str], problems: Optional[str], samples: Optional[int],
                      turns: Optional[int], temperature: Optional[float], top_p: Optional[float],
                      kernel_backend: Optional[str], precision: Optional[str], gpus: Optional[int],
                      overrides: List[str], registry: Any = None):
    """The resolved RunConfig of an evaluation: a preset (or a training run's own config, for --run) with the
    options applied as dotted overrides, so the registry records where every value came from."""
    from core.config import config_from_dict, load_config, with_overrides
    from core.errors import KrlError

    if run is not None:
        from core.evaluation import checkpoint_state

        if config is not None:
            raise KrlError("--run evaluates with the run's own config; leave out --config (use K=V overrides).")
        run_row, ckpt, state_path = checkpoint_state(registry, run, checkpoint)
        base = config_from_dict(run_row["config"] or {}, f"config of run '{run_row['name']}'")
        # The run's own prompt settings; the eval section says which weights these are.
        source = [f"evaluation.source_run={run_row['name']}", f"evaluation.source_step={ckpt['step']}"]
        if base.backend == "tinker" and ckpt.get("sampler_path"):
            source.append(f"evaluation.sampler_path={ckpt['sampler_path']}")  # sampled from; no training client
        elif state_path:
            source.append(f"evaluation.state_path={state_path}")
        base = with_overrides(base.model_copy(update={"tags": [], "name": None}), source)
    else:
        if checkpoint is not None:
            raise KrlError("--checkpoint needs --run NAME (the training run whose checkpoint to evaluate).")
        base = load_config(config or ("demo" if backend in (None, "replay") else "kevin"))
    options = {"backend": backend, "model": model, "replay.path": replay, "problems": problems,
               "evaluation.samples": samples, "max_turns": turns, "sampling.temperature": temperature,
               "sampling.top_p": top_p, "kernel.backend": kernel_backend, "kernel.precision": precision, "gpus": gpus}
    dotted = [f"{key}={value}" for key, value in options.items() if value is not None] + list(overrides or [])
    config = with_overrides(base, dotted) if dotted else base
    if config.backend == "replay":
        # A missing recordings file is the user's mistake: said (exit 2) before any run is created. The path as the
        # backend resolves it (core.config.RunConfig.replay_path; unset means the packaged demo).
        path = config.replay_path()
        if path is not None and not path.is_file():
            raise KrlError(f"replay recordings {path} do not exist. Pass --replay demo (the packaged recordings) "
                           "or a JSONL file of {\"problem_id\", \"sample\", \"turn\", \"response\"} objects.")
    return config


def eval_command(
    overrides: List[str] = typer.Argument(None, help="Dotted config overrides, e.g. eval.timing_trials=50."),
    config: Optional[str] = typer.Option(None, "--config", "-c", help="Preset or YAML (default: demo for replay, else kevin)."),
    run: Optional[str] = typer.Option(None, "--run", help="Evaluate this training run's checkpoint with its own prompt settings."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="With --run: the checkpoint step (default: the last)."),
    backend: Optional[str] = typer.Option(None, "--backend", help="tinker | local | openai | replay."),
    model: Optional[str] = typer.Option(None, "--model", help="Base model, local HF path, endpoint model name, or tiny-random."),
    replay: Optional[str] = typer.Option(None, "--replay", help="Recordings JSONL for --backend replay ('demo': the packaged ones)."),
    problems: Optional[str] = typer.Option(None, "--problems", help="builtin, kernelbench/level1..3 or a folder."),
    samples: Optional[int] = typer.Option(None, "--samples", help="Samples per problem (pass@k up to this)."),
    turns: Optional[int] = typer.Option(None, "--turns", help="Turns per sample (multi-turn with training's feedback)."),
    temperature: Optional[float] = typer.Option(None, "--temperature"),
    top_p: Optional[float] = typer.Option(None, "--top-p"),
    kernel_backend: Optional[str] = typer.Option(None, "--kernel-backend", help="cuda | triton | torch."),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32 | fp16 | bf16."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs the evaluation needs (procman assigns them)."),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="Evaluation name (default: eval-<backend>-<time>)."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background through the process manager."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary (or, with --detach, the run) as JSON."),
    unseen_shapes: bool = typer.Option(False, "--unseen-shapes", help="Re-run each correct kernel on other sizes of "
                                       "its problem and report which only work for the timed sizes."),
) -> None:
    """Evaluate a model over a problem set: pass@k, fast_p (KernelBench and best-of-n), per-turn views, geomean
    speedup. Foreground by default (Ctrl-C stops; `krl evals resume NAME` finishes it without redoing samples)."""
    from core.registry import Registry

    reg = Registry.for_workspace()
    try:
        cfg = build_eval_config(config=config, run=run, checkpoint=checkpoint, backend=backend, model=model,
                                replay=replay, problems=problems, samples=samples, turns=turns,
                                temperature=temperature, top_p=top_p, kernel_backend=kernel_backend,
                                precision=precision, gpus=gpus, overrides=list(overrides or []), registry=reg)
        if detach:
            from core import procman

            row = procman.start_run(cfg, name=name or cfg.name or procman.unique_run_name(reg, f"eval-{cfg.backend}"),
                                    kind="eval", detach=True, registry=reg)
            if as_json:
                typer.echo(json.dumps(procman.run_json(reg, row), indent=2))
            _console().print(f"{row['name']}: {row['status']}. Follow with `krl logs -f {row['name']}`; stop with "
                             f"`krl runs stop {row['name']}`; read with `krl evals show {row['name']}`.")
            return
    finally:
        reg.close()
    from core.evaluation import evaluate_foreground

    final = evaluate_foreground(cfg, name)
    _finish_and_report(final, as_json, unseen_shapes)


def _finish_and_report(final: dict, as_json: bool, unseen_shapes: bool = False) -> None:
    from core.evaluation import eval_summary
    from core.registry import Registry

    with Registry.for_workspace() as reg:
        summary = eval_summary(reg, final["id"])
        if unseen_shapes:
            from core import unseen_shapes as shapes

            reports = shapes.check_eval_run(reg, final["id"])
            summary["unseen_shapes"] = dict(shapes.summary(reports), reports=[r.to_dict() for r in reports])
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    _print_summary(summary)
    if final["status"] in ("failed", "crashed"):
        from app.commands.runs import run_failed_error

        raise run_failed_error(final["name"], final["status"])


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _print_summary(summary: dict) -> None:
    from rich.table import Table

    console = _console()
    scores = summary["scores"]
    console.print(f"[b]{summary['name']}[/b]: {summary['status']} — {summary['model']} via {summary['backend']} on "
                  f"{summary['problem_set']}, {summary['samples_done']}/{summary['problems_total'] * summary['samples']}"
                  f" samples, {summary['turns']} turn(s)")
    table = Table("score", "value", box=None)
    for key in HEADLINE_KEYS:
        if key in scores:
            table.add_row(key, _fmt(scores[key]))
    for turn in range(summary["turns"]):
        key = f"turn{turn}/correct_rate"
        if key in scores:
            table.add_row(f"turn {turn}: correct / best-so-far correct",
                          f"{_fmt(scores[key])} / {_fmt(scores.get(f'best_turn{turn}/correct_rate'))}")
    console.print(table)
    console.print(f"speedups: eager = device time (the judge's protocol, what the reward uses by default); kbtime = "
                  "KernelBench's timing convention (eager calls, host launch gaps, mean less calls over 3x the median, "
                  "each side's quietest of 3 rounds on a GPU), "
                  "comparable with published fast_p; pass@k is the same in both; geomean over speedups clipped to "
                  f"[{_fmt(scores.get('speedup_clip_low'))}, {_fmt(scores.get('speedup_clip_high'))}]")
    unseen = summary.get("unseen_shapes")
    if unseen:
        console.print(f"unseen shapes: {unseen['generalizes']}/{unseen['checked']} correct kernels generalize; only "
                      f"the timed sizes: {', '.join(unseen['only_timed_sizes']) or 'none'}; undecided "
                      f"{unseen['unknown']}")
    console.print("verdicts: " + ", ".join(f"{k} {v}" for k, v in summary["verdicts"].items()))
    if summary["hack_rules"]:
        console.print("hack rules: " + ", ".join(f"{k} {v}" for k, v in summary["hack_rules"].items()))
    speed = summary.get("throughput") or {}
    if speed.get("seconds"):
        console.print(f"throughput: {speed['samples']} samples ({speed['turns']} turns) in {speed['seconds']:.1f} s, "
                      f"{speed['samples_per_min']} samples/min, evaluator busy {speed.get('evaluator_busy_frac')} "
                      f"of {speed['evaluator_workers']} worker(s)")
    stamp = summary["stamp"]
    if stamp:
        console.print(f"stamp: {', '.join(stamp.get('devices', []))}, {stamp.get('precision')} tol "
                      f"{stamp.get('tolerance', {}).get('atol')}, torch {stamp.get('torch')}, timing "
                      f"{stamp.get('timing', {}).get('timing_trials')} trials median; compile baseline: "
                      f"{stamp.get('baseline', {}).get('compile')}")


# ---------------------------------------------------------------- krl evals …

@evals_app.command("ls")
def evals_ls(as_json: bool = typer.Option(False, "--json", help="Print a JSON list to stdout.")) -> None:
    """Evaluations with their headline numbers (as last written by each job)."""
    from rich.box import HEAVY_HEAD

    from app.commands.workspace import no_workspace_line, open_for_reading

    reg = open_for_reading()
    if reg is None:  # looking must not create ./runs (issue 26 item 17)
        if as_json:
            typer.echo("[]")
        _console().print(no_workspace_line())
        return
    with reg:
        rows = reg.list_runs(kind="eval")
        trained = [row["name"] for row in reg.list_runs() if row["kind"] != "eval"]
    if not rows and not as_json:  # an empty table says nothing: say how to make the first one
        start = f"`krl eval --run {trained[0]}` evaluates a training run" if trained else \
            "`krl eval --backend replay --replay demo` evaluates the packaged demo answers"
        _console().print(f"no evaluations yet in {reg.workspace}. {start[0].upper()}{start[1:]}.")
        return
    items = []
    for row in rows:
        last = (row.get("summary") or {}).get("last") or {}
        cfg = row.get("config") or {}
        items.append({"name": row["name"], "status": row["status"], "model": row["model"], "backend": row["backend"],
                      "problem_set": row["problem_set"], "samples": (cfg.get("evaluation") or {}).get("samples"),
                      "source_run": (cfg.get("evaluation") or {}).get("source_run"),
                      **{key: last.get(f"eval/{key}") for key in HEADLINE_KEYS[:6]}})
    if as_json:
        typer.echo(json.dumps(items, indent=2))
        return
    from app.commands.tables import Column, fitted_table

    # Names stay whole; at a narrow width model, problems, … go first (issue 26 item 8).
    columns = [Column("name", whole=True), Column("status", whole=True), Column("model", drop=9),
               Column("problems", drop=8), Column("n", drop=7), Column("pass@1", whole=True),
               Column("fast_1 kb", drop=5), Column("fast_1 best", drop=6), Column("geomean", drop=4)]
    cells = [[item["name"], item["status"], str(item["model"]), str(item["problem_set"]), _fmt(item["samples"]),
              _fmt(item["pass@1"]), _fmt(item["fast_p/eager/kernelbench/1"]), _fmt(item["fast_p/eager/best_of_n/1"]),
              _fmt(item["geomean_speedup/eager"])] for item in items]
    console = _console()
    console.print(fitted_table(columns, cells, console.width, box=HEAVY_HEAD))


@evals_app.command("show")
def evals_show(name: str = typer.Argument(..., help="Evaluation name."),
               as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON to stdout.")) -> None:
    """An evaluation's numbers, recomputed from its stored per-sample, per-turn records."""
    from core.evaluation import eval_summary
    from app.commands.workspace import require_for_reading

    with require_for_reading(name) as reg:
        summary = eval_summary(reg, name)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    _print_summary(summary)


@evals_app.command("compare")
def evals_compare(a: str = typer.Argument(..., help="Baseline evaluation."),
                  b: str = typer.Argument(..., help="Evaluation compared against it."),
                  force: bool = typer.Option(False, "--force", help="Compare evaluations made differently (warned)."),
                  as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON to stdout.")) -> None:
    """B against A on their shared problems: per-problem table and paired bootstrap 95% intervals of the
    difference in fast_1 and of the ratio of geomean speedups. An evaluation with samples still to play is refused
    (--force compares only the problems both have finished, marked partial)."""
    from core.evaluation import compare_evals
    from app.commands.workspace import require_for_reading

    with require_for_reading(a) as reg:
        result = compare_evals(reg, a, b, force=force)
    console = _console()
    if result["partial"]:
        console.print("[b red]WARNING: partial comparison, not every sample is evaluated:[/] "
                      + "; ".join(f"{name} ({state})" for name, state in result["partial"].items())
                      + f"; {len(result['unfinished_problems'])} unfinished problem(s) left out.")
    if result["stamp_differences"]:
        console.print("[b red]WARNING: these evaluations were made differently; the comparison is not sound:[/] "
                      + "; ".join(f"{k}: {v[0]!r} vs {v[1]!r}" for k, v in result["stamp_differences"].items()))
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    from app.commands.tables import Column, fitted_table

    # A and B in the headers, their names once above in full: the table stays narrow and every name whole.
    console.print(f"A = {result['a']}\nB = {result['b']}")
    columns = [Column("problem", whole=True), Column("A fast_1", whole=True, justify="right"),
               Column("B fast_1", whole=True, justify="right"), Column("A best", whole=True, justify="right"),
               Column("B best", whole=True, justify="right")]
    cells = [[row["problem_id"], _fmt(row["a_fast_1"]), _fmt(row["b_fast_1"]), _fmt(row["a_best_speedup"]),
              _fmt(row["b_best_speedup"])] for row in result["problems"]]
    console.print(fitted_table(columns, cells, console.width))
    fast = result["fast_1"]
    console.print(f"fast_1 (KernelBench, best turn) on {fast['n_problems']} shared problems: {_fmt(fast['a'])} -> "
                  f"{_fmt(fast['b'])}, difference {_fmt(fast['difference'])} "
                  f"[95% CI {_fmt(fast['low'])}, {_fmt(fast['high'])}]")
    geo = result["geomean_speedup"]
    if geo.get("ratio") is not None:
        console.print(f"geomean speedup ratio B/A on {geo['n_problems']} problems both solved: {geo['ratio']:.3f} "
                      f"[95% CI {geo['ratio_low']:.3f}, {geo['ratio_high']:.3f}]")
    else:
        console.print("geomean speedup: no problem solved by both")


@evals_app.command("export")
def evals_export(name: str = typer.Argument(..., help="Evaluation name."),
                 fmt: str = typer.Option("jsonl", "--format", help="jsonl | csv (one record per sample and turn) | "
                                                                  "conversations (one JSON line per sample: turns "
                                                                  "with prompt, response, verdict — SFT data)."),
                 output: Optional[str] = typer.Option(None, "--output", "-o", help="File (default: stdout).")) -> None:
    """Export an evaluation's records (the input of every score) or its conversations."""
    from core.errors import KrlError
    from core.evaluation import eval_conversations, eval_records
    from app.commands.workspace import require_for_reading

    if fmt not in ("jsonl", "csv", "conversations"):
        raise KrlError(f"--format must be jsonl, csv or conversations, not '{fmt}'.")
    with require_for_reading(name) as reg:
        row = reg.get_run(name)
        if row["kind"] != "eval":
            raise KrlError(f"run '{row['name']}' is a {row['kind']} run, not an evaluation.")
        items = eval_conversations(reg, row["id"]) if fmt == "conversations" else eval_records(reg, row["id"])
    handle = open(output, "w", newline="") if output else sys.stdout
    try:
        if fmt == "csv":
            extra = sorted({k for item in items for k in item} - set(EXPORT_FIELDS))
            writer = csv.DictWriter(handle, fieldnames=[*EXPORT_FIELDS, *extra])
            writer.writeheader()
            for item in items:
                writer.writerow({k: ("" if v is None else v) for k, v in item.items()})
        else:
            for item in items:
                handle.write(json.dumps(item) + "\n")
    finally:
        if output:
            handle.close()
    if output:
        _console().print(f"{len(items)} {'samples' if fmt == 'conversations' else 'records'} written to {output}")


@evals_app.command("resume")
def evals_resume(name: str = typer.Argument(..., help="A stopped, failed or crashed evaluation."),
                 detach: bool = typer.Option(False, "--detach", "-d", help="Resume in the background."),
                 as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON when it ends.")) -> None:
    """Finish an evaluation: only samples without a stored result are played."""
    from core import procman
    from core.errors import KrlError
    from core.registry import Registry

    with Registry.for_workspace() as reg:
        procman.reconcile(reg)
        row = reg.get_run(name)
        if row["kind"] != "eval":
            raise KrlError(f"run '{row['name']}' is a {row['kind']} run; resume it with `krl runs resume`.")
        if detach:
            row = procman.resume_run(reg, name, detach=True)
            _console().print(f"{row['name']}: {row['status']}")
            return
        if row["status"] not in procman.RESUMABLE_STATUSES:
            raise KrlError(f"evaluation '{row['name']}' is {row['status']}; only stopped, failed or crashed ones "
                           "can be resumed.")
    from core.config import config_from_dict
    from core.evaluation import evaluate_foreground

    final = evaluate_foreground(config_from_dict(row["config"]), resume=row["name"])
    _finish_and_report(final, as_json)


def register(app: typer.Typer) -> None:
    """Add `krl eval` and `krl evals …` to the `krl` app."""
    app.command("eval")(eval_command)
    app.add_typer(evals_app, name="evals")
