"""A tiny stand-in for evaluator.slot.worker used by the pool tests to drive the pool's own faults deterministically.
It loads the candidate, runs ModelNew against Model once, and obeys a few test-only problem ids."""

from __future__ import annotations

import importlib.util
import os
import types

from evaluator.api import EvalRequest, EvalResult, Verdict


def prepare_worker(device: str):
    import torch  # noqa: F401 - like the real worker, pay the import once

    return types.SimpleNamespace(device=device, device_name=f"standin-{device}", sticky_cuda_error=False)


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
