"""The HTTP client end to end: a real uvicorn on a loopback port serving a real CPU evaluator. Wrong token and
unreachable services are EvaluatorErrors; a restarted client resending a request id gets the stored result."""

from __future__ import annotations

import socket
import time

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from evaluator.api import EvalRequest, EvaluatorError, Verdict  # noqa: E402
from evaluator.scale.client import HttpEvaluator  # noqa: E402
from tests.evaluator.pool_support import GOOD, WRONG, candidate, module_evaluator, request  # noqa: E402
from tests.evaluator.service_support import TOKEN, serving  # noqa: E402


evaluator = module_evaluator()


@pytest.fixture(scope="module")
def service(evaluator):
    with serving(evaluator) as (url, app):
        yield url, app


def test_client_evaluates_through_a_real_server(service):
    url, _ = service
    with HttpEvaluator(url, token=TOKEN) as client:
        assert client.cpu_mode is True
        requests = [request(GOOD, measure_timing=False), request(WRONG, measure_timing=False)]
        results = {r.request_id: r for r in client.evaluate_many(requests)}
        assert results[requests[0].request_id].verdict == Verdict.CORRECT
        assert results[requests[1].request_id].verdict == Verdict.WRONG_OUTPUT
        rows = client.stats()["nodes"]
        assert rows and rows[0]["state"] == "ready"


def test_token_comes_from_the_environment(service, monkeypatch):
    url, _ = service
    monkeypatch.setenv("MY_EVAL_TOKEN", TOKEN)
    with HttpEvaluator(url, token_env="MY_EVAL_TOKEN") as client:
        assert client.evaluate(request(GOOD, measure_timing=False)).verdict == Verdict.CORRECT
    monkeypatch.delenv("MY_EVAL_TOKEN")
    with pytest.raises(EvaluatorError, match="MY_EVAL_TOKEN"):
        HttpEvaluator(url, token_env="MY_EVAL_TOKEN")


def test_wrong_token_and_bad_requests_are_clear_errors(service):
    url, _ = service
    with pytest.raises(EvaluatorError, match="rejected the token"):
        HttpEvaluator(url, token="nope")
    with HttpEvaluator(url, token=TOKEN) as client:
        with pytest.raises(EvaluatorError, match="unknown backend"):
            client.submit(EvalRequest(problem_id="p", reference_source="", candidate_source="", backend="x"))
        bad = request(GOOD, measure_timing=False)
        bad.request_id = "no/slashes"
        with pytest.raises(EvaluatorError, match="HTTP 400"):
            client.evaluate(bad)


def test_unreachable_service_fails_after_retries():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(EvaluatorError, match="did not answer"):
        HttpEvaluator(f"http://127.0.0.1:{port}", token=TOKEN, retries=2, backoff_s=0.05)
    assert time.monotonic() - started < 10


def test_restarted_client_resending_an_id_gets_the_stored_result(service):
    url, app = service
    req = request(GOOD, measure_timing=False)
    with HttpEvaluator(url, token=TOKEN) as first:
        before = first.evaluate(req)
    accepted = app.state.service.counters["accepted"]
    with HttpEvaluator(url, token=TOKEN) as second:  # the driver restarted and sends its request again
        after = second.evaluate(req)
    assert after.to_dict() == before.to_dict()
    assert app.state.service.counters["accepted"] == accepted


def test_client_retries_while_the_service_restarts(evaluator):
    """The service dies while a request is in progress and comes back without its results: the client's request
    still gets one result, re-sent under the same id once the new service answers 404 for it."""
    slow = candidate("time.sleep(2.0)\nreturn x.clamp_min(0)", prelude="import time")
    with serving(evaluator) as (url, app):
        client = HttpEvaluator(url, token=TOKEN, retries=30, backoff_s=0.1, poll_s=1.0)
        future = client.submit(request(slow, measure_timing=False))
        end = time.monotonic() + 30
        while app.state.service.counters["accepted"] < 1:
            assert time.monotonic() < end
            time.sleep(0.05)
    try:
        time.sleep(0.5)  # nobody listens: its polls fail and are retried
        with serving(evaluator, port=int(url.rsplit(":", 1)[1])) as (_, new_app):
            assert future.result(timeout=120).verdict == Verdict.CORRECT
            assert new_app.state.service.counters["accepted"] == 1  # re-sent to the service that forgot it
    finally:
        client.close()


def test_close_settles_open_requests(service):
    url, _ = service
    client = HttpEvaluator(url, token=TOKEN)
    futures = [client.submit(request(GOOD, measure_timing=False)) for _ in range(3)]
    client.close()
    for future in futures:
        try:
            assert future.result(timeout=30).verdict == Verdict.CORRECT
        except EvaluatorError as exc:
            assert "closed" in str(exc)
    with pytest.raises(EvaluatorError):
        client.submit(request(GOOD))
