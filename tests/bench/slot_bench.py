"""What the slot benchmarks share (bench_slot.py on a GPU, bench_slot_cpu.py on the CPU, bench_timing_under_load.py):
the ReLU reference problem, sized by N (`REFERENCE.format(n=...)`), that every benchmarked candidate is judged against
(the pool tests' own), and the counted rounds of a task's trace."""

from __future__ import annotations

import statistics

from tests.evaluator.pool_support import RELU_REFERENCE as REFERENCE

__all__ = ["PARTS", "REFERENCE", "counted_rounds", "parts_per_call"]

# The parts of a traced round after its calls, each side's batch and hand-over (slot/timing_phase.one_round).
PARTS = ("reference_batch", "reference_hand", "candidate_batch", "candidate_hand")


def counted_rounds(rounds: list) -> list:
    """A task's rounds from the judge's trace (KRL_EVAL_TRACE: [calls, reference batch, reference hand-over, candidate
    batch, candidate hand-over, wait] in ms) at its last batch length but the first (the warm one): the counted and
    extra rounds, near enough."""
    if not rounds:
        return []
    last = rounds[-1][0]
    return [r for r in rounds if r[0] == last][1:]


def parts_per_call(rounds: list) -> dict[str, float]:
    """Milliseconds a call of each part (PARTS), the median over a task's counted rounds; {} without any."""
    counted = [r for r in counted_rounds(rounds) if r[0] > 0]
    if not counted:
        return {}
    return {part: statistics.median(r[index] / r[0] for r in counted) for index, part in enumerate(PARTS, start=1)}
