"""A small client of `krl serve` that is itself an evaluator (EvaluatorLike): submit → Future[EvalResult].
Each request keeps its id across retries, so a dropped connection or a restarted client never evaluates twice."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional

import httpx

from evaluator.contract.types import EvalRequest, EvalResult, EvaluatorError
from evaluator.scale.backpressure import QueuedEvaluator
from evaluator.scale.stats import compile_stats

DEFAULT_TOKEN_ENV = "KRL_EVAL_TOKEN"
_RETRY_STATUS = (502, 503, 504)
KEEPALIVE_EXPIRY_S = 3.0  # idle connections dropped before servers drop theirs (uvicorn 5 s, krl serve 60 s)


class HttpEvaluator(QueuedEvaluator):
    """Talks to a `krl serve` service at `url`. The token comes from `token` or the environment variable
    `token_env`. Transport errors and 502/503/504 are retried (`retries` times, exponential backoff honouring
    Retry-After); 401 and 400 are raised at once as EvaluatorError. At most `max_in_flight` requests are open at a
    time; each is sent once (POST, no waiting) and then polled with long GETs of up to `poll_s`."""

    def __init__(self, url: str, *, token: Optional[str] = None, token_env: str = DEFAULT_TOKEN_ENV,
                 timeout_s: float = 30.0, retries: int = 8, backoff_s: float = 0.5, max_in_flight: int = 64,
                 poll_s: float = 10.0):
        token = token or os.environ.get(token_env, "").strip()
        if not token:
            raise EvaluatorError(f"no token for {url}: put the service's token in ${token_env} "
                                 "(the content of the file given to `krl serve --token-file`).")
        self.url = url.rstrip("/")
        self._retries = retries
        self._backoff_s = backoff_s
        self._poll_s = poll_s
        # Idle connections are dropped here before a server drops them (uvicorn's default is 5 s, krl serve's 60 s):
        # reusing one the server has just closed reads a reset.
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx.Timeout(timeout_s + poll_s, connect=timeout_s),
                                  limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S))
        self._executor = ThreadPoolExecutor(max_in_flight, thread_name_prefix="krl-http-eval")
        self._open: set[Future] = set()
        self._lock = threading.Lock()
        self.closing = False
        _, health = self._call("GET", "/v1/health", ok=(200, 503))  # fails fast on a wrong URL or token
        self.cpu_mode = bool(health.get("cpu_mode"))
        self.devices = [self.url]

    # ---------------------------------------------------------------- EvaluatorLike

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        future = self.running_future(request)
        with self._lock:
            self.refuse_when_closing()
            self._open.add(future)
        self._executor.submit(self._run, request, future)
        return future

    def stats(self) -> dict[str, Any]:
        _, data = self._call("GET", "/v1/workers")
        return {"kind": "http", "url": self.url, "nodes": data.get("workers", []),
                "queue_depth": data.get("queue_depth", 0), "pending": data.get("pending", 0),
                "stats": data.get("counters", {}), **compile_stats(data)}

    def close(self) -> None:
        with self._lock:
            if self.closing:
                return
            self.closing = True
            still_open = list(self._open)
        for future in still_open:
            _settle(future, error=EvaluatorError("the evaluator was closed before this request finished."))
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._http.close()

    # ---------------------------------------------------------------- one request

    def _run(self, request: EvalRequest, future: Future) -> None:
        try:
            _settle(future, result=self._evaluate(request))
        except BaseException as exc:  # noqa: BLE001 - whatever happened, the caller gets exactly one outcome
            _settle(future, error=exc if isinstance(exc, EvaluatorError) else
                    EvaluatorError(f"the request to {self.url} failed: {type(exc).__name__}: {exc}"))
        finally:
            with self._lock:
                self._open.discard(future)

    def _evaluate(self, request: EvalRequest) -> EvalResult:
        payload = request.to_dict()
        path = f"/v1/results/{request.request_id}"
        self._call("POST", "/v1/evaluate", params={"wait": "false"}, json=payload, ok=(202,))
        while True:
            status, data = self._call("GET", path, params={"wait_s": self._poll_s}, ok=(200, 202, 404))
            if status == 200:
                return EvalResult.from_dict(data)
            if status == 404:  # the service restarted and forgot it: the same id, sent again
                self._call("POST", "/v1/evaluate", params={"wait": "false"}, json=payload, ok=(202,))

    def _call(self, method: str, path: str, ok: tuple[int, ...] = (200,), **kwargs: Any) -> tuple[int, Any]:
        last = ""
        for attempt in range(self._retries + 1):
            if self.closing and path != "/v1/health":
                raise EvaluatorError("the evaluator was closed before this request finished.")
            delay = min(10.0, self._backoff_s * 2 ** attempt)
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code in ok:
                    return response.status_code, response.json()
                message = _error_text(response)
                if response.status_code == 401:
                    raise EvaluatorError(f"the service at {self.url} rejected the token ({message}); check the "
                                         "token variable against the service's --token-file.")
                if response.status_code not in _RETRY_STATUS:
                    raise EvaluatorError(f"the service at {self.url} refused {method} {path} "
                                         f"(HTTP {response.status_code}): {message}")
                last = f"HTTP {response.status_code}: {message}"
                retry_after = response.headers.get("retry-after", "")
                if retry_after.isdigit():
                    delay = min(30.0, float(retry_after))
            if attempt < self._retries:
                time.sleep(delay)
        raise EvaluatorError(f"the service at {self.url} did not answer {method} {path} after "
                             f"{self._retries + 1} tries: {last}")


def _settle(future: Future, result: Optional[EvalResult] = None, error: Optional[BaseException] = None) -> None:
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except Exception:  # noqa: BLE001 - already settled (closed under it): the first outcome stands
        pass


def _error_text(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", ""))[:500] or response.text[:500]
    except ValueError:
        return response.text[:500]
