"""Backends by name: the table `open_backend` looks a RunConfig's `backend` up in. base.py knows no implementation;
each opener here imports its backend's module only when that backend is opened (their SDKs are heavy)."""

from __future__ import annotations

import os
from typing import Any, Callable

from core.backends.base import TrainingBackend
from core.errors import KrlError


def open_local(config: Any, state_path: str | None, sampler_path: str | None = None) -> TrainingBackend:
    from core.backends.local import LocalBackend

    device = None if config.local.device == "auto" else config.local.device
    dtype = None if config.local.dtype == "auto" else config.local.dtype
    opened: Any = LocalBackend(config.model, lora_rank=config.local.lora_rank, device=device, seed=config.seed,
                               dtype=dtype)
    if state_path:
        opened.load_state(state_path)
    return opened


def open_tinker(config: Any, state_path: str | None, sampler_path: str | None = None) -> TrainingBackend:
    from core.backends.tinker import TinkerBackend

    return TinkerBackend(config.tinker.base_model or config.model, lora_rank=config.tinker.lora_rank,
                         seed=config.seed, state_path=state_path or None, base_url=config.tinker.base_url,
                         checkpoint_ttl_s=config.tinker.checkpoint_ttl_s, session_name=config.name,
                         sampler_path=sampler_path or None)


def open_openai(config: Any, state_path: str | None, sampler_path: str | None = None) -> TrainingBackend:
    from core.backends.openai import OpenAIBackend

    return OpenAIBackend(config.model, base_url=config.openai.base_url,
                         api_key=os.environ.get(config.openai.api_key_env))


def open_replay(config: Any, state_path: str | None, sampler_path: str | None = None) -> TrainingBackend:
    from core.backends.replay import ReplayBackend

    path = config.replay_path()
    return ReplayBackend(str(path) if path else None)


BACKENDS: dict[str, Callable[[Any, str | None, str | None], TrainingBackend]] = {
    "tinker": open_tinker,
    "local": open_local,
    "openai": open_openai,
    "replay": open_replay,
}


def open_backend(config: Any, state_path: str | None = None, sampler_path: str | None = None) -> TrainingBackend:
    """The backend a RunConfig names, restored from `state_path` (weights + optimizer) when given. sampler_path
    (tinker): sample from a checkpoint's saved sampler weights instead, opening no training client."""
    opener = BACKENDS.get(config.backend)
    if opener is None:
        raise KrlError(f"unknown backend '{config.backend}': use {', '.join(BACKENDS)}.")
    return opener(config, state_path, sampler_path)
