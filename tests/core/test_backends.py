"""Backends: tiny-random local sampling/training/checkpoints, Tinker-style datums and losses, replay recordings,
and the OpenAI-compatible client against a small HTTP server started here (the allowed fake edge)."""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from core.backends.base import AdamParams, Datum, Prompt, SampleContext, SamplingParams, token_loss
from core.errors import KrlError

MESSAGES = [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "Write ReLU."}]


@pytest.fixture(scope="module")
def tiny():
    from core.backends.local import LocalBackend

    return LocalBackend("tiny-random", lora_rank=4, device="cpu")


def test_tiny_tokenizer_round_trips_text_and_format_tokens():
    from core.backends.local import TinyTokenizer

    tok = TinyTokenizer()
    text = "<think>\nfuse it ü</think>\n<KERNEL>\n```python\nx = 1\n```\n</KERNEL>"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.special_ids["</think>"] in ids and tok.special_ids["\n```python\n"] in ids
    assert all(0 <= i < tok.vocab_size for i in ids)


def test_tiny_random_render_prefills_think(tiny):
    prompt = tiny.render(MESSAGES)
    assert prompt.prefilled_think
    assert tiny.tokenizer.decode(prompt.tokens).endswith("<|im_start|>assistant\n<think>\n")


def test_sampled_logprobs_match_a_forward_pass(tiny):
    prompt = tiny.render(MESSAGES)
    seqs = tiny.sample(prompt, 2, SamplingParams(max_tokens=12, seed=3))
    assert len(seqs) == 2
    for seq in seqs:
        assert len(seq.tokens) == len(seq.logprobs) >= 1
        assert seq.stop_reason in ("stop", "length")
        assert seq.truncated == (seq.stop_reason == "length")
        if seq.truncated:
            assert len(seq.tokens) == 12
        datum = Datum.from_sample(prompt.tokens, seq.tokens, seq.logprobs, 1.0)
        with torch.no_grad():
            forward = tiny.token_logprobs(datum)[len(prompt.tokens) - 1:]
        assert torch.allclose(forward, torch.tensor(seq.logprobs), atol=1e-4)


def test_sampling_is_reproducible_from_the_seed(tiny):
    prompt = tiny.render(MESSAGES)
    a = tiny.sample(prompt, 2, SamplingParams(max_tokens=10, seed=11))
    b = tiny.sample(prompt, 2, SamplingParams(max_tokens=10, seed=11))
    c = tiny.sample(prompt, 2, SamplingParams(max_tokens=10, seed=12))
    assert [s.tokens for s in a] == [s.tokens for s in b]
    assert [s.tokens for s in a] != [s.tokens for s in c]


def test_datum_is_shifted_and_masks_the_prompt():
    datum = Datum.from_sample([1, 2, 3], [7, 8], [-0.5, -0.25], 2.0)
    assert datum.input_tokens == [1, 2, 3, 7]
    assert datum.target_tokens == [2, 3, 7, 8]
    assert datum.logprobs == [0.0, 0.0, -0.5, -0.25]
    assert datum.advantages == [0.0, 0.0, 2.0, 2.0]
    with pytest.raises(ValueError):
        Datum.from_sample([1], [7, 8], [-0.5], 1.0)


def test_token_losses_follow_tinker_formulas():
    new = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    old = torch.log(torch.tensor([0.25, 0.5, 1.0]))  # ratios 2, 1, 0.5
    adv = torch.tensor([1.0, 1.0, -1.0])
    assert torch.allclose(token_loss(new, old, adv, "importance_sampling"), torch.tensor([-2.0, -1.0, 0.5]))
    ppo = token_loss(new, old, adv, "ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
    # min(r*A, clip(r)*A): ratio 2 with A>0 is clipped to 1.2; ratio 0.5 with A<0 keeps the pessimistic -0.5*-1.
    assert torch.allclose(ppo, torch.tensor([-1.2, -1.0, 0.8]))
    with pytest.raises(KrlError):
        token_loss(new, old, adv, "dpo")


def test_cispo_weighs_the_log_probability_by_the_clipped_ratio():
    new = torch.log(torch.tensor([0.5, 0.5, 0.5])).requires_grad_()
    old = torch.log(torch.tensor([0.05, 0.5, 1.0]))  # ratios 10, 1, 0.5
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss = token_loss(new, old, adv, "cispo", {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0})
    assert torch.allclose(loss, torch.tensor([-4.0, -1.0, 0.5]) * new.detach())
    loss.sum().backward()
    # The weight is a constant: the gradient is -w * A per token, never zeroed by the clip (unlike ppo).
    assert torch.allclose(new.grad, torch.tensor([-4.0, -1.0, 0.5]))


def test_local_forward_backward_reports_the_sampler_trainer_gap(tiny):
    from core.losses import sample_train_metrics

    prompt = tiny.render(MESSAGES)
    seq = tiny.sample(prompt, 1, SamplingParams(max_tokens=8, seed=5))[0]
    on_policy = Datum.from_sample(prompt.tokens, seq.tokens, seq.logprobs, 1.0)
    metrics = sample_train_metrics(tiny.forward_backward([on_policy]))
    assert metrics["optim/kl_sample_train_v1"] == pytest.approx(0.0, abs=1e-4)  # same weights, same numbers
    assert metrics["optim/entropy"] == pytest.approx(-sum(seq.logprobs) / len(seq.logprobs), rel=1e-5)
    stale = Datum.from_sample(prompt.tokens, seq.tokens, [lp - 0.3 for lp in seq.logprobs], 1.0)
    metrics = sample_train_metrics(tiny.forward_backward([stale]))
    assert metrics["optim/kl_sample_train_v1"] == pytest.approx(-0.3, abs=1e-3)
    assert metrics["optim/kl_sample_train_v2"] == pytest.approx(0.5 * 0.3 ** 2, abs=1e-3)
    tiny.optimizer.zero_grad(set_to_none=True)  # the module-scoped backend must stay untrained


def test_forward_backward_sums_over_tokens_and_optim_step_moves_weights():
    from core.backends.local import LocalBackend

    backend = LocalBackend("tiny-random", lora_rank=4, device="cpu")
    prompt = backend.render(MESSAGES)
    seq = backend.sample(prompt, 1, SamplingParams(max_tokens=8, seed=1))[0]
    before = backend.trainable_state()
    zero = Datum.from_sample(prompt.tokens, seq.tokens, seq.logprobs, 0.0)
    backend.forward_backward([zero])
    backend.optim_step(AdamParams(learning_rate=1e-2))
    unchanged = backend.trainable_state()
    assert all(torch.equal(before[k], unchanged[k]) for k in before), "a zero advantage must not move weights"

    datum = Datum.from_sample(prompt.tokens, seq.tokens, seq.logprobs, 1.5)
    out = backend.forward_backward([datum], "importance_sampling")
    # On-policy ratio is 1, so the summed IS loss is -A per sampled token.
    assert out["loss:sum"] == pytest.approx(-1.5 * len(seq.tokens), rel=1e-3)
    assert out["tokens"] == len(seq.tokens)
    step = backend.optim_step(AdamParams(learning_rate=1e-2, grad_clip_norm=1.0))
    assert step["grad_norm"] > 0
    after = backend.trainable_state()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_save_and_load_state_round_trip(tmp_path):
    from core.backends.local import LocalBackend

    backend = LocalBackend("tiny-random", lora_rank=4, device="cpu")
    prompt = backend.render(MESSAGES)
    seq = backend.sample(prompt, 1, SamplingParams(max_tokens=8, seed=2))[0]
    datum = Datum.from_sample(prompt.tokens, seq.tokens, seq.logprobs, 1.0)
    backend.forward_backward([datum])
    backend.optim_step(AdamParams(learning_rate=1e-2))
    paths = backend.save_state("ck", str(tmp_path))
    saved = backend.trainable_state()
    saved_opt = copy.deepcopy(backend.optimizer.state_dict())  # state_dict shares tensors that the next step mutates
    backend.forward_backward([datum])
    backend.optim_step(AdamParams(learning_rate=1e-2))
    assert any(not torch.equal(saved[k], v) for k, v in backend.trainable_state().items())

    fresh = LocalBackend("tiny-random", lora_rank=4, device="cpu")
    fresh.load_state(paths.state_path)
    restored = fresh.trainable_state()
    assert all(torch.equal(saved[k], restored[k]) for k in saved)
    restored_opt = fresh.optimizer.state_dict()["state"]
    for key, value in saved_opt["state"].items():
        assert torch.equal(value["exp_avg"], restored_opt[key]["exp_avg"])
    assert (tmp_path / "ck" / "sampler.pt").exists()
    with pytest.raises(KrlError):
        fresh.load_state(str(tmp_path / "missing.pt"))


# ---------------------------------------------------------------- replay

def _write_recordings(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_replay_returns_recordings_by_problem_sample_and_turn(tmp_path):
    from core.backends.replay import ReplayBackend

    path = _write_recordings(tmp_path / "rec.jsonl", [
        {"problem_id": "builtin/relu", "sample": 0, "turn": 0, "response": "a0"},
        {"problem_id": "builtin/relu", "sample": 0, "turn": 1, "response": "a1"},
        {"problem_id": "builtin/relu", "sample": 1, "turn": 0, "response": "b0", "truncated": True},
    ])
    backend = ReplayBackend(str(path))
    assert not backend.can_train
    prompt = Prompt(messages=MESSAGES)
    out = backend.sample(prompt, 3, SamplingParams(), SampleContext("builtin/relu", 0, [0, 1, 2]))
    assert [s.text for s in out] == ["a0", "b0", "a0"]  # sample 2 wraps to sample 0
    assert [s.truncated for s in out] == [False, True, False]
    assert backend.sample(prompt, 1, SamplingParams(), SampleContext("builtin/relu", 1, [0]))[0].text == "a1"
    # A shorter recording repeats its last turn.
    assert backend.sample(prompt, 1, SamplingParams(), SampleContext("builtin/relu", 2, [1]))[0].text == "b0"
    with pytest.raises(KrlError, match="nothing for problem"):
        backend.sample(prompt, 1, SamplingParams(), SampleContext("builtin/gelu", 0, [0]))
    with pytest.raises(KrlError, match="cannot train"):
        backend.optim_step(AdamParams())


def test_replay_rejects_bad_files(tmp_path):
    from core.backends.replay import ReplayBackend

    with pytest.raises(KrlError, match="do not exist"):
        ReplayBackend(str(tmp_path / "nope.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem_id": "x", "sample": 0, "turn": 0, "response": "ok"}\n{"problem_id": "x"}\n')
    with pytest.raises(KrlError, match="bad.jsonl:2"):
        ReplayBackend(str(bad))


def test_packaged_demo_recordings_cover_builtin_problems():
    from core.backends.replay import ReplayBackend
    from core.problems import load_problem_set

    backend = ReplayBackend(None)
    builtin = {p.id for p in load_problem_set("builtin")}
    recorded = set(backend.problem_ids())
    assert recorded == builtin, f"not recorded: {sorted(builtin - recorded)}; unknown: {sorted(recorded - builtin)}"
    for problem_id in recorded:
        samples = backend.recordings[problem_id]
        assert len(samples) >= 2
        for turns in samples.values():  # turns numbered 0, 1, ... without gaps
            assert sorted(turns) == list(range(len(turns)))
    # The demo shows episodes that fail, get feedback and fix it on a later turn.
    multi_turn = {problem_id for problem_id, samples in backend.recordings.items()
                  if any(len(turns) >= 2 for turns in samples.values())}
    assert len(multi_turn) >= 5


# ---------------------------------------------------------------- openai-compatible server

class _ChatServer(BaseHTTPRequestHandler):
    requests: list[dict] = []
    status = 200

    def log_message(self, *args):  # keep test output quiet
        pass

    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.headers.get("Authorization") == "Bearer bad-key":
            return self._reply(401, {"error": "bad key"})
        self._reply(200, {"data": [{"id": "served-model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body})
        reasoning_model = body["model"] == "reasoning-model"  # a served model behind a reasoning parser
        if reasoning_model and body.get("logprobs"):
            return self._reply(400, {"error": {"message": "logprobs is not supported with this model"}})
        if "max_tokens" in body:
            return self._reply(400, {"error": {"message": "Unsupported parameter: 'max_tokens'"}})
        message = ({"role": "assistant", "content": "\n<KERNEL>k</KERNEL>", "reasoning_content": "fuse it"}
                   if reasoning_model else {"role": "assistant", "content": "answer {i}"})
        choices = [{"index": i, "finish_reason": "length" if i == 1 else "stop",
                    "message": {**message, "content": message["content"].replace("{i}", str(i))},
                    "logprobs": None if reasoning_model else
                    {"content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.0}]}}
                   for i in range(body["n"])]
        self._reply(200, {"choices": list(reversed(choices)), "usage": {"completion_tokens": 2}})


@pytest.fixture
def chat_server():
    _ChatServer.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_backend_samples_chat_completions(chat_server):
    from core.backends.openai import OpenAIBackend

    backend = OpenAIBackend("served-model", base_url=chat_server, api_key="k")
    prompt = backend.render(MESSAGES)
    out = backend.sample(prompt, 2, SamplingParams(max_tokens=64, temperature=0.7, seed=5))
    assert [s.text for s in out] == ["answer 0", "answer 1"]
    assert [s.truncated for s in out] == [False, True]
    assert out[0].logprobs == [-0.5, -1.0]
    sent = _ChatServer.requests[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["messages"] == MESSAGES
    assert sent["body"]["n"] == 2 and sent["body"]["max_completion_tokens"] == 64 and sent["body"]["seed"] == 5
    assert sent["body"]["logprobs"] is True
    assert sent["body"]["model"] == "served-model"
    with pytest.raises(KrlError, match="cannot train"):
        backend.forward_backward([])
    backend.close()


def test_openai_backend_fails_clearly_before_work(chat_server):
    from core.backends.openai import OpenAIBackend

    with pytest.raises(KrlError, match="rejected the API key"):
        OpenAIBackend("served-model", base_url=chat_server, api_key="bad-key")
    with pytest.raises(KrlError, match="cannot reach"):
        OpenAIBackend("served-model", base_url="http://127.0.0.1:9/v1", api_key="k", timeout_s=2.0)


def test_kl_penalty_moves_advantages_towards_the_base_model():
    from core.losses import apply_kl_penalty

    near = Datum.from_sample([1, 2], [3, 4], [-1.0, -1.0], 1.0)  # sampled as the base model would
    far = Datum.from_sample([1, 2], [5, 6], [-0.2, -0.2], 1.0)  # far likelier under the policy than the base
    base = [[0.0, -1.0, -1.0], [0.0, -1.0, -1.0]]
    metrics = apply_kl_penalty([near, far], base, coef=0.5)
    assert metrics["kl_policy_base"] == pytest.approx(0.4)  # mean of d = 0, 0, 0.8, 0.8
    assert near.advantages == pytest.approx([0.0, 1.2, 1.2])  # 1 + 0.5 * (0.4 - 0)
    assert far.advantages == pytest.approx([0.0, 0.8, 0.8])  # 1 + 0.5 * (0.4 - 0.8); the prompt stays 0


def test_local_base_logprobs_ignore_the_adapter():
    from core.backends.local import LocalBackend

    backend = LocalBackend("tiny-random", lora_rank=4, device="cpu")
    prompt = backend.render(MESSAGES)
    seq = backend.sample(prompt, 1, SamplingParams(max_tokens=8, seed=4))[0]
    datum = Datum.from_sample(prompt.tokens, seq.tokens, seq.logprobs, 1.0)
    (before,) = backend.base_logprobs([datum])
    pad = len(prompt.tokens) - 1
    assert before[:pad] == [0.0] * pad
    assert before[pad:] == pytest.approx(seq.logprobs, abs=1e-4)  # a fresh adapter is the identity
    backend.forward_backward([datum])
    backend.optim_step(AdamParams(learning_rate=5e-2))
    (after,) = backend.base_logprobs([datum])
    assert after == pytest.approx(before, abs=1e-6)
    with torch.no_grad():
        trained = backend.token_logprobs(datum)[pad:].tolist()
    assert trained != pytest.approx(before[pad:], abs=1e-4)


def test_openai_backend_keeps_server_parsed_thinking_and_drops_refused_logprobs(chat_server, caplog):
    from core.backends.openai import OpenAIBackend
    from core.env import parse_response

    backend = OpenAIBackend("reasoning-model", base_url=chat_server, api_key="k")
    out = backend.sample(backend.render(MESSAGES), 1, SamplingParams(max_tokens=64))
    assert out[0].text == "<think>\nfuse it\n</think>\n<KERNEL>k</KERNEL>"
    assert parse_response(out[0].text).thought.strip() == "fuse it"
    assert out[0].logprobs == []
    assert [r["body"]["logprobs"] for r in _ChatServer.requests] == [True, False]
    assert "reasoning-model" in caplog.text and "rejects logprobs" in caplog.text
    backend.sample(backend.render(MESSAGES), 1, SamplingParams(max_tokens=64))
    assert _ChatServer.requests[-1]["body"]["logprobs"] is False  # asked once, remembered
