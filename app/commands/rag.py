"""CLI commands: `krl rag build | query | stats` — build a retrieval index of solved kernels, query it, describe it.
Top-level imports stay light: rag, faiss and the embedding model are imported inside the commands."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, Optional

import typer

INDEX_DIRNAME = "rag-index"

rag_app = typer.Typer(help="Retrieval-augmented prompts: build a kernel example index, query it, show its stats.")


def default_index_dir() -> Path:
    from core.registry import workspace_path

    return workspace_path() / INDEX_DIRNAME


@contextmanager
def _user_errors() -> Iterator[None]:
    """rag raises its own RagError (it does not import core); the CLI reports it like any user error."""
    from core.errors import KrlError
    from rag import RagError

    try:
        yield
    except RagError as exc:
        raise KrlError(str(exc)) from None


def _stderr():
    from rich.console import Console

    return Console(stderr=True)


# ---------------------------------------------------------------- harvest

def harvest_records(registry: Any, run_names: Optional[List[str]] = None) -> tuple[list, dict[str, int]]:
    """Correct kernels found by this workspace's runs, as rag Records with their measured speedups.
    Each keeps the problem id it solved, so retrieval never shows a problem its own solution."""
    from core.errors import KrlError
    from core.problems import resolve_problem
    from rag.corpus import Record

    runs = [registry.get_run(name) for name in run_names] if run_names else registry.list_runs()
    problems: dict[str, Any] = {}
    records, skipped = [], {"problem_unavailable": 0, "no_kernel_backend": 0, "empty_kernel": 0}
    for run in runs:
        backend = ((run.get("config") or {}).get("kernel") or {}).get("backend")
        offset = 0
        while True:
            page = registry.trajectories(run["id"], outcome="solved", order="step", limit=500, offset=offset)
            offset += len(page)
            for trajectory in page:
                if trajectory["hack"]:
                    continue
                for turn in registry.trajectory_turns(trajectory["id"]):
                    if turn["verdict"] != "correct":
                        continue
                    if not backend:
                        skipped["no_kernel_backend"] += 1
                        continue
                    if not (turn["kernel"] or "").strip():
                        skipped["empty_kernel"] += 1
                        continue
                    problem_id = trajectory["problem_id"]
                    if problem_id not in problems:
                        try:
                            problems[problem_id] = resolve_problem(problem_id)
                        except KrlError:
                            problems[problem_id] = None
                    problem = problems[problem_id]
                    if problem is None:
                        skipped["problem_unavailable"] += 1
                        continue
                    speedup = (turn["eval_result"] or {}).get("speedup")
                    records.append(Record(
                        id=f"runs/{run['name']}/s{trajectory['step']}/g{trajectory['group_index']}"
                           f".{trajectory['sample_index']}/t{turn['turn']}",
                        source="runs", backend=backend, pytorch_code=problem.source, kernel_code=turn["kernel"],
                        name=problem.name, speedup=speedup,
                        origin=f"run {run['name']} step {trajectory['step']} turn {turn['turn']}",
                        correct=True, problem_id=problem_id))
            if len(page) < 500:
                break
    return records, {k: v for k, v in skipped.items() if v}


# ---------------------------------------------------------------- commands

@rag_app.command("build")
def build(
    source: List[str] = typer.Option(["runs"], "--source", "-s",
                                     help="runs (this workspace's correct kernels; needs nothing more) | kernelbook | "
                                          "sakana | hub:OWNER/NAME (these three download from the Hugging Face hub "
                                          "and need the `datasets` package) | PATH (.jsonl/.json/.parquet or a "
                                          "folder); repeat for several."),
    backend: List[str] = typer.Option([], "--backend", "-b", help="Keep only these kernel backends (triton, cuda)."),
    model: Optional[str] = typer.Option(None, "--model", "-m",
                                        help="Embedding model (default: all-MiniLM-L6-v2, bundled, works offline)."),
    decontaminate: Optional[str] = typer.Option(None, "--decontaminate", "-d",
                                                help="Drop records matching these problems: builtin | "
                                                     "kernelbench/level1 | PATH (comma-separated for several)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Index folder (default: <workspace>/rag-index)."),
    append: bool = typer.Option(False, "--append", help="Add to the existing index (incremental; skips duplicates)."),
    replace: bool = typer.Option(False, "--replace", help="Replace an existing index."),
    run: List[str] = typer.Option([], "--run", help="With --source runs: only these runs (default: all)."),
    include_unverified: bool = typer.Option(False, "--include-unverified",
                                            help="Keep records not marked correct (default: verified only)."),
    similarity: float = typer.Option(0.93, "--similarity",
                                     help="Decontamination: drop records this similar (cosine) to a problem."),
    name_match: bool = typer.Option(True, "--name-match/--no-name-match",
                                    help="Decontamination: drop records named like a problem."),
    max_per_program: Optional[int] = typer.Option(None, "--max-per-program",
                                                  help="Keep at most N kernels (the fastest) per PyTorch program."),
    max_kernel_chars: int = typer.Option(30_000, "--max-kernel-chars", help="Drop kernels longer than this."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Read at most N records per source (trial builds)."),
    device: Optional[str] = typer.Option(None, "--device", help="Embedding device: cpu | cuda (default: auto)."),
    as_json: bool = typer.Option(False, "--json", help="Print the build report as JSON to stdout."),
) -> None:
    """Build (or extend) a retrieval index of PyTorch → kernel examples."""
    from core.errors import KrlError

    if append and replace:
        raise KrlError("--append and --replace contradict each other: choose one.")
    out_dir = out or default_index_dir()
    console = _stderr()
    with _user_errors():
        from rag.build import build_index
        from rag.decontaminate import ProblemRef
        from rag.filters import FilterOptions
        from rag.index import KernelIndex, already_exists_error
        from rag.sources import load_source

        if not (append or replace) and KernelIndex.exists(out_dir):
            raise already_exists_error(out_dir)  # said before any source is read, not after
        for spec in source:
            refuse_unreachable_source(spec)

        records, harvest_skipped = [], {}
        for spec in source:
            if spec == "runs":
                from core.registry import Registry

                with Registry.for_workspace(create=False) as registry:
                    harvested, harvest_skipped = harvest_records(registry, run or None)
                records += harvested[:limit] if limit else harvested
                console.print(f"harvested {len(harvested)} correct kernels from the registry")
            else:
                loaded = load_source(spec, limit)
                records += loaded
                console.print(f"loaded {len(loaded)} records from {spec}")
        if replace and not records and KernelIndex.exists(out_dir):
            raise KrlError(f"--replace with nothing to put in: the sources gave 0 records, and the index at {out_dir} "
                           "is kept. Check --source (and --run / --limit).")
        if not records and not append:
            hint = ("this workspace's runs have no correct kernel yet (`krl demo` makes some)"
                    if source == ["runs"] else "check --source (and --run / --limit)")
            raise KrlError(f"nothing to index: the sources gave 0 records, so no index is made at {out_dir}; {hint}, "
                           "or pass --source PATH with PyTorch → kernel pairs.")
        problems = []
        if decontaminate:
            from core.problems import load_problem_set

            problems = [ProblemRef(p.id, p.name, p.source) for p in load_problem_set(decontaminate)]
            console.print(f"decontaminating against {len(problems)} problems of {decontaminate}")
        filters = FilterOptions(backends=[b.lower() for b in backend] or None, correct_only=not include_unverified,
                                max_kernel_chars=max_kernel_chars, max_per_program=max_per_program)
        report = build_index(records, out_dir, model=model, device=device, problems=problems, filters=filters,
                             append=append, replace=replace, similarity_threshold=similarity, match_names=name_match,
                             progress=not as_json and sys.stderr.isatty())
    if harvest_skipped:
        report["harvest_skipped"] = harvest_skipped
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    _print_build_report(console, report)


def refuse_unreachable_source(spec: str) -> None:
    """A hub source without the `datasets` package is refused before anything is read, naming the install command
    for this very interpreter (no extra of kernelrl installs `datasets`: the hub corpora are opt-in downloads)."""
    import importlib.util

    from core.errors import KrlError
    from rag.sources import HUB_DATASETS

    hub_id = spec[4:] if spec.startswith("hub:") else HUB_DATASETS.get(spec) if not Path(spec).exists() else None
    if hub_id and importlib.util.find_spec("datasets") is None:
        raise KrlError(f"--source {spec} downloads {hub_id} from the Hugging Face hub, which needs the `datasets` "
                       f"package: install it with `{sys.executable} -m pip install datasets`, or download the files "
                       "yourself and pass them as --source PATH. `krl rag build` alone (--source runs) needs neither.")


def _print_build_report(console: Any, report: dict[str, Any]) -> None:
    console.print(f"[bold]{report['added']}[/] records added to {report['index']} "
                  f"({report['stats']['records']} in total, model {report['model']}, {report['seconds']:.1f} s)")
    if report["filtered_out"]:
        console.print("filtered out: " + ", ".join(f"{k} {v}" for k, v in report["filtered_out"].items()))
    if report["duplicates"]:
        console.print(f"duplicates dropped: {report['duplicates']}")
    decon = report["decontamination"]
    if decon["problems"]:
        reasons = ", ".join(f"{k} {v}" for k, v in decon["dropped"].items()) or "none"
        console.print(f"decontamination against {decon['problems']} problems dropped {decon['total_dropped']} "
                      f"({reasons})")
    for key, value in report.get("harvest_skipped", {}).items():
        console.print(f"harvest skipped {value} turns: {key}")


@rag_app.command("query")
def query(
    problem: str = typer.Argument(..., help="A problem id (builtin/softmax, kernelbench/level1/23) or a problem file."),
    k: int = typer.Option(3, "-k", "--k", help="How many examples."),
    backend: Optional[str] = typer.Option(None, "--backend", "-b",
                                          help="Kernel backend of the examples (default: any)."),
    index: Optional[Path] = typer.Option(None, "--index", "-i", help="Index folder (default: <workspace>/rag-index)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Must be the index's model (checked)."),
    token_budget: Optional[int] = typer.Option(None, "--token-budget", help="Fit the examples to N tokens."),
    mmr: Optional[float] = typer.Option(None, "--mmr", help="Diversity: MMR lambda in (0, 1) (1 = relevance only)."),
    prompt: bool = typer.Option(False, "--prompt", help="Print the examples as prompt text."),
    as_json: bool = typer.Option(False, "--json", help="Print the examples as JSON to stdout."),
) -> None:
    """Show the examples the retriever would put in a problem's prompt."""
    from core.problems import resolve_problem

    target = resolve_problem(problem)
    with _user_errors():
        from rag.retriever import IndexRetriever

        retriever = IndexRetriever(index or default_index_dir(), model=model, mmr_lambda=mmr)
        try:
            examples = retriever.examples(target.source, target.id, backend, k, token_budget=token_budget)
            text = retriever.format(examples) if prompt else ""
        finally:
            retriever.close()
    if as_json:
        typer.echo(json.dumps({"problem": target.id, "backend": backend, "k": k, "examples": examples}, indent=2))
        return
    if prompt:
        typer.echo(text)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(examples)} examples for {target.id}")
    for column in ("#", "score", "name", "backend", "speedup", "source", "id"):
        table.add_column(column)
    for number, example in enumerate(examples, 1):
        speedup = f"{example['speedup']:.2f}x" if example["speedup"] is not None else "-"
        table.add_row(str(number), f"{example['score']:.3f}", example["name"], example["backend"], speedup,
                      example["source"], example["id"])
    Console().print(table)
    if not examples:
        _stderr().print("no examples: the index has none for this backend, or all were this problem itself.")


@rag_app.command("stats")
def stats(
    index: Optional[Path] = typer.Option(None, "--index", "-i", help="Index folder (default: <workspace>/rag-index)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
) -> None:
    """Describe an index: size, model, backends, sources, op tags."""
    with _user_errors():
        from rag.index import KernelIndex

        with KernelIndex.open(index or default_index_dir()) as opened:
            info = opened.stats()
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    from rich.console import Console

    console = Console()
    console.print(f"[bold]{info['path']}[/]: {info['records']} records, {info['index_type']} "
                  f"{info['metric']} index, model {info['model']} (dim {info['dimension']}), "
                  f"{info['size_bytes'] / 1e6:.1f} MB")
    for label, key in (("backends", "by_backend"), ("sources", "by_source"), ("tags", "by_tag")):
        console.print(f"{label}: " + (", ".join(f"{k} {v}" for k, v in info[key].items()) or "-"))
    if info["with_speedup"]:
        console.print(f"speedups known for {info['with_speedup']} (mean {info['mean_speedup']:.2f}x, "
                      f"max {info['max_speedup']:.2f}x)")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `krl` app."""
    app.add_typer(rag_app, name="rag")
