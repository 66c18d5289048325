"""Episodes: parsing every response shape, feedback for every verdict, prompts, eval requests, multi-turn flow."""

from __future__ import annotations

import pytest

from core.config import load_config
from core.env import (GUIDANCE, OUTCOMES, VERDICT_TITLES, KernelEnv, KernelEnvGroupBuilder, NoRetriever, RagRetriever,
                      format_feedback, key_error_lines, make_eval_request, make_retriever, parse_response, show_kernel)
from core.errors import KrlError
from core.problems import load_problem_set
from core.reward import per_turn_advantages
from evaluator.api import EvalResult, RuntimeStats, Verdict

CODE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.clamp_min(0)\n"
THOUGHT = "ReLU is memory-bound: one pass, clamp at zero, nothing to fuse."


def fenced(code: str = CODE, lang: str = "python") -> str:
    return f"```{lang}\n{code}```"


@pytest.fixture(scope="module")
def relu():
    return load_problem_set("builtin/relu")[0]


def stats(ms: float) -> RuntimeStats:
    return RuntimeStats(median_ms=ms, mean_ms=ms, std_ms=0.0, min_ms=ms, max_ms=ms, iqr_ms=0.0, n=10)


# ---------------------------------------------------------------- parsing

def test_parse_think_and_kernel():
    parsed = parse_response(f"<think>{THOUGHT}</think>\n<KERNEL>\n{fenced()}\n</KERNEL>")
    assert parsed.outcome == "ok" and parsed.format_ok and not parsed.truncated
    assert parsed.thought == THOUGHT and parsed.kernel == CODE and parsed.language == "python"


def test_parse_thinking_tag_and_lowercase_kernel_tag():
    parsed = parse_response(f"<thinking>{THOUGHT}</thinking><kernel>{fenced(lang='')}</kernel>")
    assert parsed.thought == THOUGHT and parsed.kernel == CODE and parsed.format_ok


def test_parse_prefilled_think_only_closing_tag():
    text = f"{THOUGHT}\n</think>\n<KERNEL>\n{fenced()}\n</KERNEL>"
    for prefilled in (True, False):  # detected from the lone </think> even when not told
        parsed = parse_response(text, prefilled_think=prefilled)
        assert parsed.thought == THOUGHT and parsed.kernel == CODE and parsed.format_ok


def test_parse_prefilled_think_never_closed_is_all_thought():
    parsed = parse_response(f"{THOUGHT} still thinking", prefilled_think=True, truncated=True)
    assert parsed.thought.startswith(THOUGHT) and parsed.kernel is None and parsed.outcome == "truncated"


def test_unclosed_thinking_followed_by_kernel_tag():
    for text, prefilled in ((f"{THOUGHT}\n<KERNEL>{fenced()}</KERNEL>", True),
                            (f"<think>{THOUGHT}\n<KERNEL>{fenced()}</KERNEL>", False)):
        parsed = parse_response(text, prefilled_think=prefilled)
        assert parsed.thought == THOUGHT and parsed.kernel == CODE and parsed.outcome == "ok"


def test_code_inside_thinking_is_not_the_kernel():
    draft = fenced("x = 1\n")
    text = f"<think>draft:\n{draft}\n</think>\nno final answer"
    parsed = parse_response(text)
    assert parsed.kernel is None and parsed.outcome == "no_code" and "x = 1" in parsed.thought


def test_parse_fallback_to_first_fenced_block():
    test_block = fenced("print(1)\n")
    parsed = parse_response(f"<think>{THOUGHT}</think>Here it is:\n{fenced()}\nand a test:\n{test_block}")
    assert parsed.outcome == "fallback" and not parsed.format_ok
    assert parsed.kernel == CODE and parsed.n_blocks == 2


def test_parse_two_blocks_inside_kernel_takes_the_python_one():
    cpp_block = fenced("__global__ void k() {}\n", "cpp")
    text = f"<KERNEL>\n{cpp_block}\n{fenced()}\n</KERNEL>"
    parsed = parse_response(text)
    assert parsed.outcome == "multiple_blocks" and not parsed.format_ok and parsed.kernel == CODE


def test_parse_no_code():
    parsed = parse_response("<think>hmm</think> I cannot do this.")
    assert parsed.outcome == "no_code" and parsed.kernel is None and not parsed.format_ok


def test_parse_truncated_mid_block_drops_the_cut_code():
    text = f"<think>{THOUGHT}</think><KERNEL>\n```python\nimport torch\nclass ModelNew("
    parsed = parse_response(text, truncated=True)
    assert parsed.outcome == "truncated" and parsed.truncated and parsed.kernel is None and not parsed.format_ok
    # The same text when the model stopped on its own: the unclosed block is taken as it is.
    assert parse_response(text).kernel is not None


def test_parse_truncated_after_a_complete_block_keeps_the_kernel():
    parsed = parse_response(f"<think>{THOUGHT}</think><KERNEL>{fenced()}</KERNEL> and then more and more", True)
    assert parsed.outcome == "truncated" and parsed.kernel == CODE and not parsed.format_ok


def test_outcomes_are_documented():
    assert set(OUTCOMES) == {"ok", "fallback", "multiple_blocks", "no_code", "truncated"}


# ---------------------------------------------------------------- feedback

def feedback_result(verdict: Verdict) -> EvalResult:
    base = dict(request_id="r", problem_id="builtin/relu", verdict=verdict)
    if verdict == Verdict.CORRECT:
        base.update(compiled=True, correctness_trials_passed=5, correctness_trials_total=5, max_abs_diff=1e-7,
                    kernel_runtime=stats(0.5), reference_runtime=stats(1.0), speedup=2.0)
    elif verdict == Verdict.WRONG_OUTPUT:
        base.update(compiled=True, correctness_trials_passed=2, correctness_trials_total=5, max_abs_diff=0.25,
                    error_message="output mismatch: 37 of 65536 elements differ")
    elif verdict == Verdict.SHAPE_MISMATCH:
        base.update(compiled=True, correctness_trials_total=5,
                    error_message="expected shape (16, 4096), got (16, 4095)")
    elif verdict == Verdict.COMPILE_ERROR:
        base.update(error_message="kernel.cu(12): error: identifier \"blockIdx_x\" is undefined\n1 error detected")
    elif verdict == Verdict.RUNTIME_ERROR:
        base.update(compiled=True, error_message="line 9, in forward\nRuntimeError: CUDA error: invalid argument")
    elif verdict == Verdict.TIMEOUT:
        base.update(compiled=True, error_message="no result within 60 s")
    elif verdict == Verdict.CRASHED:
        base.update(compiled=True, error_message="worker died: signal 11 (SIGSEGV)")
    elif verdict == Verdict.HACK_DETECTED:
        base.update(compiled=True, hack_rule="calls_reference_op",
                    error_message="ModelNew.forward calls torch.relu, the operator under test")
    elif verdict == Verdict.FORMAT_ERROR:
        base.update(error_message="no class ModelNew in the candidate module")
    return EvalResult(**base)


@pytest.mark.parametrize("verdict", list(Verdict))
def test_feedback_for_every_verdict(verdict):
    parsed = parse_response(f"<think>{THOUGHT}</think><KERNEL>{fenced()}</KERNEL>")
    res = feedback_result(verdict)
    text = format_feedback(res, parsed)
    assert text.splitlines()[0].startswith("Verdict: ")
    assert text.splitlines()[0] == f"Verdict: {VERDICT_TITLES[verdict.value]}"
    assert f"Compiled: {'yes' if res.compiled else 'no'}" in text
    assert f"Guidance: {GUIDANCE[verdict.value]}" in text
    if res.error_message:
        assert res.error_message.splitlines()[0] in text
    if res.correctness_trials_total:
        assert f"{res.correctness_trials_passed}/{res.correctness_trials_total}" in text


def test_feedback_details_numbers_and_hack_rule():
    parsed = parse_response(f"<KERNEL>{fenced()}</KERNEL>")
    correct = format_feedback(feedback_result(Verdict.CORRECT), parsed)
    assert "Runtime: 0.5 ms, reference 1 ms" in correct and "Speedup: 2.00x (faster" in correct
    wrong = format_feedback(feedback_result(Verdict.WRONG_OUTPUT), parsed)
    assert "Max abs difference: 0.25" in wrong and "2/5" in wrong
    hack = format_feedback(feedback_result(Verdict.HACK_DETECTED), parsed)
    assert "Hack rule: calls_reference_op" in hack
    slow = feedback_result(Verdict.CORRECT)
    slow.speedup = 0.5
    assert "slower than PyTorch" in format_feedback(slow, parsed)


def test_feedback_without_kernel_and_when_truncated():
    text = format_feedback(None, parse_response("just words"))
    assert "Verdict: format error (no kernel found)" in text and "no code block" in text
    cut = format_feedback(None, parse_response("<think>long", truncated=True))
    assert "cut off at the token limit" in cut and "length limit" in cut
    fallback = format_feedback(feedback_result(Verdict.WRONG_OUTPUT), parse_response(fenced()))
    assert "not in a single fenced block inside <KERNEL>" in fallback


def test_long_error_logs_keep_key_lines_and_say_what_was_left_out():
    log = "\n".join([f"note: context line {i}" for i in range(40)] + ["kernel.cu(3): error: expected ';'"])
    shown = key_error_lines(log, max_lines=5)
    assert "error: expected ';'" in shown and "more lines of the error log not shown" in shown
    assert key_error_lines("a\nb") == "a\nb"


# ---------------------------------------------------------------- prompts and requests

def test_initial_prompt_has_system_problem_and_backend_instructions(relu):
    for backend, marker in (("cuda", "load_inline"), ("triton", "@triton.jit"), ("torch", "plain PyTorch")):
        env = KernelEnv(relu, load_config("demo", [f"kernel.backend={backend}"]))
        messages = env.initial_prompt()
        assert [m["role"] for m in messages] == ["system", "user"]
        assert "<think>" in messages[0]["content"] and "<KERNEL>" in messages[0]["content"]
        assert relu.source.strip() in messages[1]["content"] and marker in messages[1]["content"]
        assert "ModelNew" in messages[1]["content"]


def test_make_eval_request_honours_config(relu):
    cfg = load_config("demo", ["kernel.backend=triton", "kernel.precision=bf16", "eval.correctness_trials=3",
                               "eval.timing_trials=7", "eval.size=gpu", "seed=11"])
    req = make_eval_request(relu, CODE, cfg)
    assert (req.backend, req.precision, req.correctness_trials, req.timing_trials, req.seed) == \
        ("triton", "bf16", 3, 7, 11)
    assert req.size_overrides == relu.gpu_sizes and req.size_overrides
    assert req.reference_source == relu.source and req.problem_hash == relu.hash and req.candidate_source == CODE
    assert make_eval_request(relu, CODE, load_config("demo")).size_overrides == {}


class ListRetriever:
    def __init__(self):
        self.calls = 0

    def examples(self, problem, backend, k):
        self.calls += 1
        return [{"id": "ex1", "name": "fused_gelu", "backend": backend, "pytorch_code": "y = gelu(x)",
                 "kernel_code": "FAST_GELU_KERNEL", "speedup": 1.8, "score": 0.9, "language": "python"}][:k]


def test_retrieved_examples_appear_in_the_first_prompt_and_are_recorded(relu):
    retriever = ListRetriever()
    cfg = load_config("demo", ["rag.k=1"])
    builder = KernelEnvGroupBuilder(relu, cfg, retriever)
    envs = builder.make_envs()
    assert len(envs) == cfg.dataset.group_size
    prompts = [env.initial_prompt()[1]["content"] for env in envs]
    assert all("FAST_GELU_KERNEL" in p and "1.80x" in p for p in prompts)
    assert retriever.calls == 1  # one retrieval per group
    out = envs[0].step("no code here", False, None)
    assert "FAST_GELU_KERNEL" not in out.next_prompt[1]["content"]  # rag.every_turn is off
    assert envs[0].trajectory.transitions[0].retrieved[0]["id"] == "ex1"


def test_make_retriever_default_and_missing_index(tmp_path, caplog):
    with caplog.at_level("INFO", logger="krl.env"):
        assert isinstance(make_retriever(load_config("kevin")), NoRetriever)
    assert "rag.index is not set" in caplog.text
    with pytest.raises(KrlError, match="does not exist"):
        make_retriever(load_config("kevin", [f"rag.index={tmp_path / 'nope'}"]))
    empty = tmp_path / "empty_index"
    empty.mkdir()
    with pytest.raises(KrlError, match="cannot open rag index"):
        RagRetriever(empty)


# ---------------------------------------------------------------- episodes

def correct(speedup: float) -> EvalResult:
    return EvalResult(request_id="r", problem_id="builtin/relu", verdict=Verdict.CORRECT, compiled=True,
                      correctness_trials_passed=2, correctness_trials_total=2, speedup=speedup,
                      kernel_runtime=stats(1 / speedup), reference_runtime=stats(1.0))


def wrong() -> EvalResult:
    return EvalResult(request_id="r", problem_id="builtin/relu", verdict=Verdict.WRONG_OUTPUT, compiled=True,
                      correctness_trials_passed=0, correctness_trials_total=2, max_abs_diff=1.0,
                      error_message="mismatch")


RESPONSE = f"<think>{THOUGHT}</think><KERNEL>{fenced()}</KERNEL>"


def test_multi_turn_episode_carries_kernel_and_feedback(relu):
    cfg = load_config("demo", ["max_turns=3", "early_stop.mode=correct"])
    env = KernelEnv(relu, cfg)
    env.initial_prompt()
    parsed = env.parse(RESPONSE)
    assert env.eval_request(parsed).candidate_source == CODE
    first = env.step(RESPONSE, False, wrong())
    assert not first.done and first.turn == 0
    user = first.next_prompt[1]["content"]
    assert CODE.strip() in user and "Verdict: wrong output" in user and "turn 2 of 3" in user
    assert relu.source.strip() in user
    second = env.step(RESPONSE, False, correct(1.2))
    assert second.done and second.next_prompt is None and env.done
    traj = env.trajectory
    assert traj.solved and traj.solved_at_turn == 1 and traj.best_speedup == pytest.approx(1.2)
    with pytest.raises(RuntimeError):
        env.step(RESPONSE, False, correct(1.2))


def test_early_stop_modes(relu):
    def turns_taken(mode: str, speedups: list[float]) -> int:
        env = KernelEnv(relu, load_config("demo", ["max_turns=4", f"early_stop.mode={mode}",
                                                   "early_stop.speedup_threshold=1.5"]))
        env.initial_prompt()
        for s in speedups:
            if env.step(RESPONSE, False, correct(s)).done:
                break
        return env.turn

    assert turns_taken("correct", [1.0, 1.0, 1.0, 1.0]) == 1
    assert turns_taken("speedup", [1.0, 1.2, 1.6, 2.0]) == 3
    assert turns_taken("never", [2.0, 2.0, 2.0, 2.0]) == 4


def test_step_requires_a_result_when_there_is_a_kernel(relu):
    env = KernelEnv(relu, load_config("demo"))
    with pytest.raises(ValueError):
        env.step(RESPONSE, False, None)
    out = env.step("no code", False, None)  # nothing to evaluate: recorded as a format error
    assert out.eval_result.verdict == Verdict.FORMAT_ERROR and out.score <= 0.05
    assert "(no kernel was found in that response)" in out.next_prompt[1]["content"]


def test_previous_kernel_policy_full_or_head_tail_never_silent(relu):
    long_kernel = "".join(f"x{i} = {i}  # padding padding padding padding\n" for i in range(300))
    assert show_kernel(long_kernel, "full", 500) == long_kernel
    short = show_kernel(long_kernel, "head_tail", 2000)
    assert len(short) < 2400 and "lines omitted" in short
    assert short.startswith("x0 = 0") and short.rstrip().endswith("x299 = 299  # padding padding padding padding")
    cfg = load_config("demo", ["prompt.previous_kernel=head_tail", "prompt.max_kernel_chars=2000"])
    env = KernelEnv(relu, cfg)
    out = env.step(f"<KERNEL>{fenced(long_kernel)}</KERNEL>", False, wrong())
    user = out.next_prompt[1]["content"]
    assert "lines omitted" in user and "shown as their beginning and end" in user
    full = KernelEnv(relu, load_config("demo")).step(f"<KERNEL>{fenced(long_kernel)}</KERNEL>", False, wrong())
    assert long_kernel.strip() in full.next_prompt[1]["content"]


def test_history_all_shows_every_attempt(relu):
    env = KernelEnv(relu, load_config("demo", ["prompt.history=all", "max_turns=3"]))
    env.step(RESPONSE.replace("clamp_min", "first_try"), False, wrong())
    out = env.step(RESPONSE.replace("clamp_min", "second_try"), False, wrong())
    user = out.next_prompt[1]["content"]
    assert "first_try" in user and "second_try" in user and "turn 3 of 3" in user


def test_group_to_registry_records(relu, registry):
    cfg = load_config("demo", ["max_turns=2", "dataset.group_size=2"])
    envs = KernelEnvGroupBuilder(relu, cfg, train_step=0).make_envs()
    for env in envs:
        env.initial_prompt()
    envs[0].step(RESPONSE, False, correct(2.0))  # solved on turn 1 and stops
    envs[1].step(RESPONSE, False, wrong())
    envs[1].step(RESPONSE, False, correct(2.0))
    group = per_turn_advantages([e.trajectory.scores for e in envs], cfg.reward.gamma)
    assert group.advantages[0][0] > group.advantages[1][0]
    records = [e.trajectory.to_record(0, i, group.returns[i], group.advantages[i]) for i, e in enumerate(envs)]
    run = registry.create_run("env-test", config=cfg.to_dict())
    registry.write_step(run["id"], 0, {"env/all/reward/total": 1.0}, records, [])
    stored = registry.trajectories(run["id"], order="return")
    assert {t["solved_at_turn"] for t in stored} == {0, 1}
    turns = registry.trajectory_turns(stored[0]["id"])
    assert turns[0]["verdict"] == "correct" and "[system]" in turns[0]["prompt"]
    assert turns[0]["reward_breakdown"]["total"] == pytest.approx(envs[0].trajectory.scores[0])
