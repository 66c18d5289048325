"""The service's results store on real SQLite files: what it keeps across a reopen, its size bound, its file modes,
and that a damaged, locked or shared file stops the service with an EvaluatorError saying what to do."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading

import pytest

from evaluator.api import EvalResult, EvaluatorError, Verdict
from evaluator.scale.result_store import ResultStore, result_row
from tests.evaluator.pool_support import GOOD, request


def _accept(store: ResultStore, request_id: str) -> None:
    body = json.dumps(request(GOOD, request_id=request_id).to_dict())
    store.accept([(request_id, f"fp-{request_id}", body)])


def _result(request_id: str) -> str:
    return result_row(EvalResult(request_id=request_id, problem_id="test/relu", verdict=Verdict.CORRECT).to_dict())


def test_accepted_and_finished_rows_survive_a_reopen(tmp_path):
    path = str(tmp_path / "results.sqlite")
    store = ResultStore(path)
    for request_id in ("a", "b", "c"):
        _accept(store, request_id)
    assert store.finish("a", _result("a")) is True
    assert store.finish("a", _result("a")) is False  # one result per request: never overwritten
    store.close()

    store = ResultStore(path)
    try:
        assert store.counts() == {"unfinished": 2, "finished": 1}
        done = store.get("a")
        assert done.finished and done.request_json is None and done.submissions == 1
        assert EvalResult.from_dict(json.loads(done.result_json)).verdict == Verdict.CORRECT
        assert [row.request_id for row in store.unfinished()] == ["b", "c"]
        assert json.loads(store.get("b").request_json)["request_id"] == "b"
        assert store.get("never") is None
    finally:
        store.close()


def test_accepting_an_unfinished_id_again_counts_a_submission_and_release_undoes_it(tmp_path):
    store = ResultStore(str(tmp_path / "results.sqlite"))
    try:
        _accept(store, "a")
        _accept(store, "a")
        assert store.get("a").submissions == 2
        _accept(store, "new")
        store.release(new_ids=["new"], retried_ids=["a"])
        assert store.get("new") is None and store.get("a").submissions == 1
        store.finish("a", _result("a"))
        _accept(store, "a")  # finished rows are not touched by accept
        assert store.get("a").submissions == 1 and store.get("a").finished
    finally:
        store.close()


def test_only_the_last_keep_results_finished_rows_are_kept(tmp_path):
    store = ResultStore(str(tmp_path / "results.sqlite"), keep_results=3)
    try:
        for index in range(6):
            _accept(store, f"r{index}")
        _accept(store, "slow")  # unfinished rows are never evicted
        for index in (4, 0, 5, 1, 2, 3):
            store.finish(f"r{index}", _result(f"r{index}"))
        assert store.counts() == {"unfinished": 1, "finished": 3}
        assert [i for i in range(6) if store.get(f"r{i}")] == [1, 2, 3]  # the last three to finish
        assert store.get("slow") is not None
    finally:
        store.close()


def test_the_file_and_its_wal_are_private(tmp_path):
    path = tmp_path / "deep" / "results.sqlite"
    store = ResultStore(str(path))
    try:
        _accept(store, "a")
        for name in ("results.sqlite", "results.sqlite-wal", "results.sqlite-shm"):
            assert stat.S_IMODE(os.stat(path.parent / name).st_mode) == 0o600, name
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    finally:
        store.close()


def test_a_world_readable_file_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "results.sqlite"
    path.touch()
    path.chmod(0o644)
    with pytest.raises(EvaluatorError, match=f"chmod 600 {path}"):
        ResultStore(str(path))


def test_a_damaged_file_says_move_it_aside(tmp_path):
    path = tmp_path / "results.sqlite"
    path.write_bytes(b"this is not a sqlite database, just text " * 200)
    path.chmod(0o600)
    with pytest.raises(EvaluatorError, match="damaged.*move it aside"):
        ResultStore(str(path))


def test_a_file_locked_by_another_process_says_what_holds_it(tmp_path):
    path = str(tmp_path / "results.sqlite")
    ResultStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # as an sqlite3 shell left in a transaction would
    try:
        with pytest.raises(EvaluatorError, match="locked by another process.*close whatever holds it"):
            ResultStore(path, busy_timeout_s=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_write_blocked_by_a_lock_is_an_evaluator_error_and_the_store_recovers(tmp_path):
    path = str(tmp_path / "results.sqlite")
    store = ResultStore(path, busy_timeout_s=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(EvaluatorError, match="locked"):
            _accept(store, "a")
        holder.execute("ROLLBACK")
        _accept(store, "a")  # no transaction was left open by the failed one
        assert store.get("a") is not None
    finally:
        holder.close()
        store.close()


def test_two_services_cannot_share_one_file(tmp_path):
    path = str(tmp_path / "results.sqlite")
    first = ResultStore(path)
    try:
        with pytest.raises(EvaluatorError, match="in use by another krl serve"):
            ResultStore(path)
    finally:
        first.close()
    ResultStore(path).close()  # free again once the first one is closed


def test_a_store_from_a_newer_kernelrl_is_refused(tmp_path):
    path = str(tmp_path / "results.sqlite")
    ResultStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version=99")
    with pytest.raises(EvaluatorError, match="newer kernelrl"):
        ResultStore(path)


def test_concurrent_finishes_from_many_threads_each_land_once(tmp_path):
    store = ResultStore(str(tmp_path / "results.sqlite"))
    try:
        ids = [f"r{i}" for i in range(40)]
        for request_id in ids:
            _accept(store, request_id)
        outcomes = []
        threads = [threading.Thread(target=lambda r=r: outcomes.append(store.finish(r, _result(r))))
                   for r in ids + ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == [False] * 40 + [True] * 40
        assert store.counts() == {"unfinished": 0, "finished": 40}
    finally:
        store.close()
