"""The `tinker` backend: LoRA training and sampling on the Tinker service through its SDK (0.38: calls return futures).
A missing or rejected TINKER_API_KEY fails with a KrlError before any work starts."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Sequence

from core.backends.base import (STOP_EOS, STOP_LENGTH, AdamParams, ChatRendering, CheckpointPaths, Datum, Prompt,
                                SampleContext, SampledSequence, SamplingParams, check_loss_kind)
from core.backends.local import _HFTokenizer
from core.errors import KrlError

API_KEY_ENV = "TINKER_API_KEY"


def check_api_key_present() -> None:
    if os.environ.get(API_KEY_ENV):
        return
    stored = Path(os.environ.get("TINKER_CREDENTIALS_PATH", "~/.tinker/credentials.json")).expanduser()
    if stored.is_file():
        return
    raise KrlError(f"{API_KEY_ENV} is not set, so the tinker backend cannot start. Export your key "
                   f"(`export {API_KEY_ENV}=...`, from the Tinker console) or run `tinker auth login`; "
                   "for a run without Tinker use backend=local.")


class TinkerBackend(ChatRendering):
    """One Tinker LoRA training client plus a sampling client refreshed after each optimizer step."""

    name = "tinker"
    can_train = True

    def __init__(self, model: str, lora_rank: int = 32, seed: int | None = None, state_path: str | None = None,
                 service_client: Any = None) -> None:
        import tinker

        self._tinker = tinker
        self.model_name = model
        if service_client is None:
            check_api_key_present()
            service_client = tinker.ServiceClient()
        self.service = service_client
        self._lock = threading.RLock()
        if state_path:
            self.training = self._call(lambda: self.service.create_training_client_from_state_with_optimizer(
                state_path).result(), "loading checkpoint")
        else:
            self.training = self._call(lambda: self.service.create_lora_training_client(
                base_model=model, rank=lora_rank, seed=seed).result(), "creating the LoRA training client")
        self.tokenizer = _HFTokenizer(self.training.get_tokenizer())
        self._stop_ids = sorted(self.tokenizer.stop_ids())
        self._sampler: Any = None
        self._sampler_stale = True

    def _call(self, fn, what: str):
        tinker = self._tinker
        try:
            return fn()
        except (tinker.AuthenticationError, tinker.PermissionDeniedError) as exc:
            raise KrlError(f"Tinker rejected the API key while {what} ({exc.__class__.__name__}). Check "
                           f"{API_KEY_ENV} (a current key from the Tinker console).") from None
        except tinker.APIConnectionError as exc:
            raise KrlError(f"cannot reach the Tinker service while {what}: {exc}. Check the network or "
                           "TINKER_BASE_URL.") from None

    # ------------------------------------------------------------ prompts and sampling

    def _sampling_client(self):
        with self._lock:
            if self._sampler_stale or self._sampler is None:
                self._sampler = self._call(lambda: self.training.save_weights_and_get_sampling_client().result(),
                                           "publishing weights for sampling")
                self._sampler_stale = False
            return self._sampler

    def sample(self, prompt: Prompt, n: int, params: SamplingParams,
               context: SampleContext | None = None) -> list[SampledSequence]:
        types = self._tinker.types
        sampler = self._sampling_client()
        sampling_params = types.SamplingParams(max_tokens=params.max_tokens, temperature=params.temperature,
                                               top_p=params.top_p, seed=params.seed, stop=self._stop_ids)
        response = self._call(lambda: sampler.sample(prompt=types.ModelInput.from_ints(list(prompt.tokens)),
                                                     num_samples=n, sampling_params=sampling_params).result(),
                              "sampling")
        results = []
        for seq in response.sequences:
            tokens = list(seq.tokens)
            stopped = seq.stop_reason != "length"
            text_tokens = tokens[:-1] if stopped and tokens and tokens[-1] in self._stop_ids else tokens
            results.append(SampledSequence(text=self.tokenizer.decode(text_tokens), tokens=tokens,
                                           logprobs=list(seq.logprobs or [0.0] * len(tokens)),
                                           stop_reason=STOP_EOS if stopped else STOP_LENGTH))
        return results

    # ------------------------------------------------------------ training

    def to_tinker_datum(self, datum: Datum):
        types = self._tinker.types
        return types.Datum(model_input=types.ModelInput.from_ints(list(datum.input_tokens)),
                           loss_fn_inputs={"target_tokens": list(datum.target_tokens),
                                           "logprobs": list(datum.logprobs),
                                           "advantages": list(datum.advantages)})

    def forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                         loss_fn_config: dict[str, float] | None = None) -> dict[str, float]:
        check_loss_kind(loss_fn)
        data = [self.to_tinker_datum(d) for d in datums]
        output = self._call(lambda: self.training.forward_backward(data, loss_fn, loss_fn_config).result(),
                            "running forward_backward")
        metrics = {k: float(v) for k, v in (getattr(output, "metrics", None) or {}).items()}
        metrics["tokens"] = float(sum(sum(1 for a in d.advantages if a != 0) for d in datums))
        return metrics

    def optim_step(self, params: AdamParams) -> dict[str, float]:
        types = self._tinker.types
        adam = types.AdamParams(learning_rate=params.learning_rate, beta1=params.beta1, beta2=params.beta2,
                                eps=params.eps, weight_decay=params.weight_decay, grad_clip_norm=params.grad_clip_norm)
        response = self._call(lambda: self.training.optim_step(adam).result(), "running optim_step")
        with self._lock:
            self._sampler_stale = True  # the next sample() publishes the new weights first
        return {k: float(v) for k, v in (getattr(response, "metrics", None) or {}).items()}

    # ------------------------------------------------------------ checkpoints

    def save_state(self, name: str, directory: str) -> CheckpointPaths:
        state = self._call(lambda: self.training.save_state(name).result(), "saving state")
        sampler = self._call(lambda: self.training.save_weights_for_sampler(name).result(), "saving sampler weights")
        return CheckpointPaths(state_path=state.path, sampler_path=getattr(sampler, "path", None))

    def load_state(self, state_path: str, with_optimizer: bool = True) -> None:
        with self._lock:
            if with_optimizer:
                self.training = self._call(lambda: self.service.create_training_client_from_state_with_optimizer(
                    state_path).result(), "loading checkpoint")
            else:
                self.training = self._call(lambda: self.service.create_training_client_from_state(
                    state_path).result(), "loading checkpoint")
            self._sampler_stale = True

    def close(self) -> None:
        return None
