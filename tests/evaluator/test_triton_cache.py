"""Triton's two-level cache: the manager's read/write policy as data, and inside a real sandboxed runner a candidate
that reads the trusted level, cannot write it, and whose planted entries never reach the next candidate."""

from __future__ import annotations

import json
import os
import re

import pytest

from evaluator.isolation.sandbox import get_sandbox
from tests.evaluator.pool_support import candidate, make_evaluator, request

triton_cache = pytest.importorskip("evaluator.build.triton_cache")
from triton.runtime.cache import FileCacheManager, _base32  # noqa: E402

KEY = "ab" * 32  # a hex cache key, as Triton's own keys are
OTHER = "cd" * 32


@pytest.fixture
def levels(tmp_path, monkeypatch):
    private, shared = tmp_path / "private", tmp_path / "shared"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(private))
    monkeypatch.setenv(triton_cache.SHARED_VARIABLE, str(shared))
    return private, shared


def trusted_put(shared, key: str, data: bytes, name: str) -> str:
    """What the judge host's warm-up does: Triton's own file manager with its cache dir in the shared level."""
    private = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(shared)
    try:
        return FileCacheManager(_base32(key)).put(data, name)
    finally:
        if private is None:
            del os.environ["TRITON_CACHE_DIR"]
        else:
            os.environ["TRITON_CACHE_DIR"] = private


def test_reads_come_from_the_trusted_level_first_and_writes_go_to_the_private_level(levels):
    private, shared = levels
    trusted = trusted_put(shared, KEY, b"TRUSTED", "k.cubin")
    manager = triton_cache.TwoLevelCacheManager(_base32(KEY))
    assert manager.get_file("k.cubin") == trusted
    written = manager.put(b"PLANTED", "k.cubin")  # a candidate planting a cubin under a trusted key
    assert written.startswith(str(private)) and open(trusted, "rb").read() == b"TRUSTED"
    assert manager.get_file("k.cubin") == trusted  # the trusted copy still wins
    assert manager.get_file("new.cubin") is None
    assert manager.put(b"MINE", "new.cubin") == manager.get_file("new.cubin")  # its own compiles are found again
    assert manager.get_file("../k.cubin") is None


def test_a_trusted_group_may_name_only_trusted_files(levels):
    private, shared = levels
    cubin = trusted_put(shared, KEY, b"TRUSTED", "k.cubin")
    trusted_put(shared, KEY, json.dumps({"child_paths": {"k.cubin": cubin}}), "__grp__k.json")
    manager = triton_cache.TwoLevelCacheManager(_base32(KEY))
    assert manager.get_group("k.json") == {"k.cubin": cubin}
    outside = manager.put(b"PLANTED", "evil.cubin")
    trusted_put(shared, KEY, json.dumps({"child_paths": {"k.cubin": outside}}), "__grp__bad.json")
    assert manager.get_group("bad.json") is None
    os.symlink(outside, os.path.join(os.path.dirname(cubin), "link.cubin"))
    assert manager.get_file("link.cubin") is None


PROBE = """
import json, os
from triton.runtime.cache import get_cache_manager
found = []
manager = get_cache_manager({key!r})
found.append(type(manager).__name__)
path = manager.get_file("k.cubin")
found.append(open(path, "rb").read().decode() if path else None)
try:
    open(path, "wb").write(b"POISON")
    found.append("wrote the trusted level")
except OSError as exc:
    found.append("refused")
found.append(manager.put(b"PLANTED", "k.cubin").startswith(os.environ["TRITON_CACHE_DIR"]))
get_cache_manager({other!r}).put(b"PLANTED", "o.cubin")
found.append(get_cache_manager({other!r}).get_file("o.cubin") is not None)
raise RuntimeError("PROBE" + json.dumps(found) + "EBORP")
"""

LATER = """
import json
from triton.runtime.cache import get_cache_manager
path = get_cache_manager({key!r}).get_file("k.cubin")
found = [open(path, "rb").read().decode(), get_cache_manager({other!r}).get_file("o.cubin")]
raise RuntimeError("PROBE" + json.dumps(found) + "EBORP")
"""


def probed(ev, body: str) -> list:
    result = ev.evaluate(request(candidate(body), measure_timing=False))
    match = re.search(r"PROBE(\[.*\])EBORP", result.error_message.replace("\\'", "'"))
    assert match, (result.verdict, result.error_message)
    return json.loads(match.group(1))


@pytest.mark.skipif(get_sandbox().kind != "bwrap", reason="the shared level is offered only inside bubblewrap")
def test_in_a_real_runner_the_trusted_level_is_read_only_and_plants_die_with_the_runner(tmp_path):
    cache_dir = tmp_path / "cache"
    trusted_put(cache_dir / "triton-trusted", KEY, b"TRUSTED", "k.cubin")  # as the judge host's warm-up would
    ev = make_evaluator(str(cache_dir), worker_module="tests.evaluator.standin_worker", spare_per_device=0)
    try:
        first = probed(ev, PROBE.format(key=KEY, other=OTHER))
        later = probed(ev, LATER.format(key=KEY, other=OTHER))
    finally:
        ev.close()
    assert first == ["TwoLevelCacheManager", "TRUSTED", "refused", True, True], first
    assert later == ["TRUSTED", None], later


def test_warming_without_a_gpu_says_why_and_leaves_the_environment_as_it_was(tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU warms for real (bench_triton_cache.py)")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "private"))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    why = triton_cache.warm_shared_cache(str(tmp_path / "shared"))
    assert why and os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "private")
    assert "TRITON_CACHE_MANAGER" not in os.environ
