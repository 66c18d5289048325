"""Evaluator scale-out benchmark: throughput and per-request overhead of the same batch through the local pool, a
Ray cluster and the HTTP service; build-artefact transfer through Ray's object store versus a shared folder; with
--gpu, evaluations per minute on 1 and on every GPU through Ray (scaling efficiency). Prints figures, no asserts."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

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


def gpu_scaling(n: int) -> None:
    """Evaluations per minute of one batch on 1 GPU and on every GPU, each GPU one Ray actor."""
    import ray
    import torch

    count = torch.cuda.device_count()
    say(f"== GPU scaling through Ray: {n} torch candidates (N=4M, timed), {count} GPU(s): "
        f"{torch.cuda.get_device_name(0) if count else '-'}")
    figures = {}
    for gpus in sorted({1, count}):
        ray.init(num_gpus=gpus, include_dashboard=False, log_to_driver=False)
        cluster = open_evaluator("ray://auto", evaluator_options={"spare_per_device": 1})
        try:
            figures[gpus] = run_batch(f"ray, {gpus} GPU(s)", cluster, batch(n, True))
        finally:
            cluster.close()
            ray.shutdown()
    if count > 1:
        efficiency = figures[count]["per_min"] / (count * figures[1]["per_min"])
        say(f"scaling efficiency on {count} GPUs: {100 * efficiency:.0f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=48, help="requests in the batch")
    parser.add_argument("--workers", type=int, default=2, help="evaluation workers in each CPU setup")
    parser.add_argument("--gpu", action="store_true", help="GPU scaling through Ray (needs CUDA GPUs)")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: batch,latency,transfer")
    args = parser.parse_args()
    import platform

    say(f"machine: {platform.node()} {os.cpu_count()} CPUs, python {platform.python_version()}")
    if args.gpu:
        gpu_scaling(args.n)
        return
    skip = set(args.skip.split(","))
    if "batch" not in skip:
        local_ray_http(args.n, args.workers)
    if "latency" not in skip:
        per_request_overhead(20)
    if "transfer" not in skip:
        for size_mb in (8, 64):
            artefact_transfer(size_mb, rounds=5)


if __name__ == "__main__":
    main()
