"""The `tinker` backend: LoRA training and sampling on the Tinker service through its SDK (0.38: calls return futures).
Credentials are checked with the SDK's own resolution before any work; every SDK failure reaches the user as KrlError."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Any, Callable, Optional, Sequence

from core.backends.base import (STOP_EOS, STOP_LENGTH, AdamParams, ChatRendering, CheckpointPaths, Datum, Prompt,
                                SampleContext, SampledSequence, SamplingParams, check_loss_kind)
from core.backends.tokenizer import HFTokenizer
from core.errors import KrlError
from core.losses import add_sums, sample_train_sums

log = logging.getLogger("krl.tinker")

API_KEY_ENV = "TINKER_API_KEY"
CREDENTIAL_SOURCES = ("TINKER_API_KEY (a key from the Tinker console), TINKER_CREDENTIAL_CMD (a command that prints "
                      "one) or a key stored with `tinker auth login` (~/.tinker/credentials.json)")


def check_tinker_credentials() -> None:
    """Raise KrlError unless the Tinker SDK can resolve a credential, by the SDK's own rules; offline and instant
    (a TINKER_CREDENTIAL_CMD counts without being run). Call it before a detached tinker run starts."""
    try:
        import tinker.auth
    except ImportError:
        raise KrlError("the tinker backend needs the Tinker SDK: `pip install 'kernelrl[tinker]'`.") from None
    if tinker.auth.tinker_has_credentials():
        return
    raise KrlError(f"no Tinker credential found, so the tinker backend cannot start. Set {CREDENTIAL_SOURCES}; "
                   "for a run without Tinker use backend=local.")


def failure_kind(exc: BaseException) -> Optional[str]:
    """What kind of passing service failure `exc` is, by the SDK's own exception classes: "connection", "server"
    (5xx, rate limits, a request the server failed), "sampler_expired" (a sampling session or promise the service
    no longer holds), or None for anything a retry cannot fix (credentials, billing, bad requests, our bugs).
    A KrlError made by as_krl_error is judged by the SDK error it carries."""
    import tinker
    from tinker.lib.retryable_exception import RetryableException

    exc = getattr(exc, "sdk_error", None) or exc
    if isinstance(exc, tinker.APIConnectionError):  # timeouts included
        return "connection"
    if isinstance(exc, RetryableException):
        return "sampler_expired"
    if isinstance(exc, (tinker.InternalServerError, tinker.RateLimitError)):
        return "server"
    if isinstance(exc, tinker.RequestFailedError):
        return "server" if exc.category != tinker.types.RequestErrorCategory.User else None
    return None


def as_krl_error(exc: BaseException, what: str) -> BaseException:
    """The KrlError a user should see for an SDK failure while doing `what`; other exceptions pass unchanged
    (they are our bugs and keep their traceback). The SDK error rides along as `sdk_error` for failure_kind."""
    mapped = _krl_error_of(exc, what)
    if mapped is not exc:
        mapped.sdk_error = exc  # type: ignore[attr-defined]
    return mapped


def _krl_error_of(exc: BaseException, what: str) -> BaseException:
    import tinker

    name = exc.__class__.__name__
    if isinstance(exc, tinker.NotFoundError) and what == "loading checkpoint":
        return KrlError(f"the Tinker checkpoint to resume from no longer exists ({exc}): periodic checkpoints "
                        "expire after tinker.checkpoint_ttl_s. Fork the run from a checkpoint marked final in "
                        "checkpoints.jsonl, or start a new run.")
    if isinstance(exc, (tinker.AuthenticationError, tinker.PermissionDeniedError)):
        return KrlError(f"Tinker rejected the credential while {what} ({name}). Check {CREDENTIAL_SOURCES}.")
    if isinstance(exc, tinker.BillingError):
        return KrlError(f"Tinker refused the work while {what}: the account's billing is not set up or is "
                        "exhausted (402). Fix it in the Tinker console, then resume the run.")
    if isinstance(exc, tinker.APIConnectionError):
        return KrlError(f"cannot reach the Tinker service while {what}: {exc}. Check the network or tinker.base_url.")
    if isinstance(exc, tinker.BadRequestError):
        return KrlError(f"Tinker refused the request while {what} (bad request: {exc}). Check the model name, "
                        "tinker.lora_rank and the sampling/loss settings.")
    if isinstance(exc, tinker.TinkerError) or failure_kind(exc):
        return KrlError(f"Tinker failed while {what} ({name}: {exc}).")
    return exc


def _sdk_tokenizer(training: Any, model: str) -> Any:
    """The model's tokenizer; the SDK downloads it from the Hugging Face hub, which fails offline."""
    try:
        return training.get_tokenizer()
    except (OSError, ValueError) as exc:  # hub/network errors are OSErrors (transformers wraps them)
        raise KrlError(f"cannot load the tokenizer of {model} from the Hugging Face hub ({exc.__class__.__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''}). Connect to the network once (it is cached "
                       "in ~/.cache/huggingface), or set HF_HUB_OFFLINE=1 when it is already cached.") from None


class TinkerBackend(ChatRendering):
    """One Tinker LoRA training client plus a sampling client refreshed after each optimizer step."""

    name = "tinker"
    can_train = True

    def __init__(self, model: str, lora_rank: int = 32, seed: int | None = None, state_path: str | None = None,
                 base_url: str | None = None, checkpoint_ttl_s: int | None = None,
                 service_client: Any = None, session_name: str | None = None,
                 sampler_path: str | None = None) -> None:
        """session_name: the run's name, shown for the session in the Tinker console. sampler_path: sample from
        these saved sampler weights only (model evaluation); no training client is opened."""
        import tinker

        self._tinker = tinker
        self.model_name = model
        self.checkpoint_ttl_s = checkpoint_ttl_s
        self.base_url = base_url
        if service_client is None:
            check_tinker_credentials()
            service_client = self._call(lambda: tinker.ServiceClient(base_url=base_url, display_name=session_name),
                                        "opening a session")
        self.service = service_client
        self._lock = threading.RLock()
        self._closed = False
        self._failed = False  # an SDK call failed: the session finishes as "errored"
        self._sampler: Any = None
        self._sampler_stale = True
        self._base_sampler: Any = None  # base-model sampling client, opened for the KL penalty
        self.training: Any = None
        self.can_train = sampler_path is None
        try:
            if sampler_path:
                self._sampler = self._call(lambda: self.service.create_sampling_client(
                    model_path=sampler_path).result(), "opening the checkpoint's sampler weights")
                self._sampler_stale = False
                tokenizer = self._call(self._sampler.get_tokenizer, "loading the tokenizer")
            elif state_path:
                self.training = self._call(lambda: self.service.create_training_client_from_state_with_optimizer(
                    state_path).result(), "loading checkpoint")
            else:
                self.training = self._call(lambda: self.service.create_lora_training_client(
                    base_model=model, rank=lora_rank, seed=seed).result(), "creating the LoRA training client")
            if not sampler_path:
                tokenizer = _sdk_tokenizer(self.training, model)
            self.tokenizer = HFTokenizer(tokenizer)
            self.context_window: Optional[int] = self._model_context_window()
        except BaseException:
            self._failed = True
            self.close()
            raise
        self._stop_ids = sorted(self.tokenizer.stop_ids())

    def _call(self, fn: Callable[[], Any], what: str) -> Any:
        try:
            return fn()
        except Exception as exc:
            self._failed = True
            mapped = as_krl_error(exc, what)
            if mapped is exc:
                raise
            raise mapped from None

    def _then(self, api_future: Any, what: str, convert: Callable[[Any], Any]) -> Future:
        """A future of convert(result) that fails with the KrlError for an SDK failure (as _call does)."""
        out: Future = Future()

        def finish(done: Future) -> None:
            try:
                out.set_result(convert(done.result()))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on `out`
                self._failed = True
                out.set_exception(as_krl_error(exc, what))

        api_future.future().add_done_callback(finish)
        return out

    def _model_context_window(self) -> Optional[int]:
        """The model's context length as the service states it (None when it does not say)."""
        try:
            # RestClient's call replaces ServiceClient.get_server_capabilities (deprecated in the SDK).
            capabilities = self._call(lambda: self._tinker.RestClient(base_url=self.base_url)
                                      .get_server_capabilities().result(), "reading the server's capabilities")
        except KrlError as exc:
            log.warning("context length of %s unknown (%s); prompts are not clamped", self.model_name, exc)
            return None
        base = self.model_name.split(":")[0]
        for supported in capabilities.supported_models:
            if supported.model_name == base and supported.max_context_length:
                return int(supported.max_context_length)
        return None

    # ------------------------------------------------------------ prompts and sampling

    def refresh_sampler(self) -> None:
        """Publish the weights again on the next sample (after a sampler the service no longer holds)."""
        with self._lock:
            if self.training is not None:
                self._sampler_stale = True

    def is_transient_error(self, exc: BaseException) -> bool:
        return failure_kind(exc) is not None

    def _sampling_client(self):
        with self._lock:
            if self.training is not None and (self._sampler_stale or self._sampler is None):
                self._sampler = self._call(lambda: self.training.save_weights_and_get_sampling_client().result(),
                                           "publishing weights for sampling")
                self._sampler_stale = False
            return self._sampler

    def sample(self, prompt: Prompt, n: int, params: SamplingParams,
               context: SampleContext | None = None) -> list[SampledSequence]:
        types = self._tinker.types
        sampler = self._sampling_client()
        # One seed with num_samples > 1 can give n token-identical sequences (reported by Tinker users; the
        # cookbook never combines them): equal rewards, a dropped group, no learning. A group is one unseeded call.
        seed = params.seed if n == 1 else None
        sampling_params = types.SamplingParams(max_tokens=params.max_tokens, temperature=params.temperature,
                                               top_p=params.top_p, seed=seed, stop=self._stop_ids)
        response = self._call(lambda: sampler.sample(prompt=types.ModelInput.from_ints(list(prompt.tokens)),
                                                     num_samples=n, sampling_params=sampling_params).result(),
                              "sampling")
        results = []
        for seq in response.sequences:
            tokens = list(seq.tokens)
            logprobs = seq.logprobs
            if logprobs is None or len(logprobs) != len(tokens):
                # Zeros would make the importance ratio p_new / 1: a silently wrong loss.
                raise KrlError(f"Tinker returned {'no' if logprobs is None else len(logprobs)} logprobs for "
                               f"{len(tokens)} sampled tokens; training needs one per token. This is a service "
                               "fault: resume the run; report it to Tinker if it repeats.")
            stopped = seq.stop_reason != "length"
            text_tokens = tokens[:-1] if stopped and tokens and tokens[-1] in self._stop_ids else tokens
            results.append(SampledSequence(text=self.tokenizer.decode(text_tokens), tokens=tokens,
                                           logprobs=[float(x) for x in logprobs],
                                           stop_reason=STOP_EOS if stopped else STOP_LENGTH))
        return results

    def base_logprobs(self, datums: Sequence[Datum]) -> list[list[float]]:
        """Target logprobs under the base model (a base-model sampling client's compute_logprobs, all requests
        submitted before any is awaited; only the sampled tail is scored, so the prompt comes from the prefix
        cache)."""
        types = self._tinker.types
        with self._lock:
            if self._base_sampler is None:
                self._base_sampler = self._call(lambda: self.service.create_sampling_client(
                    base_model=self.model_name).result(), "opening the base model for the KL penalty")
        futures = []
        for datum in datums:
            sequence = list(datum.input_tokens) + [datum.target_tokens[-1]]
            scored = int(sum(datum.action_mask())) or 1
            futures.append(self._call(lambda: self._base_sampler.compute_logprobs(
                types.ModelInput.from_ints(sequence), prompt_logprobs_last_n=min(scored, len(sequence) - 1)),
                "scoring tokens under the base model"))
        out = []
        for datum, future in zip(datums, futures):
            logprobs = self._call(future.result, "scoring tokens under the base model")
            # logprobs[i] scores sequence[i]; targets are sequence[1:]. None where not scored (prompt positions).
            out.append([0.0 if lp is None or m == 0 else float(lp) for lp, m in zip(logprobs[1:], datum.action_mask())])
        return out

    # ------------------------------------------------------------ training

    def to_tinker_datum(self, datum: Datum):
        types = self._tinker.types
        return types.Datum(model_input=types.ModelInput.from_ints(list(datum.input_tokens)),
                           loss_fn_inputs={"target_tokens": list(datum.target_tokens),
                                           "logprobs": list(datum.logprobs),
                                           "advantages": list(datum.advantages)})

    def submit_forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                                loss_fn_config: dict[str, float] | None = None) -> Future:
        """Queue the pass and return at once: a future of its metrics, including the sampler/trainer gap sums
        computed from the per-datum training logprobs Tinker returns."""
        check_loss_kind(loss_fn)
        datums = list(datums)
        data = [self.to_tinker_datum(d) for d in datums]
        api_future = self._call(lambda: self.training.forward_backward(data, loss_fn, loss_fn_config),
                                "submitting forward_backward")

        def metrics_of(output: Any) -> dict[str, float]:
            metrics = {k: float(v) for k, v in (output.metrics or {}).items()}
            metrics["tokens"] = float(sum(sum(d.action_mask()) for d in datums))
            if len(output.loss_fn_outputs) != len(datums):
                raise KrlError(f"Tinker returned {len(output.loss_fn_outputs)} loss outputs for {len(datums)} "
                               "datums; resume the run.")
            for datum, per_datum in zip(datums, output.loss_fn_outputs):
                training_logprobs = per_datum["logprobs"].tolist()
                add_sums(metrics, sample_train_sums(datum.logprobs, training_logprobs, datum.action_mask()))
            return metrics

        return self._then(api_future, "running forward_backward", metrics_of)

    def forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                         loss_fn_config: dict[str, float] | None = None) -> dict[str, float]:
        return self.submit_forward_backward(datums, loss_fn, loss_fn_config).result()

    def submit_optim_step(self, params: AdamParams) -> Future:
        types = self._tinker.types
        adam = types.AdamParams(learning_rate=params.learning_rate, beta1=params.beta1, beta2=params.beta2,
                                eps=params.eps, weight_decay=params.weight_decay, grad_clip_norm=params.grad_clip_norm)
        api_future = self._call(lambda: self.training.optim_step(adam), "submitting optim_step")
        with self._lock:
            self._sampler_stale = True  # the next sample() publishes the new weights first

        def metrics_of(response: Any) -> dict[str, float]:
            return {k: float(v) for k, v in (response.metrics or {}).items()}

        return self._then(api_future, "running optim_step", metrics_of)

    def optim_step(self, params: AdamParams) -> dict[str, float]:
        return self.submit_optim_step(params).result()

    # ------------------------------------------------------------ checkpoints

    def save_state(self, name: str, directory: str, final: bool = False) -> CheckpointPaths:
        """Weights + optimizer, and sampler weights. Periodic checkpoints expire after checkpoint_ttl_s; the final
        one is kept (as the cookbook does)."""
        ttl = None if final else self.checkpoint_ttl_s
        state = self._call(lambda: self.training.save_state(name, ttl_seconds=ttl).result(), "saving state")
        sampler = self._call(lambda: self.training.save_weights_for_sampler(name, ttl_seconds=ttl).result(),
                             "saving sampler weights")
        return CheckpointPaths(state_path=state.path, sampler_path=sampler.path)

    def save_rolling_state(self, name: str, ttl_s: int) -> str:
        """Weights + optimizer only (no sampler weights), expiring after ttl_s: the cheap step-to-step resume point
        between periodic checkpoints."""
        return self._call(lambda: self.training.save_state(name, ttl_seconds=ttl_s).result(),
                          "saving a rolling state").path

    def keep_checkpoint(self, paths: Sequence[str]) -> None:
        """Remove the TTL of saved checkpoints (a periodic one that became a stopped run's resume point)."""
        rest = self._tinker.RestClient(base_url=self.base_url)
        for path in paths:
            if path and path.startswith("tinker://"):
                self._call(lambda p=path: rest.set_checkpoint_ttl_from_tinker_path(p, None).result(),
                           "keeping the checkpoint")

    def post_update_logprobs(self, datums: Sequence[Datum]) -> list[list[float]]:
        """Each datum's target logprobs under the weights after the last optimizer step (0 where not sampled),
        for the cookbook's post-update KL; the new weights are published for sampling first, as the next step's
        sampling would anyway."""
        types = self._tinker.types
        sampler = self._sampling_client()
        futures = [self._call(lambda d=d: sampler.compute_logprobs(types.ModelInput.from_ints(
            list(d.input_tokens) + [d.target_tokens[-1]])), "scoring tokens after the update") for d in datums]
        out = []
        for datum, future in zip(datums, futures):
            logprobs = self._call(future.result, "scoring tokens after the update")
            out.append([0.0 if lp is None or m == 0 else float(lp)
                        for lp, m in zip(logprobs[1:], datum.action_mask())])
        return out

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
        """Finish the Tinker session (heartbeats stop, the console shows it ended, "errored" after a failed SDK
        call); once, best effort."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.service.close("errored" if self._failed else "success").result(timeout=30)
        except Exception as exc:  # the run's result is already recorded; a failed goodbye must not change it
            log.warning("closing the Tinker session failed: %s", exc)

