"""CUDA builds on Ray compile actors of a real two-node cluster on this machine: the head (one logical GPU, CPU-mode
pool) evaluates, both nodes compile; builds cross the object store and are verified where they are evaluated."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import textwrap
import time

import pytest

ray = pytest.importorskip("ray")

from evaluator.api import Verdict  # noqa: E402
from evaluator.scale.cluster import ClusterEvaluator  # noqa: E402
from evaluator.scale.service import EvaluationService  # noqa: E402
from evaluator.scale.cluster_compile import BuildRefused, CompileActor, install_build, pack_build  # noqa: E402
from evaluator.build.artefacts import entry_key, lookup  # noqa: E402
from tests.evaluator.pool_support import ROOT, candidate, request, two_node_ray_cluster  # noqa: E402


def cpp_candidate(answer: int, prelude: str = "") -> str:
    """A real build with CPU-only torch: a C++ library without torch headers (links in seconds), as test_compile's."""
    return textwrap.dedent(f'''
        import torch
        from torch.utils.cpp_extension import load_inline
        {prelude}
        lib_path = load_inline(name="answer_ext", cpp_sources='extern "C" int krl_answer() {{ return {answer}; }}',
                               is_python_module=False, no_implicit_headers=True)
    ''')


def slow_candidate(answer: int) -> str:
    """Its module sleeps in the compile worker before asking for the build: a build long enough to kill mid-way."""
    return cpp_candidate(answer, prelude="import time; time.sleep(8)")


@pytest.fixture(scope="module")
def cluster():
    """Head: 2 CPUs and one logical GPU (its actor's pool is in CPU mode: there is no real GPU), so it evaluates
    and compiles with its CPU left; node 2: 1 CPU and no GPU, so in a cluster with GPUs it only compiles."""
    with two_node_ray_cluster(head_cpus=2, head_gpus=1) as nodes_and_second:
        yield nodes_and_second


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    """The evaluating node's cache and the compile actors' cache: apart, so a build there arrives only by transfer."""
    return str(tmp_path_factory.mktemp("eval-cache")), str(tmp_path_factory.mktemp("compile-cache"))


@pytest.fixture(scope="module")
def evaluator(cluster, caches):
    eval_cache, compile_cache = caches
    options = {"cpu_workers": 1, "spare_per_device": 0, "compile_workers": 0, "cache_dir": eval_cache}
    ev = ClusterEvaluator(evaluator_options=options, start_timeout_s=300, compile_cache_dir=compile_cache,
                          actor_env={"PYTHONPATH": ROOT, "KRL_WARM_PCH": "0"})
    _wait_for(lambda: [r["state"] for r in ev.stats()["compile_nodes"]] == ["ready", "ready"])
    yield ev
    ev.close()


def _wait_for(predicate, timeout_s=240.0, evaluator=None):
    # Generous (a replacement compile actor took 25 s under four busy loops on the 2-core machine), and below
    # pytest's own 300 s so that a miss says what the compile nodes and Ray's actors were doing.
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return
        time.sleep(0.1)
    rows = evaluator.stats()["compile_nodes"] if evaluator is not None else "?"
    raise AssertionError(f"condition not reached in {timeout_s:.0f} s; compile nodes: {rows}; "
                         f"Ray's actors: {_ray_actors()}")


def _ray_actors() -> list:
    try:  # the GCS's own table: ray.util.state needs the dashboard, which these clusters run without
        from ray._private import state

        return [(a.get("ActorClassName"), a.get("State"), a.get("Pid"), str(a.get("DeathCause", ""))[:400])
                for a in state.actors().values()]
    except Exception as exc:  # a diagnostic only: say why it is missing
        return [f"Ray's actor table is unreadable: {exc!r}"]


def _entries(cache: str) -> list[str]:
    folder = os.path.join(cache, "cuda")
    return sorted(e for e in os.listdir(folder) if "." not in e) if os.path.isdir(folder) else []


def _sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _published(cache: str, source: str):
    wanted = _sha256(source)
    for entry in _entries(cache):
        manifest = json.load(open(os.path.join(cache, "cuda", entry, "manifest.json")))
        if manifest["source_sha256"] == wanted:
            return lookup(cache, entry)
    return None


def _compile_row(ev, gpu_node: bool):
    return next(r for r in ev.stats()["compile_nodes"] if r["gpu_node"] == gpu_node and r["state"] == "ready")


def test_the_cpu_node_builds_and_the_evaluating_node_verifies_and_publishes(evaluator, caches):
    eval_cache, compile_cache = caches
    rows = evaluator.stats()["nodes"]
    assert len(rows) == 1 and rows[0]["device"] == "gpu0"  # the GPU-less node evaluates nothing
    source = cpp_candidate(42)
    result = evaluator.evaluate(request(source, backend="cuda"))
    # Built on a compile actor, installed here; CPU mode then says it cannot run CUDA kernels.
    assert result.verdict == Verdict.RUNTIME_ERROR and result.compiled and "CPU mode" in result.error_message
    assert result.phase_times_s["build_install"] > 0 and result.phase_times_s["compile"] > 0
    stats = evaluator.stats()
    assert _compile_row(evaluator, gpu_node=False)["done"] == 1  # ties go to the node without GPUs
    assert _compile_row(evaluator, gpu_node=True)["done"] == 0
    assert stats["compiles_per_min"] > 0 and stats["compile_queue_depth"] == 0 and stats["compiles_in_flight"] == 0
    assert stats["stats"]["compile_bytes_sent"] > 0
    # The service's /v1/workers (and so the HTTP client and the TUI's cluster view) carries the compile figures.
    served = EvaluationService(evaluator).workers()
    assert served["compiles_per_min"] > 0 and len(served["compile_nodes"]) == len(stats["compile_nodes"])
    built, received = _published(compile_cache, source), _published(eval_cache, source)
    assert built is not None and received is not None  # verified entries in both nodes' caches
    assert received.so_path.startswith(eval_cache) and received.artefact_sha256 == built.artefact_sha256
    assert ctypes.CDLL(received.so_path).krl_answer() == 42
    again = evaluator.evaluate(request(source, backend="cuda"))
    assert "compile" in again.cache_hits and _entries(eval_cache) == [entry_key(_sha256(source), built.key)]


def test_a_forged_or_malformed_build_is_refused_and_never_published(evaluator, caches, tmp_path):
    eval_cache, compile_cache = caches
    source = cpp_candidate(7)
    handle = evaluator.compile_actor_handles()[_compile_row(evaluator, gpu_node=False)["slot"]]
    payload = json.dumps(request(source, backend="cuda").to_dict())
    reply_ref, blob_ref = handle.compile.options(num_returns=2).remote(payload, "")
    reply, blob = json.loads(ray.get(reply_ref, timeout=120)), ray.get(blob_ref, timeout=60)
    manifest = json.loads(reply["manifest"])
    assert len(blob) == manifest["artefacts"][0]["length"] > 1000  # a real library's bytes

    def forged(change):
        copy = json.loads(reply["manifest"])
        change(copy)
        return json.dumps(copy)

    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0xFF
    evil = cpp_candidate(666)

    def claim_hash(m):  # the manifest claims the flipped bytes' hash for the artefact, the record does not
        m["artefacts"][0]["sha256"] = hashlib.sha256(bytes(flipped)).hexdigest()

    cases = [
        (reply["manifest"], bytes(flipped), source, "do not hash"),
        (forged(claim_hash), bytes(flipped), source, "without its artefact, or with another"),
        (reply["manifest"], blob, evil, "another candidate source"),
        (forged(lambda m: m["artefacts"][0].update(length=len(blob) + 1)), blob, source, "outside the bytes"),
        (forged(lambda m: m["artefacts"].clear()), blob, source, "without its artefact"),
        (forged(lambda m: m["record"]["artifacts"]["builds"][0].update(module_name="os; import sys")), blob, source,
         "not a Python identifier"),
        (forged(lambda m: m.update(transfer="carrier pigeon")), blob, source, "no known way"),
        ("{not json", blob, source, "unreadable"),
    ]
    fresh = str(tmp_path / "fresh")
    for manifest_json, data, candidate_source, why in cases:
        with pytest.raises(BuildRefused, match=why):
            install_build(manifest_json, data, fresh, candidate_source)
        assert _entries(fresh) == []  # nothing published, nothing left behind
    assert not [e for e in os.listdir(os.path.join(fresh, "cuda")) if e.startswith(".build-")]
    # Through the evaluating actor itself: the forged bytes are refused there too, and its cache keeps nothing.
    eval_handle = next(iter(evaluator.actor_handles().values()))
    answer = json.loads(ray.get(eval_handle.evaluate.remote(payload, reply["manifest"], bytes(flipped)), timeout=60))
    assert "do not hash" in answer["refused"] and _published(eval_cache, source) is None
    # The same build, untouched, installs; a shared-folder manifest verifies only against the cache that holds it.
    record = install_build(reply["manifest"], blob, fresh, source)
    assert record["ok"] and ctypes.CDLL(record["artifacts"]["builds"][0]["so_path"]).krl_answer() == 7
    shared, nothing = pack_build(manifest["record"], compile_cache, "shared_folder")
    assert nothing == b"" and install_build(shared, b"", compile_cache, source)["ok"]
    with pytest.raises(BuildRefused, match="missing or failed verification"):
        install_build(shared, b"", str(tmp_path / "elsewhere"), source)


def test_a_compile_actor_killed_mid_build_is_retried_once_elsewhere_then_crashed(evaluator):
    def kill_the_one_building(not_on: str = "") -> str:
        def building():
            return [r for r in evaluator.stats()["compile_nodes"]
                    if r["in_flight"] and r["state"] == "ready" and r["slot"] != not_on]

        _wait_for(building)
        slot = building()[0]["slot"]
        ray.kill(evaluator.compile_actor_handles()[slot], no_restart=True)
        return slot

    deaths = evaluator.stats()["stats"].get("compile_actor_deaths", 0)
    future = evaluator.submit(request(slow_candidate(1), backend="cuda", compile_timeout_s=120))
    first_victim = kill_the_one_building()
    result = future.result(timeout=240)
    assert result.verdict == Verdict.RUNTIME_ERROR and result.compiled, result.error_message  # built elsewhere
    assert result.attempts == 2
    stats = evaluator.stats()
    assert stats["stats"]["compile_actor_deaths"] == deaths + 1 and stats["stats"]["compile_retries"] >= 1
    assert any(r["slot"] != first_victim and r["done"] >= 1 for r in stats["compile_nodes"] if r["state"] == "ready")
    # Killed on its second try as well: one result, `crashed`, saying it is our fault.
    _wait_for(lambda: [r["state"] for r in evaluator.stats()["compile_nodes"]].count("ready") == 2, evaluator=evaluator)
    future = evaluator.submit(request(slow_candidate(2), backend="cuda", compile_timeout_s=120))
    kill_the_one_building(not_on=kill_the_one_building())  # (the retry goes to the node it has not failed on)
    result = future.result(timeout=240)
    assert result.verdict == Verdict.CRASHED and result.attempts == 2
    assert "infrastructure failure" in result.error_message and "compile actor" in result.error_message


class TamperingCompileActor(CompileActor):
    """A compile node whose bytes change on the way (a bad disk, memory, or someone in between): one bit flipped."""

    async def compile(self, request_json: str, arch: str):
        reply, blob = await super().compile(request_json, arch)
        return reply, (bytes([blob[0] ^ 1]) + blob[1:]) if blob else blob


def test_builds_refused_by_the_evaluating_node_are_retried_once_then_crashed(evaluator, caches):
    """Both compile nodes tamper: the evaluating node refuses the first build, the request is built again on the
    other node, refused again, and gets one `crashed` result that says it is our fault."""
    eval_cache, _ = caches
    honest_class = evaluator._fleet._actor_class
    evaluator._fleet._actor_class = ray.remote(TamperingCompileActor)  # what replacements are started as
    try:
        honest_pids = {r["pid"] for r in evaluator.stats()["compile_nodes"]}
        for handle in evaluator.compile_actor_handles().values():
            ray.kill(handle, no_restart=True)

        def tampering_ready() -> bool:  # the driver sees a death at its next call to the actor (stats, every 2 s)
            rows = [r for r in evaluator.stats()["compile_nodes"] if r["state"] == "ready"]
            return len(rows) == 2 and not {r["pid"] for r in rows} & honest_pids

        _wait_for(tampering_ready, evaluator=evaluator)
        refused = evaluator.stats()["stats"].get("builds_refused", 0)
        source = cpp_candidate(99)
        result = evaluator.submit(request(source, backend="cuda")).result(timeout=240)
        assert result.verdict == Verdict.CRASHED and result.attempts == 2
        assert "infrastructure failure" in result.error_message and "refused" in result.error_message
        assert "do not hash" in result.error_message
        assert evaluator.stats()["stats"]["builds_refused"] == refused + 2
        assert _published(eval_cache, source) is None
    finally:
        evaluator._fleet._actor_class = honest_class


def test_a_build_lost_with_its_compile_node_is_built_again_elsewhere(cluster, evaluator):
    """The compile node dies after building, before the evaluating node fetched the bytes (they lived in its object
    store): the evaluation fails with ObjectLostError, the request is built again on the head, and evaluated once.
    (Last of the CPU tests: it removes node 2.)"""
    nodes, second = cluster
    pids = {r["pid"] for r in evaluator.stats()["compile_nodes"]}
    for handle in evaluator.compile_actor_handles().values():  # honest compile actors again, after the last test
        ray.kill(handle, no_restart=True)
    _wait_for(lambda: len([r for r in evaluator.stats()["compile_nodes"]
                           if r["state"] == "ready" and r["pid"] not in pids]) == 2, evaluator=evaluator)
    # The evaluating actor is kept busy (2 in flight = its capacity), so the built request waits in the driver.
    slow = candidate("time.sleep(4)\nreturn x.clamp_min(0)", prelude="import time")
    busy = [evaluator.submit(request(slow, measure_timing=False)) for _ in range(2)]
    padded = cpp_candidate(5, prelude="").replace("return 5; }", "return 5; } char krl_pad[1 << 20] = {1};")
    future = evaluator.submit(request(padded, backend="cuda"))  # 1 MiB: its bytes stay in node 2's object store
    _wait_for(lambda: _compile_row(evaluator, gpu_node=False)["done"] == 1)
    assert not future.done() and evaluator.stats()["stats"].get("builds_lost", 0) == 0
    nodes.remove_node(second)
    result = future.result(timeout=240)
    assert result.verdict == Verdict.RUNTIME_ERROR and result.compiled, result.error_message
    assert result.attempts == 2 and evaluator.stats()["stats"]["builds_lost"] == 1
    assert [f.result(timeout=120).verdict for f in busy] == [Verdict.CORRECT] * 2

@pytest.mark.gpu
def test_on_a_gpu_the_cluster_build_is_loaded_from_the_evaluating_nodes_cache(tmp_path):
    """On the GPU machine (pytest -m gpu tests/evaluator/test_cluster_compile.py): a compile actor builds a real CUDA
    extension (torch headers, nvcc) into its own cache; the GPU actor verifies it, publishes it into its cache and its
    runner loads it from there. So both sides' cache keys agree (GPU arch, toolchain) and the GPU side builds
    nothing itself."""
    import torch

    from tests.evaluator.test_compile import RELU_CUDA

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    if ray.is_initialized():
        pytest.skip("a Ray instance of another test is running")
    eval_cache, compile_cache = str(tmp_path / "eval"), str(tmp_path / "compile")
    ev = ClusterEvaluator(evaluator_options={"spare_per_device": 0, "cache_dir": eval_cache}, start_timeout_s=300,
                          compile_workers_per_node=2, compile_cache_dir=compile_cache)
    try:
        first = ev.evaluate(request(RELU_CUDA, backend="cuda", compile_timeout_s=900))
        second = ev.evaluate(request(RELU_CUDA, backend="cuda", compile_timeout_s=900))
        time.sleep(2.5)  # one more round of the actors' stats
        stats = ev.stats()
    finally:
        ev.close()
        ray.shutdown()
    assert first.verdict == Verdict.CORRECT and second.verdict == Verdict.CORRECT, first.error_message
    assert first.compiled and first.phase_times_s["build_install"] > 0
    assert sum(r["done"] for r in stats["compile_nodes"]) == 2 and "compile" in second.cache_hits
    assert _published(eval_cache, RELU_CUDA) is not None and _published(compile_cache, RELU_CUDA) is not None
    # Its pool started no compile worker, and its runner loaded the published build: a private nvcc build of this
    # extension inside the load phase would take tens of seconds.
    assert not any(w["role"] == "compile" for row in stats["nodes"] for w in row["pool"].get("workers", []))
    assert first.phase_times_s["load"] < 15, first.phase_times_s
