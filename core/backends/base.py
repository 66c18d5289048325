"""The TrainingBackend protocol every policy backend implements, with Tinker semantics, and its plain data types.
Targets are pre-shifted (input_tokens[i] predicts target_tokens[i]); losses are summed over tokens, as in Tinker."""

from __future__ import annotations

import math
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence, runtime_checkable

from core.errors import KrlError

LOSS_KINDS = ("importance_sampling", "ppo", "cispo")
STOP_LENGTH = "length"  # hit max_tokens: the response is truncated
STOP_EOS = "stop"


@dataclass
class SamplingParams:
    max_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    seed: Optional[int] = None  # per-call seed: makes sampling independent of thread order


@dataclass
class Prompt:
    """A rendered chat prompt: the messages (for chat APIs) and their tokens (for token-level backends)."""

    messages: list[dict[str, str]]
    tokens: list[int] = field(default_factory=list)
    prefilled_think: bool = False  # the renderer already opened `<think>` for the model


@dataclass
class SampleContext:
    """Who asks for a sample: replay backends look responses up by it; others ignore it."""

    problem_id: str = ""
    turn: int = 0
    samples: list[int] = field(default_factory=list)  # sample index within the group, one per requested sequence


@dataclass
class SampledSequence:
    text: str
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # one per sampled token, under the sampling policy
    stop_reason: str = STOP_EOS

    @property
    def truncated(self) -> bool:
        return self.stop_reason == STOP_LENGTH


@dataclass
class Datum:
    """One training example, Tinker style: prompt + sampled tokens, shifted by one.

    input_tokens = full[:-1], target_tokens = full[1:]; logprobs and advantages are aligned with targets and are
    0 on prompt positions (so only sampled tokens carry loss); mask is 1 on sampled positions (the model's actions),
    which is what the sampler/trainer KL is measured over. The mask stays here: Tinker's losses do not take it."""

    input_tokens: list[int]
    target_tokens: list[int]
    logprobs: list[float]
    advantages: list[float]
    mask: list[float] = field(default_factory=list)

    @classmethod
    def from_sample(cls, prompt_tokens: Sequence[int], sampled_tokens: Sequence[int],
                    sampled_logprobs: Sequence[float], advantage: float) -> "Datum":
        full = list(prompt_tokens) + list(sampled_tokens)
        n_prompt = len(prompt_tokens)
        if len(sampled_logprobs) != len(sampled_tokens):
            raise ValueError("one sampling logprob per sampled token is required")
        if n_prompt < 1 or not sampled_tokens:
            raise ValueError("a datum needs at least one prompt token and one sampled token")
        # Position i predicts full[i + 1]; sampled tokens start at full[n_prompt], predicted from position n_prompt-1.
        pad = n_prompt - 1
        return cls(input_tokens=full[:-1], target_tokens=full[1:],
                   logprobs=[0.0] * pad + [float(x) for x in sampled_logprobs],
                   advantages=[0.0] * pad + [float(advantage)] * len(sampled_tokens),
                   mask=[0.0] * pad + [1.0] * len(sampled_tokens))

    def action_mask(self) -> list[float]:
        """1 where the target was sampled by the policy (falls back to nonzero advantages for hand-made datums)."""
        return self.mask or [1.0 if a != 0 else 0.0 for a in self.advantages]

    def __len__(self) -> int:
        return len(self.target_tokens)


@dataclass
class AdamParams:
    """Tinker's AdamW parameters (its defaults: betas 0.9/0.95, eps 1e-12, no weight decay)."""

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0  # 0: no clipping


@dataclass
class CheckpointPaths:
    state_path: str  # weights + optimizer (resume)
    sampler_path: Optional[str] = None  # weights only (sampling / export)


def check_loss_kind(loss_fn: str) -> None:
    if loss_fn not in LOSS_KINDS:
        raise KrlError(f"loss.kind must be one of {', '.join(LOSS_KINDS)}, not '{loss_fn}'.")


def token_loss(new_logprobs, old_logprobs, advantages, loss_fn: str, config: dict[str, float] | None = None):
    """Per-token policy-gradient loss (torch tensors), to be summed; same formulas as Tinker's built-ins.

    importance_sampling: -(p_new / p_old) * A.  ppo: -min(r * A, clip(r, low, high) * A).
    cispo: -stopgrad(clip(r, low, high)) * A * log p_new (the clipped ratio only weighs the gradient, never zeros it;
    Tinker's default is one-sided: low 0, high 4)."""
    import torch

    ratio = torch.exp(new_logprobs - old_logprobs)
    cfg = config or {}
    if loss_fn == "importance_sampling":
        return -(ratio * advantages)
    if loss_fn == "ppo":
        low = float(cfg.get("clip_low_threshold", 0.8))
        high = float(cfg.get("clip_high_threshold", 1.2))
        clipped = torch.clamp(ratio, low, high)
        return -torch.minimum(ratio * advantages, clipped * advantages)
    if loss_fn == "cispo":
        low = float(cfg.get("clip_low_threshold", 0.0))
        high = float(cfg.get("clip_high_threshold", 4.0))
        weight = torch.clamp(ratio, low, high).detach()
        return -(weight * advantages * new_logprobs)
    check_loss_kind(loss_fn)
    raise AssertionError("unreachable")


def finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class ChatRendering:
    """render/count_tokens for backends that hold a `tokenizer` with render_chat and encode. A template that ends
    in `<think>` pre-fills the thinking, which the parser must know."""

    def render(self, messages: list[dict[str, str]]) -> Prompt:
        text = self.tokenizer.render_chat(messages)
        return Prompt(messages=list(messages), tokens=self.tokenizer.encode(text),
                      prefilled_think=text.rstrip().endswith("<think>"))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))


@runtime_checkable
class TrainingBackend(Protocol):
    """A policy the loop can sample from and (when can_train) update.

    All methods are synchronous and thread-safe; the loop calls sample() from several threads at once."""

    name: str
    can_train: bool

    def render(self, messages: list[dict[str, str]]) -> Prompt:
        """Chat messages → prompt tokens (with the generation header; may pre-fill `<think>`)."""

    def count_tokens(self, text: str) -> int:
        """Tokens in a piece of text (metrics for sampling-only backends)."""

    def sample(self, prompt: Prompt, n: int, params: SamplingParams,
               context: SampleContext | None = None) -> list[SampledSequence]:
        """n independent continuations with per-token logprobs and stop reasons."""

    def forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                         loss_fn_config: dict[str, float] | None = None) -> dict[str, float]:
        """Accumulate gradients of the summed token loss; returns metrics (loss:sum, tokens, …)."""

    def optim_step(self, params: AdamParams) -> dict[str, float]:
        """Apply accumulated gradients and clear them; returns metrics (grad_norm where known)."""

    def save_state(self, name: str, directory: str, final: bool = False) -> CheckpointPaths:
        """Weights + optimizer under `name` (local backends write into `directory`). final: the run's last one,
        kept where a service would expire periodic checkpoints."""

    def load_state(self, state_path: str, with_optimizer: bool = True) -> None:
        """Restore what save_state wrote."""

    def close(self) -> None:
        ...

    # Optional, found with getattr: `context_window` (tokens the model holds, None when unknown),
    # `submit_forward_backward` / `submit_optim_step` (return futures) and `base_logprobs` (see the functions below).


def finished_future(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def submit_forward_backward(backend: TrainingBackend, datums: Sequence[Datum], loss_fn: str,
                            loss_fn_config: dict[str, float] | None = None) -> Future:
    """forward_backward as a future of its metrics. A service backend (tinker) answers at once, so the optimizer step
    can be queued right behind the pass and both land in the same clock cycle; others compute before returning."""
    submit = getattr(backend, "submit_forward_backward", None)
    if submit is not None:
        return submit(datums, loss_fn, loss_fn_config)
    return finished_future(backend.forward_backward(datums, loss_fn, loss_fn_config))


def submit_optim_step(backend: TrainingBackend, params: AdamParams) -> Future:
    """optim_step as a future of its metrics (see submit_forward_backward)."""
    submit = getattr(backend, "submit_optim_step", None)
    if submit is not None:
        return submit(params)
    return finished_future(backend.optim_step(params))


def base_logprobs(backend: TrainingBackend, datums: Sequence[Datum]) -> list[list[float]]:
    """Each datum's target logprobs under the base model (no adapter), for the KL penalty; 0 on prompt positions."""
    compute = getattr(backend, "base_logprobs", None)
    if compute is None:
        raise KrlError(f"the {backend.name} backend cannot score tokens under the base model, which "
                       "loss.kl_penalty_coef needs. Use backend=local or tinker, or set loss.kl_penalty_coef=0.")
    return compute(datums)


def context_window_tokens(backend: Any, configured: Optional[int] = None) -> Optional[int]:
    """The most tokens prompt + response may hold: the configured cap, else what the backend knows of its model
    (None: unknown, no clamping)."""
    known = getattr(backend, "context_window", None)
    if configured and known:
        return min(int(configured), int(known))
    return int(configured or known) if (configured or known) else None


class SamplingOnlyBackend:
    """Shared behaviour of backends that cannot train (openai, replay): training calls are refused clearly."""

    name = "sampling-only"
    can_train = False

    def forward_backward(self, datums, loss_fn="importance_sampling", loss_fn_config=None) -> dict[str, float]:
        raise KrlError(f"the {self.name} backend only samples; it cannot train. Use backend=local or tinker to train.")

    def optim_step(self, params: AdamParams) -> dict[str, float]:
        raise KrlError(f"the {self.name} backend only samples; it cannot train. Use backend=local or tinker to train.")

    def save_state(self, name: str, directory: str, final: bool = False) -> CheckpointPaths:
        # Nothing to save: the run's own checkpoint file (step, data order, RNG) is all a resume needs.
        return CheckpointPaths(state_path="", sampler_path=None)

    def load_state(self, state_path: str, with_optimizer: bool = True) -> None:
        return None

    def count_tokens(self, text: str) -> int:
        # Roughly 4 characters a token for English and code; only used for metrics.
        return max(1, len(text) // 4) if text else 0

    def render(self, messages: list[dict[str, str]]) -> Prompt:
        return Prompt(messages=list(messages))

    def close(self) -> None:
        return None


def open_backend(config: Any, state_path: str | None = None, sampler_path: str | None = None) -> TrainingBackend:
    """The backend a RunConfig names, restored from `state_path` (weights + optimizer) when given. sampler_path
    (tinker): sample from a checkpoint's saved sampler weights instead, opening no training client."""
    backend = config.backend
    if backend == "local":
        from core.backends.local import LocalBackend

        device = None if config.local.device == "auto" else config.local.device
        dtype = None if config.local.dtype == "auto" else config.local.dtype
        opened: Any = LocalBackend(config.model, lora_rank=config.local.lora_rank, device=device, seed=config.seed,
                                   dtype=dtype)
        if state_path:
            opened.load_state(state_path)
        return opened
    if backend == "tinker":
        from core.backends.tinker import TinkerBackend

        return TinkerBackend(config.tinker.base_model or config.model, lora_rank=config.tinker.lora_rank,
                             seed=config.seed, state_path=state_path or None, base_url=config.tinker.base_url,
                             checkpoint_ttl_s=config.tinker.checkpoint_ttl_s, session_name=config.name,
                             sampler_path=sampler_path or None)
    if backend == "openai":
        import os

        from core.backends.openai import OpenAIBackend

        return OpenAIBackend(config.model, base_url=config.openai.base_url,
                             api_key=os.environ.get(config.openai.api_key_env))
    if backend == "replay":
        from core.backends.replay import ReplayBackend

        path = config.replay_path()
        return ReplayBackend(str(path) if path else None)
    raise KrlError(f"unknown backend '{backend}': use tinker, local, openai or replay.")
