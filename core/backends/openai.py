"""The `openai` backend: sampling only, from any OpenAI-compatible chat server (vLLM, SGLang, …) over httpx.
For evaluation runs of a served model; these APIs return no token ids, and logprobs only when the server gives them."""

from __future__ import annotations

import logging
import os
from typing import Any

from core.backends.base import (STOP_EOS, STOP_LENGTH, Prompt, SampleContext, SampledSequence, SamplingOnlyBackend,
                                SamplingParams)
from core.errors import KrlError

DEFAULT_BASE_URL = "http://localhost:8000/v1"

log = logging.getLogger("krl.openai")


class OpenAIBackend(SamplingOnlyBackend):
    name = "openai"
    can_train = False

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float = 600.0, check: bool = True) -> None:
        import httpx

        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout_s,
                                    headers={"Authorization": f"Bearer {key}"})
        self._httpx = httpx
        self.sends_logprobs = True  # turned off, with a warning, when the model rejects the parameter
        if check:
            self.check_server()

    def check_server(self) -> None:
        """Fail before any work when the server is unreachable or rejects the key."""
        try:
            response = self._client.get("/models")
        except self._httpx.HTTPError as exc:
            raise KrlError(f"cannot reach the OpenAI-compatible server at {self.base_url} ({exc}). Start it, or set "
                           "openai.base_url to where it listens (e.g. http://localhost:8000/v1).") from None
        if response.status_code in (401, 403):
            raise KrlError(f"the server at {self.base_url} rejected the API key (HTTP {response.status_code}). "
                           "Set OPENAI_API_KEY to a key it accepts.")

    def sample(self, prompt: Prompt, n: int, params: SamplingParams,
               context: SampleContext | None = None) -> list[SampledSequence]:
        # max_completion_tokens: OpenAI's reasoning models reject max_tokens; vLLM and SGLang accept both.
        body: dict[str, Any] = {"model": self.model, "messages": prompt.messages, "n": n,
                                "max_completion_tokens": params.max_tokens, "temperature": params.temperature,
                                "top_p": params.top_p}
        if params.seed is not None:
            body["seed"] = params.seed
        response = self._post(body)
        if response.status_code == 400 and self.sends_logprobs and "logprobs" in response.text:
            # Reasoning models (OpenAI o-series, some served ones) refuse logprobs: sample without them.
            self.sends_logprobs = False
            log.warning("model %s at %s rejects logprobs; sampling without them (%s)", self.model, self.base_url,
                        response.text[:200])
            response = self._post(body)
        if response.status_code != 200:
            raise KrlError(f"the server at {self.base_url} answered HTTP {response.status_code}: "
                           f"{response.text[:300]}")
        choices = sorted(response.json().get("choices", []), key=lambda c: c.get("index", 0))
        sequences = []
        for choice in choices:
            message = choice.get("message") or {}
            content = message.get("content") or ""
            # A server-side reasoning parser (vLLM, SGLang) moves the thinking out of `content`; put it back in the
            # <think> block the environment parses, so it is kept with the turn.
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if reasoning:
                content = f"<think>\n{reasoning.strip()}\n</think>\n{content.lstrip()}"
            logprob_items = ((choice.get("logprobs") or {}).get("content")) or []
            sequences.append(SampledSequence(
                text=content, tokens=[], logprobs=[float(item.get("logprob", 0.0)) for item in logprob_items],
                stop_reason=STOP_LENGTH if choice.get("finish_reason") == "length" else STOP_EOS))
        if len(sequences) != n:
            raise KrlError(f"asked {self.base_url} for {n} completions, got {len(sequences)}. "
                           "Does the server support the `n` parameter?")
        return sequences

    def _post(self, body: dict[str, Any]):
        try:
            return self._client.post("/chat/completions", json={**body, "logprobs": self.sends_logprobs})
        except self._httpx.HTTPError as exc:
            raise KrlError(f"the OpenAI-compatible server at {self.base_url} failed: {exc}.") from None

    def close(self) -> None:
        self._client.close()
