"""The evaluator on a real Ray cluster on this machine: a head and a second node (separate raylet processes with their
own CPUs), CPU-mode pools in the actors. Exactly one result per request when an actor is killed or a node removed."""

from __future__ import annotations

import collections
import os
import random
import signal
import time

import pytest

ray = pytest.importorskip("ray")

from evaluator.api import Verdict  # noqa: E402
from evaluator.scale.cluster import ClusterEvaluator  # noqa: E402
from tests.evaluator.pool_support import (GOOD, WRONG, candidate, request, two_node_ray_cluster,  # noqa: E402
                                          worker_pythonpath)

KINDS = {
    "correct": (GOOD, Verdict.CORRECT, {}),
    "wrong": (WRONG, Verdict.WRONG_OUTPUT, {}),
    "raises": (candidate("raise ValueError('nope')"), Verdict.RUNTIME_ERROR, {}),
    "syntax": (GOOD + "\n)(\n", Verdict.COMPILE_ERROR, {}),
    "segfault": (candidate("ctypes.string_at(0)", prelude="import ctypes"), Verdict.CRASHED, {}),
    "hang": (candidate("while True:\n    pass"), Verdict.TIMEOUT, {"run_timeout_s": 2.0}),
}


def _burst(n: int, seed: int):
    plan = ["segfault"] * 2 + ["hang"] * 2 + ["raises"] * 6 + ["syntax"] * 6 + ["wrong"] * (n // 4)
    plan += ["correct"] * (n - len(plan))
    random.Random(seed).shuffle(plan)
    requests, expected = [], {}
    for kind in plan:
        source, verdict, extra = KINDS[kind]
        req = request(source, measure_timing=False, **extra)
        requests.append(req)
        expected[req.request_id] = verdict
    return requests, expected


def _check_exactly_once(futures, expected):
    results = [f.result(timeout=240) for f in futures]
    assert collections.Counter(r.request_id for r in results) == collections.Counter(list(expected))
    for result in results:
        assert result.verdict == expected[result.request_id], (result.verdict, result.error_message[:300])
    return results


@pytest.fixture(scope="module")
def cluster():
    """A head node and a second node, one CPU each, as separate Ray processes on this machine."""
    with two_node_ray_cluster() as nodes_and_second:
        yield nodes_and_second


@pytest.fixture(scope="module")
def evaluator(cluster, tmp_path_factory):
    options = {"cpu_workers": 1, "spare_per_device": 0, "compile_workers": 0,
               "cache_dir": str(tmp_path_factory.mktemp("cache"))}
    with worker_pythonpath():
        ev = ClusterEvaluator(evaluator_options=options, cpu_actors_per_node=1, start_timeout_s=120)
    yield ev
    ev.close()


def _wait_for(predicate, timeout_s=120.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def test_one_actor_per_node_and_results_say_where_they_ran(evaluator):
    rows = evaluator.stats()["nodes"]
    assert [r["state"] for r in rows] == ["ready", "ready"]
    assert len({r["slot"].split("/")[0] for r in rows}) == 2  # two distinct Ray nodes
    results = list(evaluator.evaluate_many([request(GOOD, measure_timing=False) for _ in range(8)]))
    assert all(r.verdict == Verdict.CORRECT for r in results)
    assert all(r.worker_id.count("/") == 1 and ":" in r.worker_id.split("/")[0] for r in results)
    assert all(r.node for r in results)
    assert len({r.worker_id.split("/")[0] for r in results}) == 2  # both actors took work
    stats = evaluator.stats()
    assert stats["stats"]["results"] >= 8 and sum(r["done"] for r in stats["nodes"]) >= 8


def test_actor_killed_mid_burst_every_request_gets_exactly_one_result(evaluator):
    requests, expected = _burst(40, seed=3)
    futures = [evaluator.submit(r) for r in requests]
    _wait_for(lambda: sum(r["done"] for r in evaluator.stats()["nodes"]) >= 5)
    victim_key, victim = next(iter(evaluator.actor_handles().items()))
    ray.kill(victim, no_restart=True)
    results = _check_exactly_once(futures, expected)
    stats = evaluator.stats()
    assert stats["stats"]["actor_deaths"] >= 1
    assert stats["stats"].get("retries", 0) >= 1  # what it held went elsewhere
    assert any(r.attempts == 2 for r in results)
    # A replacement actor takes the dead one's place on the same node.
    _wait_for(lambda: evaluator.actor_handles().get(victim_key) not in (None, victim)
              and all(r["state"] == "ready" for r in evaluator.stats()["nodes"] if r["state"] != "dead"))


def test_stuck_actor_is_killed_and_its_requests_go_elsewhere(evaluator):
    """An actor that stops answering (SIGSTOP: alive to Ray, silent to us) past its requests' deadlines plus the
    grace is killed, and what it held is evaluated by the other actor."""
    slow = candidate("time.sleep(0.5)\nreturn x.clamp_min(0)", prelude="import time")
    evaluator.stall_grace_s = 2.0
    try:
        requests = [request(slow, measure_timing=False, run_timeout_s=4.0, compile_timeout_s=4.0) for _ in range(12)]
        futures = [evaluator.submit(r) for r in requests]
        _wait_for(lambda: any(r["in_flight"] and r["state"] == "ready" for r in evaluator.stats()["nodes"]))
        victim = next(r for r in evaluator.stats()["nodes"] if r["in_flight"] and r["state"] == "ready")
        os.kill(victim["pid"], signal.SIGSTOP)
        try:
            results = [f.result(timeout=180) for f in futures]
        finally:
            try:
                os.kill(victim["pid"], signal.SIGCONT)  # if it still exists, let it die normally
            except ProcessLookupError:
                pass
        assert [r.verdict for r in results] == [Verdict.CORRECT] * len(requests)
        assert evaluator.stats()["stats"]["stalled_actors"] >= 1
        assert any(r.attempts == 2 for r in results)
    finally:
        evaluator.stall_grace_s = 120.0


def test_backpressure_bounded_queue_reports_depth(evaluator):
    from evaluator.factory import EvaluatorBusy

    slow = candidate("time.sleep(0.3)\nreturn x.clamp_min(0)", prelude="import time")
    evaluator.max_queue = 3
    try:
        futures, busy = [], None
        for _ in range(30):
            try:
                futures.append(evaluator.submit(request(slow, measure_timing=False)))
            except EvaluatorBusy as exc:
                busy = exc
                break
        assert busy is not None and busy.queue_depth == 3
        assert evaluator.stats()["queue_depth"] == 3
        # evaluate_many waits for room instead of failing: every request still gets its result.
        more = [request(GOOD, measure_timing=False) for _ in range(6)]
        assert sorted(r.request_id for r in evaluator.evaluate_many(more)) == sorted(r.request_id for r in more)
        assert all(f.result(timeout=120).verdict == Verdict.CORRECT for f in futures)
    finally:
        evaluator.max_queue = 10_000


@pytest.mark.slow
def test_burst_of_200_mixed_requests_over_two_nodes_exactly_once(evaluator):
    requests, expected = _burst(200, seed=5)
    results = _check_exactly_once([evaluator.submit(r) for r in requests], expected)
    assert len({r.worker_id.split("/")[0] for r in results}) >= 2  # spread over both nodes' actors


def test_node_removed_mid_burst_every_request_gets_exactly_one_result(cluster, evaluator):
    nodes, second = cluster
    requests, expected = _burst(40, seed=11)
    futures = [evaluator.submit(r) for r in requests]
    _wait_for(lambda: sum(r["done"] for r in evaluator.stats()["nodes"]) >= 5)
    nodes.remove_node(second)
    results = _check_exactly_once(futures, expected)
    assert evaluator.stats()["stats"]["actor_deaths"] >= 2  # this one and the actor killed earlier
    assert any(r.attempts == 2 for r in results)
    # What is left keeps serving.
    assert evaluator.evaluate(request(GOOD, measure_timing=False)).verdict == Verdict.CORRECT


@pytest.mark.gpu
def test_two_gpus_one_actor_each_and_a_crash_on_one_leaves_the_other(tmp_path):
    """On a 2-GPU machine (run: pytest -m gpu tests/evaluator/test_cluster.py): one actor per GPU, each its own
    physical GPU, and candidates that crash their worker on one GPU leave the other's results correct."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    if ray.is_initialized():
        pytest.skip("a Ray instance of another test is running")
    ev = ClusterEvaluator(evaluator_options={"spare_per_device": 1, "cache_dir": str(tmp_path)}, start_timeout_s=300)
    try:
        rows = ev.stats()["nodes"]
        assert len(rows) == torch.cuda.device_count()
        assert len({r["device"] for r in rows}) == len(rows)  # distinct physical GPUs
        good = [request(GOOD) for _ in range(16)]
        crash = [request(KINDS["segfault"][0]) for _ in range(4)]
        futures = [ev.submit(r) for r in good + crash]
        results = [f.result(timeout=600) for f in futures]
        assert [r.verdict for r in results[:16]] == [Verdict.CORRECT] * 16
        assert [r.verdict for r in results[16:]] == [Verdict.CRASHED] * 4
        assert len({r.worker_id.split("/")[0] for r in results[:16]}) == 2  # both GPUs served
        assert all(r.device_name and r.gpu_name and r.node for r in results[:16])
    finally:
        ev.close()
        ray.shutdown()
