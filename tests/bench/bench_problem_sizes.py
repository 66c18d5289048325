"""Time every built-in problem's reference at its `gpu_sizes` (index.yaml) on the local GPU, fp32, CUDA events.
Prints one line per problem: the sizes are meant to give each reference tens of microseconds or more."""

from __future__ import annotations

import statistics
import sys
import types
from pathlib import Path

import torch
import yaml

BUILTIN = Path(__file__).resolve().parents[2] / "core" / "data" / "problems" / "builtin"


def reference_ms(source: str, sizes: dict, trials: int = 30) -> tuple[float, float]:
    """(median ms per forward, peak GiB of GPU memory) of the reference with `sizes` applied."""
    module = types.ModuleType("reference")
    exec(compile(source, "reference.py", "exec"), module.__dict__)
    for name, value in sizes.items():
        setattr(module, name, value)  # the problems read their size constants at call time
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda().eval()
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
    torch.cuda.reset_peak_memory_stats()
    times = []
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        for _ in range(trials):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    peak = torch.cuda.max_memory_allocated() / 2**30
    del model, inputs
    torch.cuda.empty_cache()
    return statistics.median(times), peak


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: run this on a GPU machine")
        return 1
    index = yaml.safe_load((BUILTIN / "index.yaml").read_text())
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, fp32, median of 30 forwards")
    print(f"{'problem':28s} {'ms':>9s} {'peak GiB':>9s}  gpu_sizes")
    for stem, entry in index.items():
        sizes = dict(entry.get("gpu_sizes") or {})
        try:
            ms, peak = reference_ms((BUILTIN / f"{stem}.py").read_text(), sizes)
            print(f"{stem:28s} {ms:9.3f} {peak:9.2f}  {sizes}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on to the next problem
            print(f"{stem:28s} failed: {exc!r}"[:200], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
