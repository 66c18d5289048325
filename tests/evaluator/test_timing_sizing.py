"""The GPU timing's batch sizing, against a model of what broke it on an H100: a size's first round pays its sets' and
outputs' allocations. No exclusive window may be a size's first round, and the counted batches come near the target."""

from types import SimpleNamespace

from evaluator.slot.round_figures import ROUNDS
from evaluator.slot.timing_phase import BATCH_TARGET_S, PROBE_CALLS, TimingPhase

PER_CALL_S = 70e-6  # a small op's per-call cost on both sides
PER_BATCH_S = 0.3e-3  # a batch's fixed cost (the synchronisation, the order)
FIRST_AT_SIZE_S = 0.1  # the allocator growing for a new size: 110-183 ms for 13 calls at 8 slots (session 10)


class AllocatorModel:
    """Stands in for TimingPhase.one_round: seconds of a batch on either side, a new size's first round slower."""

    def __init__(self, phase: TimingPhase, per_call_s: float = PER_CALL_S, per_batch_s: float = PER_BATCH_S):
        self.phase, self.seen, self.rounds = phase, set(), []
        self.per_call_s, self.per_batch_s = per_call_s, per_batch_s

    def one_round(self, calls: int, candidate_first: bool = False, counted: bool = False,
                  exclusive: bool = True) -> tuple[float, float]:
        first = calls not in self.seen
        self.seen.add(calls)
        self.rounds.append({"calls": calls, "exclusive": exclusive, "counted": counted, "first": first})
        seconds = calls * self.per_call_s + self.per_batch_s + (FIRST_AT_SIZE_S if first else 0.0)
        self.phase.batch_only = {"reference": seconds, "candidate": seconds}
        self.phase.staged_for = calls
        return seconds / calls, seconds / calls


def timed_with(monkeypatch, per_call_s: float = PER_CALL_S, per_batch_s: float = PER_BATCH_S):
    """The sizing and counted rounds of one GPU timing against the model; (phase, model, reference_ms, candidate_ms)."""
    task = SimpleNamespace(device="cuda:0", request=SimpleNamespace(timing_trials=ROUNDS["cuda"]))
    phase = TimingPhase(task, SimpleNamespace(trace=None), SimpleNamespace(phases={}))
    phase.staged = 1024
    model = AllocatorModel(phase, per_call_s, per_batch_s)
    monkeypatch.setattr(phase, "one_round", model.one_round)
    phase.one_round(PROBE_CALLS, False, exclusive=False)  # the cold round, as TimingPhase.warmed runs it
    probe = phase.sized(PROBE_CALLS, probe=True)
    reference_ms, candidate_ms = phase.rounds(probe)
    return phase, model, reference_ms, candidate_ms


def test_gpu_batches_are_sized_on_rounds_that_are_not_a_sizes_first(monkeypatch):
    phase, model, reference_ms, candidate_ms = timed_with(monkeypatch)

    assert not [r for r in model.rounds if r["exclusive"] and r["first"]], model.rounds
    assert all(r["first"] for r in model.rounds if not r["exclusive"]), model.rounds  # no size warmed twice
    batch_s = phase.calls * PER_CALL_S + PER_BATCH_S
    assert batch_s >= BATCH_TARGET_S["cuda"] / 2, (phase.calls, model.rounds)
    assert len(reference_ms) == len(candidate_ms) == ROUNDS["cuda"] and reference_ms == candidate_ms


def test_batches_dominated_by_fixed_costs_are_made_longer_before_counting(monkeypatch):
    """A host-bound op (~13 us a call) behind ~1 ms of fixed costs a batch: sized from short batches, the counted ones
    came out at a third of the target (one H100, session 11); they are grown, and only rounds at the final length
    count."""
    phase, model, reference_ms, candidate_ms = timed_with(monkeypatch, per_call_s=13e-6, per_batch_s=1e-3)

    batch_s = phase.calls * 13e-6 + 1e-3
    assert batch_s >= 0.6 * BATCH_TARGET_S["cuda"], (phase.calls, model.rounds)
    counted = [r for r in model.rounds if r["counted"]]
    counting = ROUNDS["cuda"]
    assert [r["calls"] for r in counted[-counting:]] == [phase.calls] * counting and len(reference_ms) == counting
    assert not [r for r in model.rounds if r["exclusive"] and r["first"]], model.rounds
