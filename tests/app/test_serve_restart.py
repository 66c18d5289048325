"""`krl serve` killed with SIGKILL in the middle of a burst and started again on the same results store: every
request id gets exactly one result through the real client, and what had finished before the kill is not evaluated
again (its stored row is untouched: same result text, one submission)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("uvicorn")

from evaluator.api import EvaluatorError, Verdict  # noqa: E402
from evaluator.scale.client import HttpEvaluator  # noqa: E402
from tests.evaluator.pool_support import GOOD, ROOT, WRONG, candidate, request  # noqa: E402

TOKEN = "restart-test-token"
KINDS = {
    "honest": (GOOD, Verdict.CORRECT),
    "wrong": (WRONG, Verdict.WRONG_OUTPUT),
    "raises": (candidate("raise ValueError('nope')"), Verdict.RUNTIME_ERROR),
    "segfault": (candidate("ctypes.string_at(0)", prelude="import ctypes"), Verdict.CRASHED),
    "hangs": (candidate("time.sleep(600)", prelude="import time"), Verdict.TIMEOUT),
}
BURST = ["honest", "wrong", "raises", "honest", "hangs", "wrong", "segfault", "honest", "hangs", "honest", "wrong",
         "honest"]


def _stored_rows(path: str) -> dict[str, tuple[int, str | None]]:
    """request_id -> (submissions, result JSON) as the store file holds them (read as any SQLite reader would)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return {rid: (n, result) for rid, n, result in
                db.execute("SELECT request_id, submissions, result_json FROM requests")}


class _Service:
    """One `krl serve` process on a fixed loopback port over a CPU pool with one worker."""

    def __init__(self, tmp_path, port: int, store: str):
        token_path = tmp_path / "token"
        token_path.write_text(TOKEN + "\n")
        token_path.chmod(0o600)
        env = dict(os.environ, KRL_CACHE_DIR=str(tmp_path / "cache"), HOME=str(tmp_path / "home"))
        self.stderr_path = tmp_path / f"serve-{time.monotonic_ns()}.err"
        self.url = f"http://127.0.0.1:{port}"
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app", "serve", "--port", str(port), "--token-file", str(token_path),
                 "--devices", "cpu", "--cpu-workers", "1", "--results-db", store],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)

    def client(self, timeout_s: float = 180) -> HttpEvaluator:
        end = time.monotonic() + timeout_s
        while True:
            assert self.process.poll() is None, self.stderr_path.read_text()
            try:
                # Two retries, as every client has (8 by default): a transport error on a poll is retried with the
                # same id; a reset read once in CI (session 20) is not what this test is about.
                return HttpEvaluator(self.url, token=TOKEN, retries=2, poll_s=5)
            except EvaluatorError:
                assert time.monotonic() < end, "krl serve did not come up"
                time.sleep(0.3)

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).text
        return {name: float(value) for name, value in re.findall(r"^(\S+) (\S+)$", text, re.M)}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def test_a_service_killed_mid_burst_restarts_and_gives_every_id_exactly_one_result(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = str(tmp_path / "results.sqlite")
    requests = [request(KINDS[kind][0], measure_timing=False, run_timeout_s=3.0, request_id=f"{kind}-{index}")
                for index, kind in enumerate(BURST)]
    expected = {r.request_id: KINDS[kind][1] for r, kind in zip(requests, BURST)}

    first = _Service(tmp_path, port, store)
    try:
        first.client().close()
        with httpx.Client(base_url=first.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
            for r in requests:  # the burst, not waiting: each 202 means "in the store"
                response = http.post("/v1/evaluate", params={"wait": "false"}, json=r.to_dict())
                assert response.status_code == 202, response.text
        end = time.monotonic() + 240
        while sum(result is not None for _, result in _stored_rows(store).values()) < 4:
            assert first.process.poll() is None and time.monotonic() < end, first.stderr_path.read_text()
            time.sleep(0.1)
        first.process.kill()  # SIGKILL: no clean stop, no last writes
        first.process.wait()
    finally:
        first.stop()
    at_kill = _stored_rows(store)
    finished_at_kill = {rid: result for rid, (_, result) in at_kill.items() if result is not None}
    unfinished_at_kill = set(at_kill) - set(finished_at_kill)
    assert set(at_kill) == set(expected) and unfinished_at_kill, "the kill came after the burst had finished"

    second = _Service(tmp_path, port, store)
    try:
        with second.client() as client:
            results = {r.request_id: r for r in client.evaluate_many(requests)}  # re-sends the same ids
            stats = second.metrics()
    finally:
        second.stop()
    assert {rid: r.verdict for rid, r in results.items()} == expected
    after = _stored_rows(store)
    assert set(after) == set(expected) and all(result is not None for _, result in after.values())
    for rid, result in finished_at_kill.items():  # finished before the kill: answered from the store, untouched
        assert after[rid] == (1, result)
    for rid in unfinished_at_kill:  # handed to the evaluator once more at start-up, and only then
        assert after[rid][0] == 2
    assert stats['krl_requests_total{outcome="recovered"}'] == len(unfinished_at_kill)
    assert stats.get('krl_requests_total{outcome="accepted"}', 0) == 0  # every re-send found its id
    assert stats['krl_stored_requests{state="finished"}'] == len(expected)
    assert "evaluated again" in second.stderr_path.read_text()
