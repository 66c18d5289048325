"""Training through service failures and with off-policy overlap, end to end: core.train.execute against autospecs
of the real Tinker SDK clients (tests/core/tinker_sdk_fakes.py), failures injected at each call site."""

from __future__ import annotations

import json

import httpx
import pytest

tinker = pytest.importorskip("tinker")

from tinker.lib.retryable_exception import RetryableException  # noqa: E402

from core.backends.tinker import failure_kind  # noqa: E402
from core.config import load_config  # noqa: E402
from core.registry import Registry  # noqa: E402
from core.rollouts import SharedFirstTurn  # noqa: E402
from core.train import batch_for_step, execute  # noqa: E402
from tests.core.tinker_sdk_fakes import NO_KERNEL_RESPONSE, SAMPLING_LOGPROB, FakeTinker, http_error  # noqa: E402

NO_THINK_RESPONSE = "sorry, no kernel"  # a different answer, still nothing to evaluate: steps stay fast
STEPS = 4


def server_error():
    return http_error(tinker.InternalServerError, 500, "the service failed")


def tiny(*extra: str):
    """Single-turn steps of one group of 2 whose answers hold no kernel (the evaluator judges nothing); the KL
    penalty keeps equal-reward groups in training, so every step calls forward_backward and optim_step."""
    return load_config("single-turn", [
        "backend=tinker", "model=Qwen/Qwen3-8B", "problems=builtin", "dataset.batch_size=1", "dataset.group_size=2",
        f"max_steps={STEPS}", "kernel.backend=torch", "eval.devices=cpu", "eval.cpu_workers=1", "gpus=0",
        "sampling.max_tokens=512", "loss.kl_penalty_coef=0.5", "loss.remove_constant_reward_groups=false",
        "recovery.backoff_s=0", "rag.index=null", *extra])


@pytest.fixture
def fake(monkeypatch, tmp_path):
    for name in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD", "TINKER_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    service = FakeTinker(responses=[NO_KERNEL_RESPONSE, NO_THINK_RESPONSE])
    return service.install(monkeypatch)


def start(registry: Registry, name: str, *extra: str) -> int:
    config = tiny(*extra).model_dump(mode="json")
    config["name"] = name
    return registry.create_run(name, config=config, backend="tinker")["id"]


def jsonl(registry: Registry, name: str) -> list[dict]:
    return [json.loads(line) for line in (registry.run_dir(name) / "checkpoints.jsonl").read_text().splitlines()]


def events(registry: Registry, run_id: int, kind: str) -> list[str]:
    return [e["message"] for e in registry.events(run_id) if e["kind"] == kind]


def steps_of(registry: Registry, run_id: int, key: str = "env/all/reward/total") -> list[int]:
    return registry.metric_series(run_id, key)["step"]


def sample_calls(fake: FakeTinker) -> int:
    return sum(s.sample.call_count for s in fake.samplers)


# ---------------------------------------------------------------- what a failure is

@pytest.mark.parametrize("error, kind", [
    (server_error(), "server"),
    (http_error(tinker.RateLimitError, 429, "slow down"), "server"),
    (tinker.APIConnectionError(request=httpx.Request("POST", "https://tinker.example/x")), "connection"),
    (RetryableException("Promise expired/broken for request r-1"), "sampler_expired"),
    (tinker.RequestFailedError("out of capacity", "r-2", tinker.types.RequestErrorCategory.Server), "server"),
    (tinker.RequestFailedError("bad tokens", "r-3", tinker.types.RequestErrorCategory.User), None),
    (http_error(tinker.BadRequestError, 400, "unknown model"), None),
    (http_error(tinker.BillingError, 402, "no credits"), None),
    (ValueError("our bug"), None),
])
def test_failures_are_classified_by_the_sdk_classes(error, kind):
    from core.backends.tinker import as_krl_error

    assert failure_kind(error) == kind
    assert failure_kind(as_krl_error(error, "sampling")) == kind  # also once mapped for the user


def test_a_failed_first_turn_is_requested_once_for_its_group():
    shared, sent = SharedFirstTurn(), []

    def produce():
        sent.append(1)
        raise RetryableException("expired")

    for _ in range(4):  # four samples of one group
        with pytest.raises(RetryableException):
            shared.get(produce)
    assert len(sent) == 1


# ---------------------------------------------------------------- the loop through failures

def test_each_call_site_fails_once_and_the_run_loses_no_step(fake, registry):
    run_id = start(registry, "survives", "checkpoint_every=10")
    fake.fail_calls("sample", {1: RetryableException("Promise expired/broken for request r-9")})  # step 1
    fake.fail_calls("forward_backward", {2: server_error()})  # step 2
    fake.fail_calls("optim_step", {4: http_error(tinker.RateLimitError, 429, "slow down")})  # step 3 (2: failed try)
    fake.fail_calls("save", {4: server_error()})  # the final checkpoint (0-3: rolling saves of steps -1..2)
    assert execute(registry, run_id, install_signals=False) == 0
    row = registry.get_run(run_id)
    assert row["status"] == "finished", row["error"]
    assert steps_of(registry, run_id) == list(range(STEPS))  # every step written once
    retries = events(registry, run_id, "retry")
    assert len(retries) == 4 and "RetryableException" in retries[0] and "InternalServerError" in retries[1]
    # A retried step samples again (3 retried steps); the failed group's turn was sent once, not once per member
    # (that would be one more), and the re-send went to a freshly published sampler.
    assert sample_calls(fake) == STEPS + 3
    assert fake.training.save_weights_and_get_sampling_client.call_count == STEPS + 3
    # A failure mid-update undid it: the weights came back from the last completed step's rolling checkpoint.
    restored = [c.args[0] for c in fake.service.create_training_client_from_state_with_optimizer.call_args_list]
    assert restored == ["tinker://run-1/weights/step-000001-rolling", "tinker://run-1/weights/step-000002-rolling"]
    records = jsonl(registry, "survives")
    assert [(r["name"], r["kind"], r["ttl_s"]) for r in records] == [
        ("initial-rolling", "rolling", 86400), ("step-000000-rolling", "rolling", 86400),
        ("step-000001-rolling", "rolling", 86400), ("step-000002-rolling", "rolling", 86400),
        ("step-000003", "final", None)]
    assert registry.metric_series(run_id, "recovery/retries")["value"][-1] == 3.0  # the save retry came after
    # Server metrics beside ours; the plain reward sum beside the discounted return; per-group outcomes.
    for key, value in (("optim/clipped_frac:mean", 0.25), ("optim/update_norm:mean", 0.01),
                       ("optim/grad_norm:mean", 0.5), ("env/all/by_group/frac_all_bad", 1.0),
                       ("env/all/by_group/frac_mixed", 0.0)):
        assert registry.metric_series(run_id, key)["value"] == [pytest.approx(value)] * STEPS, key
    assert steps_of(registry, run_id, "env/all/return/discounted") == list(range(STEPS))
    fake.service_class.assert_called_once_with(base_url=None, display_name="survives")
    fake.rest.get_server_capabilities.assert_called_once_with()


def test_a_run_that_gives_up_keeps_its_last_step_and_resumes_there(fake, registry):
    run_id = start(registry, "gives-up", "checkpoint_every=10", "recovery.max_attempts=2")
    fake.fail_calls("forward_backward", {2: server_error(), 3: server_error()})  # both tries of step 2
    assert execute(registry, run_id, install_signals=False) == 1
    row = registry.get_run(run_id)
    assert row["status"] == "failed" and "InternalServerError" in row["error"]
    assert len(events(registry, run_id, "retry")) == 1
    assert any("resume point: final checkpoint at step 1" in m for m in events(registry, run_id, "checkpoint"))
    last = jsonl(registry, "gives-up")[-1]
    assert (last["name"], last["step"], last["final"], last["ttl_s"]) == ("step-000001", 1, True, None)
    assert fake.training.save_state.call_args.kwargs["ttl_seconds"] is None  # kept by the service too
    # The final checkpoint was taken from restored weights, not from the half-applied update.
    restored = [c.args[0] for c in fake.service.create_training_client_from_state_with_optimizer.call_args_list]
    assert restored[-1] == "tinker://run-1/weights/step-000001-rolling"

    assert execute(registry, run_id, install_signals=False) == 0  # resume
    assert registry.get_run(run_id)["status"] == "finished"
    opened = fake.service.create_training_client_from_state_with_optimizer.call_args_list[-1].args[0]
    assert opened == "tinker://run-1/weights/step-000001"
    assert steps_of(registry, run_id) == list(range(STEPS))  # at most one step lost, none written twice
    assert_data_order(registry, run_id, "gives-up")


def assert_data_order(registry: Registry, run_id: int, name: str) -> None:
    from core.problems import load_problem_set

    problems = load_problem_set("builtin")
    expected = [problems[index].id for step in range(STEPS) for index, _ in batch_for_step(len(problems), step, 1, 0)]
    rows = sorted(registry.trajectories(run_id), key=lambda t: (t["step"], t["sample_index"]))
    assert [t["step"] for t in rows] == [s for s in range(STEPS) for _ in range(2)]
    assert [t["problem_id"] for t in rows][::2] == expected


# ---------------------------------------------------------------- off-policy overlap

def test_overlap_stays_within_k_and_a_resume_inside_it_is_exact(fake, registry):
    run_id = start(registry, "overlapped", "max_steps_off_policy=1", "checkpoint_every=2")
    assert execute(registry, run_id, install_signals=False, stop_after_step=1) == 0
    assert registry.get_run(run_id)["status"] == "stopped"
    # Stopped right after the periodic checkpoint of step 1: its TTL is cleared rather than saved again.
    fake.rest.set_checkpoint_ttl_from_tinker_path.assert_any_call("tinker://run-1/weights/step-000001", None)
    last = jsonl(registry, "overlapped")[-1]
    assert (last["name"], last["final"], last["ttl_s"]) == ("step-000001", True, None)

    assert execute(registry, run_id, install_signals=False) == 0
    assert registry.get_run(run_id)["status"] == "finished"
    staleness = registry.metric_series(run_id, "overlap/staleness")
    assert staleness["step"] == list(range(STEPS))
    assert max(staleness["value"]) <= 1 and staleness["value"][1] == 1.0  # step 1 was sampled while 0 trained
    assert registry.metric_series(run_id, "overlap/dropped_steps")["value"][-1] == 0.0
    assert_data_order(registry, run_id, "overlapped")  # the step in flight at the stop was sampled again, once
    # The loss is fed the sampler's logprobs, whatever policy produced them.
    for call in fake.training.forward_backward.call_args_list:
        for datum in call.args[0]:
            sampled = [lp for lp, a in zip(datum.loss_fn_inputs["logprobs"].data,
                                           datum.loss_fn_inputs["target_tokens"].data) if lp != 0.0]
            assert sampled and set(sampled) == {SAMPLING_LOGPROB}


# ---------------------------------------------------------------- evaluation from sampler weights

def test_checkpoint_evaluation_samples_from_the_saved_sampler_weights(fake, registry):
    from app.commands.eval import build_eval_config
    from core.backends.base import SamplingParams
    from core.backends.factory import open_backend

    run_id = start(registry, "to-evaluate", "checkpoint_every=2", "max_steps=2")
    registry.add_checkpoint(run_id, 1, "step-000001", "tinker://run-1/weights/step-000001",
                            "tinker://run-1/sampler_weights/step-000001")
    from core.checkpoint import checkpoint_dir, save_trainer_state

    save_trainer_state(checkpoint_dir(registry.run_dir("to-evaluate"), "step-000001"), {
        "step": 1, "backend_can_train": True, "backend_state_path": "tinker://run-1/weights/step-000001"})
    config = build_eval_config(config=None, run="to-evaluate", checkpoint=None, backend=None, model=None,
                               replay=None, problems=None, samples=None, turns=None, temperature=None, top_p=None,
                               kernel_backend=None, precision=None, gpus=None, overrides=[], registry=registry)
    assert config.evaluation.sampler_path == "tinker://run-1/sampler_weights/step-000001"
    assert config.evaluation.state_path is None
    backend = open_backend(config, sampler_path=config.evaluation.sampler_path)
    prompt = backend.render([{"role": "user", "content": "Write ReLU."}])
    assert backend.sample(prompt, 2, SamplingParams(max_tokens=64))
    assert fake.opened_sampler_paths == ["tinker://run-1/sampler_weights/step-000001"]
    fake.service.create_lora_training_client.assert_not_called()
    fake.service.create_training_client_from_state_with_optimizer.assert_not_called()
    assert not backend.can_train
    backend.close()


def test_post_update_kl_is_logged_when_asked(fake, registry):
    """The updated policy scores every sampled token TRAIN_SHIFT lower in the fake."""
    from tests.core.tinker_sdk_fakes import TRAIN_SHIFT

    run_id = start(registry, "post-kl", "compute_post_kl=true", "max_steps=1")
    assert execute(registry, run_id, install_signals=False) == 0
    assert registry.metric_series(run_id, "kl_pre_post_v1")["value"] == [pytest.approx(TRAIN_SHIFT, rel=1e-5)]


def test_a_resume_whose_checkpoint_expired_says_so(fake):
    from core.backends.tinker import TinkerBackend
    from core.errors import KrlError

    fake.create_error = http_error(tinker.NotFoundError, 404, "checkpoint not found")
    with pytest.raises(KrlError, match="no longer exists .*expire after tinker.checkpoint_ttl_s.*marked final"):
        TinkerBackend("Qwen/Qwen3-8B", state_path="tinker://run-1/weights/step-000001-rolling")


def test_resuming_from_a_checkpoint_the_service_has_expired_is_refused_before_anything_starts(fake, registry,
                                                                                           monkeypatch):
    """A run that ended on a periodic checkpoint (TTL on the service) and was left for longer than the TTL: `krl runs
    resume` says so and exits 2 instead of queueing a job that fails on the missing weights."""
    from core import procman
    from core.errors import KrlError

    run_id = start(registry, "left-too-long", "checkpoint_every=1", "recovery.max_attempts=1")
    fake.fail_calls("forward_backward", {2: server_error()})
    assert execute(registry, run_id, install_signals=False) == 1
    records = jsonl(registry, "left-too-long")
    newest = dict(records[-1], time=records[-1]["time"] - 8 * 86400, ttl_s=7 * 86400)  # as if kept with its TTL
    with open(registry.run_dir("left-too-long") / "checkpoints.jsonl", "a") as handle:
        handle.write(json.dumps(newest) + "\n")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test")  # credentials are fine: the expiry is what stops it
    with pytest.raises(KrlError, match="expired on the service.*Fork the run from a checkpoint marked final"):
        procman.resume_run(registry, "left-too-long")
    assert registry.get_run(run_id)["status"] == "failed"  # nothing queued
