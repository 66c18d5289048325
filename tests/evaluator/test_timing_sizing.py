"""The GPU timing's batch sizing, against a model of what broke it on an H100: a size's first round pays its sets' and
outputs' allocations. No exclusive window may be a size's first round, and the counted batches come near the target."""

from types import SimpleNamespace

from evaluator.slot.timing_phase import BATCH_TARGET_S, PROBE_CALLS, TimingPhase

PER_CALL_S = 70e-6  # a small op's per-call cost on both sides
PER_BATCH_S = 0.3e-3  # a batch's fixed cost (the synchronisation, the order)
FIRST_AT_SIZE_S = 0.1  # the allocator growing for a new size: 110-183 ms for 13 calls at 8 slots (session 10)


class AllocatorModel:
    """Stands in for TimingPhase.one_round: seconds of a batch on either side, a new size's first round slower."""

    def __init__(self, phase: TimingPhase):
        self.phase, self.seen, self.rounds = phase, set(), []

    def one_round(self, calls: int, candidate_first: bool = False, counted: bool = False,
                  exclusive: bool = True) -> tuple[float, float]:
        first = calls not in self.seen
        self.seen.add(calls)
        self.rounds.append({"calls": calls, "exclusive": exclusive, "counted": counted, "first": first})
        seconds = calls * PER_CALL_S + PER_BATCH_S + (FIRST_AT_SIZE_S if first else 0.0)
        self.phase.batch_only = {"reference": seconds, "candidate": seconds}
        self.phase.staged_for = calls
        return seconds / calls, seconds / calls


def test_gpu_batches_are_sized_on_rounds_that_are_not_a_sizes_first(monkeypatch):
    task = SimpleNamespace(device="cuda:0", request=SimpleNamespace(timing_trials=7))
    phase = TimingPhase(task, SimpleNamespace(trace=None), SimpleNamespace(phases={}))
    phase.staged = 1024
    model = AllocatorModel(phase)
    monkeypatch.setattr(phase, "one_round", model.one_round)
    phase.one_round(PROBE_CALLS, False, exclusive=False)  # the cold round, as TimingPhase.warmed runs it
    probe = phase.sized(PROBE_CALLS, probe=True)
    reference_ms, candidate_ms = phase.rounds(probe)

    assert not [r for r in model.rounds if r["exclusive"] and r["first"]], model.rounds
    assert all(r["first"] for r in model.rounds if not r["exclusive"]), model.rounds  # no size warmed twice
    batch_s = phase.calls * PER_CALL_S + PER_BATCH_S
    assert batch_s >= BATCH_TARGET_S["cuda"] / 2, (phase.calls, model.rounds)
    assert len(reference_ms) == len(candidate_ms) == 7 and reference_ms == candidate_ms
