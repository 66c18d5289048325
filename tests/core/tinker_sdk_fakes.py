"""The Tinker service, faked at the SDK's edge: autospecs of the real ServiceClient/TrainingClient/SamplingClient
answering with the SDK's own types and futures, so a wrong name, keyword or shape fails here as it would live."""

from __future__ import annotations

import string
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Optional
from unittest.mock import create_autospec

import httpx
import numpy as np
import tinker
from tinker import types
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

RELU_RESPONSE = """<think>
ReLU is one elementwise pass; clamp_min writes the output directly.
</think>
<KERNEL>
```python
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp_min(x, 0.0)
```
</KERNEL>"""
NO_KERNEL_RESPONSE = "<think>\nno idea</think>\nsorry"
SAMPLING_LOGPROB = -0.5
TRAIN_SHIFT = 0.1  # the fake trainer scores every token this much lower than the sampler: kl v1 = 0.1
BASE_LOGPROB = -0.7  # the base model's logprob of every token (compute_logprobs on a base-model client)


def make_tokenizer():
    """A real transformers tokenizer built in code (character level, Qwen-like chat template pre-filling <think>)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + sorted(set(string.printable)))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", unk_token="<unk>",
                                 pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"])
    hf.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")
    return hf


def sdk_future(value: Any = None, error: BaseException | None = None) -> AwaitableConcurrentFuture:
    """A finished future of the SDK's own class."""
    future: Future = Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return AwaitableConcurrentFuture(future)


def delayed_future(value: Any, delay_s: float) -> AwaitableConcurrentFuture:
    """A pending future of the SDK's own class that completes after delay_s (a request in flight)."""
    future: Future = Future()
    timer = threading.Timer(delay_s, future.set_result, args=(value,))
    timer.daemon = True
    timer.start()
    return AwaitableConcurrentFuture(future)


def http_error(cls: type, status: int, message: str) -> BaseException:
    response = httpx.Response(status, request=httpx.Request("POST", "https://tinker.example/api/v1/x"))
    return cls(message, response=response, body=None)


class ClockServer:
    """Tinker's training side works in clock cycles: a request waits for the next cycle (after one network trip),
    and every request queued by then runs in that cycle, in order. A pending future is what the SDK returns."""

    def __init__(self, cycle_s: float, round_trip_s: float) -> None:
        self.cycle_s = cycle_s
        self.round_trip_s = round_trip_s
        self._start = time.monotonic()
        self._lock = threading.Lock()

    def submit(self, produce: Callable[[], Any]) -> AwaitableConcurrentFuture:
        future: Future = Future()
        arrives = time.monotonic() + self.round_trip_s / 2
        cycles = int((arrives - self._start) // self.cycle_s) + 1
        done_at = self._start + cycles * self.cycle_s + self.round_trip_s / 2

        def complete() -> None:
            try:
                future.set_result(produce())
            except BaseException as exc:  # noqa: BLE001 - the future carries it
                future.set_exception(exc)

        timer = threading.Timer(max(0.0, done_at - time.monotonic()), complete)
        timer.daemon = True
        timer.start()
        return AwaitableConcurrentFuture(future)


@dataclass
class FakeTinker:
    """One fake Tinker service. `service_class` replaces tinker.ServiceClient; the three clients are autospecs.

    collapse_seeded_groups: a seed with num_samples > 1 returns n copies of one sequence (what users reported).
    missing_logprobs: sequences come back with logprobs None. clock: a ClockServer for training calls."""

    responses: list[str] = field(default_factory=lambda: [RELU_RESPONSE, NO_KERNEL_RESPONSE])
    context_length: Optional[int] = 32768
    collapse_seeded_groups: bool = True
    missing_logprobs: bool = False
    clock: Optional[ClockServer] = None
    sample_latency_s: float = 0.0  # each sample request is in flight this long (its future is pending)
    create_error: Optional[BaseException] = None
    model_name: str = "Qwen/Qwen3-8B"

    def __post_init__(self) -> None:
        self.tokenizer = make_tokenizer()
        self.eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.weight_versions = 0
        self.sample_calls = 0
        self.service = create_autospec(tinker.ServiceClient, instance=True)
        self.training = create_autospec(tinker.TrainingClient, instance=True)
        self.service_class = create_autospec(tinker.ServiceClient, return_value=self.service)
        self.rest = create_autospec(tinker.RestClient, instance=True)
        self.rest_class = create_autospec(tinker.RestClient, return_value=self.rest)
        self.failures: dict[str, dict[int, BaseException]] = {}  # call site -> {call number: its error}
        self.calls: dict[str, int] = {}  # call site -> calls so far
        self._count_lock = threading.Lock()
        self.samplers: list[Any] = []
        self.base_samplers: list[Any] = []
        self.pass_futures: list[AwaitableConcurrentFuture] = []
        self.opened_sampler_paths: list[str] = []
        self.pending_passes_at_optim: list[int] = []

        self.service.create_lora_training_client.side_effect = self._create
        self.service.create_training_client_from_state_with_optimizer.side_effect = self._create
        self.service.create_training_client_from_state.side_effect = self._create
        self.rest.get_server_capabilities.side_effect = lambda: sdk_future(types.GetServerCapabilitiesResponse(
            supported_models=[types.SupportedModel(model_name=self.model_name,
                                                   max_context_length=self.context_length)]))
        self.service.close.side_effect = lambda status, detail=None: sdk_future(None)
        self.service.create_sampling_client.side_effect = self._base_sampler
        self.training.get_tokenizer.side_effect = lambda: self.tokenizer
        self.training.save_weights_and_get_sampling_client.side_effect = self._new_sampler
        self.training.forward_backward.side_effect = self._forward_backward
        self.training.optim_step.side_effect = self._optim_step
        self.training.save_state.side_effect = lambda name, ttl_seconds=None, **kw: self._failing("save") or sdk_future(
            types.SaveWeightsResponse(path=f"tinker://run-1/weights/{name}"))
        self.training.save_weights_for_sampler.side_effect = lambda name, ttl_seconds=None, **kw: sdk_future(
            types.SaveWeightsForSamplerResponse(path=f"tinker://run-1/sampler_weights/{name}"))

    def install(self, monkeypatch: Any) -> "FakeTinker":
        """Replace the SDK's ServiceClient and RestClient with this fake's autospecs, with a test key set."""
        monkeypatch.setattr(tinker, "ServiceClient", self.service_class)
        monkeypatch.setattr(tinker, "RestClient", self.rest_class)
        monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
        return self

    def fail_calls(self, site: str, errors: dict[int, BaseException]) -> None:
        """Calls number N (0-based, counted per site over the fake's life) at `site` (sample, forward_backward,
        optim_step, save) fail with errors[N]: the request reaches the service and comes back failed."""
        self.failures.setdefault(site, {}).update(errors)

    def _failing(self, site: str) -> Optional[AwaitableConcurrentFuture]:
        with self._count_lock:
            index = self.calls.get(site, 0)
            self.calls[site] = index + 1
        error = self.failures.get(site, {}).pop(index, None)
        return sdk_future(error=error) if error is not None else None

    # ------------------------------------------------------------ answers

    def _create(self, *args: Any, **kwargs: Any) -> AwaitableConcurrentFuture:
        if self.create_error is not None:
            return sdk_future(error=self.create_error)
        return sdk_future(self.training)

    def _base_sampler(self, model_path: Any = None, base_model: Any = None, **kwargs: Any) -> AwaitableConcurrentFuture:
        if model_path is not None:  # a checkpoint's sampler weights (model evaluation)
            assert base_model is None and model_path.startswith("tinker://")
            self.opened_sampler_paths.append(model_path)
            return self._new_sampler()
        assert base_model == self.model_name
        sampler = create_autospec(tinker.SamplingClient, instance=True)

        def compute_logprobs(prompt: types.ModelInput, prompt_logprobs_last_n: Optional[int] = None):
            n = prompt.length
            scored = prompt_logprobs_last_n or n - 1
            return sdk_future([None] * (n - scored) + [BASE_LOGPROB] * scored)

        sampler.compute_logprobs.side_effect = compute_logprobs
        self.base_samplers.append(sampler)
        return sdk_future(sampler)

    def _new_sampler(self, *args: Any, **kwargs: Any) -> AwaitableConcurrentFuture:
        self.weight_versions += 1
        sampler = create_autospec(tinker.SamplingClient, instance=True)
        version = self.weight_versions
        sampler.sample.side_effect = lambda prompt, num_samples, sampling_params, **kw: self._failing(
            "sample") or self._sample(version, prompt, num_samples, sampling_params)
        sampler.get_tokenizer.side_effect = lambda: self.tokenizer

        def compute_logprobs(prompt: types.ModelInput, **kw: Any) -> AwaitableConcurrentFuture:
            # The updated policy scores every token TRAIN_SHIFT below the sampler (kl_pre_post_v1 = TRAIN_SHIFT).
            return sdk_future([None] + [SAMPLING_LOGPROB - TRAIN_SHIFT] * (prompt.length - 1))

        sampler.compute_logprobs.side_effect = compute_logprobs
        self.samplers.append(sampler)
        return sdk_future(sampler)

    def _sample(self, version: int, prompt: types.ModelInput, num_samples: int,
                params: types.SamplingParams) -> AwaitableConcurrentFuture:
        assert isinstance(prompt, types.ModelInput) and isinstance(params, types.SamplingParams)
        call = self.sample_calls
        self.sample_calls += 1
        sequences = []
        for i in range(num_samples):
            pick = 0 if (params.seed is not None and num_samples > 1 and self.collapse_seeded_groups) else call + i
            text = self.responses[pick % len(self.responses)]
            tokens = self.tokenizer.encode(text, add_special_tokens=False)
            truncated = params.max_tokens is not None and len(tokens) >= params.max_tokens
            tokens = tokens[: params.max_tokens] if truncated else tokens + [self.eos]
            logprobs = None if self.missing_logprobs else [SAMPLING_LOGPROB] * len(tokens)
            sequences.append(types.SampledSequence(stop_reason="length" if truncated else "stop",
                                                   sequence_id=f"v{version}-c{call}-s{i}", _tokens_list=tokens,
                                                   _logprobs_list=logprobs))
        response = types.SampleResponse(sequences=sequences)
        return delayed_future(response, self.sample_latency_s) if self.sample_latency_s else sdk_future(response)

    def _forward_backward(self, data: list, loss_fn: str, loss_fn_config: Any = None) -> AwaitableConcurrentFuture:
        failed = self._failing("forward_backward")
        if failed is not None:
            return failed
        for datum in data:
            assert isinstance(datum, types.Datum)
            assert set(datum.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
            n = datum.model_input.length
            for key, tensor in datum.loss_fn_inputs.items():
                assert list(tensor.shape) == [n], key
            assert datum.loss_fn_inputs["target_tokens"].dtype == "int64"

        def produce() -> types.ForwardBackwardOutput:
            outputs = []
            for datum in data:
                sampled = np.asarray(datum.loss_fn_inputs["logprobs"].tolist(), dtype=np.float32)
                outputs.append({"logprobs": types.TensorData.from_numpy(sampled - np.float32(TRAIN_SHIFT))})
            return types.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs,
                                               metrics={"loss:sum": -1.25, "clipped_frac:mean": 0.25})

        future = self.clock.submit(produce) if self.clock else sdk_future(produce())
        self.pass_futures.append(future)
        return future

    def _optim_step(self, optim_params: Any = None, **kwargs: Any) -> AwaitableConcurrentFuture:
        assert isinstance(optim_params, types.AdamParams)
        failed = self._failing("optim_step")
        if failed is not None:
            return failed
        # How many forward_backward results were still outstanding when the step was queued (0: serialised).
        self.pending_passes_at_optim.append(sum(1 for f in self.pass_futures if not f.future().done()))

        def produce() -> types.OptimStepResponse:
            return types.OptimStepResponse(metrics={"grad_norm:mean": 0.5, "update_norm:mean": 0.01})

        return self.clock.submit(produce) if self.clock else sdk_future(produce())

    # ------------------------------------------------------------ what was sent

    def sent_sampling_params(self) -> list[tuple[int, types.SamplingParams]]:
        """(num_samples, SamplingParams) of every sample call, in order."""
        out = []
        for sampler in self.samplers:
            for call in sampler.sample.call_args_list:
                out.append((call.kwargs["num_samples"], call.kwargs["sampling_params"]))
        return out
