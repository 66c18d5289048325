"""One contract, three evaluators: the local pool, the Ray cluster (a local Ray) and the HTTP client over a real
uvicorn. Each is opened through open_evaluator; the kinds whose extra is not installed are skipped."""

from __future__ import annotations

import collections
import importlib.util
from concurrent.futures import Future

import pytest

from evaluator.api import EvalRequest, EvaluatorError, Verdict
from evaluator.factory import EvaluatorLike, open_evaluator, worker_rows
from evaluator.isolation import gpu_nodes
from tests.evaluator.pool_support import GOOD, WRONG, candidate, make_evaluator, worker_pythonpath
from tests.evaluator.pool_support import request as make_request

POOL_OPTIONS = {"devices": "cpu", "cpu_workers": 1, "compile_workers": 0, "spare_per_device": 0}
EXPECTED = {"correct": (GOOD, Verdict.CORRECT), "wrong": (WRONG, Verdict.WRONG_OUTPUT),
            "raises": (candidate("raise ValueError('nope')"), Verdict.RUNTIME_ERROR),
            "syntax": (GOOD + "\n)(\n", Verdict.COMPILE_ERROR)}


def _needs(*modules: str):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (an extra is not installed)")


@pytest.fixture(params=[pytest.param("local"), pytest.param("ray", marks=_needs("ray")),
                        pytest.param("http", marks=_needs("uvicorn", "starlette", "httpx"))])
def opened(request, tmp_path):
    kind = request.param
    options = dict(POOL_OPTIONS, cache_dir=str(tmp_path / "cache"))
    if kind == "local":
        with worker_pythonpath():
            yield kind, open_evaluator("local", **options)
    elif kind == "ray":
        with worker_pythonpath():
            options.pop("devices")
            yield kind, open_evaluator("ray://local", evaluator_options=options, num_cpus=2)
    else:
        from tests.evaluator.service_support import TOKEN, serving

        backing = make_evaluator(str(tmp_path / "cache"), spare_per_device=0)
        try:
            with serving(backing) as (url, _):
                yield kind, open_evaluator(url, token=TOKEN)
        finally:
            backing.close()


def test_every_evaluator_keeps_the_same_contract(opened):
    kind, evaluator = opened
    try:
        assert isinstance(evaluator, EvaluatorLike)
        # submit: a Future of one EvalResult; candidates' faults are verdicts.
        planned = [(name, make_request(source, measure_timing=False)) for name, (source, _) in EXPECTED.items()]
        futures = {req.request_id: evaluator.submit(req) for _, req in planned}
        assert all(isinstance(f, Future) for f in futures.values())
        for name, req in planned:
            result = futures[req.request_id].result(timeout=180)
            assert result.request_id == req.request_id
            assert result.verdict == EXPECTED[name][1], (kind, name, result.error_message[:300])
        # evaluate_many: every request's result exactly once.
        batch = [make_request(GOOD if i % 2 else WRONG, measure_timing=False) for i in range(6)]
        seen = collections.Counter(r.request_id for r in evaluator.evaluate_many(batch))
        assert seen == collections.Counter(r.request_id for r in batch)
        # stats: rows per node/device with real state.
        rows = worker_rows(evaluator.stats())
        assert rows and any(row["state"] == "ready" for row in rows), rows
        # our faults are EvaluatorError, raised by submit.
        with pytest.raises(EvaluatorError):
            evaluator.submit(EvalRequest(problem_id="p", reference_source="", candidate_source="", backend="x"))
    finally:
        evaluator.close()
    # closed: a new request is refused as EvaluatorError (raised, or held by its future).
    try:
        future = evaluator.submit(make_request(GOOD))
    except EvaluatorError:
        return
    with pytest.raises(EvaluatorError):
        future.result(timeout=30)


@pytest.mark.parametrize("address", ["ray:/x", "ftp://host", "cluster"])
def test_unknown_addresses_are_clear_errors(address):
    with pytest.raises(EvaluatorError, match="unknown evaluator address"):
        open_evaluator(address)


def test_slots_per_gpu_auto_is_one_per_two_cores_and_more_is_warned(monkeypatch):
    """Past one slot per two cores the host bounds the rate and misreads speedups (16 slots on 16 cores, an H100)."""
    import warnings

    from evaluator.local import evaluator as local_evaluator

    monkeypatch.setattr(local_evaluator.os, "sched_getaffinity", lambda _pid: set(range(16)))
    assert local_evaluator.slots_per_gpu("auto", 1) == 8 and local_evaluator.slots_per_gpu("auto", 4) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert local_evaluator.slots_per_gpu(8, 1) == 8  # within the cores: no warning
    with pytest.warns(RuntimeWarning, match="one slot per two CPU cores"):
        assert local_evaluator.slots_per_gpu(16, 1) == 16
    with pytest.raises(EvaluatorError, match="a number or 'auto'"):
        local_evaluator.slots_per_gpu("many", 1)


def test_auto_slots_are_shared_among_the_gpus_evaluating_on_the_host(monkeypatch):
    """The driver's lock is one per host: "auto" gives 8 slots in all to a pool over 4 GPUs, and to 4 Ray actors each
    given one GPU of a 4-GPU host (counted from the driver's listing, as recorded on a 4 x H200 host); a pool over one
    GPU of that host keeps its 8."""
    from evaluator.local import evaluator as local_evaluator

    monkeypatch.setattr(local_evaluator.os, "sched_getaffinity", lambda _pid: set(range(64)))
    assert local_evaluator.slots_per_gpu("auto", 4) == 2
    assert local_evaluator.slots_per_gpu("auto", 1) == 8
    assert local_evaluator.slots_per_gpu("auto", 1, sharing_gpus=16) == 1  # never none
    pytest.importorskip("ray")
    from evaluator.scale.cluster import actor_slots

    four = [gpu_nodes.HostGpu(bus=f"0000:{n}:00.0", uuid=f"GPU-{n}", minor=n, model="NVIDIA H200") for n in range(4)]
    monkeypatch.setattr(gpu_nodes, "host_gpus", lambda: four)
    assert actor_slots("auto") == 2
    assert actor_slots(6) == 6  # a number is taken as given
    monkeypatch.setattr(gpu_nodes, "host_gpus", lambda: [])  # no driver listing: the actor's one GPU
    assert actor_slots("auto") == 8
