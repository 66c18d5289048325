"""What the slot benchmarks share (bench_slot.py on a GPU, bench_slot_cpu.py on the CPU): the ReLU reference problem,
sized by N (`REFERENCE.format(n=...)`), that every benchmarked candidate is judged against: the pool tests' own."""

from __future__ import annotations

from tests.evaluator.pool_support import RELU_REFERENCE as REFERENCE

__all__ = ["REFERENCE"]
