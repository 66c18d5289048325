"""A tiny stand-in for evaluator.slot.worker used by the pool tests to drive the pool's own faults deterministically.
It loads the candidate, runs ModelNew against Model once, and obeys a few test-only problem ids."""

from __future__ import annotations

import importlib.util
import os
import types

from evaluator.contract.types import EvalRequest, EvalResult, Verdict


def prepare_worker(device: str):
    import torch  # noqa: F401 - like the real worker, pay the import once

    return types.SimpleNamespace(device=device, device_name=f"standin-{device}", sticky_cuda_error=False)


prepare_runner = prepare_worker


def evaluate_in_process(request: EvalRequest, ctx, prebuilt=None) -> EvalResult:
    import torch

    result = EvalResult(request_id=request.request_id, problem_id=request.problem_id, verdict=Verdict.RUNTIME_ERROR,
                        device_name=ctx.device_name, timing_clock="monotonic")
    if request.problem_id == "standin/internal-error":
        raise RuntimeError("a bug in the worker")
    if request.problem_id == "standin/sticky":
        ctx.sticky_cuda_error = True
    path = os.path.abspath("candidate.py")
    with open(path, "w") as handle:
        handle.write(request.candidate_source)
    try:
        spec = importlib.util.spec_from_file_location("candidate", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        result.verdict, result.error_message = Verdict.COMPILE_ERROR, str(exc)
        return result
    except BaseException as exc:  # noqa: BLE001
        result.verdict, result.error_message = Verdict.COMPILE_ERROR, repr(exc)
        return result
    if not hasattr(module, "ModelNew"):
        result.verdict, result.error_message = Verdict.FORMAT_ERROR, "no ModelNew"
        return result
    reference: dict = {}
    exec(compile(request.reference_source, "<reference>", "exec"), reference)
    link = getattr(ctx, "judge_link", None)  # the trusted judge: inputs come from it, outputs go back to it
    try:
        model = module.ModelNew(*reference["get_init_inputs"]())
        expected = reference["Model"](*reference["get_init_inputs"]())
        names = [f"trial-{k}" for k in range(request.correctness_trials)] + ["timing-0", "recheck"]
        got = None
        for name in names if link else ["trial-0"]:
            if link:
                inputs = link.inputs(name)
            else:
                torch.manual_seed(request.seed)
                inputs = reference["get_inputs"]()
            got = model(*inputs)
            if link:
                link.hand_over(name, got)
        ok = got.shape == expected(*inputs).shape and torch.allclose(got, expected(*inputs), atol=1e-4, rtol=1e-4)
    except BaseException as exc:  # noqa: BLE001
        result.verdict, result.error_message = Verdict.RUNTIME_ERROR, repr(exc)[:2000]
        return result
    result.compiled = True
    result.correctness_trials_total = 1
    if ok:
        result.verdict, result.correctness_trials_passed = Verdict.CORRECT, 1
    else:
        result.verdict = Verdict.WRONG_OUTPUT
    result.phase_times_s["pid"] = float(os.getpid())
    return result


class StandinSession:
    """The judge's orders, served by the stand-in: load, call, stage/run/hand/keep, finish (evaluator/slot/order_loop.py)."""

    def __init__(self, request: EvalRequest, ctx, prebuilt=None):
        self.request, self.ctx = request, ctx
        self.model = None
        self.sets: list = []
        self.outputs: list = []
        self.kept: dict = {}
        self.last_inputs: list = []

    def load(self) -> None:
        if self.request.problem_id == "standin/internal-error":
            raise RuntimeError("a bug in the worker")
        if self.request.problem_id == "standin/sticky":
            self.ctx.sticky_cuda_error = True
        path = os.path.abspath("candidate.py")
        with open(path, "w") as handle:
            handle.write(self.request.candidate_source)
        spec = importlib.util.spec_from_file_location("candidate", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001
            raise _Failure(Verdict.COMPILE_ERROR, repr(exc)[:2000]) from None
        if not hasattr(module, "ModelNew"):
            raise _Failure(Verdict.FORMAT_ERROR, "no ModelNew")
        reference: dict = {}
        exec(compile(self.request.reference_source, "<reference>", "exec"), reference)
        self.model = module.ModelNew(*reference["get_init_inputs"]())

    def trial(self, inputs):
        self.last_inputs = inputs
        return self.model(*inputs)

    def recheck(self, fresh):
        return self.model(*fresh)

    def kernel_checks(self, inputs, other) -> None:
        pass

    def stage(self, bases, count) -> None:
        self.bases = bases

    def run(self, calls: int, salt: int) -> None:
        from evaluator.judging import judge

        self.sets = [judge.nudged_values(self.bases[i % len(self.bases)], salt + i) for i in range(calls)]
        self.outputs = [self.model(*self.sets[i % len(self.sets)]) for i in range(calls)]

    def run_eager(self, calls: int, salt: int) -> list:
        self.run(calls, salt)
        return []  # no event times (CPU): what the real worker reports there too

    def keep(self, calls: dict) -> None:
        self.kept.update({name: self.outputs[call] for name, call in calls.items()})

    def kept_output(self, name: str):
        return self.kept.pop(name)

    def projections(self, seed: int, scale: float = 1.0) -> list:
        from evaluator.slot.projection import projections

        return projections(self.outputs, seed, scale)

    def digests(self, seed: int) -> list:
        from evaluator.slot.output_digest import digests

        return digests(self.outputs, seed)

    def finish(self) -> None:
        pass

    def evidence(self) -> dict:
        return {}

    def failure(self, exc: BaseException) -> dict:
        verdict = exc.verdict if isinstance(exc, _Failure) else Verdict.RUNTIME_ERROR
        return {"type": "failed", "verdict": verdict.value, "message": str(exc)[:2000] or repr(exc)[:2000]}


class _Failure(Exception):
    def __init__(self, verdict: Verdict, message: str):
        super().__init__(message)
        self.verdict = verdict


def open_session(request: EvalRequest, ctx, prebuilt=None) -> StandinSession:
    return StandinSession(request, ctx, prebuilt)
