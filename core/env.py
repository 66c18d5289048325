"""Kernel-writing episodes: prompts (with optional retrieved examples), response parsing, evaluator feedback and the
single/multi-turn state machine, in tinker-cookbook's vocabulary (Env, EnvGroupBuilder, Transition, Trajectory)."""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from core.config import RunConfig
from core.errors import KrlError
from core.problems import Problem
from core.registry import TrajectoryRecord, TurnRecord
# OUTCOMES, ParsedResponse and parse_response stay importable from here (the environment's vocabulary).
from core.response import OUTCOMES, ParseOutcome, ParsedResponse, parse_response  # noqa: F401
from core.reward import StageSchedule, discounted_returns, score_turn
from evaluator.api import EvalRequest, EvalResult, Verdict

log = logging.getLogger("krl.env")

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}

# ---------------------------------------------------------------- prompts

SYSTEM_PROMPT = """You are an expert GPU performance engineer. You replace PyTorch reference programs with custom \
kernels that compute the same result, faster.

Answer in exactly this form:
<think>
Your reasoning: what the reference computes, where time goes, which kernel design you choose and why.
</think>
<KERNEL>
```python
# the complete Python module with your ModelNew
```
</KERNEL>

Rules: put exactly one fenced code block inside <KERNEL>; it must be a complete, self-contained Python module \
(imports included) that defines `class ModelNew(nn.Module)` whose __init__ takes the same arguments as the \
reference `Model` and whose forward returns the same outputs. Do not call the reference implementation, do not \
hard-code or cache outputs, and do not skip work for particular inputs: such kernels are detected and penalised."""

BACKEND_INSTRUCTIONS = {
    "cuda": """Write the kernel in CUDA C++ and build it inline with \
`torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...])` at module \
level; ModelNew.forward calls the compiled function. Keep `ModelNew.__init__` the same signature as `Model.__init__` \
and create the same parameters (same shapes) so weights match. Check your indexing and launch bounds; use \
`.contiguous()` inputs and the input's dtype and device.""",
    "triton": """Write the kernel in Triton: one or more `@triton.jit` functions launched from `ModelNew.forward` \
with an explicit grid, `import triton` and `import triton.language as tl`. Keep `ModelNew.__init__` the same \
signature as `Model.__init__` and create the same parameters (same shapes) so weights match. Mask loads and stores \
at the edges.""",
    "torch": """Write ModelNew in plain PyTorch (no custom extensions): fuse, reorder or simplify operations to make \
it faster while computing the same result. Keep `ModelNew.__init__` the same signature as `Model.__init__` and \
create the same parameters (same shapes) so weights match.""",
}

BACKEND_NAMES = {"cuda": "CUDA (load_inline)", "triton": "Triton", "torch": "PyTorch"}


# ---------------------------------------------------------------- retrieval

class Retriever(Protocol):
    """Examples of good kernels for a problem; each a dict with id, name, backend, pytorch_code, kernel_code,
    speedup, score, language."""

    def examples(self, problem: Problem, backend: str, k: int) -> list[dict]: ...


class NoRetriever:
    """The default: no examples."""

    def examples(self, problem: Problem, backend: str, k: int) -> list[dict]:
        return []


class RagRetriever:
    """Adapts rag.retriever.IndexRetriever (imported lazily: rag is an optional extra) to the Retriever protocol.
    count_tokens (text -> int) should be the policy's tokenizer so token_budget means policy tokens."""

    def __init__(self, index_dir: str | Path, token_budget: Optional[int] = None,
                 count_tokens: Optional[Callable[[str], int]] = None):
        path = Path(index_dir).expanduser()
        if not path.exists():
            raise KrlError(f"rag.index '{index_dir}' does not exist. Build one with `krl rag build` or set "
                           "rag.index=null to train without retrieved examples.")
        try:
            from rag import RagError
            from rag.retriever import IndexRetriever
        except ImportError as exc:
            raise KrlError(f"rag.index is set but the retrieval extra is not usable ({exc}). Install it with "
                           "`pip install 'kernelrl[rag]'` or set rag.index=null.") from None
        self._rag_error = RagError
        try:
            self._index = IndexRetriever(str(path), count_tokens=count_tokens)
        except (RagError, OSError, ValueError) as exc:
            raise KrlError(f"cannot open rag index '{index_dir}': {exc} Rebuild it with `krl rag build` or set "
                           "rag.index=null.") from None
        self.index_dir = str(path)
        self.token_budget = token_budget
        # Every sample of a group (and every epoch) asks the same question; embedding it once is enough.
        self._cache: dict[tuple[str, str, str, int], list[dict]] = {}
        self._lock = threading.Lock()

    def examples(self, problem: Problem, backend: str, k: int) -> list[dict]:
        if k <= 0:
            return []
        key = (problem.id, problem.hash, backend, k)
        with self._lock:
            if key in self._cache:
                return [dict(ex) for ex in self._cache[key]]
            try:
                found = list(self._index.examples(problem.source, problem.id, backend, k, self.token_budget))
            except self._rag_error as exc:
                raise KrlError(f"retrieval from rag index '{self.index_dir}' failed: {exc}") from None
            self._cache[key] = found
            return [dict(ex) for ex in found]


def make_retriever(config: RunConfig, count_tokens: Optional[Callable[[str], int]] = None) -> Retriever:
    """rag.index set -> RagRetriever (KrlError when rag or the index is missing); else NoRetriever, with a log line."""
    if config.rag.index:
        return RagRetriever(config.rag.index, config.rag.token_budget, count_tokens)
    log.info("rag.index is not set: prompts carry no retrieved examples")
    return NoRetriever()


def format_examples(examples: Sequence[dict]) -> str:
    if not examples:
        return ""
    parts = ["Here are examples of fast, correct kernels for similar problems (for ideas; do not copy blindly):"]
    for i, ex in enumerate(examples, 1):
        speedup = ex.get("speedup")
        speed_text = f", {speedup:.2f}x faster than PyTorch" if isinstance(speedup, (int, float)) else ""
        parts.append(f"Example {i}: {ex.get('name') or ex.get('id', '?')} "
                     f"({BACKEND_NAMES.get(ex.get('backend', ''), ex.get('backend', ''))}{speed_text})")
        if ex.get("pytorch_code"):
            parts.append(f"Reference:\n```python\n{ex['pytorch_code'].strip()}\n```")
        lang = ex.get("language") or "python"
        parts.append(f"Kernel:\n```{lang}\n{(ex.get('kernel_code') or '').strip()}\n```")
    return "\n\n".join(parts)


def problem_statement(problem: Problem, backend: str) -> str:
    return (f"Reference program ({problem.id}, {problem.name}):\n```python\n{problem.source.strip()}\n```\n\n"
            f"Target: {BACKEND_NAMES.get(backend, backend)}. {BACKEND_INSTRUCTIONS[backend]}")


def system_message() -> Message:
    return {"role": "system", "content": SYSTEM_PROMPT}


def messages_to_text(messages: Sequence[Message]) -> str:
    """A stored, readable form of a chat prompt (the registry keeps prompts as text)."""
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)


# ---------------------------------------------------------------- feedback

GUIDANCE: dict[str, str] = {
    Verdict.CORRECT.value: "Correct. Now make it faster: fuse operations, cut memory traffic, use a better launch "
                           "configuration, and keep it correct.",
    Verdict.WRONG_OUTPUT.value: "The outputs differ from the reference: check indexing, boundary masks, reduction "
                                "order, data types and that every element is written.",
    Verdict.SHAPE_MISMATCH.value: "The output shape or dtype differs from the reference: return exactly what "
                                  "Model.forward returns.",
    Verdict.FORMAT_ERROR.value: "No usable ModelNew was found: give one complete Python module defining "
                                "`class ModelNew(nn.Module)` in a single fenced block inside <KERNEL>…</KERNEL>.",
    Verdict.COMPILE_ERROR.value: "Fix the compile error shown above first; keep the kernel simple until it builds.",
    Verdict.RUNTIME_ERROR.value: "The kernel crashed while running: check memory accesses, launch parameters, "
                                 "device/dtype of tensors and the forward signature.",
    Verdict.TIMEOUT.value: "The kernel ran too long: look for infinite loops, a grid that is far too large, or "
                           "pathological launch configurations.",
    Verdict.CRASHED.value: "The evaluation process died (e.g. illegal memory access or segfault): check bounds "
                           "and pointer arithmetic; do not touch memory you did not allocate.",
    Verdict.HACK_DETECTED.value: "The kernel was rejected for sidestepping the task (see the rule above): compute "
                                 "the result yourself in your own kernel, for every input.",
}
GUIDANCE_NO_KERNEL = ("Your response contained no code block. Answer with <think>…</think> then <KERNEL> holding "
                      "one fenced ```python block with the whole module.")
GUIDANCE_TRUNCATED = ("Your response hit the length limit before it was complete: think more briefly and write "
                      "the kernel sooner.")

VERDICT_TITLES = {
    Verdict.CORRECT.value: "correct",
    Verdict.WRONG_OUTPUT.value: "wrong output",
    Verdict.SHAPE_MISMATCH.value: "output shape mismatch",
    Verdict.FORMAT_ERROR.value: "format error",
    Verdict.COMPILE_ERROR.value: "compile error",
    Verdict.RUNTIME_ERROR.value: "runtime error",
    Verdict.TIMEOUT.value: "timeout",
    Verdict.CRASHED.value: "crashed",
    Verdict.HACK_DETECTED.value: "hack detected",
}

MAX_ERROR_LINES = 20
_KEY_LINE_RE = re.compile(r"error|exception|assert|undefined|not declared|no matching|expected|invalid|"
                          r"cannot|failed|mismatch|illegal|out of (memory|bounds)|^\s*File \".*\", line \d+", re.I)


def key_error_lines(message: str, max_lines: int = MAX_ERROR_LINES) -> str:
    """The whole (already cleaned) message when short; otherwise the lines that name errors, in order, with a count
    of what was left out (never cut silently)."""
    lines = [ln.rstrip() for ln in message.strip().splitlines() if ln.strip()]
    if len(lines) <= max_lines:
        return "\n".join(lines)
    keep = [i for i, ln in enumerate(lines) if _KEY_LINE_RE.search(ln)][:max_lines]
    if not keep:
        keep = list(range(len(lines) - max_lines, len(lines)))
    shown = [lines[i] for i in keep]
    return "\n".join(shown) + f"\n[{len(lines) - len(shown)} more lines of the error log not shown]"


def _ms(stats: Any) -> Optional[float]:
    return None if stats is None else getattr(stats, "median_ms", None)


def format_feedback(result: Optional[EvalResult], parsed: ParsedResponse) -> str:
    """The structured feedback the model sees next turn: verdict, compiled, key error lines, trials k/n, max diff,
    runtime and speedup, hack rule, one line of guidance."""
    lines: list[str] = []
    if parsed.truncated:
        lines.append("Note: your response was cut off at the token limit.")
    if result is None:
        if parsed.kernel is None:
            lines.append("Verdict: format error (no kernel found)")
            lines.append(f"Guidance: {GUIDANCE_TRUNCATED if parsed.truncated else GUIDANCE_NO_KERNEL}")
        else:
            lines.append("Verdict: not evaluated")
            lines.append("Guidance: the kernel was not evaluated; submit it again.")
        return "\n".join(lines)
    verdict = result.verdict.value if isinstance(result.verdict, Verdict) else str(result.verdict)
    lines.append(f"Verdict: {VERDICT_TITLES.get(verdict, verdict)}")
    if parsed.kernel is not None and parsed.outcome in (ParseOutcome.FALLBACK, ParseOutcome.MULTIPLE_BLOCKS):
        lines.append("Format: the code was not in a single fenced block inside <KERNEL>…</KERNEL>; "
                     "the first block was used.")
    lines.append(f"Compiled: {'yes' if result.compiled else 'no'}")
    if result.error_message.strip() and verdict != Verdict.CORRECT.value:
        lines.append("Errors:\n" + key_error_lines(result.error_message))
    if result.correctness_trials_total:
        lines.append(f"Correctness trials passed: {result.correctness_trials_passed}/{result.correctness_trials_total}")
    if result.max_abs_diff is not None and verdict in (Verdict.WRONG_OUTPUT.value, Verdict.CORRECT.value):
        lines.append(f"Max abs difference: {result.max_abs_diff:.3g}"
                     + (f" (mean {result.mean_abs_diff:.3g})" if result.mean_abs_diff is not None else ""))
    kernel_ms, ref_ms = _ms(result.kernel_runtime), _ms(result.reference_runtime)
    if kernel_ms is not None:
        ref_text = f", reference {ref_ms:.4g} ms" if ref_ms is not None else ""
        lines.append(f"Runtime: {kernel_ms:.4g} ms{ref_text}")
    if result.speedup is not None:
        relation = "faster" if result.speedup >= 1 else "slower"
        lines.append(f"Speedup: {result.speedup:.2f}x ({relation} than the PyTorch reference)")
    if result.hack_rule:
        lines.append(f"Hack rule: {result.hack_rule}")
    guidance = GUIDANCE.get(verdict, "")
    if verdict == Verdict.CORRECT.value and result.speedup is not None and result.speedup < 1:
        guidance = "Correct but slower than PyTorch: find where time goes and fuse or restructure to beat it."
    if parsed.truncated and verdict != Verdict.CORRECT.value:
        guidance = f"{guidance} {GUIDANCE_TRUNCATED}"
    lines.append(f"Guidance: {guidance}")
    return "\n".join(lines)


def no_kernel_result(problem: Problem, parsed: ParsedResponse) -> EvalResult:
    """The result recorded for a response without code: nothing to evaluate, verdict format_error."""
    reason = "response was truncated before a complete code block" if parsed.truncated else "no fenced code block"
    return EvalResult(request_id="", problem_id=problem.id, verdict=Verdict.FORMAT_ERROR, error_message=reason)


# ---------------------------------------------------------------- evaluation requests

def make_eval_request(problem: Problem, kernel_source: str, config: RunConfig) -> EvalRequest:
    """The evaluator request for one candidate, honouring kernel.backend/precision, eval trials and eval.size."""
    return EvalRequest(
        problem_id=problem.id,
        reference_source=problem.source,
        candidate_source=kernel_source,
        problem_hash=problem.hash,
        backend=config.kernel.backend,
        precision=config.kernel.precision,
        correctness_trials=config.eval.correctness_trials,
        timing_trials=config.eval.timing_trials,
        warmup_trials=config.eval.warmup_trials,
        compile_timeout_s=config.eval.compile_timeout_s,
        run_timeout_s=config.eval.run_timeout_s,
        measure_timing=config.eval.measure_timing,
        seed=config.seed,
        size_overrides=problem.gpu_sizes if config.eval.size == "gpu" else {},
    )


# ---------------------------------------------------------------- episodes

def show_kernel(kernel: str, policy: str, max_chars: int) -> str:
    """A previous kernel for a later prompt: whole ('full'), or head and tail with a stated omission ('head_tail')."""
    if policy == "full" or len(kernel) <= max_chars:
        return kernel
    lines = kernel.splitlines()
    head: list[str] = []
    tail: list[str] = []
    budget = max_chars // 2
    for line in lines:
        if sum(len(x) + 1 for x in head) + len(line) + 1 > budget:
            break
        head.append(line)
    for line in reversed(lines[len(head):]):
        if sum(len(x) + 1 for x in tail) + len(line) + 1 > budget:
            break
        tail.insert(0, line)
    omitted = len(lines) - len(head) - len(tail)
    return "\n".join(head + [f"# [... {omitted} lines omitted from this view of your previous kernel ...]"] + tail)


@dataclass
class Transition:
    """One turn: the prompt shown, the response, what was parsed and evaluated, the score and the feedback."""

    turn: int  # 0-based
    prompt: list[Message]
    response: str
    parsed: ParsedResponse
    eval_result: EvalResult
    score: float
    breakdown: dict[str, float]
    feedback: str
    done: bool
    retrieved: list[dict] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0


@dataclass
class StepOutcome:
    score: float
    breakdown: dict[str, float]
    feedback: str
    done: bool
    next_prompt: Optional[list[Message]]  # None when done
    parsed: ParsedResponse
    eval_result: EvalResult
    turn: int


@dataclass
class Trajectory:
    """One episode of one problem: its transitions in order."""

    problem_id: str
    transitions: list[Transition] = field(default_factory=list)

    @property
    def scores(self) -> list[float]:
        return [t.score for t in self.transitions]

    @property
    def solved_at_turn(self) -> Optional[int]:
        return next((t.turn for t in self.transitions if t.eval_result.verdict == Verdict.CORRECT), None)

    @property
    def solved(self) -> bool:
        return self.solved_at_turn is not None

    @property
    def best_speedup(self) -> Optional[float]:
        speeds = [t.eval_result.speedup for t in self.transitions
                  if t.eval_result.verdict == Verdict.CORRECT and t.eval_result.speedup is not None]
        return max(speeds) if speeds else None

    @property
    def hack(self) -> bool:
        return any(t.eval_result.verdict == Verdict.HACK_DETECTED for t in self.transitions)

    def to_record(self, group: int, sample: int, returns: Optional[Sequence[float]] = None,
                  advantages: Optional[Sequence[float]] = None, gamma: float = 0.4) -> TrajectoryRecord:
        """The registry's form. returns/advantages come from core.reward.per_turn_advantages for the group."""
        rets = list(returns) if returns is not None else discounted_returns(self.scores, gamma)
        advs = list(advantages) if advantages is not None else [0.0] * len(self.transitions)
        turns = [TurnRecord(
            turn=t.turn, prompt=messages_to_text(t.prompt), response=t.response, kernel=t.parsed.kernel or "",
            thought=t.parsed.thought, verdict=t.eval_result.verdict.value, eval_result=t.eval_result.to_dict(),
            feedback=t.feedback, step_score=t.score, return_=rets[i], advantage=advs[i],
            reward_breakdown=dict(t.breakdown), tokens_in=t.tokens_in, tokens_out=t.tokens_out,
            retrieved=list(t.retrieved)) for i, t in enumerate(self.transitions)]
        return TrajectoryRecord(group=group, sample=sample, problem_id=self.problem_id, turns=turns,
                                total_return=rets[0] if rets else 0.0, solved=self.solved,
                                solved_at_turn=self.solved_at_turn, best_speedup=self.best_speedup, hack=self.hack)


def episode_done(result: EvalResult, turn: int, config: RunConfig) -> bool:
    """Last turn, or early stop: 'correct' on any correct kernel, 'speedup' on a correct one at >= threshold."""
    if turn + 1 >= config.max_turns:
        return True
    mode = config.early_stop.mode
    if result.verdict != Verdict.CORRECT or mode == "never":
        return False
    if mode == "correct":
        return True
    return result.speedup is not None and result.speedup >= config.early_stop.speedup_threshold


class KernelEnv:
    """One multi-turn episode for one problem (single-turn when max_turns is 1).

    Loop: prompt = env.initial_prompt(); then per turn: sample a response for `prompt`, parsed = env.parse(text,
    truncated), req = env.eval_request(parsed) (None: no kernel, nothing to evaluate), result = evaluate(req),
    out = env.step(text, truncated, result); stop when out.done, else prompt = out.next_prompt."""

    def __init__(self, problem: Problem, config: RunConfig, retriever: Optional[Retriever] = None,
                 train_step: int = 0, schedule: Optional[StageSchedule] = None, prefilled_think: bool = False):
        self.problem = problem
        self.config = config
        self.retriever = retriever or NoRetriever()
        self.train_step = train_step
        self.schedule = schedule or StageSchedule.from_config(config)
        self.prefilled_think = prefilled_think
        self.trajectory = Trajectory(problem.id)
        self.done = False
        self._prompt: Optional[list[Message]] = None
        self._retrieved: Optional[list[dict]] = None

    @property
    def turn(self) -> int:
        """The 0-based index of the turn about to be taken."""
        return len(self.trajectory.transitions)

    @property
    def backend(self) -> str:
        return self.config.kernel.backend

    def retrieved(self) -> list[dict]:
        if self._retrieved is None:
            self._retrieved = self.retriever.examples(self.problem, self.backend, self.config.rag.k) \
                if self.config.rag.k > 0 else []
        return self._retrieved

    def initial_prompt(self) -> list[Message]:
        parts = [problem_statement(self.problem, self.backend)]
        examples = format_examples(self.retrieved())
        if examples:
            parts.append(examples)
        parts.append("Write ModelNew. Think first inside <think>…</think>, then give the module inside "
                     "<KERNEL>…</KERNEL>.")
        self._prompt = [system_message(), {"role": "user", "content": "\n\n".join(parts)}]
        return self._prompt

    def _refinement_prompt(self) -> list[Message]:
        cfg = self.config.prompt
        parts = [problem_statement(self.problem, self.backend)]
        if self.config.rag.every_turn:
            examples = format_examples(self.retrieved())
            if examples:
                parts.append(examples)
        shown = self.trajectory.transitions if cfg.history == "all" else self.trajectory.transitions[-1:]
        if cfg.previous_kernel == "head_tail":
            parts.append(f"(Previous kernels longer than {cfg.max_kernel_chars} characters are shown as their "
                         "beginning and end, with the number of omitted lines marked.)")
        for t in shown:
            if t.parsed.kernel is None:
                body = "(no kernel was found in that response)"
            else:
                body = f"```python\n{show_kernel(t.parsed.kernel, cfg.previous_kernel, cfg.max_kernel_chars).rstrip()}\n```"
            parts.append(f"Your attempt on turn {t.turn + 1}:\n{body}\n\nFeedback on turn {t.turn + 1}:\n{t.feedback}")
        last = self.trajectory.transitions[-1]
        ask = ("Make it faster while keeping it correct." if last.eval_result.verdict == Verdict.CORRECT
               else "Fix the problems above.")
        parts.append(f"This is turn {self.turn + 1} of {self.config.max_turns}. {ask} Think first inside "
                     "<think>…</think>, then give the complete new module inside <KERNEL>…</KERNEL>.")
        return [system_message(), {"role": "user", "content": "\n\n".join(parts)}]

    def current_prompt(self) -> list[Message]:
        return self._prompt if self._prompt is not None else self.initial_prompt()

    def parse(self, response_text: str, truncated: bool = False) -> ParsedResponse:
        return parse_response(response_text, truncated, self.prefilled_think)

    def eval_request(self, parsed: ParsedResponse) -> Optional[EvalRequest]:
        return make_eval_request(self.problem, parsed.kernel, self.config) if parsed.kernel is not None else None

    def step(self, response_text: str, truncated: bool = False, eval_result: Optional[EvalResult] = None, *,
             parsed: Optional[ParsedResponse] = None, response_tokens: Optional[int] = None,
             prompt_tokens: int = 0) -> StepOutcome:
        """Score one turn and move on. eval_result may be None only when the response had no kernel."""
        if self.done:
            raise RuntimeError("step() after the episode ended")
        parsed = parsed or self.parse(response_text, truncated)
        if eval_result is None:
            if parsed.kernel is not None:
                raise ValueError("a response with a kernel needs its EvalResult; evaluate env.eval_request(parsed)")
            eval_result = no_kernel_result(self.problem, parsed)
        turn = self.turn
        prompt = self.current_prompt()
        weights = self.schedule.weights_at(self.train_step)
        score, breakdown = score_turn(parsed, eval_result, self.config.reward, weights, response_tokens, response_text)
        feedback = format_feedback(eval_result if parsed.kernel is not None else None, parsed)
        done = episode_done(eval_result, turn, self.config)
        self.trajectory.transitions.append(Transition(
            turn=turn, prompt=prompt, response=response_text, parsed=parsed, eval_result=eval_result, score=score,
            breakdown=breakdown, feedback=feedback, done=done,
            retrieved=list(self._retrieved or []) if (turn == 0 or self.config.rag.every_turn) else [],
            tokens_in=prompt_tokens, tokens_out=response_tokens or 0))
        self.done = done
        self._prompt = None if done else self._refinement_prompt()
        return StepOutcome(score, breakdown, feedback, done, self._prompt, parsed, eval_result, turn)

    def end_early(self) -> None:
        """End the episode after the turn just scored (its next prompt no longer fits the context window)."""
        self.done = True
        self._prompt = None
        if self.trajectory.transitions:
            self.trajectory.transitions[-1].done = True


class _OnceRetriever:
    """Asks the wrapped retriever once and hands every env of a group the same examples."""

    def __init__(self, inner: Retriever):
        self.inner = inner
        self._cache: dict[tuple[str, str, int], list[dict]] = {}

    def examples(self, problem: Problem, backend: str, k: int) -> list[dict]:
        key = (problem.id, backend, k)
        if key not in self._cache:
            self._cache[key] = self.inner.examples(problem, backend, k)
        return self._cache[key]


class KernelEnvGroupBuilder:
    """group_size episodes of one problem (one GRPO group) at one training step."""

    def __init__(self, problem: Problem, config: RunConfig, retriever: Optional[Retriever] = None,
                 train_step: int = 0, schedule: Optional[StageSchedule] = None, prefilled_think: bool = False):
        self.problem = problem
        self.config = config
        self.retriever = _OnceRetriever(retriever or NoRetriever())
        self.train_step = train_step
        self.schedule = schedule or StageSchedule.from_config(config)
        self.prefilled_think = prefilled_think

    def make_envs(self) -> list[KernelEnv]:
        return [KernelEnv(self.problem, self.config, self.retriever, self.train_step, self.schedule,
                          self.prefilled_think) for _ in range(self.config.dataset.group_size)]
