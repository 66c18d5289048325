"""The requests bench_batch.py sends: real inline-CUDA (load_inline) candidates for KernelBench level 1-2 problems,
a small Triton batch and a torch batch (plumbing only), each item a (problem, candidate) pair with its origin.

Where the CUDA candidates come from (nothing here is padded with copies):
- the KernelBench agreement pairs (tests/bench/bench_kernelbench_agreement.py `pairs()`, backend "cuda"): 14 LLM-style
  kernels on KernelBench's own level 1 and 2 files, resized as that benchmark resizes them (needs a KernelBench
  checkout: $KERNELBENCH_ROOT, default .gpu/kernelbench);
- the evaluator benchmark's batch (tests/bench/bench_evaluator.py `batch_candidates()`): 41 LLM-style kernels (4
  launch styles of 6 activations, reductions, softmax, norms, matmul, matvec) and 5 with typical LLM compile errors,
  on our built-in KernelBench-style level 1 problems at their GPU sizes (core/data/problems/builtin)."""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BUILTIN = ROOT / "core" / "data" / "problems" / "builtin"
# The built-in activations' launch styles that enter the default 48 (the other two styles are in --set all).
DEFAULT_STYLES = ("simple", "vec4")


@dataclass
class Item:
    """One (problem, candidate) pair of a batch."""

    name: str  # unique within its batch, e.g. "kb/level1/19_ReLU:1M" or "builtin/k05-gelu"
    origin: str  # "kernelbench" | "builtin" | "builtin-broken" | "triton" | "torch"
    problem_id: str
    reference: str
    candidate: str
    backend: str
    sizes: dict

    @property
    def source_sha(self) -> str:
        return hashlib.sha256(self.candidate.encode()).hexdigest()[:16]


def kernelbench_root() -> Path:
    return Path(os.environ.get("KERNELBENCH_ROOT") or ROOT / ".gpu" / "kernelbench").resolve()


def kernelbench_cuda(root: Optional[Path] = None) -> tuple[list[Item], str]:
    """The agreement benchmark's inline-CUDA pairs on KernelBench's files; ([], why) without a checkout."""
    root = root or kernelbench_root()
    if not (root / "KernelBench").is_dir():
        return [], f"no KernelBench checkout at {root} (set KERNELBENCH_ROOT): its 14 CUDA pairs are left out"
    try:
        from tests.bench.bench_kernelbench_agreement import pairs, resized
    except ImportError as exc:  # that benchmark is someone else's to change: say so rather than stop
        return [], f"the KernelBench pairs could not be imported ({exc}): its CUDA pairs are left out"
    items = []
    for pair in pairs():
        if pair["backend"] != "cuda":
            continue
        path = root / pair["file"]
        if not path.exists():
            continue
        items.append(Item(name=f"kb/{pair['name']}", origin="kernelbench", problem_id=f"kernelbench/{pair['name']}",
                          reference=resized(path.read_text(), pair["sizes"]), candidate=pair["candidate"],
                          backend="cuda", sizes={}))
    return items, ""


def builtin_problem(stem: str) -> tuple[str, dict]:
    """(reference source, gpu_sizes) of a built-in problem, read from the package data; PyYAML when present, else
    the index's one-line flow maps (`gpu_sizes: {BATCH: 4096, DIM: 16384}`), so no core import or PyYAML is needed."""
    text = (BUILTIN / "index.yaml").read_text()
    try:
        import yaml

        sizes = dict((yaml.safe_load(text) or {}).get(stem, {}).get("gpu_sizes", {}))
    except ImportError:
        block = re.search(rf"^{re.escape(stem)}:\n((?:[ \t]+.*\n?)*)", text, re.MULTILINE)
        found = re.search(r"gpu_sizes:\s*\{([^}]*)\}", block.group(1)) if block else None
        sizes = {}
        for part in (found.group(1).split(",") if found else []):
            key, _, value = part.partition(":")
            if key.strip():
                sizes[key.strip()] = int(value.strip())
    return (BUILTIN / f"{stem}.py").read_text(), sizes


def builtin_cuda(styles: tuple[str, ...] = ()) -> list[Item]:
    """The evaluator benchmark's batch: its good kernels (activations only in `styles`, all when empty), then its
    planted compile errors."""
    from tests.bench.bench_evaluator import ELEMENTWISE_KERNELS, ELEMENTWISE_OPS, batch_candidates, broken_candidates

    broken = len(broken_candidates())
    everything = batch_candidates()
    good, bad = everything[:-broken], everything[-broken:]
    # batch_candidates() lists the activations first: op by op, each in every launch style (dict order).
    style_of = dict(enumerate(style for _ in ELEMENTWISE_OPS for style in ELEMENTWISE_KERNELS))
    items = []
    for k, (stem, source) in enumerate(good):
        if styles and k in style_of and style_of[k] not in styles:
            continue
        items.append(_builtin_item(f"builtin/k{k:02d}-{stem}" + (f":{style_of[k]}" if k in style_of else ""),
                                   "builtin", stem, source))
    for k, (stem, source) in enumerate(bad):
        items.append(_builtin_item(f"builtin/broken{k}-{stem}", "builtin-broken", stem, source))
    return items


def _builtin_item(name: str, origin: str, stem: str, source: str) -> Item:
    reference, sizes = builtin_problem(stem)
    return Item(name=name, origin=origin, problem_id=f"builtin/{stem}", reference=reference, candidate=source,
                backend="cuda", sizes=sizes)


def cuda_batch(which: str = "48") -> tuple[list[Item], list[str]]:
    """"48": the 14 KernelBench pairs, the built-in batch's non-activation kernels, its activations in two launch
    styles and its 5 compile errors (14 + 29 + 5 = 48). "all": every kernel of both (60). Notes say what is missing."""
    notes = []
    kernelbench, why = kernelbench_cuda()
    if why:
        notes.append(why)
    items = kernelbench + builtin_cuda(() if which == "all" else DEFAULT_STYLES)
    return items, notes


def triton_batch(n: int) -> list[Item]:
    """bench_slot.py's small honest Triton ReLU (3 block sizes) on the pool tests' ReLU problem at 4 sizes
    (reference ~0.01-0.1 ms on an H100): 12 distinct pairs, repeated up to n."""
    from tests.bench.bench_slot import BLOCKS, SIZES, TRITON
    from tests.bench.slot_bench import REFERENCE

    return [Item(name=f"triton/relu-{i}", origin="triton", problem_id=f"bench/relu-{i % len(SIZES)}",
                 reference=REFERENCE.format(n=SIZES[i % len(SIZES)]),
                 candidate=TRITON.format(block=BLOCKS[i % len(BLOCKS)]), backend="triton", sizes={})
            for i in range(n)]


TORCH_RELU = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, {floor})
'''


def torch_batch(n: int) -> list[Item]:
    """A torch ReLU on the ReLU problem at CPU sizes: for checking the benchmark's plumbing on a CPU machine."""
    from tests.bench.slot_bench import REFERENCE

    return [Item(name=f"torch/relu-{i}", origin="torch", problem_id="bench/relu-cpu",
                 reference=REFERENCE.format(n=1 << (10 + i % 4)), candidate=TORCH_RELU.format(floor="0.0"),
                 backend="torch", sizes={}) for i in range(n)]


def describe(items: list[Item]) -> dict:
    """How distinct a batch is: pairs, candidate sources, problems, and the count per origin."""
    origins: dict[str, int] = {}
    for item in items:
        origins[item.origin] = origins.get(item.origin, 0) + 1
    return {"items": len(items), "distinct_sources": len({i.source_sha for i in items}),
            "distinct_pairs": len({(i.problem_id, i.reference, i.source_sha) for i in items}),
            "distinct_problems": len({(i.problem_id, i.reference) for i in items}), "by_origin": origins}
