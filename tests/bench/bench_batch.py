"""Benchmark: 48 real inline-CUDA candidates for KernelBench level 1-2 problems (tests/bench/batch_kernels.py) through
the real Evaluator, cold (empty build cache) then warm (cache kept), locally or through Ray on 1, 2, 4 GPUs with the
scaling efficiency. One JSON line per pass: wall_s, evals_per_min, verdicts, phase_mean_s, gpu_idle_share, machine.

    python3 tests/bench/bench_batch.py                         # one pool on every visible GPU: cuda cold, then warm
    python3 tests/bench/bench_batch.py --ray --ray-gpus 1,2,4 --kinds cuda,triton --cache-dir /tmp/krl-batch-cache
    python3 tests/bench/bench_batch.py --dry-run               # the request list only (no GPU, no evaluator)
    python3 tests/bench/bench_batch.py --summarize a.jsonl b.jsonl   # scaling efficiency from earlier JSON lines

Build cache: evaluator/build/artefacts.py, under <cache-dir>/cuda/<entry>/ where entry = sha256(candidate source
sha256 : extension key) and the extension key hashes the load_inline sources, functions, flags, GPU arch, toolchain and
torch versions and the build recipe; torch's precompiled headers live under <cache-dir>/pch/. A fresh --cache-dir
(the default: a new temporary folder) is a cold cache."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.batch_kernels import Item, cuda_batch, describe, torch_batch, triton_batch  # noqa: E402
from tests.bench.host_sampler import HostSampler  # noqa: E402

GPU_KINDS = ("cuda", "triton")
# Of the budget left, what a local pass may take when another pass follows it. 0.65 cut an H100's cold pass at 260.8 s
# of a 430 s budget with one build unfinished, which the warm pass then waited 94 s for.
COLD_SHARE = 0.7


def say(row: dict) -> None:
    print(json.dumps(row), flush=True)


def note(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


class GpuSampler:
    """nvidia-smi's utilisation of the given GPUs every 100 ms while a pass runs: idle share = 1 - mean utilisation
    (per GPU, and over all of them). Without nvidia-smi, no figure (None)."""

    def __init__(self, indices: list[int]):
        self.indices = indices
        self.samples: dict[int, list[float]] = {i: [] for i in indices}
        self.process: Optional[subprocess.Popen] = None

    def __enter__(self) -> "GpuSampler":
        if not self.indices or shutil.which("nvidia-smi") is None:
            return self
        # Every GPU is sampled and the wanted ones kept: no reliance on -i taking a list.
        command = ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100"]
        try:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return self
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for line in self.process.stdout:
            index, _, value = line.partition(",")
            try:
                if int(index) in self.samples:
                    self.samples[int(index)].append(float(value))
            except ValueError:
                pass

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def figures(self) -> dict:
        every = [v for values in self.samples.values() for v in values]
        return {"gpu_idle_share": round(1 - statistics.mean(every) / 100, 3) if every else None,
                "gpu_idle_by_device": {str(i): round(1 - statistics.mean(v) / 100, 3)
                                       for i, v in sorted(self.samples.items()) if v}}


def make_requests(items: list[Item], tag: str, copies: int = 1) -> list:
    """The items as EvalRequests with default judging settings (5 correctness trials, 100 timed calls, KernelBench
    timing too); `copies` repeats the batch (distinct request ids, same sources: build-cache hits)."""
    from evaluator.api import EvalRequest

    return [EvalRequest(problem_id=item.problem_id, reference_source=item.reference, candidate_source=item.candidate,
                        backend=item.backend, size_overrides=dict(item.sizes), compile_timeout_s=600,
                        run_timeout_s=120, request_id=f"{tag}-{copy}-{k:03d}")
            for copy in range(copies) for k, item in enumerate(items)]


def warm_up(evaluator, count: int, deadline: float, items: Optional[list[Item]] = None) -> int:
    """Untimed requests with one correctness trial, enough to reach every slot, so a pass measures running pools:
    trivial torch ones, or the given items (CUDA ones start the compile workers: their builds must be cached)."""
    from evaluator.api import EvalRequest

    items = (items * count)[:count] if items else torch_batch(count)
    requests = [EvalRequest(problem_id=i.problem_id, reference_source=i.reference, candidate_source=i.candidate,
                            backend=i.backend, size_overrides=dict(i.sizes), correctness_trials=1,
                            measure_timing=False, kernelbench_timing=False, compile_timeout_s=600,
                            request_id=f"warmup-{i.backend}-{k}") for k, i in enumerate(items)]
    done = 0
    futures = [evaluator.submit(r) for r in requests]
    try:
        for future in concurrent.futures.as_completed(futures, timeout=max(1.0, deadline - time.monotonic())):
            future.result()
            done += 1
    except (concurrent.futures.TimeoutError, Exception) as exc:  # noqa: BLE001 - reported, the pass still runs
        note(f"warm-up: {done}/{count} done ({type(exc).__name__}: {str(exc)[:200]})")
    return done


def run_pass(evaluator, requests: list, gpus: list[int], deadline: float) -> dict:
    """Submit the whole batch at once, collect until done or the deadline; the figures of that pass."""
    results, failures, done_s = [], [], {}
    with GpuSampler(gpus) as sampler, HostSampler() as host:
        started = time.monotonic()
        futures = [evaluator.submit(r) for r in requests]
        try:
            for future in concurrent.futures.as_completed(futures, timeout=max(1.0, deadline - time.monotonic())):
                try:
                    results.append(future.result())
                    done_s[results[-1].request_id] = round(time.monotonic() - started, 2)
                except Exception as exc:  # noqa: BLE001 - an evaluator error is a figure of its own
                    failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        except concurrent.futures.TimeoutError:
            pass
        wall_s = time.monotonic() - started
    for future in futures:
        future.cancel()
    pool = evaluator.stats() if hasattr(evaluator, "stats") else {}
    summary = summarize_results(results, wall_s)
    for item, result in zip(summary["per_item"], results):
        item["done_s"] = done_s.get(result.request_id)
    # A warm pass's wall over the items whose build the cache held: one source the cold pass did not finish (a broken
    # one whose failing build took 94 s) was the whole of a warm pass's 94.5 s on an H100
    built = [done_s.get(r.request_id) or 0.0 for r in results if "compile" in r.cache_hits]
    return {**summary, "missing": len(requests) - len(results) - len(failures),
            "wall_cached_s": max(built) if built else None,
            "pool_stats": pool.get("stats", {}), "recent_infrastructure_failures":
                pool.get("recent_infrastructure_failures", []),
            "evaluator_errors": len(failures), "evaluator_error_sample": sorted(set(failures))[:2],
            **sampler.figures(), **host.figures()}


def summarize_results(results: list, wall_s: float) -> dict:
    verdicts: dict[str, int] = {}
    phases: dict[str, list[float]] = {}
    for result in results:
        verdicts[result.verdict.value] = verdicts.get(result.verdict.value, 0) + 1
        for name, value in result.phase_times_s.items():
            phases.setdefault(name, []).append(float(value))
    errors = sorted({f"{r.verdict.value}: {first_line(r.error_message)}" for r in results
                     if r.verdict.value != "correct"})
    speedups = [r.speedup for r in results if r.verdict.value == "correct" and r.speedup]
    return {"n_done": len(results), "wall_s": round(wall_s, 2),
            "evals_per_min": round(60 * len(results) / wall_s, 1) if wall_s > 0 else None,
            "verdicts": dict(sorted(verdicts.items())),
            "phase_mean_s": {k: round(statistics.mean(v), 4) for k, v in sorted(phases.items())},
            "compile_s_sum": round(sum(phases.get("compile", [])), 1),
            "build_cache_hits": sum("compile" in r.cache_hits for r in results),
            "speedup_median": round(statistics.median(speedups), 3) if speedups else None,
            "error_sample": errors[:4], "gpu_name": next((r.gpu_name for r in results if r.gpu_name), ""),
            # the whole message (its traceback's end) of each evaluator failure: a first line does not say what broke
            "infrastructure_failures": [f"{r.problem_id}: {r.error_message[-1200:]}" for r in results
                                        if "infrastructure failure" in r.error_message][:4],
            "retried": sum(r.attempts > 1 for r in results),
            # per item, the phases a task's wall is made of: which problems the batch's time goes to
            "per_item": [{"problem": r.problem_id, "verdict": r.verdict.value,
                       "phases": {k: round(float(v), 3) for k, v in r.phase_times_s.items()
                                  if k in ITEM_PHASES}} for r in results]}


ITEM_PHASES = ("compile", "load", "correctness", "kernel_checks", "timing", "recheck", "total", "timing_held",
               "device_wait", "timing_setup", "cpu_judge", "cpu_runner", "trials_judge_inputs", "trials_runner",
               "trials_judge_compare")


def first_line(text: str) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:160] if lines else ""


def cache_entries(cache_dir: str) -> int:
    folder = os.path.join(cache_dir, "cuda")
    return len([n for n in os.listdir(folder) if not n.startswith(".") and not n.endswith(".lock")]) \
        if os.path.isdir(folder) else 0


def batch_for(kind: str, args) -> tuple[list[Item], list[str]]:
    if kind == "cuda":
        items, notes = cuda_batch(args.set)
    elif kind == "triton":
        items, notes = triton_batch(args.triton_n), []
    else:
        items, notes = torch_batch(args.torch_n), []
    return (items[: args.limit] if args.limit else items), notes


def base_row(args, mode: str, kind: str, items: list[Item], notes: list[str]) -> dict:
    return {"machine": platform.node(), "mode": mode, "kind": kind, "set": args.set if kind == "cuda" else "",
            **{k: v for k, v in describe(items).items() if k != "by_origin"}, "by_origin": describe(items)["by_origin"],
            "notes": notes}


# ---------------------------------------------------------------- one machine: the local pool

def run_local(args, kinds: list[str], gpus: list[int], deadline: float) -> list[dict]:
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="krl-batch-cache-")
    os.makedirs(cache_dir, exist_ok=True)
    rows: list[dict] = []
    try:
        run_local_in(args, kinds, gpus, deadline, cache_dir, rows)
    finally:
        if not args.cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)
    return rows


def run_local_in(args, kinds: list[str], gpus: list[int], deadline: float, cache_dir: str, rows: list[dict]) -> None:
    from evaluator.api import Evaluator

    started = time.monotonic()
    options: dict[str, Any] = {"devices": gpus or "cpu", "workers_per_device": args.slots, "cache_dir": cache_dir}
    if args.compile_workers is not None:
        options["compile_workers"] = args.compile_workers
    if not gpus:
        options["cpu_workers"] = int(args.slots) if str(args.slots).isdigit() else 2
    with Evaluator(**options) as evaluator:
        slots = len(evaluator.devices) * evaluator.workers_per_device if gpus else options["cpu_workers"]
        warmed = warm_up(evaluator, 2 * slots, deadline)
        start_s = round(time.monotonic() - started, 1)
        for kind in kinds:
            items, notes = batch_for(kind, args)
            passes = args.passes.split(",") if kind == "cuda" else ["run"]
            for number, name in enumerate(passes):
                if time.monotonic() > deadline - 5:
                    say({**base_row(args, "local", kind, items, notes), "pass": name, "skipped": "budget spent"})
                    continue
                before = cache_entries(cache_dir)
                # A pass that is not the last gets at most COLD_SHARE of the time left, so the next one is measured too.
                last = number == len(passes) - 1 and kind == kinds[-1]
                until = deadline if last else time.monotonic() + COLD_SHARE * (deadline - time.monotonic())
                row = run_pass(evaluator, make_requests(items, f"{kind}-{name}{number}"), gpus, until)
                row = {**base_row(args, "local", kind, items, notes), "pass": name, "pool": "same",
                       "gpus": len(gpus), "devices": evaluator.devices, "slots_per_gpu": evaluator.workers_per_device,
                       "pool_start_s": start_s, "warmup_done": warmed, "cache_dir": cache_dir,
                       "cache_entries_before": before, **row}
                say(row)
                rows.append(row)


# ---------------------------------------------------------------- Ray: 1, 2, 4 GPUs of one host

def open_ray(count: int, gpu: bool, args, cache_dir: str):
    """A fresh local Ray instance with `count` GPUs (CPU mode: `count` CPU actors) and the cluster evaluator on it."""
    import ray

    from evaluator.factory import open_evaluator

    os.environ["KRL_CACHE_DIR"] = cache_dir  # forwarded to every actor, the compile actor's cache included
    if gpu:
        ray.init(address="local", num_gpus=count, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address="local", num_gpus=0, num_cpus=max(2, count + 1), include_dashboard=False,
                 log_to_driver=False)
    options: dict[str, Any] = {"cache_dir": cache_dir, "workers_per_device": args.slots}
    if not gpu:
        options = {"cache_dir": cache_dir, "cpu_workers": 1, "spare_per_device": 0, "compile_workers": 0}
    try:
        return open_evaluator("ray://auto", evaluator_options=options, cpu_actors_per_node=max(1, count),
                              actor_cpus=0.5 if not gpu else 1.0)
    except BaseException:
        ray.shutdown()
        raise


def ray_session(args, count: int, gpu: bool, cache_dir: str, plan: list[tuple[str, str, int]],
                deadline: float) -> list[dict]:
    """One Ray instance on `count` GPUs: warm-up, then each (kind, pass name, copies) of the plan."""
    import ray

    rows = []
    started = time.monotonic()
    cluster = open_ray(count, gpu, args, cache_dir)
    try:
        actors = len(cluster.devices)
        warmed = warm_up(cluster, (16 if gpu else 2) * max(1, actors), deadline)
        if any(kind == "cuda" and name != "cold" for kind, name, _ in plan):
            # The compile actor's workers start on its first CUDA request: in a long run they are up already.
            built = [item for item in batch_for("cuda", args)[0] if item.origin != "builtin-broken"]
            warmed += warm_up(cluster, 2 * max(1, actors), deadline, built)
        start_s = round(time.monotonic() - started, 1)
        for kind, name, copies in plan:
            items, notes = batch_for(kind, args)
            base = {**base_row(args, "ray", kind, items, notes), "pass": name, "pool": "fresh", "gpus": count,
                    "actors": actors, "devices": cluster.devices, "copies": copies}
            if time.monotonic() > deadline - 5:
                say({**base, "skipped": "budget spent"})
                continue
            before = cache_entries(cache_dir)
            row = run_pass(cluster, make_requests(items, f"{kind}-{name}-g{count}", copies),
                           actor_gpus(cluster.devices, count) if gpu else [], deadline)
            row = {**base, "ray_start_s": start_s, "warmup_done": warmed, "cache_dir": cache_dir,
                   "cache_entries_before": before, **row}
            say(row)
            rows.append(row)
    finally:
        cluster.close()
        ray.shutdown()
    return rows


def actor_gpus(devices: list[str], count: int) -> list[int]:
    """The physical GPU indices the actors hold ("node:gpu2" -> 2), for the sampler; 0..count-1 if none is named."""
    found = sorted({int(part[3:]) for device in devices for part in device.rsplit(":", 1)[-1].split(",")
                    if part.startswith("gpu") and part[3:].isdigit()})
    return found or list(range(count))


def run_ray(args, kinds: list[str], counts: list[int], gpu: bool, deadline: float) -> list[dict]:
    """A cold pass first when the cache has no CUDA builds (its own session on the most GPUs: it fills the cache),
    then a fresh session per GPU count, so every count starts alike: new pools, build cache warm. Weak scaling by
    default: on N GPUs the batch is sent N times (each GPU gets as much work as the single one)."""
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="krl-batch-cache-")
    os.makedirs(cache_dir, exist_ok=True)
    try:
        rows = run_ray_in(args, kinds, counts, gpu, deadline, cache_dir)
    finally:
        if not args.cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)
    for row in scaling(rows):
        say(row)
    return rows


def run_ray_in(args, kinds: list[str], counts: list[int], gpu: bool, deadline: float, cache_dir: str) -> list[dict]:
    rows = []
    if "cuda" in kinds and cache_entries(cache_dir) == 0 and "cold" in args.passes:
        until = time.monotonic() + COLD_SHARE * (deadline - time.monotonic())
        rows += guarded_session(args, max(counts), gpu, cache_dir, [("cuda", "cold", 1)], until)
    for number, count in enumerate(counts):
        if time.monotonic() > deadline - 30:
            say({"machine": platform.node(), "mode": "ray", "gpus": count, "skipped": "budget spent"})
            continue
        copies = count if args.scaling == "weak" else 1
        plan = [(kind, "warm" if kind == "cuda" else "run", copies) for kind in kinds]
        # Each GPU count gets an equal share of the time left, so a slow one does not leave the next unmeasured.
        until = time.monotonic() + (deadline - time.monotonic()) / (len(counts) - number)
        rows += guarded_session(args, count, gpu, cache_dir, plan, until)
    return rows


def guarded_session(args, count: int, gpu: bool, cache_dir: str, plan: list, deadline: float) -> list[dict]:
    """A session that fails (no actor started, Ray itself) is one JSON line, and the next GPU count still runs."""
    try:
        return ray_session(args, count, gpu, cache_dir, plan, deadline)
    except Exception as exc:  # noqa: BLE001 - reported as a row
        say({"machine": platform.node(), "mode": "ray", "gpus": count, "plan": [list(p) for p in plan],
             "skipped": f"the session failed: {type(exc).__name__}: {str(exc)[:600]}"})
        return []


def scaling(rows: list[dict]) -> list[dict]:
    """Rate on N / (N x rate on 1), per kind, from the warm (CUDA) or only (Triton, torch) passes through Ray."""
    rates: dict[tuple[str, int], float] = {}
    for row in rows:
        if row.get("mode") == "ray" and row.get("pass") in ("warm", "run") and row.get("evals_per_min") and \
                complete(row):
            rates[row["kind"], int(row["gpus"])] = float(row["evals_per_min"])
    out = []
    for (kind, count), rate in sorted(rates.items()):
        one = rates.get((kind, 1))
        if count > 1 and one:
            out.append({"scaling": kind, "gpus": count, "evals_per_min": rate, "one_gpu_evals_per_min": one,
                        "efficiency": round(rate / (count * one), 3)})
    return out


def complete(row: dict) -> bool:
    """Whether a pass returned all it sent: a pass cut by the budget holds its slow first minute alone (4 GPUs on an
    H100 host read 0.51 of 4x one GPU over the 23 of 96 done), which is no rate to scale by."""
    if "n_done" not in row or "items" not in row:
        return True  # an older line without the counts
    return int(row["n_done"]) >= int(row["items"]) * int(row.get("copies", 1))


def read_rows(paths: list[str]) -> list[dict]:
    rows = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


# ---------------------------------------------------------------- entry

def visible_gpus() -> int:
    from evaluator.local.evaluator import detect_gpus

    return detect_gpus()[0]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="cuda", help="comma list of cuda, triton, torch (torch: plumbing on a CPU)")
    parser.add_argument("--set", default="48", choices=("48", "all"), help="the CUDA batch: 48 pairs, or all 60")
    parser.add_argument("--limit", type=int, default=0, help="only the first N items of each batch")
    parser.add_argument("--triton-n", type=int, default=48, help="Triton requests per batch (12 distinct pairs)")
    parser.add_argument("--torch-n", type=int, default=8)
    parser.add_argument("--passes", default="cold,warm", help="CUDA passes (local: one pool; ray: cold only if empty)")
    parser.add_argument("--gpus", type=int, default=0, help="local mode: GPUs 0..N-1 (default: every visible one)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu"), help="cpu: CPU mode (torch kind only)")
    parser.add_argument("--slots", default="auto", help="slots per GPU (workers_per_device)")
    parser.add_argument("--compile-workers", type=int, default=None, help="local mode (default: the Evaluator's)")
    parser.add_argument("--cache-dir", default="", help="build cache (default: a fresh temporary folder = cold)")
    parser.add_argument("--ray", action="store_true", help="through Ray on one host, a fresh instance per GPU count")
    parser.add_argument("--ray-gpus", default="", help="GPU counts for --ray (default: 1,2,4 up to the visible)")
    parser.add_argument("--scaling", default="weak", choices=("weak", "strong"),
                        help="weak: the batch sent N times on N GPUs; strong: once")
    parser.add_argument("--budget-s", type=float, default=540.0, help="stop collecting after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="print the request list and exit")
    parser.add_argument("--summarize", nargs="*", default=None, help="JSON-line files: print the scaling rows")
    parser.add_argument("--out", default="", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    if args.summarize is not None:
        for row in scaling(read_rows(args.summarize)):
            say(row)
        return 0
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in GPU_KINDS + ("torch",)]
    if unknown:
        parser.error(f"unknown kind(s) {unknown}: use cuda, triton, torch")
    if args.dry_run:
        for kind in kinds:
            items, notes = batch_for(kind, args)
            say({"dry_run": kind, **describe(items), "notes": notes})
            for item in items:
                print(f"  {item.backend:6} {item.name:44} {item.problem_id:44} {item.source_sha} sizes={item.sizes}")
        return 0
    count = 0 if args.device == "cpu" else visible_gpus()
    wants_gpu = [k for k in kinds if k in GPU_KINDS]
    if wants_gpu and count == 0:
        print(f"bench_batch: the {', '.join(wants_gpu)} batch needs a CUDA GPU and "
              f"{'--device cpu was given' if args.device == 'cpu' else 'none is visible (nvidia-smi, torch)'}; "
              "use --kinds torch for a CPU plumbing check, or --dry-run for the request list.", file=sys.stderr)
        return 2
    if args.out:
        sys.stdout = _Tee(sys.stdout, open(args.out, "a"))
    if args.ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            print("bench_batch: --ray needs Ray: offline, `make wheels` here, then there `python3 -m pip install "
                  "--no-index --no-deps --target /tmp/site .whl/ray/*.whl` and PYTHONPATH=/tmp/site:$PWD "
                  "(tests/bench/gpu_batch.sh does it)", file=sys.stderr)
            return 2
        counts = [int(c) for c in args.ray_gpus.split(",")] if args.ray_gpus else \
            [c for c in (1, 2, 4) if c <= max(1, count)]
        if count and max(counts) > count:
            print(f"bench_batch: --ray-gpus {args.ray_gpus} asks for more GPUs than the {count} visible",
                  file=sys.stderr)
            return 2
        run_ray(args, kinds, counts, gpu=count > 0, deadline=deadline)
    else:
        if count and args.gpus > count:
            print(f"bench_batch: --gpus {args.gpus} but only {count} visible", file=sys.stderr)
            return 2
        gpus = list(range(args.gpus or count))
        run_local(args, kinds, gpus, deadline)
    return 0


class _Tee:
    """stdout that also appends to a file (the JSON lines survive a killed run: each is flushed)."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()

    def __getattr__(self, name: str):  # fileno, isatty, encoding...: the terminal's, for libraries that ask
        return getattr(self.streams[0], name)


if __name__ == "__main__":
    sys.exit(main())
