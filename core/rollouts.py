"""Rollouts: episodes of problems played by a backend against an evaluator (sample → parse → evaluate → feedback).
Training (core/train.py) and model evaluation (core/evaluation.py) both use it; it knows no updates or registry."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from core.backends.base import Prompt, SampleContext, SampledSequence, SamplingParams, TrainingBackend
from core.config import RunConfig
from core.env import KernelEnv, Retriever, messages_to_text
from core.problems import Problem
from core.reward import StageSchedule
from evaluator.api import EvalResult

WAIT_POLL_S = 0.25  # how often waiting threads look at the stop flag


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


@dataclass
class Rollout:
    group: int
    sample: int
    problem: Problem
    env: KernelEnv
    samples: list[TurnSample] = field(default_factory=list)


class SharedFirstTurn:
    """The group's first prompt is the same for every sample: sample it once with n = group size."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._result: Optional[list[SampledSequence]] = None

    def get(self, produce: Callable[[], list[SampledSequence]]) -> list[SampledSequence]:
        with self._lock:
            if self._result is None:
                self._result = produce()
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

    def check_stop(self) -> None:
        if self.stop_event.is_set():
            raise StopRequested(self.stop_reason())

    def sample(self, prompt: Prompt, n: int, step: int, group: int, turn: int, problem: Problem,
               samples: list[int], sample_key: Any) -> list[SampledSequence]:
        self.check_stop()
        params = SamplingParams(max_tokens=self.config.sampling.max_tokens,
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
            rollout.samples.append(TurnSample(prompt, sequence))
            if outcome.done:
                return rollout
            messages = outcome.next_prompt
            prompt = self.backend.render(messages)
            sequence = self.sample(prompt, 1, step, group, env.turn, problem, [sample_index], sample)[0]

    def submit_group(self, pool: Executor, step: int, group: int, problem: Problem, epoch: int,
                     samples: Sequence[int], group_size: Optional[int] = None) -> list[Future]:
        """Start `samples` of one group on the pool (the first turn is sampled once for the whole group)."""
        shared = SharedFirstTurn()
        return [pool.submit(self.rollout, step, group, sample, problem, epoch, shared, group_size)
                for sample in samples]


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
