"""The generalisation check of `krl eval --unseen-shapes`: each correct kernel runs once more, untimed, on other sizes
of its problem (the size constants scaled), and the report says per sample whether it `generalizes` (not a verdict)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional, Sequence

from core.problems import Problem, check_problem_source
from evaluator.contract.types import EvalRequest, Verdict

# Integer size constants at least this large are scaled; smaller ones (kernel sizes, strides, groups, channels of 3)
# keep their value, since changing them changes the problem rather than its size.
MIN_SCALED_SIZE = 16
SCALE = 0.5  # half of each size, plus one when that is even: no longer a multiple of the usual block sizes
# Verdicts that mean the kernel itself failed on the other sizes; anything else (the reference failing, a timeout of
# the evaluator) leaves `generalizes` unknown.
KERNEL_FAILURES = {Verdict.WRONG_OUTPUT, Verdict.SHAPE_MISMATCH, Verdict.RUNTIME_ERROR, Verdict.CRASHED,
                   Verdict.HACK_DETECTED, Verdict.COMPILE_ERROR}


@dataclass
class GeneralizationReport:
    """One sample's kernel re-run on other sizes. generalizes: True / False, None when the check could not decide."""

    problem_id: str
    sample: int
    turn: int
    sizes: dict[str, int] = field(default_factory=dict)
    generalizes: Optional[bool] = None
    verdict: str = ""
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scaled_sizes(reference_source: str, base: Optional[dict[str, int]] = None) -> dict[str, int]:
    """The problem's integer size constants (after `base` overrides) of at least MIN_SCALED_SIZE, each mapped to
    about half its value and odd. Empty when the problem has none to scale."""
    constants = dict(check_problem_source(reference_source, "<problem>"))
    constants.update(base or {})
    out = {}
    for name, value in constants.items():
        if isinstance(value, int) and value >= MIN_SCALED_SIZE:
            scaled = max(1, int(value * SCALE))
            out[name] = scaled + 1 if scaled % 2 == 0 else scaled
    return out


def unseen_request(problem: Problem, kernel: str, backend: str, precision: str, base_sizes: Optional[dict] = None,
                   seed: int = 42) -> Optional[EvalRequest]:
    """The untimed request on other sizes, None when the problem has no size to change."""
    sizes = scaled_sizes(problem.source, base_sizes)
    if not sizes:
        return None
    return EvalRequest(problem_id=problem.id, reference_source=problem.source, candidate_source=kernel,
                       problem_hash=problem.hash, backend=backend, precision=precision, correctness_trials=2,
                       measure_timing=False, kernelbench_timing=False, seed=seed + 1,
                       size_overrides={**(base_sizes or {}), **sizes})


def report_of(problem_id: str, sample: int, turn: int, request: Optional[EvalRequest], result: Any) -> GeneralizationReport:
    """`generalizes` from the untimed result: correct -> True; the kernel's own failure -> False; else unknown."""
    if request is None:
        return GeneralizationReport(problem_id, sample, turn, message="no size constant to change")
    report = GeneralizationReport(problem_id, sample, turn, sizes=dict(request.size_overrides))
    report.verdict = result.verdict.value
    reference_failed = "evaluator input error" in (result.error_message or "")
    if result.verdict == Verdict.CORRECT:
        report.generalizes = True
    elif result.verdict in KERNEL_FAILURES and not reference_failed:
        report.generalizes = False
        report.message = (result.error_message or "")[:300]
    else:
        report.message = "the problem itself did not run at these sizes" if reference_failed else \
            (result.error_message or "")[:300]
    return report


def check(evaluator: Any, items: Sequence[dict[str, Any]]) -> list[GeneralizationReport]:
    """items: {problem (Problem), sample, turn, kernel, backend, precision, sizes (the sizes it was timed at)}.
    Submits every request at once (the evaluator spreads them), then reports in the items' order."""
    requests = [unseen_request(i["problem"], i["kernel"], i["backend"], i["precision"], i.get("sizes")) for i in items]
    futures = [evaluator.submit(r) if r is not None else None for r in requests]
    return [report_of(i["problem"].id, i["sample"], i["turn"], r, f.result() if f is not None else None)
            for i, r, f in zip(items, requests, futures)]


def best_correct_turns(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (problem, sample), the first correct turn's record: the kernel a user would keep."""
    chosen: dict[tuple[str, int], dict[str, Any]] = {}
    for record in sorted(records, key=lambda r: (r["problem_id"], int(r["sample"]), int(r["turn"]))):
        if record["verdict"] == "correct":
            chosen.setdefault((record["problem_id"], int(record["sample"])), record)
    return list(chosen.values())


def summary(reports: Sequence[GeneralizationReport]) -> dict[str, Any]:
    """Counts for the eval summary: checked, generalizes, only_timed_sizes (the ids that failed), unknown."""
    failed = [f"{r.problem_id}#{r.sample}" for r in reports if r.generalizes is False]
    return {"checked": len(reports), "generalizes": sum(r.generalizes is True for r in reports),
            "only_timed_sizes": failed, "unknown": sum(r.generalizes is None for r in reports)}


def check_eval_run(registry: Any, name_or_id: str | int, evaluator: Any = None) -> list[GeneralizationReport]:
    """The check over a stored evaluation: each sample's first correct kernel, at the sizes the run used, re-run on
    scaled sizes. Opens the run's own evaluator unless one is given."""
    from core.config import config_from_dict
    from core.evaluation import eval_records
    from core.problems import load_problem_set

    row = registry.get_run(name_or_id)
    config = config_from_dict(row["config"] or {}, f"config of run '{row['name']}'")
    problems = {p.id: p for p in load_problem_set(config.problems)}
    items = []
    for record in best_correct_turns(eval_records(registry, row["id"])):
        problem = problems.get(record["problem_id"])
        turns = registry.trajectory_turns(record["trajectory_id"]) if problem is not None else []
        kernel = next((t.get("kernel") for t in turns if int(t["turn"]) == int(record["turn"])), None)
        if problem is None or not kernel:
            continue
        items.append({"problem": problem, "sample": record["sample"], "turn": record["turn"], "kernel": kernel,
                      "backend": config.kernel.backend, "precision": config.kernel.precision,
                      "sizes": problem.gpu_sizes if config.eval.size == "gpu" else {}})
    if not items:
        return []
    own = evaluator is None
    if own:
        from core.run_evaluator import open_run_evaluator

        evaluator = open_run_evaluator(config.eval)
    try:
        return check(evaluator, items)
    finally:
        if own:
            evaluator.close()
