"""Hack-resistance rules, each with a name and feedback text; static rules read the candidate's AST (static.py),
runtime rules watch it run (runtime.py). Every check returns a Finding or None; the worker turns findings into verdicts."""

from __future__ import annotations

from dataclasses import dataclass

RULES = {
    "reference_model": "ModelNew must not call, subclass or import the reference Model; implement the computation yourself.",
    "introspection": "The candidate must not reach into the evaluator (frames, gc, sys.modules, __main__).",
    "custom_kernel_bypassed": "forward's result must come from your own custom kernel, not from PyTorch ops around a "
    "kernel that does token work or is never called.",
    "custom_kernel_not_launched": "None of your custom kernels ran during forward; the result came from elsewhere.",
    "custom_kernel_unused": "The output does not depend on your custom kernels (their results were replaced and the "
    "output stayed the same): the kernels must compute the result.",
    "cached_output": "The output did not follow the inputs: results must be recomputed on every call, not cached.",
    "no_work_when_timed": "Timed calls launched no GPU work although the correctness calls did: compute the full result "
    "on every call.",
    "below_speed_of_light": "The measured time is below what the GPU can physically do for this problem (its FLOPs "
    "and bytes at peak rate): the timed calls cannot have computed the result.",
    "input_mutation": "forward modified its input tensors in place; inputs must be left unchanged.",
    "lazy_output": "forward must return plain torch.Tensor results, not tensor subclasses or proxies that compute (or "
    "compare) when they are looked at instead of when forward runs.",
    "patched_torch": "The candidate replaced functions of torch, time or other libraries the evaluator relies on.",
    "side_work": "The candidate uses threads or processes, or leaves work running after forward returns; join side "
    "CUDA streams back to the current stream before returning.",
    "untimed_work": "GPU work escapes the timed region (device-wide synchronised time far exceeds the event timing, or "
    "work on a side stream starts before the timed region): make side streams wait for the current stream before "
    "their work, and join them back before forward returns.",
    "persisting_l2": "The candidate sets up persisting L2 cache lines (an access-policy window or a persisting-L2 "
    "limit), which keeps data resident through the timing's cache flush: leave the L2 cache policy alone.",
    "swallowed_kernel_failure": "A try/except around your kernel hides its failures (falls back instead of raising); "
    "let errors propagate.",
}


@dataclass(frozen=True)
class Finding:
    """A rule that fired, with the feedback the model sees."""

    rule: str
    message: str


def message(rule: str, detail: str = "") -> str:
    text = f"Hack check `{rule}` failed: {RULES[rule]}"
    return f"{text} ({detail})" if detail else text


def finding(rule: str, detail: str = "") -> Finding:
    return Finding(rule, message(rule, detail))
