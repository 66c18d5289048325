"""The tinker backend against a fake of the Tinker SDK's client objects (the service cannot be reached from CI):
exact calls, real `tinker.types` datums and their shapes, key errors before work, and one training step of the loop."""

from __future__ import annotations

import string
from concurrent.futures import Future

import httpx
import pytest
import tinker
from tinker import types

from core.backends.base import AdamParams, Datum, SamplingParams
from core.errors import KrlError

MESSAGES = [{"role": "user", "content": "Write ReLU."}]
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


def done(value):
    future: Future = Future()
    future.set_result(value)
    return future


class FakeSamplingClient:
    def __init__(self, owner, version):
        self.owner = owner
        self.version = version

    def sample(self, prompt, num_samples, sampling_params, **kwargs):
        assert isinstance(prompt, types.ModelInput) and isinstance(sampling_params, types.SamplingParams)
        self.owner.calls.append(("sample", {"prompt": prompt.to_ints(), "num_samples": num_samples,
                                            "params": sampling_params, "version": self.version}))
        eos = self.owner.tokenizer.convert_tokens_to_ids("<|im_end|>")
        sequences = []
        for i in range(num_samples):
            text = self.owner.responses[i % len(self.owner.responses)]
            tokens = self.owner.tokenizer.encode(text, add_special_tokens=False)
            truncated = len(tokens) >= sampling_params.max_tokens
            tokens = tokens[: sampling_params.max_tokens] if truncated else tokens + [eos]
            sequences.append(types.SampledSequence(stop_reason="length" if truncated else "stop", sequence_id=f"s{i}",
                                                   _tokens_list=tokens, _logprobs_list=[-0.5] * len(tokens)))
        return done(types.SampleResponse(sequences=sequences))


class FakeTrainingClient:
    def __init__(self, owner, origin):
        self.owner = owner
        self.origin = origin
        self.versions = 0

    def get_tokenizer(self):
        return self.owner.tokenizer

    def save_weights_and_get_sampling_client(self, name=None, **kwargs):
        self.versions += 1
        self.owner.calls.append(("save_weights_and_get_sampling_client", self.versions))
        return done(FakeSamplingClient(self.owner, self.versions))

    def forward_backward(self, data, loss_fn, loss_fn_config=None):
        for datum in data:
            assert isinstance(datum, types.Datum)
            assert set(datum.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
            n = datum.model_input.length
            for key, tensor in datum.loss_fn_inputs.items():
                assert list(tensor.shape) == [n], key
            assert datum.loss_fn_inputs["target_tokens"].dtype == "int64"
        self.owner.calls.append(("forward_backward", {"data": data, "loss_fn": loss_fn, "config": loss_fn_config}))
        return done(types.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[],
                                                metrics={"loss:sum": -1.25}))

    def optim_step(self, adam_params):
        assert isinstance(adam_params, types.AdamParams)
        self.owner.calls.append(("optim_step", adam_params))
        return done(types.OptimStepResponse(metrics=None))

    def save_state(self, name):
        self.owner.calls.append(("save_state", name))
        return done(types.SaveWeightsResponse(path=f"tinker://run-1/weights/{name}"))

    def save_weights_for_sampler(self, name):
        self.owner.calls.append(("save_weights_for_sampler", name))
        return done(types.SaveWeightsForSamplerResponse(path=f"tinker://run-1/sampler_weights/{name}"))


class FakeServiceClient:
    """Stands in for tinker.ServiceClient; records every call in order."""

    instances: list["FakeServiceClient"] = []
    reject_key = False
    responses = [RELU_RESPONSE, "<think>\nno idea</think>\nsorry"]

    def __init__(self, *args, **kwargs):
        self.calls: list[tuple[str, object]] = []
        self.tokenizer = make_tokenizer()
        type(self).instances.append(self)

    def _refuse(self):
        response = httpx.Response(401, request=httpx.Request("POST", "https://tinker.example/api/v1/create_model"))
        raise tinker.AuthenticationError("invalid api key", response=response, body=None)

    def create_lora_training_client(self, base_model, rank=32, seed=None, **kwargs):
        self.calls.append(("create_lora_training_client", {"base_model": base_model, "rank": rank, "seed": seed}))
        if self.reject_key:
            self._refuse()
        return done(FakeTrainingClient(self, "new"))

    def create_training_client_from_state_with_optimizer(self, path, **kwargs):
        self.calls.append(("create_training_client_from_state_with_optimizer", path))
        return done(FakeTrainingClient(self, path))


@pytest.fixture
def fake_sdk(monkeypatch):
    FakeServiceClient.instances = []
    FakeServiceClient.reject_key = False
    monkeypatch.setattr(tinker, "ServiceClient", FakeServiceClient)
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    return FakeServiceClient


def test_missing_api_key_fails_before_any_call(monkeypatch, tmp_path, fake_sdk):
    from core.backends.tinker import TinkerBackend

    monkeypatch.delenv("TINKER_API_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))  # no stored credentials either
    with pytest.raises(KrlError, match="TINKER_API_KEY is not set"):
        TinkerBackend("Qwen/Qwen3-8B")
    assert fake_sdk.instances == []


def test_rejected_api_key_is_a_clear_error(fake_sdk):
    from core.backends.tinker import TinkerBackend

    fake_sdk.reject_key = True
    with pytest.raises(KrlError, match="rejected the API key"):
        TinkerBackend("Qwen/Qwen3-8B")


def test_calls_and_datum_shapes(fake_sdk):
    from core.backends.tinker import TinkerBackend

    backend = TinkerBackend("Qwen/Qwen3-8B", lora_rank=16, seed=7)
    service = fake_sdk.instances[-1]
    assert service.calls[0] == ("create_lora_training_client", {"base_model": "Qwen/Qwen3-8B", "rank": 16, "seed": 7})

    prompt = backend.render(MESSAGES)
    assert prompt.prefilled_think
    assert service.tokenizer.decode(prompt.tokens).endswith("<|im_start|>assistant\n<think>\n")
    seqs = backend.sample(prompt, 2, SamplingParams(max_tokens=4096, temperature=0.9, seed=3))
    name, sent = service.calls[-1]
    assert name == "sample" and sent["num_samples"] == 2 and sent["prompt"] == prompt.tokens
    assert sent["params"].max_tokens == 4096 and sent["params"].temperature == 0.9 and sent["params"].seed == 3
    assert service.tokenizer.convert_tokens_to_ids("<|im_end|>") in sent["params"].stop
    assert seqs[0].text == RELU_RESPONSE and seqs[0].stop_reason == "stop"
    assert len(seqs[0].logprobs) == len(seqs[0].tokens)

    datum = Datum.from_sample(prompt.tokens, seqs[0].tokens, seqs[0].logprobs, 0.75)
    metrics = backend.forward_backward([datum], "ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
    name, sent = service.calls[-1]
    assert name == "forward_backward" and sent["loss_fn"] == "ppo"
    assert sent["config"] == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    tinker_datum = sent["data"][0]
    assert tinker_datum.model_input.to_ints() == prompt.tokens + seqs[0].tokens[:-1]
    assert tinker_datum.loss_fn_inputs["target_tokens"].data == prompt.tokens[1:] + seqs[0].tokens
    advantages = tinker_datum.loss_fn_inputs["advantages"].data
    assert advantages[: len(prompt.tokens) - 1] == [0.0] * (len(prompt.tokens) - 1)
    assert advantages[len(prompt.tokens) - 1:] == [0.75] * len(seqs[0].tokens)
    assert metrics["loss:sum"] == -1.25

    backend.optim_step(AdamParams(learning_rate=3e-5, eps=1e-8, grad_clip_norm=1.0))
    name, adam = service.calls[-1]
    assert name == "optim_step" and adam.learning_rate == 3e-5 and adam.eps == 1e-8 and adam.grad_clip_norm == 1.0
    # The next sample publishes the updated weights first.
    backend.sample(prompt, 1, SamplingParams(max_tokens=8))
    names = [c[0] for c in service.calls]
    assert names[-2:] == ["save_weights_and_get_sampling_client", "sample"]
    assert service.calls[-1][1]["version"] == 2
    assert seqs and backend.sample(prompt, 1, SamplingParams(max_tokens=8))[0].truncated

    paths = backend.save_state("step-000003", "/unused")
    assert paths.state_path == "tinker://run-1/weights/step-000003"
    assert paths.sampler_path == "tinker://run-1/sampler_weights/step-000003"
    backend.load_state(paths.state_path)
    assert service.calls[-1] == ("create_training_client_from_state_with_optimizer", paths.state_path)


def test_resume_opens_the_training_client_from_state(fake_sdk):
    from core.backends.tinker import TinkerBackend

    TinkerBackend("Qwen/Qwen3-8B", state_path="tinker://run-1/weights/step-000002")
    calls = [c[0] for c in fake_sdk.instances[-1].calls]
    assert calls == ["create_training_client_from_state_with_optimizer"]


@pytest.mark.slow
def test_one_training_step_of_the_loop_through_the_sdk(fake_sdk, registry):
    from core.config import load_config
    from core.train import execute

    config = load_config("single-turn", [
        "backend=tinker", "model=Qwen/Qwen3-8B", "problems=builtin/relu", "max_steps=1", "dataset.batch_size=1",
        "dataset.group_size=2", "kernel.backend=torch", "eval.devices=cpu", "eval.timing_trials=3",
        "eval.warmup_trials=1", "eval.correctness_trials=2", "sampling.max_tokens=2048", "optim.lr=2e-5",
        "optim.warmup_steps=0", "gpus=0", "eval.run_timeout_s=600"])
    run = registry.create_run("tinker-loop", config=config.model_dump(mode="json"), backend="tinker")
    assert execute(registry, run["id"], install_signals=False) == 0
    row = registry.get_run(run["id"])
    assert row["status"] == "finished", row["error"]
    service = fake_sdk.instances[-1]
    names = [c[0] for c in service.calls]
    assert names[0] == "create_lora_training_client"
    order = [names.index(n) for n in ("sample", "forward_backward", "optim_step", "save_state")]
    assert order == sorted(order)
    fb = next(c[1] for c in service.calls if c[0] == "forward_backward")
    assert fb["loss_fn"] == "importance_sampling" and len(fb["data"]) == 2  # one datum per sample's turn
    signs = sorted(d.loss_fn_inputs["advantages"].data[-1] > 0 for d in fb["data"])
    assert signs == [False, True]  # the correct kernel is pushed up, the empty answer down
    adam = next(c[1] for c in service.calls if c[0] == "optim_step")
    assert adam.learning_rate == pytest.approx(2e-5)
    checkpoint = registry.last_checkpoint(run["id"])
    assert checkpoint["state_path"] == "tinker://run-1/weights/step-000000"
    verdicts = sorted(t["verdict"] for traj in registry.trajectories(run["id"])
                      for t in registry.trajectory_turns(traj["id"]))
    assert verdicts == ["correct", "format_error"]
    # eval.size=gpu (from the preset) is not used on a CPU evaluator; the run says so.
    assert any("problems keep their own sizes" in e["message"] for e in registry.events(run["id"]))
