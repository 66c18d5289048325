"""Build-cache pruning on real folders: least recently used entries go first down to the budget's headroom, recent
ones and ones whose lock is held stay, and `krl cache` reports and prunes."""

from __future__ import annotations

import fcntl
import json
import os
import time

import pytest

from evaluator.build.cache import HEADROOM, cache_entries, max_cache_bytes, prune_cache

KIB = 1024


def make_entry(cache_dir, area: str, name: str, size: int, age_s: float) -> str:
    folder = cache_dir / area / name
    folder.mkdir(parents=True)
    (folder / ("result.json" if area == "cuda" else "kernel.cubin")).write_bytes(os.urandom(size))
    stamp = time.time() - age_s
    for path in folder.iterdir():
        os.utime(path, (stamp, stamp))
    return str(folder)


@pytest.fixture
def filled(tmp_path):
    cache = tmp_path / "cache"
    # Ten 64 KiB entries used 1..10 hours ago, plus one built a minute ago; a build in progress is not an entry.
    old = [make_entry(cache, "cuda" if i % 2 else "triton", f"e{i}", 64 * KIB, age_s=3600 * (i + 1)) for i in range(10)]
    fresh = make_entry(cache, "cuda", "fresh", 64 * KIB, age_s=60)
    (cache / "cuda" / ".build-x-123").mkdir()
    return cache, old, fresh


def test_entries_are_listed_with_size_and_last_use(filled):
    cache, old, fresh = filled
    entries = {e.path: e for e in cache_entries(str(cache))}
    assert set(entries) == set(old) | {fresh}
    assert all(e.bytes >= 64 * KIB for e in entries.values())
    assert entries[old[9]].last_used < entries[old[0]].last_used < entries[fresh].last_used


def test_prune_removes_least_recently_used_down_to_the_headroom(filled):
    cache, old, fresh = filled
    total = sum(e.bytes for e in cache_entries(str(cache)))
    budget = total // 2
    report = prune_cache(str(cache), budget)
    remaining = {e.path for e in cache_entries(str(cache))}
    assert report.bytes_after <= budget * (1 - HEADROOM) and report.bytes_after == sum(
        e.bytes for e in cache_entries(str(cache)))
    assert fresh in remaining and old[0] in remaining  # the most recently used stay
    assert set(report.removed) == set(old) - remaining and old[9] in report.removed  # the oldest went first
    assert (cache / "cuda" / ".build-x-123").exists()


def test_nothing_is_removed_under_budget_or_when_everything_is_recent(filled):
    cache, old, fresh = filled
    assert prune_cache(str(cache), 100 * 2**20).removed == []
    assert prune_cache(str(cache), 1, min_age_s=11 * 3600).removed == []  # all used within the last 11 hours


def test_an_entry_being_loaded_or_built_is_skipped(filled):
    cache, old, fresh = filled
    oldest_cuda = old[9] if "cuda" in old[9] else old[8]
    fd = os.open(oldest_cuda + ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_SH)  # what a worker holds while it loads the extension
    try:
        report = prune_cache(str(cache), 1)
    finally:
        os.close(fd)
    assert os.path.isdir(oldest_cuda) and oldest_cuda not in report.removed and report.skipped_in_use == 1
    assert fresh not in report.removed


def test_budget_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("KRL_CACHE_MAX_GB", "2.5")
    assert max_cache_bytes() == int(2.5 * 2**30)
    monkeypatch.setenv("KRL_CACHE_MAX_GB", "0")
    assert max_cache_bytes() is None
    monkeypatch.delenv("KRL_CACHE_MAX_GB")
    assert max_cache_bytes() == 20 * 2**30


def test_cli_reports_and_prunes(filled, capsys, monkeypatch):
    from app.cli import main

    cache, old, fresh = filled

    def krl(*args):
        monkeypatch.setattr("sys.argv", ["krl", *args])
        with pytest.raises(SystemExit) as done:
            main()
        return done.value.code, capsys.readouterr()

    code, out = krl("cache", "info", "--dir", str(cache), "--json")
    info = json.loads(out.out)
    assert code == 0 and info["areas"]["cuda"]["entries"] == 6 and info["areas"]["triton"]["entries"] == 5
    code, out = krl("cache", "prune", "--dir", str(cache), "--max-gb", str(300 * KIB / 2**30), "--json")
    pruned = json.loads(out.out)
    assert code == 0 and pruned["removed"] > 0 and pruned["bytes_after"] <= 300 * KIB
    code, out = krl("cache", "prune", "--dir", str(cache / "missing"), "--max-gb", "1")
    assert code == 2 and "KRL_CACHE_DIR" in out.err


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as the sandbox's user needs root")
def test_the_sandbox_user_can_open_an_entry_by_name_but_not_list_the_entries():
    """Runners read the cache as uid 65534: their own entry by the exact name the judge gives them, never a listing of
    every earlier candidate's builds (entry names hash each candidate's source)."""
    from evaluator.build.artefacts import publish_compile
    from evaluator.build.records import CompileRecord

    import shutil
    import tempfile
    from pathlib import Path

    root = Path(tempfile.mkdtemp(prefix="krl-cache-test"))  # pytest's own folders are closed to other users
    os.chmod(root, 0o755)
    cache = root / "cache"
    publish_compile(CompileRecord(ok=True), str(root / "private"), str(cache), "source")
    entry = cache / "cuda" / ("ab" * 16)
    entry.mkdir(mode=0o755)
    (entry / "manifest.json").write_text("{}")
    os.chmod(cache, 0o755)
    pid = os.fork()
    if pid == 0:  # the child drops to the sandbox's user and reports by its exit status
        os.setgid(65534)
        os.setuid(65534)
        try:
            os.listdir(cache / "cuda")
            os._exit(1)
        except PermissionError:
            pass
        os._exit(0 if (entry / "manifest.json").read_text() == "{}" else 2)
    try:
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        shutil.rmtree(root)
