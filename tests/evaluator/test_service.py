"""The HTTP service through an in-process ASGI client against a real CPU evaluator: auth on every route, verdicts
as 200, our faults as 400/503 (never 500), idempotent request ids, asynchronous results, health and metrics."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient  # noqa: E402

from evaluator.api import EvalResult, Verdict  # noqa: E402
from evaluator.scale.service import create_app  # noqa: E402
from tests.evaluator.pool_support import GOOD, WRONG, candidate, make_evaluator, module_evaluator, request  # noqa: E402

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROUTES = [("POST", "/v1/evaluate"), ("POST", "/v1/evaluate/batch"), ("GET", "/v1/results/abc"),
          ("GET", "/v1/health"), ("GET", "/v1/workers"), ("GET", "/metrics")]


evaluator = module_evaluator()


@pytest.fixture(scope="module")
def client(evaluator):
    with TestClient(create_app(evaluator, TOKEN), raise_server_exceptions=True) as test_client:
        yield test_client


def _payload(source: str, **kwargs) -> dict:
    return request(source, measure_timing=False, **kwargs).to_dict()


@pytest.mark.parametrize("method,path", ROUTES)
@pytest.mark.parametrize("header", [None, "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x"])
def test_every_route_needs_the_token(client, method, path, header):
    headers = {"Authorization": header} if header else {}
    response = client.request(method, path, headers=headers, json={})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


def test_verdicts_are_200_whatever_the_candidate_did(client):
    cases = {Verdict.CORRECT: GOOD, Verdict.WRONG_OUTPUT: WRONG,
             Verdict.RUNTIME_ERROR: candidate("raise ValueError('nope')"),
             Verdict.CRASHED: candidate("ctypes.string_at(0)", prelude="import ctypes")}
    for verdict, source in cases.items():
        response = client.post("/v1/evaluate", json=_payload(source), headers=AUTH)
        assert response.status_code == 200, response.text
        result = EvalResult.from_dict(response.json())
        assert result.verdict == verdict


@pytest.mark.parametrize("body,needle", [
    ({"problem_id": "p"}, "missing"),
    ({**_payload(GOOD), "bogus": 1}, "unknown field"),
    ({**_payload(GOOD), "backend": "fortran"}, "unknown backend"),
    ({**_payload(GOOD), "timing_trials": "many"}, "timing_trials"),
    ({**_payload(GOOD), "measure_timing": 1}, "measure_timing"),
    ({**_payload(GOOD), "size_overrides": {"N": "big"}}, "size_overrides"),
    ({**_payload(GOOD), "request_id": "../etc"}, "request_id"),
    ([1, 2], "JSON object"),
])
def test_bad_requests_are_400_with_a_reason(client, body, needle):
    response = client.post("/v1/evaluate", json=body, headers=AUTH)
    assert response.status_code == 400
    assert needle in response.json()["error"]


def test_invalid_json_and_bad_batches_are_400(client):
    assert client.post("/v1/evaluate", content=b"{not json", headers=AUTH).status_code == 400
    assert client.post("/v1/evaluate/batch", json={"requests": "x"}, headers=AUTH).status_code == 400
    bad = client.post("/v1/evaluate/batch", json={"requests": [_payload(GOOD), {"problem_id": 3}]}, headers=AUTH)
    assert bad.status_code == 400 and bad.json()["error"].startswith("request 1:")
    assert client.get("/v1/results/x?wait_s=soon", headers=AUTH).status_code in (400, 404)


def test_oversized_body_is_413_unread(client, monkeypatch):
    import evaluator.scale.service as service_module

    monkeypatch.setattr(service_module, "MAX_BODY_BYTES", 4096)
    payload = _payload(GOOD + "\n# " + "x" * 8000)
    response = client.post("/v1/evaluate", json=payload, headers=AUTH)
    assert response.status_code == 413 and "smaller" in response.json()["error"]

    def chunked():  # no Content-Length: the size is counted while reading
        yield json.dumps(payload).encode()

    response = client.post("/v1/evaluate", content=chunked(), headers=AUTH)
    assert response.status_code == 413


def test_same_request_id_is_evaluated_once(client):
    service = client.app.state.service
    payload = _payload(GOOD)
    accepted = service.counters["accepted"]
    first = client.post("/v1/evaluate", json=payload, headers=AUTH).json()
    again = client.post("/v1/evaluate", json=payload, headers=AUTH).json()
    assert again == first  # the stored result, not a second evaluation (timings would differ)
    assert service.counters["accepted"] == accepted + 1
    assert service.counters["deduplicated"] >= 1
    changed = dict(payload, candidate_source=WRONG)
    response = client.post("/v1/evaluate", json=changed, headers=AUTH)
    assert response.status_code == 400 and "already used" in response.json()["error"]


def test_asynchronous_submit_then_fetch_by_id(client):
    payload = _payload(WRONG)
    response = client.post("/v1/evaluate?wait=false", json=payload, headers=AUTH)
    assert response.status_code == 202 and response.json()["request_id"] == payload["request_id"]
    fetched = client.get(f"/v1/results/{payload['request_id']}?wait_s=60", headers=AUTH)
    assert fetched.status_code == 200
    assert fetched.json()["verdict"] == "wrong_output"
    assert client.get("/v1/results/never-sent", headers=AUTH).status_code == 404


def test_batch_returns_results_in_request_order(client):
    payloads = [_payload(GOOD), _payload(WRONG), _payload(GOOD + "\n)(\n")]
    response = client.post("/v1/evaluate/batch", json={"requests": payloads}, headers=AUTH)
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["request_id"] for r in results] == [p["request_id"] for p in payloads]
    assert [r["verdict"] for r in results] == ["correct", "wrong_output", "compile_error"]
    queued = client.post("/v1/evaluate/batch", json={"requests": [_payload(GOOD)], "wait": False}, headers=AUTH)
    assert queued.status_code == 202 and len(queued.json()["request_ids"]) == 1


def _wait_until_healthy(client, timeout_s: float = 120.0):
    """Poll /v1/health: 503 (starting, or unavailable before the pool has spawned anything) until a worker is
    ready, then 200 with status ok."""
    end = time.monotonic() + timeout_s
    while True:
        response = client.get("/v1/health", headers=AUTH)
        assert (response.status_code == 200) == (response.json()["status"] == "ok")
        if response.status_code == 200:
            return response
        assert time.monotonic() < end
        time.sleep(0.2)


def test_health_workers_and_metrics_report_real_state(client):
    health = _wait_until_healthy(client)
    assert health.json()["status"] == "ok" and health.json()["workers_ready"] >= 1
    assert health.json()["cpu_mode"] is True
    rows = client.get("/v1/workers", headers=AUTH).json()["workers"]
    assert rows and rows[0]["device"] == "cpu" and rows[0]["state"] == "ready"
    client.post("/v1/evaluate", json=_payload(GOOD), headers=AUTH)
    metrics = client.get("/metrics", headers=AUTH)
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert 'krl_results_total{verdict="correct"}' in metrics.text
    assert 'krl_workers{state="ready"} 1' in metrics.text


def test_full_queue_is_503_with_retry_after(evaluator):
    slow = candidate("time.sleep(1.0)\nreturn x.clamp_min(0)", prelude="import time")
    with TestClient(create_app(evaluator, TOKEN, max_pending=1)) as client:
        first = client.post("/v1/evaluate?wait=false", json=_payload(slow), headers=AUTH)
        assert first.status_code == 202
        second = client.post("/v1/evaluate?wait=false", json=_payload(GOOD), headers=AUTH)
        assert second.status_code == 503
        assert second.headers["retry-after"] and second.json()["queue_depth"] == 1
        done = client.get(f"/v1/results/{first.json()['request_id']}?wait_s=60", headers=AUTH)
        assert done.json()["verdict"] == "correct"


def test_closed_evaluator_is_503_not_500(tmp_path):
    ev = make_evaluator(str(tmp_path))
    ev.close()
    with TestClient(create_app(ev, TOKEN), raise_server_exceptions=True) as client:
        response = client.post("/v1/evaluate", json=_payload(GOOD), headers=AUTH)
        assert response.status_code == 503 and "closed" in response.json()["error"]
        health = client.get("/v1/health", headers=AUTH)
        assert health.status_code == 503 and health.json()["status"] == "unavailable"


def test_health_waits_for_workers_before_saying_ok(tmp_path):
    ev = make_evaluator(str(tmp_path))
    try:
        with TestClient(create_app(ev, TOKEN)) as client:
            response = _wait_until_healthy(client)
            assert response.json()["workers_ready"] >= 1
    finally:
        ev.close()


def test_an_empty_token_is_refused(evaluator):
    from evaluator.api import EvaluatorError

    with pytest.raises(EvaluatorError):
        create_app(evaluator, "")


# ---------------------------------------------------------------- across restarts, on a results store file

def _store_app(evaluator, path):
    from evaluator.scale.result_store import ResultStore

    return create_app(evaluator, TOKEN, store=ResultStore(str(path)))


def test_a_restarted_service_answers_finished_ids_from_its_store(evaluator, tmp_path):
    path = tmp_path / "results.sqlite"
    payload = _payload(GOOD)
    first_app = _store_app(evaluator, path)
    with TestClient(first_app) as client:
        first = client.post("/v1/evaluate", json=payload, headers=AUTH).json()
    first_app.state.service.close()

    again_app = _store_app(evaluator, path)
    try:
        service = again_app.state.service
        with TestClient(again_app) as client:
            assert client.post("/v1/evaluate", json=payload, headers=AUTH).json() == first  # same timings: stored
            assert client.get(f"/v1/results/{payload['request_id']}", headers=AUTH).json() == first
            changed = client.post("/v1/evaluate", json=dict(payload, candidate_source=WRONG), headers=AUTH)
            assert changed.status_code == 400 and "already used" in changed.json()["error"]
            metrics = client.get("/metrics", headers=AUTH).text
        assert service.counters["accepted"] == 0 and service.counters["deduplicated"] == 1
        assert 'krl_stored_requests{state="finished"} 1' in metrics
    finally:
        again_app.state.service.close()


def test_work_whose_evaluation_failed_on_our_side_is_evaluated_at_the_next_start(evaluator, tmp_path):
    from evaluator.scale.result_store import ResultStore

    path = tmp_path / "results.sqlite"
    slow = _payload(candidate("time.sleep(3.0)\nreturn x.clamp_min(0)", prelude="import time"))
    failing = make_evaluator(str(tmp_path / "cache"))
    first_app = _store_app(failing, path)
    with TestClient(first_app) as client:
        assert client.post("/v1/evaluate?wait=false", json=slow, headers=AUTH).status_code == 202
        failing.close()  # the evaluator goes away under the request: no result, and none invented
        end = time.monotonic() + 60
        while first_app.state.service.pending:
            assert time.monotonic() < end
            time.sleep(0.1)
        fetched = client.get(f"/v1/results/{slow['request_id']}", headers=AUTH)
        assert fetched.status_code == 404 and "send it again" in fetched.json()["error"]
        refused = client.post("/v1/evaluate", json=slow, headers=AUTH)
        assert refused.status_code == 503  # evaluated again, failed again on our side: not counted as a submission
    first_app.state.service.close()

    second_app = _store_app(evaluator, path)
    try:
        assert second_app.state.service.counters["recovered"] == 1
        with TestClient(second_app) as client:
            done = client.get(f"/v1/results/{slow['request_id']}?wait_s=60", headers=AUTH)
            assert done.status_code == 200 and done.json()["verdict"] == "correct"
    finally:
        second_app.state.service.close()
    store = ResultStore(str(path))
    try:
        # Submissions count hand-overs that ended in a result or in a service death: the two failed ones do not.
        assert store.get(slow["request_id"]).submissions == 1 and store.counts()["unfinished"] == 0
    finally:
        store.close()


def test_a_request_in_progress_at_three_unclean_deaths_is_given_up_as_crashed(evaluator, tmp_path):
    from evaluator.scale.result_store import ResultStore
    from evaluator.scale.service import MAX_SUBMISSIONS

    path = str(tmp_path / "results.sqlite")
    payload = _payload(GOOD)
    store = ResultStore(path)
    store.accept([(payload["request_id"], "fp", json.dumps(payload))])
    store.resubmitted([payload["request_id"]] * (MAX_SUBMISSIONS - 1))  # what two more lives that died leave
    store.close()
    app = _store_app(evaluator, path)
    try:
        assert app.state.service.counters["given_up"] == 1 and app.state.service.counters["recovered"] == 0
        with TestClient(app) as client:
            result = client.get(f"/v1/results/{payload['request_id']}", headers=AUTH).json()
        assert result["verdict"] == "crashed" and "stopped 3 times" in result["error_message"]
    finally:
        app.state.service.close()


def test_a_clean_stop_hands_unfinished_work_to_the_next_start_without_counting_it(evaluator, tmp_path):
    from evaluator.scale.result_store import ResultStore

    path = str(tmp_path / "results.sqlite")
    slow = _payload(candidate("time.sleep(2.0)\nreturn x.clamp_min(0)", prelude="import time"))
    first_app = _store_app(evaluator, path)
    with TestClient(first_app) as client:
        assert client.post("/v1/evaluate?wait=false", json=slow, headers=AUTH).status_code == 202
    first_app.state.service.close()  # still in progress: handed over again at the next start, not held against it
    store = ResultStore(path)
    assert store.get(slow["request_id"]).submissions == 0 and not store.get(slow["request_id"]).finished
    store.close()

    second_app = _store_app(evaluator, path)
    try:
        with TestClient(second_app) as client:
            done = client.get(f"/v1/results/{slow['request_id']}?wait_s=60", headers=AUTH)
        assert done.status_code == 200 and done.json()["verdict"] == "correct"
    finally:
        second_app.state.service.close()
