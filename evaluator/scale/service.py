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
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from evaluator.contract.protocol import EvaluatorLike
from evaluator.contract.types import (BACKENDS, PRECISIONS, EvalRequest, EvalResult, EvaluatorBusy, EvaluatorError,
                                      Verdict)
from evaluator.scale.result_store import ResultStore, StoredRequest, result_row
from evaluator.scale.stats import compile_stats, worker_rows

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

MAX_SUBMISSIONS = 3  # a request in progress at this many unclean service deaths is given up as `crashed`


@dataclasses.dataclass(eq=False)
class _Live:
    fingerprint: str
    future: Future  # the service's own future: set only once the result is in the store


class EvaluationService:
    """Requests by id, exactly once, also across service restarts: every accepted request is in `store` before it is
    answered, and its result is stored before anyone sees it. A request id seen again returns the first submission's
    result (no second evaluation); `recover()` hands the store's unfinished requests to the evaluator once, at start.
    At most `max_pending` unfinished requests (then EvaluatorBusy). Without a store, one in memory (one life)."""

    def __init__(self, evaluator: EvaluatorLike, *, store: Optional[ResultStore] = None, max_pending: int = 2000,
                 max_results: int = 50_000):
        self.evaluator = evaluator
        self.store = store if store is not None else ResultStore(keep_results=max_results)
        self.max_pending = max_pending
        self.max_results = self.store.keep_results
        self._live: dict[str, _Live] = {}
        self._closed = False
        # Reentrant: a future that is already done runs its done-callback (which takes the lock) at once.
        self._lock = threading.RLock()
        self.counters: collections.Counter = collections.Counter()
        self.verdicts: collections.Counter = collections.Counter()
        self.seconds_sum = 0.0
        self.started_at = time.time()

    @property
    def pending(self) -> int:
        return len(self._live)

    def recover(self) -> int:
        """Hand every request the store holds unfinished (accepted by an earlier life of the service that died or
        stopped before its result) to the evaluator, once; returns how many. One that was in progress at
        MAX_SUBMISSIONS unclean deaths gets a stored `crashed` result instead (it may be what kills the service)."""
        unfinished = []
        for row in self.store.unfinished():
            request = EvalRequest.from_dict(json.loads(row.request_json))
            if row.submissions >= MAX_SUBMISSIONS:
                self.store.finish(row.request_id, result_row(result_json(_given_up(request, row.submissions))))
                self.counters["given_up"] += 1
            else:
                unfinished.append((request, row.fingerprint))
        self.store.resubmitted([request.request_id for request, _ in unfinished])
        for request, fingerprint in unfinished:
            while True:
                try:
                    with self._lock:
                        self._hand_over_locked(request, fingerprint)
                    break
                except EvaluatorBusy as exc:  # the evaluator's own queue is full: wait, outside the lock
                    time.sleep(exc.retry_after_s)
        self.counters["recovered"] += len(unfinished)
        return len(unfinished)

    def submit_many(self, payloads: list[Any]) -> list[tuple[str, Future]]:
        """Validate every payload first (BadRequest names the first bad one), then submit all or none."""
        requests = []
        for index, payload in enumerate(payloads):
            try:
                requests.append(parse_request(payload))
            except BadRequest as exc:
                raise BadRequest(f"request {index}: {exc}" if len(payloads) > 1 else str(exc)) from None
        with self._lock:
            if self._closed:
                raise EvaluatorError("the service is shutting down; retry in a moment.")
            known: dict[str, Future] = {}
            fresh: dict[str, tuple[EvalRequest, str, bool]] = {}  # id -> (request, fingerprint, stored already)
            for request in requests:
                request_id, fingerprint = request.request_id, _fingerprint(request)
                if request_id in fresh:  # the same id twice in one batch
                    if fresh[request_id][1] != fingerprint:
                        raise _reused(request_id)
                    continue
                future, stored = self._known_locked(request_id, fingerprint)
                if future is None:
                    fresh[request_id] = (request, fingerprint, stored)
                else:
                    known[request_id] = future
            if self.pending + len(fresh) > self.max_pending:
                self.counters["rejected_busy"] += 1
                raise EvaluatorBusy(f"the service has {self.pending} requests in progress (limit "
                                    f"{self.max_pending}); retry later.", self.pending)
            known.update(self._accept_locked(list(fresh.values())))
            self.counters["deduplicated"] += len(requests) - len(fresh)
            return [(r.request_id, known[r.request_id]) for r in requests]

    def lookup(self, request_id: str) -> Optional[Future]:
        """The future of a request's result, or None when there is none to wait for here (never sent, forgotten,
        or its evaluation failed on our side): the caller sends it again under the same id."""
        with self._lock:
            live = self._live.get(request_id)
            if live is not None:
                return live.future
            row = self.store.get(request_id)
        return _stored_future(row) if row is not None and row.finished else None

    def close(self) -> None:
        """Stop cleanly: requests still in progress are not held against MAX_SUBMISSIONS (they are handed over again
        at the next start), and the store is closed. Close the evaluator after this."""
        with self._lock:
            self._closed = True
            live = list(self._live)
        try:
            self.store.resubmitted(live, delta=-1)
        except EvaluatorError as exc:
            log.warning("could not record the clean stop in the results store: %s", exc)
        self.store.close()

    def _take_back(self, request_id: str) -> None:
        """A hand-over that ended without a result (our failure) is not held against the request's MAX_SUBMISSIONS:
        only service deaths during its evaluation are."""
        try:
            self.store.resubmitted([request_id], delta=-1)
        except EvaluatorError as exc:
            log.warning("request %s: could not record the failed hand-over: %s", request_id, exc)

    def health(self) -> dict[str, Any]:
        stats = self.evaluator.stats()
        rows = worker_rows(stats)
        ready = sum(r["state"] == "ready" for r in rows)
        status = "ok" if ready else ("starting" if any(r["state"] == "starting" for r in rows) else "unavailable")
        return {"status": status, "workers_ready": ready, "workers": len(rows), "pending": self.pending,
                "queue_depth": stats.get("queue_depth", self.pending), "cpu_mode": bool(getattr(
                    self.evaluator, "cpu_mode", all(r["device"] == "cpu" for r in rows)))}

    def workers(self) -> dict[str, Any]:
        stats = self.evaluator.stats()
        rows = [{k: v for k, v in row.items() if k != "pool"} for row in worker_rows(stats)]
        return {"workers": rows, "queue_depth": stats.get("queue_depth", self.pending), "pending": self.pending,
                "counters": dict(stats.get("stats", {})), **compile_stats(stats)}

    def metrics_text(self) -> str:
        """Prometheus text exposition (version 0.0.4)."""
        rows = worker_rows(self.evaluator.stats())
        stored = self.store.counts()
        with self._lock:
            counters, verdicts, seconds = dict(self.counters), dict(self.verdicts), self.seconds_sum
            pending = self.pending
        lines = ["# TYPE krl_requests_total counter"]
        lines += [f'krl_requests_total{{outcome="{k}"}} {v}' for k, v in sorted(counters.items())]
        lines += ["# TYPE krl_results_total counter"]
        lines += [f'krl_results_total{{verdict="{k}"}} {v}' for k, v in sorted(verdicts.items())]
        lines += ["# TYPE krl_evaluation_seconds summary", f"krl_evaluation_seconds_sum {seconds:.6f}",
                  f"krl_evaluation_seconds_count {sum(verdicts.values())}",
                  "# TYPE krl_pending_requests gauge", f"krl_pending_requests {pending}",
                  "# TYPE krl_stored_requests gauge",
                  f'krl_stored_requests{{state="unfinished"}} {stored["unfinished"]}',
                  f'krl_stored_requests{{state="finished"}} {stored["finished"]}',
                  "# TYPE krl_workers gauge"]
        for state in ("ready", "starting", "broken", "dead"):
            lines.append(f'krl_workers{{state="{state}"}} {sum(r["state"] == state for r in rows)}')
        lines.append("# TYPE krl_worker_in_flight gauge")
        for row in rows:
            lines.append(f'krl_worker_in_flight{{node="{_label(row["node"])}",device="{_label(row["device"])}"}} '
                         f'{row["in_flight"] or 0}')
        return "\n".join(lines) + "\n"

    # ---- inside the lock

    def _known_locked(self, request_id: str, fingerprint: str) -> tuple[Optional[Future], bool]:
        """(future of the result to reuse or None, whether the store has the id). A reused id with another
        payload is a BadRequest; an id whose earlier evaluation failed on our side is evaluated again."""
        live = self._live.get(request_id)
        if live is not None:
            if live.fingerprint != fingerprint:
                raise _reused(request_id)
            return live.future, True
        row = self.store.get(request_id)
        if row is None:
            return None, False
        if row.fingerprint != fingerprint:
            raise _reused(request_id)
        return (_stored_future(row) if row.finished else None), True

    def _accept_locked(self, fresh: list[tuple[EvalRequest, str, bool]]) -> dict[str, Future]:
        """Store the requests (one transaction), then hand them to the evaluator; those it refuses are taken back
        out of the store before the caller hears the refusal."""
        self.store.accept([(r.request_id, fp, json.dumps(r.to_dict())) for r, fp, _ in fresh])
        futures = {}
        for index, (request, fingerprint, _) in enumerate(fresh):
            try:
                futures[request.request_id] = self._hand_over_locked(request, fingerprint)
            except EvaluatorError:
                refused = fresh[index:]
                self.store.release([r.request_id for r, _, stored in refused if not stored],
                                   [r.request_id for r, _, stored in refused if stored])
                raise
            self.counters["accepted"] += 1
        return futures

    def _hand_over_locked(self, request: EvalRequest, fingerprint: str) -> Future:
        inner = self.evaluator.submit(request)  # EvaluatorError (closed, busy) goes to the caller as 503
        outer: Future = Future()
        self._live[request.request_id] = _Live(fingerprint, outer)
        started = time.monotonic()
        # An inner future already done runs this at once, in this thread (the lock is reentrant).
        inner.add_done_callback(lambda done: self._on_evaluated(request.request_id, done, started))
        return outer

    def _on_evaluated(self, request_id: str, inner: Future, started: float) -> None:
        """Store the result, then publish it: nobody sees a result that a restart could lose."""
        with self._lock:
            outer = self._live[request_id].future
        error: Optional[BaseException] = None
        try:
            result = inner.result()
            self.store.finish(request_id, result_row(result_json(result)))
        except EvaluatorError as exc:  # the evaluator or the store failed: a retry (or the next start) redoes it
            error = exc
        except BaseException as exc:  # noqa: BLE001 - cancelled, or a bug of ours: still exactly one outcome
            error = EvaluatorError(f"the evaluation failed on our side ({type(exc).__name__}: {exc}); send the "
                                   "request again.")
        if error is not None and not self._closed:
            self._take_back(request_id)
        with self._lock:
            del self._live[request_id]  # after the store write: a re-sent id finds the stored result, never a gap
            if error is None:
                self.verdicts[result.verdict.value] += 1
                self.seconds_sum += time.monotonic() - started
            else:
                self.counters["evaluator_errors"] += 1
        if error is None:
            outer.set_result(result)
        else:
            if not self._closed:
                log.warning("request %s: %s", request_id, error)
            outer.set_exception(error)


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


def _reused(request_id: str) -> BadRequest:
    return BadRequest(f"request_id {request_id!r} was already used for a different request; use a new id for new "
                      "work.")


def _stored_future(row: StoredRequest) -> Future:
    future: Future = Future()
    future.set_result(EvalResult.from_dict(json.loads(row.result_json)))
    return future


def _given_up(request: EvalRequest, submissions: int) -> EvalResult:
    return EvalResult(request_id=request.request_id, problem_id=request.problem_id, verdict=Verdict.CRASHED,
                      attempts=submissions,
                      error_message=f"The evaluation service stopped {submissions} times while this request was in "
                                    "progress (it may be the cause); it is not tried again.")


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


# ---------------------------------------------------------------- HTTP

def create_app(evaluator: EvaluatorLike, token: str, *, store: Optional[ResultStore] = None, max_pending: int = 2000,
               max_results: int = 50_000) -> Starlette:
    """The ASGI app over `evaluator`. Every route needs `Authorization: Bearer <token>`. With a `store` (a
    ResultStore on a file) accepted requests and results outlive the process: its unfinished requests are handed to
    the evaluator here, before the app serves. `app.state.service.close()` before closing the evaluator."""
    if not token:
        raise EvaluatorError("the service needs a non-empty token.")
    service = EvaluationService(evaluator, store=store, max_pending=max_pending, max_results=max_results)
    recovered = service.recover()
    if recovered:
        log.warning("handed %d unfinished request(s) from the results store to the evaluator again", recovered)
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
        ((request_id, future),) = await run_in_threadpool(service.submit_many, [await body(request)])
        if _flag(request, "wait", True):
            return _result_response(await _wait(future))
        return JSONResponse({"request_id": request_id, "status": "done" if future.done() else "pending",
                             "pending": service.pending}, status_code=202)

    async def evaluate_batch(request: Request) -> Response:
        data = await body(request)
        if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
            raise BadRequest('the body must be {"requests": [EvalRequest, ...], "wait": true|false}.')
        if len(data["requests"]) > MAX_BATCH:
            raise BadRequest(f"at most {MAX_BATCH} requests per batch; split it.")
        submitted = await run_in_threadpool(service.submit_many, data["requests"])
        if data.get("wait", True):
            results = [await _wait(future) for _, future in submitted]
            return JSONResponse({"results": [result_json(r) for r in results]})
        return JSONResponse({"request_ids": [rid for rid, _ in submitted], "pending": service.pending},
                            status_code=202)

    async def result(request: Request) -> Response:
        request_id = request.path_params["request_id"]
        future = await run_in_threadpool(service.lookup, request_id)
        if future is None:
            return JSONResponse({"error": f"no result to wait for under {request_id!r} here (never sent, its "
                                          "evaluation failed on our side, or forgotten after "
                                          f"{service.max_results} newer results); send it again with the same id."},
                                status_code=404)
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
