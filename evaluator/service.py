"""`krl serve`'s HTTP API: thin Starlette routes over an injected evaluator (local pool, Ray cluster, anything
EvaluatorLike). Bearer-token auth on every route; a candidate's fault is 200 with its verdict, ours 400/503, never 500."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import hmac
import json
import logging
import math
import re
import threading
import time
from concurrent.futures import Future
from typing import Any, Awaitable, Callable, Optional

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from evaluator.api import BACKENDS, PRECISIONS, EvalRequest, EvalResult, EvaluatorError
from evaluator.factory import EvaluatorBusy, EvaluatorLike, worker_rows

log = logging.getLogger(__name__)

MAX_BATCH = 1000
MAX_BODY_BYTES = 32 * 2**20  # a batch of large candidates fits; a body past this is refused unread (413)
MAX_WAIT_S = 60.0  # longest a GET /v1/results/{id}?wait_s= holds the connection
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_REQUIRED = ("problem_id", "reference_source", "candidate_source")
_FIELDS = {f.name: f for f in dataclasses.fields(EvalRequest)}


class BadRequest(EvaluatorError):
    """The caller sent something we cannot evaluate (HTTP 400); the message says what to change."""


class TooLarge(BadRequest):
    """The body is over MAX_BODY_BYTES (HTTP 413)."""


# ---------------------------------------------------------------- the service (no HTTP in here)

@dataclasses.dataclass(eq=False)
class _Entry:
    fingerprint: str
    future: Future
    submitted_at: float


class EvaluationService:
    """Requests by id, exactly once: a request id seen again returns the first submission's result (a client that
    retries, or a trainer that restarted, never causes a second evaluation). At most `max_pending` unfinished
    requests (then EvaluatorBusy); the last `max_results` finished results are kept for GET /v1/results/{id}."""

    def __init__(self, evaluator: EvaluatorLike, *, max_pending: int = 2000, max_results: int = 50_000):
        self.evaluator = evaluator
        self.max_pending = max_pending
        self.max_results = max_results
        self._entries: "collections.OrderedDict[str, _Entry]" = collections.OrderedDict()
        self._pending = 0
        # Reentrant: a future that is already done runs its done-callback (which takes the lock) at once.
        self._lock = threading.RLock()
        self.counters: collections.Counter = collections.Counter()
        self.verdicts: collections.Counter = collections.Counter()
        self.seconds_sum = 0.0
        self.started_at = time.time()

    def submit_many(self, payloads: list[Any]) -> list[tuple[str, Future]]:
        """Validate every payload first (BadRequest names the first bad one), then submit all or none."""
        requests = []
        for index, payload in enumerate(payloads):
            try:
                requests.append(parse_request(payload))
            except BadRequest as exc:
                raise BadRequest(f"request {index}: {exc}" if len(payloads) > 1 else str(exc)) from None
        with self._lock:
            fresh = [r for r in requests if self._reusable(r) is None]
            if self._pending + len(fresh) > self.max_pending:
                self.counters["rejected_busy"] += 1
                raise EvaluatorBusy(f"the service has {self._pending} requests in progress (limit "
                                    f"{self.max_pending}); retry later.", self._pending)
            return [(r.request_id, self._submit_locked(r)) for r in requests]

    def lookup(self, request_id: str) -> Optional[Future]:
        with self._lock:
            entry = self._entries.get(request_id)
            return entry.future if entry else None

    def health(self) -> dict[str, Any]:
        stats = self.evaluator.stats()
        rows = worker_rows(stats)
        ready = sum(r["state"] == "ready" for r in rows)
        status = "ok" if ready else ("starting" if any(r["state"] == "starting" for r in rows) else "unavailable")
        return {"status": status, "workers_ready": ready, "workers": len(rows), "pending": self._pending,
                "queue_depth": stats.get("queue_depth", self._pending), "cpu_mode": bool(getattr(
                    self.evaluator, "cpu_mode", all(r["device"] == "cpu" for r in rows)))}

    def workers(self) -> dict[str, Any]:
        stats = self.evaluator.stats()
        rows = [{k: v for k, v in row.items() if k != "pool"} for row in worker_rows(stats)]
        return {"workers": rows, "queue_depth": stats.get("queue_depth", self._pending), "pending": self._pending,
                "counters": dict(stats.get("stats", {}))}

    def metrics_text(self) -> str:
        """Prometheus text exposition (version 0.0.4)."""
        rows = worker_rows(self.evaluator.stats())
        with self._lock:
            counters, verdicts, seconds = dict(self.counters), dict(self.verdicts), self.seconds_sum
            pending = self._pending
        lines = ["# TYPE krl_requests_total counter"]
        lines += [f'krl_requests_total{{outcome="{k}"}} {v}' for k, v in sorted(counters.items())]
        lines += ["# TYPE krl_results_total counter"]
        lines += [f'krl_results_total{{verdict="{k}"}} {v}' for k, v in sorted(verdicts.items())]
        lines += ["# TYPE krl_evaluation_seconds summary", f"krl_evaluation_seconds_sum {seconds:.6f}",
                  f"krl_evaluation_seconds_count {sum(verdicts.values())}",
                  "# TYPE krl_pending_requests gauge", f"krl_pending_requests {pending}",
                  "# TYPE krl_workers gauge"]
        for state in ("ready", "starting", "broken", "dead"):
            lines.append(f'krl_workers{{state="{state}"}} {sum(r["state"] == state for r in rows)}')
        lines.append("# TYPE krl_worker_in_flight gauge")
        for row in rows:
            lines.append(f'krl_worker_in_flight{{node="{_label(row["node"])}",device="{_label(row["device"])}"}} '
                         f'{row["in_flight"] or 0}')
        return "\n".join(lines) + "\n"

    # ---- inside the lock

    def _reusable(self, request: EvalRequest) -> Optional[_Entry]:
        entry = self._entries.get(request.request_id)
        if entry is None:
            return None
        if entry.fingerprint != _fingerprint(request):
            raise BadRequest(f"request_id {request.request_id!r} was already used for a different request; "
                             "use a new id for new work.")
        failed = entry.future.done() and entry.future.exception() is not None
        return None if failed else entry  # our own failure is not a result: a retry evaluates it again

    def _submit_locked(self, request: EvalRequest) -> Future:
        entry = self._reusable(request)
        if entry is not None:
            self.counters["deduplicated"] += 1
            return entry.future
        future = self.evaluator.submit(request)  # EvaluatorError (closed, busy) goes to the caller as 503
        self.counters["accepted"] += 1
        self._pending += 1
        self._entries[request.request_id] = _Entry(_fingerprint(request), future, time.monotonic())
        self._entries.move_to_end(request.request_id)
        started = time.monotonic()
        future.add_done_callback(lambda f: self._on_done(f, started))
        self._evict_locked()
        return future

    def _on_done(self, future: Future, started: float) -> None:
        with self._lock:
            self._pending -= 1
            if future.exception() is None:
                self.verdicts[future.result().verdict.value] += 1
                self.seconds_sum += time.monotonic() - started
            else:
                self.counters["evaluator_errors"] += 1

    def _evict_locked(self) -> None:
        excess = len(self._entries) - self.max_results
        for key in list(self._entries)[: max(0, excess) * 2]:
            if excess <= 0:
                break
            if self._entries[key].future.done():
                del self._entries[key]
                excess -= 1


def parse_request(payload: Any) -> EvalRequest:
    """An EvalRequest from JSON, or BadRequest saying which field is wrong."""
    if not isinstance(payload, dict):
        raise BadRequest("the body must be a JSON object (an EvalRequest).")
    unknown = sorted(set(payload) - set(_FIELDS))
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(unknown)}; EvalRequest has {', '.join(_FIELDS)}.")
    missing = [name for name in _REQUIRED if not isinstance(payload.get(name), str)]
    if missing:
        raise BadRequest(f"missing or non-string field(s): {', '.join(missing)}.")
    for name, value in payload.items():
        default = _FIELDS[name].default
        if value is None and name in ("atol", "rtol"):
            continue
        expected = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}.get(type(default))
        if expected and (not isinstance(value, expected) or (bool not in expected and isinstance(value, bool))):
            raise BadRequest(f"field {name!r} must be {type(default).__name__}, not {type(value).__name__}.")
    sizes = payload.get("size_overrides", {})
    if not isinstance(sizes, dict) or not all(isinstance(k, str) and type(v) is int for k, v in sizes.items()):
        raise BadRequest("size_overrides must map names to integers.")
    if payload.get("backend", "torch") not in BACKENDS:
        raise BadRequest(f"unknown backend {payload['backend']!r}; use one of {', '.join(BACKENDS)}.")
    if payload.get("precision", "fp32") not in PRECISIONS:
        raise BadRequest(f"unknown precision {payload['precision']!r}; use one of {', '.join(PRECISIONS)}.")
    if "request_id" in payload and not _REQUEST_ID.match(payload["request_id"]):
        raise BadRequest("request_id must be 1-128 characters of letters, digits and _.:-")
    return EvalRequest.from_dict(payload)


def _fingerprint(request: EvalRequest) -> str:
    return hashlib.sha256(json.dumps(request.to_dict(), sort_keys=True).encode()).hexdigest()


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


# ---------------------------------------------------------------- HTTP

def create_app(evaluator: EvaluatorLike, token: str, *, max_pending: int = 2000,
               max_results: int = 50_000) -> Starlette:
    """The ASGI app over `evaluator`. Every route needs `Authorization: Bearer <token>`."""
    if not token:
        raise EvaluatorError("the service needs a non-empty token.")
    service = EvaluationService(evaluator, max_pending=max_pending, max_results=max_results)
    expected = f"Bearer {token}".encode()

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            supplied = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(supplied, expected):
                service.counters["unauthorized"] += 1
                return JSONResponse({"error": "missing or wrong token: send Authorization: Bearer <token>."},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
            try:
                return await handler(request)
            except TooLarge as exc:
                service.counters["bad_request"] += 1
                return JSONResponse({"error": str(exc)}, status_code=413)
            except BadRequest as exc:
                service.counters["bad_request"] += 1
                return JSONResponse({"error": str(exc)}, status_code=400)
            except EvaluatorBusy as exc:
                return JSONResponse({"error": str(exc), "queue_depth": exc.queue_depth}, status_code=503,
                                    headers={"Retry-After": str(max(1, round(exc.retry_after_s)))})
            except EvaluatorError as exc:
                return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": "5"})
            except Exception as exc:  # noqa: BLE001 - our bug: logged here, the caller may retry
                log.exception("service route %s failed", request.url.path)
                return JSONResponse({"error": f"internal error ({type(exc).__name__}); retry later."},
                                    status_code=503, headers={"Retry-After": "5"})
        return endpoint

    async def body(request: Request) -> Any:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise TooLarge(f"the body is {int(declared)} bytes, over {MAX_BODY_BYTES}; send smaller batches.")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise TooLarge(f"the body is over {MAX_BODY_BYTES} bytes; send smaller batches.")
            chunks.append(chunk)
        try:
            return json.loads(b"".join(chunks))
        except ValueError:
            raise BadRequest("the body is not valid JSON.") from None

    async def evaluate(request: Request) -> Response:
        ((request_id, future),) = service.submit_many([await body(request)])
        if _flag(request, "wait", True):
            return _result_response(await _wait(future))
        return JSONResponse({"request_id": request_id, "status": "done" if future.done() else "pending",
                             "pending": service._pending}, status_code=202)

    async def evaluate_batch(request: Request) -> Response:
        data = await body(request)
        if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
            raise BadRequest('the body must be {"requests": [EvalRequest, ...], "wait": true|false}.')
        if len(data["requests"]) > MAX_BATCH:
            raise BadRequest(f"at most {MAX_BATCH} requests per batch; split it.")
        submitted = service.submit_many(data["requests"])
        if data.get("wait", True):
            results = [await _wait(future) for _, future in submitted]
            return JSONResponse({"results": [result_json(r) for r in results]})
        return JSONResponse({"request_ids": [rid for rid, _ in submitted], "pending": service._pending},
                            status_code=202)

    async def result(request: Request) -> Response:
        request_id = request.path_params["request_id"]
        future = service.lookup(request_id)
        if future is None:
            return JSONResponse({"error": f"no request {request_id!r} here (never sent, or forgotten after "
                                          f"{service.max_results} newer results); send it again."}, status_code=404)
        try:
            wait_s = min(MAX_WAIT_S, max(0.0, float(request.query_params.get("wait_s", 0))))
        except ValueError:
            raise BadRequest("wait_s must be a number of seconds.") from None
        if not future.done() and wait_s:
            try:
                await asyncio.wait_for(_wait(future), wait_s)
            except asyncio.TimeoutError:
                pass
        if not future.done():
            return JSONResponse({"request_id": request_id, "status": "pending"}, status_code=202)
        return _result_response(future.result())

    async def health(request: Request) -> Response:
        state = service.health()
        return JSONResponse(state, status_code=200 if state["status"] == "ok" else 503)

    async def workers(request: Request) -> Response:
        return JSONResponse(service.workers())

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(service.metrics_text(), media_type="text/plain; version=0.0.4")

    routes = [
        Route("/v1/evaluate", guarded(evaluate), methods=["POST"]),
        Route("/v1/evaluate/batch", guarded(evaluate_batch), methods=["POST"]),
        Route("/v1/results/{request_id}", guarded(result), methods=["GET"]),
        Route("/v1/health", guarded(health), methods=["GET"]),
        Route("/v1/workers", guarded(workers), methods=["GET"]),
        Route("/metrics", guarded(metrics), methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    app.state.service = service
    return app


async def _wait(future: Future) -> EvalResult:
    """Await an evaluator future without ever cancelling it (a client that hangs up must not cancel the work)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def copy(done: Future) -> None:
        loop.call_soon_threadsafe(lambda: waiter.done() or waiter.set_result(None))

    future.add_done_callback(copy)
    await asyncio.shield(waiter)
    return future.result()  # an EvaluatorError here becomes a 503


def _result_response(result: EvalResult) -> Response:
    return JSONResponse(result_json(result))


def result_json(result: EvalResult) -> dict[str, Any]:
    """The result as strict JSON: a NaN or infinite difference (a candidate that output NaN) is sent as null."""
    def finite(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, list):
            return [finite(v) for v in value]
        return value

    return finite(result.to_dict())


def _flag(request: Request, name: str, default: bool) -> bool:
    value = request.query_params.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise BadRequest(f"{name} must be true or false.")
