"""The Cluster tab's data: snapshots of a real `krl serve` service's workers (uvicorn on loopback over a real CPU pool,
reached with the real HttpEvaluator) written by the recorder a run uses; staleness; errors; local runs record none."""

from __future__ import annotations

import json

import pytest

from core.cluster_snapshot import (SNAPSHOT_FILE, ClusterRecorder, is_stale, read_snapshot, start_recording,
                                   take_snapshot, write_snapshot)
from core.config import load_config
from core.run_evaluator import remote_address
from tests.evaluator.pool_support import GOOD, WRONG, make_evaluator, request

pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    from tests.evaluator.service_support import TOKEN, serving

    backing = make_evaluator(str(tmp_path_factory.mktemp("cache")))
    try:
        with serving(backing) as (url, _app):
            yield url, TOKEN
    finally:
        backing.close()


def _client(service, retries: int = 2):
    from evaluator.scale.client import HttpEvaluator

    url, token = service
    return HttpEvaluator(url, token=token, retries=retries)


def test_recorder_writes_the_services_workers_and_a_final_snapshot(service, tmp_path):
    client = _client(service)
    try:
        results = list(client.evaluate_many([request(GOOD), request(WRONG)]))
        assert sorted(r.verdict for r in results) == ["correct", "wrong_output"]
        recorder = ClusterRecorder(client, service[0], tmp_path, every_s=0.2).start()
        recorder.record_soon()
        recorder.stop()
        assert not recorder._thread.is_alive()
    finally:
        client.close()
    snapshot = read_snapshot(tmp_path)
    assert snapshot["final"] is True and snapshot["error"] == ""
    assert snapshot["address"] == service[0] and snapshot["kind"] == "http"
    # The service's pool: one CPU device on this machine, ready, its two results counted by the service.
    assert [(row["node"], row["device"], row["state"]) for row in snapshot["rows"]] == [("local", "cpu", "ready")]
    assert snapshot["totals"]["devices"] == 1 and snapshot["totals"]["ready"] == 1
    assert snapshot["totals"]["done"] >= 2
    assert snapshot["totals"]["queue_depth"] == 0
    # A local pool behind the service counts per pool, not per device: the view shows "—", never a made-up 0.
    assert snapshot["rows"][0]["evals_per_min"] is None and snapshot["totals"]["evals_per_min"] is None
    assert snapshot["totals"]["compile_queue_depth"] is None or snapshot["totals"]["compile_queue_depth"] >= 0
    assert not is_stale(snapshot, snapshot["taken_at"] + 3600)  # final: the last one there will be
    assert [p.name for p in tmp_path.iterdir()] == [SNAPSHOT_FILE]  # no temporary file left behind


def test_an_unreachable_service_is_recorded_as_an_error_keeping_the_last_rows(tmp_path):
    from tests.evaluator.service_support import TOKEN, serving

    backing = make_evaluator(str(tmp_path / "cache"))
    try:
        with serving(backing) as (url, _app):
            client = _client((url, TOKEN), retries=0)
            recorder = ClusterRecorder(client, url, tmp_path / "run", every_s=60)
            good = recorder.record()
        # The service is gone now; the client is still open.
        after = recorder.record()
        client.close()
    finally:
        backing.close()
    assert good["error"] == "" and good["rows"]
    assert "did not answer" in after["error"] and after["rows"] == good["rows"]
    assert after["taken_at"] >= good["taken_at"]
    assert read_snapshot(tmp_path / "run")["error"] == after["error"]


def test_staleness_follows_the_recording_period(tmp_path):
    snapshot = take_snapshot({"kind": "ray", "nodes": [], "queue_depth": 0}, "ray://auto", every_s=5, now=1000.0)
    assert not is_stale(snapshot, 1000.0 + 15)
    assert is_stale(snapshot, 1000.0 + 16)
    slow = take_snapshot({"kind": "ray", "nodes": []}, "ray://auto", every_s=60, now=1000.0)
    assert not is_stale(slow, 1000.0 + 150) and is_stale(slow, 1000.0 + 181)
    write_snapshot(tmp_path, snapshot)
    assert json.loads((tmp_path / SNAPSHOT_FILE).read_text()) == snapshot


def test_a_local_run_records_nothing(tmp_path):
    local = load_config("demo", ["eval.devices=cpu"])
    assert remote_address(local.eval) == "" and remote_address(local.model_dump(mode="json")["eval"]) == ""
    assert start_recording(object(), remote_address(local.eval), tmp_path) is None
    assert read_snapshot(tmp_path) is None
    on_ray = load_config("demo", ["eval.cluster=ray://auto"])
    assert remote_address(on_ray.eval) == "ray://auto" == remote_address(on_ray.model_dump(mode="json")["eval"])
