"""RAG benchmark: embedding throughput on CPU (real MiniLM), index build time and query latency at 10k and 100k
records (synthetic unit vectors for the index, real embeddings for queries). Prints figures; asserts nothing."""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

OPS = ["torch.relu(x)", "torch.softmax(x, dim=-1)", "torch.sigmoid(x)", "x @ w", "torch.sum(x, dim=1)",
       "torch.nn.functional.gelu(x)", "torch.tanh(x) * 2", "torch.cumsum(x, dim=0)", "torch.max(x, dim=1)[0]",
       "torch.nn.functional.layer_norm(x, x.shape[-1:])", "torch.mean(x ** 2)", "x.t().contiguous()"]


def synthetic_program(i: int) -> tuple[str, str]:
    rng = random.Random(i)
    body = " + ".join(rng.sample(OPS, rng.randint(1, 3))).replace("x @ w", "x @ x.t()")
    name = f"Op{i}"
    code = (f"import torch\nimport torch.nn as nn\n\nN = {rng.choice([256, 1024, 4096])}\n\n\nclass Model(nn.Module):\n"
            f"    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n"
            f"        return {body}\n\n\ndef get_inputs():\n    return [torch.randn(N, N)]\n\n\n"
            f"def get_init_inputs():\n    return []\n")
    return name, code


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def bench_embedding(n: int, batch_size: int) -> None:
    from rag.corpus import embedding_text
    from rag.embed import Embedder

    started = time.perf_counter()
    embedder = Embedder(device="cpu", batch_size=batch_size, cache_size=0)
    load_s = time.perf_counter() - started
    texts = [embedding_text(code, name) for name, code in (synthetic_program(i) for i in range(n))]
    tokens = sum(min(embedder.count_tokens(t) + 2, embedder.max_seq_length) for t in texts)
    embedder.encode(texts[:batch_size])  # warm-up
    started, started_cpu = time.perf_counter(), time.process_time()
    embedder.encode(texts)
    seconds, cpu_s = time.perf_counter() - started, time.process_time() - started_cpu
    print(f"embedding: model load {load_s:.1f} s; {n} programs (batch {batch_size}, {tokens / n:.0f} tokens each) "
          f"in {seconds:.2f} s wall = {n / seconds:.0f} texts/s, {tokens / seconds:.0f} tokens/s "
          f"({cpu_s:.1f} s cpu over {embedder.num_threads or 'default'} threads)")


def bench_index(size: int, queries: int, hnsw_threshold: int, embedder, label: str) -> None:
    from rag import DEFAULT_MODEL
    from rag.corpus import Record
    from rag.index import KernelIndex
    from rag.retriever import IndexRetriever

    rng = np.random.default_rng(size)
    vectors = rng.standard_normal((size, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    records = [Record(id=f"synthetic/{i}", source="synthetic", backend="triton" if i % 4 else "cuda",
                      pytorch_code=f"import torch\ny = torch.relu(x) + {i}\n",
                      kernel_code=f"import triton\n# kernel {i}\nz = {i}\n", name=f"op{i}", tags=["synthetic"])
               for i in range(size)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "index"
        started = time.perf_counter()
        index = KernelIndex.create(out, DEFAULT_MODEL, 384, hnsw_threshold=hnsw_threshold)
        index.add(records, vectors)
        build_s = time.perf_counter() - started
        kind = index.index_type
        search_ms, search_cpu_ms = [], []
        for q in range(queries):
            started, started_cpu = time.perf_counter(), time.process_time()
            index.search(vectors[q * 7 % size], 20, backend="triton")
            search_ms.append((time.perf_counter() - started) * 1000)
            search_cpu_ms.append((time.process_time() - started_cpu) * 1000)
        index.close()

        retriever = IndexRetriever(out, embedder=embedder)
        embedder.clear_cache()
        seed = size * 100 + (50_000 if kind == "hnsw" else 0)  # fresh problems: nothing cached from earlier runs
        problems = [synthetic_program(seed + q)[1] for q in range(queries)]
        retriever.examples(problems[0], "warmup", "triton", 3)
        cold_ms, cold_cpu_ms, warm_ms = [], [], []
        for q, source in enumerate(problems):  # each first query embeds the problem
            started, started_cpu = time.perf_counter(), time.process_time()
            retriever.examples(source, f"bench/{q}", "triton", 3)
            cold_ms.append((time.perf_counter() - started) * 1000)
            cold_cpu_ms.append((time.process_time() - started_cpu) * 1000)
        for q, source in enumerate(problems):  # training asks again every step: the vector is cached
            started = time.perf_counter()
            retriever.examples(source, f"bench/{q}", "triton", 3)
            warm_ms.append((time.perf_counter() - started) * 1000)
        retriever.close()
    # CPU time next to wall time: on a shared machine wall time mostly measures the neighbours.
    print(f"{label:<13} {size:>7} records  {kind:<5} build {build_s:6.2f} s\n"
          f"    FAISS search (top 20, backend filter): wall p50 {statistics.median(search_ms):.2f} ms "
          f"p95 {percentile(search_ms, 0.95):.2f} ms, cpu p50 {statistics.median(search_cpu_ms):.2f} ms\n"
          f"    examples(k=3), new problem (embed + search): wall p50 {statistics.median(cold_ms):.1f} ms "
          f"p95 {percentile(cold_ms, 0.95):.1f} ms, cpu p50 {statistics.median(cold_cpu_ms):.1f} ms\n"
          f"    examples(k=3), problem seen before (cached vector): wall p50 {statistics.median(warm_ms):.2f} ms "
          f"p95 {percentile(warm_ms, 0.95):.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000", help="index sizes (records), comma-separated")
    parser.add_argument("--embed-n", type=int, default=1000, help="programs to embed for the throughput figure")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--hnsw", action="store_true", help="also time an HNSW index at each size")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}")
    bench_embedding(args.embed_n, args.batch_size)
    from rag.embed import Embedder

    embedder = Embedder(device="cpu")
    for size in (int(s) for s in args.sizes.split(",") if s.strip()):
        bench_index(size, args.queries, hnsw_threshold=10**9, embedder=embedder, label="exact (flat)")
        if args.hnsw:
            bench_index(size, args.queries, hnsw_threshold=0, embedder=embedder, label="hnsw")


if __name__ == "__main__":
    main()
