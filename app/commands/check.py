"""CLI command: `krl check PROBLEM KERNEL_FILE` evaluates one candidate kernel and prints its verdict.
Top-level imports stay light: heavy modules are imported inside the commands."""

from __future__ import annotations

import json
import re
from typing import Optional

import typer


def _guess_backend(source: str) -> str:
    if re.search(r"\bload_inline\b", source):
        return "cuda"
    if re.search(r"^\s*(import triton|from triton\b)", source, re.MULTILINE):
        return "triton"
    return "torch"


def check(
    problem: str = typer.Argument(..., help="Problem id or path: builtin/relu, kernelbench/level1/19_ReLU, ./my_problem.py"),
    kernel_file: str = typer.Argument(..., help="Python file defining `class ModelNew(nn.Module)`."),
    backend: Optional[str] = typer.Option(None, "--backend", "-b", help="cuda | triton | torch (default: guessed from the file)."),
    precision: str = typer.Option("fp32", "--precision", "-p", help="fp32 | fp16 | bf16."),
    size: str = typer.Option("default", "--size", help="default: the problem file's sizes; gpu: its gpu_sizes."),
    devices: str = typer.Option("auto", "--devices", help="auto | cpu | comma-separated GPU indices."),
    timing_trials: int = typer.Option(100, "--timing-trials", help="Timed calls per kernel."),
    no_timing: bool = typer.Option(False, "--no-timing", help="Check correctness only."),
    as_json: bool = typer.Option(False, "--json", help="Print the EvalResult as JSON to stdout."),
) -> None:
    """Check one kernel against a problem: verdict, correctness, speedup. Exit 0 whatever the verdict."""
    import os
    import shutil
    import sys
    from pathlib import Path

    from core.errors import KrlError
    from core.problems import resolve_problem
    from evaluator.api import BACKENDS, PRECISIONS, EvalRequest, Evaluator, EvaluatorError

    if precision not in PRECISIONS:
        raise KrlError(f"unknown precision '{precision}'; use one of {', '.join(PRECISIONS)}.")
    if backend is not None and backend not in BACKENDS:
        raise KrlError(f"unknown backend '{backend}'; use one of {', '.join(BACKENDS)}.")
    if size not in ("default", "gpu"):
        raise KrlError(f"unknown size '{size}'; use default or gpu.")
    path = Path(kernel_file).expanduser()
    try:
        source = path.read_text()
    except OSError as exc:
        raise KrlError(f"cannot read kernel file {path}: {exc.strerror}. Give the path of a Python file defining ModelNew.") from None
    except UnicodeDecodeError:
        source = "\x00"  # not text: refused just below
    refuse_unfit_file(path, source, backend)
    chosen = resolve_problem(problem)
    request = EvalRequest(
        problem_id=chosen.id,
        reference_source=chosen.source,
        candidate_source=source,
        problem_hash=chosen.hash,
        backend=backend or _guess_backend(source),
        precision=precision,
        timing_trials=timing_trials,
        measure_timing=not no_timing,
        size_overrides=chosen.gpu_sizes if size == "gpu" else {},
    )
    device_arg: object = devices if devices != "auto" else _auto_devices()
    if devices not in ("auto", "cpu"):
        device_arg = [d.strip() for d in devices.split(",") if d.strip()]
    from rich.console import Console

    console = Console(stderr=True)
    evaluator = None
    try:
        try:
            with console.status(f"evaluating {path.name} on {chosen.id} ({request.backend}, {precision})…") if not as_json else _null():
                evaluator = Evaluator(devices=device_arg, workers_per_device=1, cpu_workers=1, spare_per_device=0,
                                      compile_workers=1 if shutil.which("nvcc") or os.environ.get("CUDA_HOME") else 0)
                result = evaluator.evaluate(request)
        except EvaluatorError as exc:
            raise KrlError(f"the evaluator could not run: {exc}") from None
        # The verdict is shown before the workers are shut down (a few tenths of a second the user need not wait).
        if as_json:
            typer.echo(json.dumps(result.to_dict(), indent=2))
            sys.stdout.flush()
            return
        print_result(console, result)
        if request.backend == "triton" and result.device_name == "cpu" and request.measure_timing:
            console.print("[yellow]note:[/] on CPU, Triton kernels run under the Triton interpreter: their timing and "
                          "speedup are meaningless (use a GPU to time them).")
    finally:
        if evaluator is not None:
            evaluator.close()


def _auto_devices() -> str:
    """'cpu' when this machine shows no GPU (KRL_GPUS, CUDA_VISIBLE_DEVICES, the driver's /proc entries, nvidia-smi),
    else 'auto'. Said here, the Evaluator need not import torch in this process only to count zero GPUs: a second
    or more before the first worker even starts, on a CPU machine."""
    import glob

    from core.procman import detect_gpus

    return "auto" if detect_gpus() or glob.glob("/dev/nvidia[0-9]*") else "cpu"


LARGE_KERNEL_BYTES = 1 << 20  # a kernel file past this is almost surely not what was meant


def refuse_unfit_file(path, source: str, backend: Optional[str]) -> None:
    """What is wrong with the file itself, said at once (exit 2) instead of after the evaluator's start-up: not
    text, empty, a raw CUDA file, no ModelNew at all, CUDA on a machine without a GPU. A very large file is warned."""
    from core.errors import KrlError

    if "\x00" in source:
        raise KrlError(f"{path} is not a text file. Give a Python file defining `class ModelNew(nn.Module)`.")
    if path.suffix in (".cu", ".cuh", ".cpp", ".cc"):
        raise KrlError(f"{path} is raw {path.suffix} source; krl check takes a Python file defining ModelNew. Put the "
                       "CUDA source in a string and build it with torch.utils.cpp_extension.load_inline (see "
                       "`krl problems show builtin/relu` for the interface to match).")
    if not source.strip():
        raise KrlError(f"{path} is empty. Give a Python file defining `class ModelNew(nn.Module)`.")
    if "ModelNew" not in source:
        raise KrlError(f"{path} never mentions ModelNew: the evaluator needs `class ModelNew(nn.Module)` with the "
                       "reference Model's interface.")
    if (backend or _guess_backend(source)) == "cuda":
        from core.procman import detect_gpus

        if not detect_gpus():
            raise KrlError("CUDA kernels need a GPU and this machine has none (KRL_GPUS / CUDA_VISIBLE_DEVICES / "
                           "nvidia-smi found nothing). Check it on a GPU machine, or pass --backend torch for a "
                           "PyTorch-only ModelNew.")
    if len(source.encode()) > LARGE_KERNEL_BYTES:
        import sys

        print(f"warning: {path} is {len(source.encode()) / 1e6:.1f} MB; a kernel is usually a few kB. Checking it "
              "anyway.", file=sys.stderr)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def print_result(console, result) -> None:
    colour = "green" if result.correct else ("yellow" if result.verdict.value in ("wrong_output", "shape_mismatch") else "red")
    console.print(f"[bold {colour}]{result.verdict.value}[/]  {result.problem_id}  on {result.device_name or '?'}")
    console.print(f"correctness trials: {result.correctness_trials_passed}/{result.correctness_trials_total}"
                  + (f"   max |diff| {result.max_abs_diff:.3g}" if result.max_abs_diff is not None else ""))
    if result.kernel_runtime and result.reference_runtime:
        # The medians of every round; a slot's GPU speedup is each side's fastest rounds (slot/round_figures.py).
        console.print(f"kernel {result.kernel_runtime.median_ms:.4f} ms  reference {result.reference_runtime.median_ms:.4f} ms "
                      f"(median rounds)  speedup {result.speedup:.3f}x  ({result.timing_clock})" if result.speedup else "")
    if result.hack_rule:
        console.print(f"hack rule: {result.hack_rule}")
    if result.error_message:
        from rich.markup import escape

        console.print(escape(result.error_message))
    from app.commands.phases import plain_phase_line

    phases = plain_phase_line(result.phase_times_s)  # stages a user knows, never the evaluator's phase names
    if phases:
        console.print(f"[dim]{phases}{'  cache: ' + ','.join(result.cache_hits) if result.cache_hits else ''}[/]")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `krl` app."""
    app.command("check")(check)
