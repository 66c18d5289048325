"""Rollouts: episodes of problems played by a backend against an evaluator (sample → parse → evaluate → feedback).
Training (core/train.py) and model evaluation (core/evaluation.py) both use it; it knows no updates or registry."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from core.backends.base import (Prompt, SampleContext, SampledSequence, SamplingParams, TrainingBackend,
                                context_window_tokens)
from core.config import RunConfig
from core.env import KernelEnv, Retriever, messages_to_text
from core.errors import KrlError
from core.problems import Problem
from core.reward import StageSchedule
from evaluator.api import EvalResult

WAIT_POLL_S = 0.25  # how often waiting threads look at the stop flag
# A later turn whose prompt leaves fewer response tokens than this (or than max_tokens, if smaller) ends the episode:
# a reply cut that short cannot hold a kernel, and scoring it would punish the policy for the history's length.
MIN_RESPONSE_TOKENS = 256


class StopRequested(Exception):
    """SIGTERM/SIGINT arrived: abandon the current step, checkpoint, exit cleanly."""


def derive_seed(*parts: Any) -> int:
    """A stable 31-bit seed from the parts (independent of thread order and Python's hash randomisation)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass
class TurnSample:
    prompt: Prompt
    sequence: SampledSequence
    max_tokens_clamped: bool = False  # the context window left less than sampling.max_tokens


@dataclass
class Rollout:
    group: int
    sample: int
    problem: Problem
    env: KernelEnv
    samples: list[TurnSample] = field(default_factory=list)
    context_full: bool = False  # ended early: the next turn's prompt no longer fitted the context window


class SharedFirstTurn:
    """The group's first prompt is the same for every sample: sample it once with n = group size. A failed request
    fails the whole group once: the other samples get its error instead of each sending the request again (a
    retry of the step re-sends it, once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._result: Optional[list[SampledSequence]] = None
        self._error: Optional[BaseException] = None

    def get(self, produce: Callable[[], list[SampledSequence]]) -> list[SampledSequence]:
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._result is None:
                try:
                    self._result = produce()
                except BaseException as exc:
                    self._error = exc
                    raise
            return self._result


class RolloutRunner:
    """Plays episodes with one backend and one evaluator. `config` is what episodes see (prompts, turns, sampling,
    seed); `stop_event` abandons every episode in flight with StopRequested(stop_reason())."""

    def __init__(self, backend: TrainingBackend, evaluator: Any, config: RunConfig, retriever: Optional[Retriever],
                 stop_event: threading.Event, stop_reason: Callable[[], str] = lambda: "stop requested",
                 schedule: Optional[StageSchedule] = None) -> None:
        self.backend = backend
        self.evaluator = evaluator
        self.config = config
        self.retriever = retriever
        self.stop_event = stop_event
        self.stop_reason = stop_reason
        self.schedule = schedule or StageSchedule.from_config(config)
        self.context_window = context_window_tokens(backend, config.sampling.context_window)

    def prompt_tokens(self, prompt: Prompt) -> int:
        return len(prompt.tokens) or self.backend.count_tokens(messages_to_text(prompt.messages))

    def response_budget(self, prompt: Prompt) -> int:
        """max_tokens for this prompt: the configured one, clamped to what the context window leaves."""
        configured = self.config.sampling.max_tokens
        if self.context_window is None:
            return configured
        return min(configured, self.context_window - self.prompt_tokens(prompt))

    def fits(self, prompt: Prompt) -> bool:
        return self.response_budget(prompt) >= min(MIN_RESPONSE_TOKENS, self.config.sampling.max_tokens)

    def check_stop(self) -> None:
        if self.stop_event.is_set():
            raise StopRequested(self.stop_reason())

    def sample(self, prompt: Prompt, n: int, step: int, group: int, turn: int, problem: Problem,
               samples: list[int], sample_key: Any) -> list[SampledSequence]:
        self.check_stop()
        params = SamplingParams(max_tokens=max(1, self.response_budget(prompt)),
                                temperature=self.config.sampling.temperature, top_p=self.config.sampling.top_p,
                                seed=derive_seed("sample", self.config.seed, step, group, sample_key, turn))
        context = SampleContext(problem_id=problem.id, turn=turn, samples=samples)
        return self.backend.sample(prompt, n, params, context)

    def evaluate(self, request) -> EvalResult:
        future: Future = self.evaluator.submit(request)
        while True:
            try:
                return future.result(timeout=WAIT_POLL_S)
            except TimeoutError:
                if self.stop_event.is_set():
                    future.cancel()
                    raise StopRequested(self.stop_reason()) from None

    def rollout(self, step: int, group: int, sample: int, problem: Problem, epoch: int,
                first_turn: SharedFirstTurn, group_size: Optional[int] = None) -> Rollout:
        """One episode: sample `sample` of a group of `group_size` (default the config's) on `problem`."""
        cfg = self.config
        group_size = group_size or cfg.dataset.group_size
        env = KernelEnv(problem, cfg, self.retriever, train_step=step, schedule=self.schedule)
        messages = env.initial_prompt()
        prompt = self.backend.render(messages)
        env.prefilled_think = prompt.prefilled_think
        if not self.fits(prompt):
            raise KrlError(f"problem {problem.id}: its first prompt is {self.prompt_tokens(prompt)} tokens, which "
                           f"leaves fewer than {MIN_RESPONSE_TOKENS} of the {self.context_window}-token context "
                           "window for the answer. Raise sampling.context_window (up to the model's), use a model "
                           "with a longer context, or leave the problem out.")
        # Replay/recorded samples rotate with the epoch, so a problem seen again gets other recordings.
        sample_index = epoch * group_size + sample
        sequences = first_turn.get(lambda: self.sample(
            prompt, group_size, step, group, 0, problem,
            [epoch * group_size + s for s in range(group_size)], "group"))
        sequence = sequences[sample]
        rollout = Rollout(group, sample, problem, env)
        while True:
            self.check_stop()
            parsed = env.parse(sequence.text, sequence.truncated)
            request = env.eval_request(parsed)
            result = self.evaluate(request) if request is not None else None
            tokens_out = len(sequence.tokens) or self.backend.count_tokens(sequence.text)
            tokens_in = len(prompt.tokens) or self.backend.count_tokens(messages_to_text(messages))
            outcome = env.step(sequence.text, sequence.truncated, result, parsed=parsed, response_tokens=tokens_out,
                               prompt_tokens=tokens_in)
            rollout.samples.append(TurnSample(prompt, sequence,
                                              self.response_budget(prompt) < self.config.sampling.max_tokens))
            if outcome.done:
                return rollout
            messages = outcome.next_prompt
            prompt = self.backend.render(messages)
            if not self.fits(prompt):
                env.end_early()
                rollout.context_full = True
                return rollout
            sequence = self.sample(prompt, 1, step, group, env.turn, problem, [sample_index], sample)[0]

    def submit_group(self, pool: Executor, step: int, group: int, problem: Problem, epoch: int,
                     samples: Sequence[int], group_size: Optional[int] = None) -> list[Future]:
        """Start `samples` of one group on the pool (the first turn is sampled once for the whole group)."""
        shared = SharedFirstTurn()
        return [pool.submit(self.rollout, step, group, sample, problem, epoch, shared, group_size)
                for sample in samples]


def context_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """env/all/context_full_frac: episodes ended because the next prompt no longer fitted the context window;
    env/all/clamped_turn_frac: turns whose max_tokens the window clamped."""
    turns = [t for r in rollouts for t in r.samples]
    if not rollouts:
        return {}
    return {"env/all/context_full_frac": sum(r.context_full for r in rollouts) / len(rollouts),
            "env/all/clamped_turn_frac": sum(t.max_tokens_clamped for t in turns) / len(turns) if turns else 0.0}


def wait_all(futures: Sequence[Future]) -> list[Any]:
    """Every future's result, waiting for all first so no thread still uses the backend when we stop or fail;
    the first real error wins over a StopRequested."""
    results, first_error = [], None
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            if first_error is None or (isinstance(first_error, StopRequested)
                                       and not isinstance(exc, StopRequested)):
                first_error = exc
    if first_error is not None:
        raise first_error
    return results
