"""Evaluator scale-out benchmark: throughput and per-request overhead of the same batch through the local pool, a
Ray cluster and the HTTP service; builds on compile actors of one node vs two (throughput), and a real build's trip
to the evaluating node through Ray's object store vs a shared folder; with --gpu, evaluations per minute on 1 and on
every GPU through Ray (scaling efficiency). Prints figures, no asserts."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluator.api import EvalRequest, Verdict  # noqa: E402
from evaluator.factory import open_evaluator  # noqa: E402
from tests.evaluator.pool_support import GOOD, REFERENCE, WRONG  # noqa: E402


def say(text: str = "") -> None:
    print(text, flush=True)


def batch(n: int, gpu: bool) -> list[EvalRequest]:
    """A fixed mixed batch (3 correct : 1 wrong) of torch candidates on the pool tests' relu problem."""
    sizes = {"N": 1 << 22} if gpu else {}
    return [EvalRequest(problem_id="bench/relu", reference_source=REFERENCE, candidate_source=WRONG if i % 4 == 3
                        else GOOD, correctness_trials=3, timing_trials=20 if gpu else 3, warmup_trials=2,
                        measure_timing=gpu, size_overrides=sizes) for i in range(n)]


def run_batch(label: str, evaluator, requests: list[EvalRequest]) -> dict:
    # Warm every worker first (torch import, first-call costs), so the figure is the steady state.
    list(evaluator.evaluate_many(batch(4, bool(requests[0].size_overrides))))
    started = time.perf_counter()
    results = list(evaluator.evaluate_many(requests))
    seconds = time.perf_counter() - started
    verdicts = {v.value: sum(r.verdict == v for r in results) for v in Verdict if any(r.verdict == v for r in results)}
    figures = {"label": label, "n": len(results), "seconds": seconds, "per_min": 60 * len(results) / seconds,
               "verdicts": verdicts}
    say(f"{label:34s} {len(results):4d} evals in {seconds:7.2f} s = {figures['per_min']:7.1f} /min   "
        f"{verdicts}")
    phases = sorted({phase for r in results for phase in r.phase_times_s})
    say("    mean phase seconds: " + ", ".join(
        f"{phase} {statistics.mean(r.phase_times_s.get(phase, 0.0) for r in results):.2f}" for phase in phases))
    return figures


def local_ray_http(n: int, workers: int) -> None:
    say(f"== same batch of {n} CPU-mode evaluations, {workers} evaluation workers in each setup")
    pool = {"devices": "cpu", "cpu_workers": workers, "compile_workers": 0, "spare_per_device": 0}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["KRL_CACHE_DIR"] = cache
        local = open_evaluator("local", **pool)
        try:
            base = run_batch("local pool", local, batch(n, False))
        finally:
            local.close()
        try:
            import ray  # noqa: F401
        except ImportError:
            say("ray: not installed (pip install 'kernelrl[ray]')")
        else:
            options = dict(pool)
            options.pop("devices")
            options["cpu_workers"] = 1
            cluster = open_evaluator("ray://local", evaluator_options=options, cpu_actors_per_node=workers,
                                     actor_cpus=0.5, num_cpus=max(2, workers))
            try:
                ray_figures = run_batch(f"ray ({workers} actors x 1 worker)", cluster, batch(n, False))
            finally:
                cluster.close()
            say(f"   ray/local throughput {ray_figures['per_min'] / base['per_min']:.2f}")
        try:
            from tests.evaluator.service_support import TOKEN, serving
        except ImportError:
            say("http: uvicorn/starlette not installed (pip install 'kernelrl[serve]')")
            return
        backing = open_evaluator("local", **pool)
        try:
            with serving(backing) as (url, _):
                client = open_evaluator(url, token=TOKEN)
                try:
                    http_figures = run_batch("http (client -> uvicorn -> pool)", client, batch(n, False))
                finally:
                    client.close()
        finally:
            backing.close()
        say(f"   http/local throughput {http_figures['per_min'] / base['per_min']:.2f}")


def per_request_overhead(n: int) -> None:
    """Sequential requests (one at a time), so the difference of the medians is each layer's own cost."""
    say(f"== per-request latency, {n} sequential correct requests (median end to end, ms)")
    pool = {"devices": "cpu", "cpu_workers": 1, "compile_workers": 0, "spare_per_device": 0}

    def median_ms(evaluator) -> float:
        evaluator.evaluate(batch(1, False)[0])  # warm
        times = []
        for request in batch(n, False):
            request.candidate_source = GOOD
            started = time.perf_counter()
            evaluator.evaluate(request)
            times.append(time.perf_counter() - started)
        return 1000 * statistics.median(times)

    local = open_evaluator("local", **pool)
    try:
        base = median_ms(local)
    finally:
        local.close()
    say(f"local pool                          {base:8.1f}")
    try:
        options = dict(pool)
        options.pop("devices")
        cluster = open_evaluator("ray://local", evaluator_options=options, num_cpus=2)
        try:
            say(f"ray (1 actor)                       {median_ms(cluster):8.1f}")
        finally:
            cluster.close()
    except ImportError:
        pass
    from tests.evaluator.service_support import TOKEN, serving

    backing = open_evaluator("local", **pool)
    try:
        with serving(backing) as (url, _):
            client = open_evaluator(url, token=TOKEN, poll_s=10.0)
            try:
                say(f"http (client, uvicorn)              {median_ms(client):8.1f}")
            finally:
                client.close()
    finally:
        backing.close()


def artefact_transfer(size_mb: int, rounds: int) -> None:
    """A build made on one node, needed on another: bytes through Ray's object store, or through a folder both can
    read (here a local disk folder standing in for a shared file system: the figure is a lower bound for NFS)."""
    import ray
    from ray.cluster_utils import Cluster

    say(f"== moving a {size_mb} MiB build artefact between two Ray nodes on this machine ({rounds} rounds)")
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes.add_node(num_cpus=1, resources={"builder": 1})
    ray.init(address=nodes.address, log_to_driver=False)
    nodes.wait_for_nodes()
    folder = tempfile.mkdtemp(prefix="krl-shared-cache-")
    try:
        @ray.remote(num_cpus=0, resources={"builder": 0.01})
        def build(key: str, size: int, to_folder: bool):
            data = os.urandom(size)
            if to_folder:
                path = os.path.join(folder, key + ".so")
                with open(path + ".tmp", "wb") as handle:
                    handle.write(data)
                os.replace(path + ".tmp", path)
                return path
            return data

        @ray.remote(num_cpus=0)
        def load(artefact) -> int:
            if isinstance(artefact, str):
                with open(artefact, "rb") as handle:
                    return len(handle.read())
            return len(artefact)

        size = size_mb * 2**20
        for label, to_folder in (("object store", False), ("shared folder", True)):
            times = []
            for i in range(rounds):
                started = time.perf_counter()
                ref = build.remote(f"k{i}-{label[0]}", size, to_folder)
                assert ray.get(load.remote(ref)) == size
                times.append(time.perf_counter() - started)
            say(f"{label:14s} build+move+load median {1000 * statistics.median(times):7.1f} ms "
                f"(min {1000 * min(times):.1f})")
    finally:
        ray.shutdown()
        nodes.shutdown()


def sized_cpp_candidate(answer: int, size_mib: float = 0.0, heavy: bool = False) -> str:
    """A real load_inline build that CPU-only torch can link: a C++ library without torch headers, padded with
    `size_mib` MiB of initialised data so its .so is as large as a torch extension's (a few MiB); `heavy` makes the
    compiler work a few seconds (std::regex), so the build, not the round trip, dominates."""
    body = f'extern "C" int krl_answer() {{ return {answer}; }}'
    if heavy:
        body = ('#include <regex>\n#include <string>\nextern "C" int krl_answer() { std::regex r("(a+)(b*)c"); '
                f'return std::regex_match(std::string("aaabbc"), r) ? {answer} : 0; }}')
    if size_mib:
        body += f"\n__attribute__((used)) char krl_pad[{int(size_mib * 2**20)}] = {{1}};"
    return (f"import torch\nfrom torch.utils.cpp_extension import load_inline\n"
            f"lib = load_inline(name='bench_ext', cpp_sources={body!r}, is_python_module=False, "
            f"no_implicit_headers=True)\n")


def build_cluster(second_node: bool, head_cpus: int):
    """Head: a logical GPU (so a GPU-less node only compiles; its actor's pool is CPU mode) and head_cpus CPUs (one
    for its evaluation actor, the rest for its compile actor); optionally a second raylet with 1 CPU that only
    compiles. Both raylets run on this machine: the 'second node' shares its cores."""
    import ray
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "num_gpus": 1,
                                                          "include_dashboard": False})
    if second_node:
        nodes.add_node(num_cpus=1)
    ray.init(address=nodes.address, log_to_driver=False)
    nodes.wait_for_nodes()
    return nodes


def open_compiling_cluster(cache: str, compile_cache: Optional[str] = None, transfer: str = "object_store"):
    from evaluator.scale.cluster import ClusterEvaluator

    options = {"cpu_workers": 1, "spare_per_device": 0, "compile_workers": 0, "cache_dir": cache}
    cluster = ClusterEvaluator(evaluator_options=options, compile_cache_dir=compile_cache, compile_transfer=transfer,
                               actor_env={"PYTHONPATH": str(ROOT), "KRL_WARM_PCH": "0"})
    end = time.monotonic() + 120
    while time.monotonic() < end and any(r["state"] != "ready" for r in cluster.stats()["compile_nodes"]):
        time.sleep(0.2)
    return cluster


def compile_request(source: str) -> EvalRequest:
    return EvalRequest(problem_id="bench/relu", reference_source=REFERENCE, candidate_source=source, backend="cuda",
                       compile_timeout_s=300)


def compile_throughput(n: int) -> None:
    """Distinct builds through compile actors on one node (1 compile worker) and on two (1 + 1). On this machine
    the second node is a second raylet on the same cores: the figure shows the builds spreading, not more silicon."""
    import ray

    say(f"== compile throughput: {n} distinct C++ builds (load_inline, std::regex, no torch headers) on compile actors")
    figures = {}
    for second in (False, True):
        nodes = build_cluster(second, head_cpus=2)
        try:
            with tempfile.TemporaryDirectory() as cache:
                cluster = open_compiling_cluster(cache, os.path.join(cache, "compile"))
                try:
                    workers = sum(r["workers"] for r in cluster.stats()["compile_nodes"])
                    warm = [compile_request(sized_cpp_candidate(10_000 + k + 100 * second)) for k in range(2 * workers)]
                    list(cluster.evaluate_many(warm))  # each compile worker started, torch imported
                    requests = [compile_request(sized_cpp_candidate(k + 1000 * second, heavy=True)) for k in range(n)]
                    started = time.perf_counter()
                    results = list(cluster.evaluate_many(requests))
                    seconds = time.perf_counter() - started
                    by_node = {r["node"] + ("(gpu node)" if r["gpu_node"] else ""): r["done"]
                               for r in cluster.stats()["compile_nodes"] if r["state"] == "ready"}
                    built = sum(r.compiled for r in results)
                finally:
                    cluster.close()
        finally:
            ray.shutdown()
            nodes.shutdown()
        label = "two nodes (1+1 workers)" if second else "one node (1 worker)"
        figures[second] = 60 * n / seconds
        say(f"{label:26s} {built}/{n} built in {seconds:6.1f} s = {figures[second]:6.1f} builds/min   "
            f"builds per compile node (incl. warm-up): {by_node}")
    say(f"   two nodes / one node: {figures[True] / figures[False]:.2f}x")


def build_transfer(sizes_mib: list[float], rounds: int) -> None:
    """A real build made on the compile-only node and evaluated on the head, its .so padded to a realistic size:
    through the object store (bytes verified and published into the head's own cache) vs a shared folder (one cache
    both nodes read; the head only verifies). Overhead = end to end - the build itself (packing, moving, verifying,
    publishing, queueing)."""
    import ray

    say(f"== a real build's trip to the evaluating node ({rounds} builds per size and mode; median ms)")
    nodes = build_cluster(True, head_cpus=1)  # the head only evaluates; the second node only compiles
    try:
        for transfer in ("object_store", "shared_folder"):
            with tempfile.TemporaryDirectory() as cache:
                compile_cache = os.path.join(cache, "compile") if transfer == "object_store" else None
                cluster = open_compiling_cluster(cache, compile_cache, transfer)
                try:
                    list(cluster.evaluate_many([compile_request(sized_cpp_candidate(-1 - len(transfer)))]))  # warm
                    for size in sizes_mib:
                        overhead, install = [], []
                        for k in range(rounds):
                            result = cluster.evaluate(compile_request(sized_cpp_candidate(k, size)))
                            times = result.phase_times_s
                            overhead.append(times["end_to_end"] - times.get("compile", 0.0))
                            install.append(times.get("build_install", 0.0))
                        say(f"{transfer:13s} {size:5.1f} MiB .so: overhead {1000 * statistics.median(overhead):7.1f}"
                            f"   of which verify+publish on the evaluating node {1000 * statistics.median(install):6.1f}"
                            f"   ({result.verdict.value})")
                finally:
                    cluster.close()
    finally:
        ray.shutdown()
        nodes.shutdown()


def kernel_batch(n: int, kind: str) -> list[EvalRequest]:
    """n timed evaluations of one Triton or CUDA ReLU (the test candidates) on the builtin relu problem; the CUDA
    source is the same in every request, so it is built once and then loaded from the build cache."""
    from tests.evaluator.candidates.harness import builtin, candidate

    source = candidate("relu_triton.py" if kind == "triton" else "cuda_relu.py")
    return [EvalRequest(problem_id="bench/relu", reference_source=builtin("relu"), candidate_source=source,
                        backend=kind, correctness_trials=3, timing_trials=20, warmup_trials=2,
                        compile_timeout_s=600, size_overrides={"BATCH": 4096, "DIM": 4096}) for _ in range(n)]


def gpu_scaling(n: int, only: str = "") -> None:
    """Evaluations per minute of the same batches (torch, Triton, CUDA candidates) on 1 GPU and on every GPU, each
    GPU one Ray actor."""
    import ray
    import torch

    count = torch.cuda.device_count()
    say(f"== GPU scaling through Ray: {n} candidates of each kind (timed), {count} GPU(s): "
        f"{torch.cuda.get_device_name(0) if count else '-'}")
    kinds = {"torch": lambda: batch(n, True), "triton": lambda: kernel_batch(n, "triton"),
             "cuda": lambda: kernel_batch(n, "cuda")}
    kinds = {kind: make for kind, make in kinds.items() if not only or kind in only.split(",")}
    figures: dict[tuple[str, int], dict] = {}
    for gpus in sorted({1, count}):
        ray.init(address="local", num_gpus=gpus, include_dashboard=False, log_to_driver=False)
        cluster = open_evaluator("ray://auto", evaluator_options={"spare_per_device": 1})
        try:
            if "cuda" in kinds:
                list(cluster.evaluate_many(kernel_batch(gpus, "cuda")))  # the one CUDA build, outside the figures
            for kind, make in kinds.items():
                figures[kind, gpus] = run_batch(f"ray, {gpus} GPU(s), {kind}", cluster, make())
        finally:
            cluster.close()
            ray.shutdown()
    if count > 1:
        for kind in kinds:
            efficiency = figures[kind, count]["per_min"] / (count * figures[kind, 1]["per_min"])
            say(f"scaling efficiency on {count} GPUs, {kind}: {100 * efficiency:.0f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=48, help="requests in the batch")
    parser.add_argument("--workers", type=int, default=2, help="evaluation workers in each CPU setup")
    parser.add_argument("--gpu", action="store_true", help="GPU scaling through Ray (needs CUDA GPUs)")
    parser.add_argument("--kinds", default="", help="with --gpu: comma list of torch,triton,cuda (default all)")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: "
                                                   "batch,latency,transfer,compile,build_transfer")
    parser.add_argument("--builds", type=int, default=12, help="distinct builds in the compile-throughput part")
    args = parser.parse_args()
    import platform

    say(f"machine: {platform.node()} {os.cpu_count()} CPUs, python {platform.python_version()}")
    if args.gpu:
        gpu_scaling(args.n, args.kinds)
        return
    skip = set(args.skip.split(","))
    if "batch" not in skip:
        local_ray_http(args.n, args.workers)
    if "latency" not in skip:
        per_request_overhead(20)
    if "transfer" not in skip:
        for size_mb in (8, 64):
            artefact_transfer(size_mb, rounds=5)
    if "compile" not in skip:
        compile_throughput(args.builds)
    if "build_transfer" not in skip:
        build_transfer([1.0, 8.0, 32.0], rounds=3)


if __name__ == "__main__":
    main()
