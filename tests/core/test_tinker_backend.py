"""The tinker backend against autospecs of the real Tinker SDK clients answering with the SDK's own types (the
service cannot be reached from CI): calls, datum shapes, seeds, logprobs, the KL metric, overlap, session, errors."""

from __future__ import annotations

import pytest
import tinker
from tinker import types

from core.backends.base import AdamParams, Datum, SamplingParams, submit_forward_backward, submit_optim_step
from core.errors import KrlError
from core.losses import sample_train_metrics
from tests.core.tinker_sdk_fakes import (BASE_LOGPROB, NO_KERNEL_RESPONSE, RELU_RESPONSE, SAMPLING_LOGPROB,
                                         TRAIN_SHIFT, ClockServer, FakeTinker, http_error)

MESSAGES = [{"role": "user", "content": "Write ReLU."}]


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for name in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD", "TINKER_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.tinker/credentials.json either


@pytest.fixture
def fake(monkeypatch, no_credentials):
    return FakeTinker().install(monkeypatch)


def open_backend(**kwargs):
    from core.backends.tinker import TinkerBackend

    return TinkerBackend("Qwen/Qwen3-8B", **kwargs)


# ---------------------------------------------------------------- session and credentials

def test_missing_credentials_fail_before_any_call(monkeypatch, fake):
    monkeypatch.delenv("TINKER_API_KEY")
    with pytest.raises(KrlError, match="no Tinker credential found"):
        open_backend()
    fake.service_class.assert_not_called()


def test_credentials_follow_the_sdk_rules(monkeypatch, tmp_path, no_credentials):
    from core.backends.tinker import check_tinker_credentials

    with pytest.raises(KrlError, match="TINKER_CREDENTIAL_CMD"):
        check_tinker_credentials()
    monkeypatch.setenv("TINKER_CREDENTIAL_CMD", "echo tml-from-a-command")  # counts without being run
    check_tinker_credentials()
    monkeypatch.delenv("TINKER_CREDENTIAL_CMD")
    store = tinker.lib.credentials.JsonCredentialStore(tmp_path / ".tinker" / "credentials.json")
    store.add_key("work", tinker.lib.credentials.ManualKey(key="tml-stored", name="work"))
    store.set_default("work")
    check_tinker_credentials()


def test_base_url_goes_to_the_client_not_the_environment(fake, monkeypatch):
    import os

    open_backend(base_url="https://tinker.example/services/x")
    fake.service_class.assert_called_once_with(base_url="https://tinker.example/services/x", display_name=None)
    assert "TINKER_BASE_URL" not in os.environ


@pytest.mark.parametrize("error, message", [
    (http_error(tinker.AuthenticationError, 401, "invalid api key"), "rejected the credential"),
    (http_error(tinker.BillingError, 402, "billing not set up"), "billing"),
    (http_error(tinker.BadRequestError, 400, "unknown base model"), "refused the request .*unknown base model"),
    (tinker.RequestFailedError("out of capacity", "req-1", types.RequestErrorCategory.Server), "Tinker failed"),
])
def test_sdk_errors_become_clear_krl_errors_and_close_the_session(fake, error, message):
    fake.create_error = error
    with pytest.raises(KrlError, match=message):
        open_backend()
    fake.service.close.assert_called_once_with("errored")


def test_offline_tokenizer_download_is_a_clear_error(fake):
    fake.training.get_tokenizer.side_effect = OSError(
        "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cache")
    with pytest.raises(KrlError, match="cannot load the tokenizer of Qwen/Qwen3-8B.*HF_HUB_OFFLINE"):
        open_backend()
    fake.service.close.assert_called_once_with("errored")


def test_close_finishes_the_session_once(fake):
    backend = open_backend()
    backend.close()
    backend.close()
    fake.service.close.assert_called_once_with("success")


def test_context_window_comes_from_the_server(fake):
    fake.context_length = 40960
    assert open_backend().context_window == 40960
    fake.model_name = "another/model"
    assert open_backend().context_window is None


# ---------------------------------------------------------------- calls and shapes

def test_calls_and_datum_shapes(fake):
    backend = open_backend(lora_rank=16, seed=7)
    fake.service.create_lora_training_client.assert_called_once_with(base_model="Qwen/Qwen3-8B", rank=16, seed=7)

    prompt = backend.render(MESSAGES)
    assert prompt.prefilled_think
    assert fake.tokenizer.decode(prompt.tokens).endswith("<|im_start|>assistant\n<think>\n")
    seqs = backend.sample(prompt, 2, SamplingParams(max_tokens=4096, temperature=0.9, seed=3))
    (n, sent), = fake.sent_sampling_params()
    assert n == 2 and sent.max_tokens == 4096 and sent.temperature == 0.9
    assert fake.samplers[0].sample.call_args.kwargs["prompt"].to_ints() == prompt.tokens
    assert fake.eos in sent.stop
    assert seqs[0].text == RELU_RESPONSE and seqs[0].stop_reason == "stop"
    assert seqs[0].logprobs == [SAMPLING_LOGPROB] * len(seqs[0].tokens)

    datum = Datum.from_sample(prompt.tokens, seqs[0].tokens, seqs[0].logprobs, 0.75)
    metrics = backend.forward_backward([datum], "ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
    fake.training.forward_backward.assert_called_once()
    data, loss_fn, config = fake.training.forward_backward.call_args.args
    assert loss_fn == "ppo" and config == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    assert data[0].model_input.to_ints() == prompt.tokens + seqs[0].tokens[:-1]
    assert data[0].loss_fn_inputs["target_tokens"].data == prompt.tokens[1:] + seqs[0].tokens
    advantages = data[0].loss_fn_inputs["advantages"].data
    assert advantages[: len(prompt.tokens) - 1] == [0.0] * (len(prompt.tokens) - 1)
    assert advantages[len(prompt.tokens) - 1:] == [0.75] * len(seqs[0].tokens)
    assert metrics["loss:sum"] == -1.25 and metrics["tokens"] == len(seqs[0].tokens)

    backend.optim_step(AdamParams(learning_rate=3e-5, eps=1e-8, grad_clip_norm=1.0))
    adam = fake.training.optim_step.call_args.args[0]
    assert isinstance(adam, types.AdamParams)
    assert adam.learning_rate == 3e-5 and adam.eps == 1e-8 and adam.grad_clip_norm == 1.0
    # The next sample publishes the updated weights first.
    assert backend.sample(prompt, 1, SamplingParams(max_tokens=8))[0].truncated
    assert fake.training.save_weights_and_get_sampling_client.call_count == 2 and len(fake.samplers) == 2

    paths = backend.save_state("step-000003", "/unused")
    assert paths.state_path == "tinker://run-1/weights/step-000003"
    assert paths.sampler_path == "tinker://run-1/sampler_weights/step-000003"
    backend.load_state(paths.state_path)
    fake.service.create_training_client_from_state_with_optimizer.assert_called_once_with(paths.state_path)


def test_resume_opens_the_training_client_from_state(fake):
    open_backend(state_path="tinker://run-1/weights/step-000002")
    fake.service.create_training_client_from_state_with_optimizer.assert_called_once_with(
        "tinker://run-1/weights/step-000002")
    fake.service.create_lora_training_client.assert_not_called()


def test_periodic_checkpoints_expire_and_final_ones_are_kept(fake):
    backend = open_backend(checkpoint_ttl_s=7 * 24 * 3600)
    backend.save_state("step-000009", "/unused")
    assert fake.training.save_state.call_args.kwargs["ttl_seconds"] == 7 * 24 * 3600
    assert fake.training.save_weights_for_sampler.call_args.kwargs["ttl_seconds"] == 7 * 24 * 3600
    backend.save_state("step-000019", "/unused", final=True)
    assert fake.training.save_state.call_args.kwargs["ttl_seconds"] is None


# ---------------------------------------------------------------- defects of issue 14

def test_a_group_is_never_sampled_with_one_seed(fake):
    """Seed + num_samples > 1 gives copies on Tinker (the fake does the same): a group must be unseeded."""
    backend = open_backend()
    prompt = backend.render(MESSAGES)
    group = backend.sample(prompt, 4, SamplingParams(max_tokens=4096, seed=11))
    assert len({tuple(s.tokens) for s in group}) > 1
    single = backend.sample(prompt, 1, SamplingParams(max_tokens=4096, seed=11))
    assert len(single) == 1
    (n_group, group_params), (n_single, single_params) = fake.sent_sampling_params()
    assert (n_group, group_params.seed) == (4, None)
    assert (n_single, single_params.seed) == (1, 11)  # a single sample keeps its seed


def test_missing_sampling_logprobs_fail_loudly(fake):
    fake.missing_logprobs = True
    backend = open_backend()
    with pytest.raises(KrlError, match="no logprobs for .* sampled tokens"):
        backend.sample(backend.render(MESSAGES), 2, SamplingParams(max_tokens=4096))


def test_forward_backward_measures_the_sampler_trainer_gap(fake):
    backend = open_backend()
    prompt = backend.render(MESSAGES)
    seqs = backend.sample(prompt, 2, SamplingParams(max_tokens=4096))
    datums = [Datum.from_sample(prompt.tokens, s.tokens, s.logprobs, a) for s, a in zip(seqs, (1.0, -1.0))]
    metrics = sample_train_metrics(backend.forward_backward(datums))
    # The fake trainer scores every token TRAIN_SHIFT below the sampler; prompt positions do not count.
    assert metrics["optim/kl_sample_train_v1"] == pytest.approx(TRAIN_SHIFT, rel=1e-5)
    assert metrics["optim/kl_sample_train_v2"] == pytest.approx(0.5 * TRAIN_SHIFT ** 2, rel=1e-4)
    assert metrics["optim/entropy"] == pytest.approx(-SAMPLING_LOGPROB)


def test_optim_step_is_queued_before_the_pass_returns(fake):
    from core.train import update_policy

    fake.clock = ClockServer(cycle_s=0.2, round_trip_s=0.01)
    backend = open_backend()
    prompt = backend.render(MESSAGES)
    seqs = backend.sample(prompt, 2, SamplingParams(max_tokens=4096))
    datums = [Datum.from_sample(prompt.tokens, s.tokens, s.logprobs, a) for s, a in zip(seqs, (1.0, -1.0))]
    metrics = update_policy(backend, datums, 2, "importance_sampling", None, AdamParams())
    # Both passes were still on the server when each optimizer step was sent: one clock cycle, not four.
    assert fake.pending_passes_at_optim == [1, 2]
    assert metrics["optim/kl_sample_train_v1"] == pytest.approx(TRAIN_SHIFT, rel=1e-5)
    assert metrics["optim/tokens"] == sum(len(s.tokens) for s in seqs)


def test_base_model_logprobs_score_only_the_sampled_tokens(fake):
    backend = open_backend()
    prompt = backend.render(MESSAGES)
    seq = backend.sample(prompt, 1, SamplingParams(max_tokens=4096))[0]
    datum = Datum.from_sample(prompt.tokens, seq.tokens, seq.logprobs, 1.0)
    (base,) = backend.base_logprobs([datum])
    fake.service.create_sampling_client.assert_called_once_with(base_model="Qwen/Qwen3-8B")
    call = fake.base_samplers[0].compute_logprobs.call_args
    assert call.args[0].to_ints() == prompt.tokens + seq.tokens
    assert call.kwargs["prompt_logprobs_last_n"] == len(seq.tokens)  # the prompt is served from the prefix cache
    pad = len(prompt.tokens) - 1
    assert base == [0.0] * pad + [BASE_LOGPROB] * len(seq.tokens)  # aligned with the datum's targets
    backend.base_logprobs([datum])
    fake.service.create_sampling_client.assert_called_once()  # one base client per run


def test_sdk_failure_inside_a_future_is_a_krl_error(fake):
    backend = open_backend()
    fake.training.optim_step.side_effect = None
    fake.training.optim_step.return_value = tinker.lib.public_interfaces.api_future.AwaitableConcurrentFuture(
        _failed(http_error(tinker.BillingError, 402, "no credits")))
    with pytest.raises(KrlError, match="billing"):
        submit_optim_step(backend, AdamParams()).result()


def _failed(error):
    from concurrent.futures import Future

    future: Future = Future()
    future.set_exception(error)
    return future


def test_local_submit_helpers_wrap_synchronous_backends():
    class Synchronous:
        def forward_backward(self, datums, loss_fn, loss_fn_config=None):
            return {"loss:sum": 2.0, "tokens": 3.0}

        def optim_step(self, params):
            return {"grad_norm": 1.5}

    assert submit_forward_backward(Synchronous(), [], "ppo").result() == {"loss:sum": 2.0, "tokens": 3.0}
    assert submit_optim_step(Synchronous(), AdamParams()).result() == {"grad_norm": 1.5}


# ---------------------------------------------------------------- the loop through the SDK

@pytest.mark.slow
def test_one_training_step_of_the_loop_through_the_sdk(fake, registry):
    from core.config import load_config
    from core.train import execute

    config = load_config("single-turn", [
        "backend=tinker", "model=Qwen/Qwen3-8B", "problems=builtin/relu", "max_steps=1", "dataset.batch_size=1",
        "dataset.group_size=2", "kernel.backend=torch", "eval.devices=cpu", "eval.timing_trials=3",
        "eval.warmup_trials=1", "eval.correctness_trials=2", "sampling.max_tokens=2048", "optim.lr=2e-5",
        "optim.warmup_steps=0", "gpus=0", "eval.run_timeout_s=600", "loss.kl_penalty_coef=0.5"])
    run = registry.create_run("tinker-loop", config=config.model_dump(mode="json"), backend="tinker")
    assert execute(registry, run["id"], install_signals=False) == 0
    row = registry.get_run(run["id"])
    assert row["status"] == "finished", row["error"]
    fake.service.create_lora_training_client.assert_called_once()
    (n, params), = fake.sent_sampling_params()
    assert n == 2 and params.seed is None  # the group: one unseeded call
    data, loss_fn, _ = fake.training.forward_backward.call_args.args
    assert loss_fn == "importance_sampling" and len(data) == 2  # one datum per sample's turn
    signs = sorted(d.loss_fn_inputs["advantages"].data[-1] > 0 for d in data)
    assert signs == [False, True]  # the correct kernel is pushed up, the empty answer down
    assert fake.training.optim_step.call_args.args[0].learning_rate == pytest.approx(2e-5)
    kl = registry.metric_series(run["id"], "optim/kl_sample_train_v1")["value"]
    assert kl == [pytest.approx(TRAIN_SHIFT, rel=1e-5)]
    # KL penalty: every token is SAMPLING - BASE apart, so the penalty (mean - own) is 0 and advantages stay ±A.
    kl_base = registry.metric_series(run["id"], "kl_policy_base")["value"]
    assert kl_base == [pytest.approx(SAMPLING_LOGPROB - BASE_LOGPROB, rel=1e-5)]
    checkpoint = registry.last_checkpoint(run["id"])
    assert checkpoint["state_path"] == "tinker://run-1/weights/step-000000"
    verdicts = sorted(t["verdict"] for traj in registry.trajectories(run["id"])
                      for t in registry.trajectory_turns(traj["id"]))
    assert verdicts == ["correct", "format_error"]
    fake.service.close.assert_called_once_with("success")
    assert NO_KERNEL_RESPONSE  # the fake's second answer is the empty one


# ---------------------------------------------------------------- the context window (multi-turn)

def _answerless_runner(fake, monkeypatch, context_length, max_tokens=4096):
    """Three-turn episodes whose answers hold no kernel (no evaluator needed), through the autospecced SDK."""
    import threading

    from core.config import load_config
    from core.problems import load_problem_set
    from core.rollouts import RolloutRunner, SharedFirstTurn

    fake.responses = [NO_KERNEL_RESPONSE]
    fake.context_length = context_length
    config = load_config("kevin", ["backend=tinker", "model=Qwen/Qwen3-8B", "problems=builtin/relu", "max_turns=3",
                                   "dataset.group_size=1", f"sampling.max_tokens={max_tokens}", "rag.index=null"])
    runner = RolloutRunner(open_backend(), None, config, None, threading.Event())
    problem = load_problem_set("builtin/relu")[0]
    return runner, lambda: runner.rollout(0, 0, 0, problem, 0, SharedFirstTurn(), 1)


def test_max_tokens_is_clamped_and_an_episode_ends_cleanly_when_its_prompt_outgrows_the_context(fake, monkeypatch):
    from core.rollouts import MIN_RESPONSE_TOKENS, context_metrics

    _, play = _answerless_runner(fake, monkeypatch, context_length=10**6)
    roomy = play()
    first, second = (len(t.prompt.tokens) for t in roomy.samples[:2])
    assert len(roomy.samples) == 3 and not roomy.context_full and second > first

    # The first prompt fits with room to spare; the second (history + feedback) leaves too little for an answer.
    window = first + MIN_RESPONSE_TOKENS + (second - first) // 2
    assert window - second < MIN_RESPONSE_TOKENS
    runner, play = _answerless_runner(fake, monkeypatch, context_length=window)
    assert runner.context_window == window
    tight = play()
    assert len(tight.samples) == 1 and tight.context_full and tight.env.done
    assert tight.env.trajectory.transitions[-1].done
    sent = fake.sent_sampling_params()[-1][1]
    assert sent.max_tokens == window - first  # clamped to what the window leaves after the prompt
    assert context_metrics([tight]) == {"env/all/context_full_frac": 1.0, "env/all/clamped_turn_frac": 1.0}
    assert context_metrics([roomy])["env/all/context_full_frac"] == 0.0


def test_a_first_prompt_that_does_not_fit_is_a_clear_error(fake, monkeypatch):
    _, play = _answerless_runner(fake, monkeypatch, context_length=10**6)
    first = len(play().samples[0].prompt.tokens)
    _, play = _answerless_runner(fake, monkeypatch, context_length=first + 10)
    with pytest.raises(KrlError, match="problem builtin/relu: its first prompt is .* sampling.context_window"):
        play()
