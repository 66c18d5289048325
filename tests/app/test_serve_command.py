"""`krl serve` as a real process: a CPU evaluator behind uvicorn on 127.0.0.1, reached with the Python client;
token-file mistakes exit 2 with one line, no traceback."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

pytest.importorskip("uvicorn")

from evaluator.api import EvaluatorError, Verdict  # noqa: E402
from evaluator.scale.client import HttpEvaluator  # noqa: E402
from tests.evaluator.pool_support import GOOD, ROOT, request  # noqa: E402

KRL = [sys.executable, "-m", "app"]


def _krl(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(KRL + list(args), capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)


@pytest.mark.parametrize("content,mode,needle", [("", 0o600, "empty"), ("tok\n", 0o644, "chmod 600"),
                                                 (None, 0o600, "cannot read")])
def test_token_file_mistakes_exit_2(tmp_path, content, mode, needle):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
        path.chmod(mode)
    done = _krl("serve", "--token-file", str(path), "--devices", "cpu")
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("extra", [
    pytest.param([], id="local-pool"),
    pytest.param(["--ray", "local"], id="ray", marks=[pytest.mark.slow, pytest.mark.skipif(
        importlib.util.find_spec("ray") is None, reason="needs ray (the [ray] extra)")]),
])
def test_serve_answers_the_client_on_loopback(tmp_path, extra):
    token_path = tmp_path / "token"
    token_path.write_text("serve-test-token\n")
    token_path.chmod(0o600)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, KRL_CACHE_DIR=str(tmp_path / "cache"), HOME=str(tmp_path / "home"))
    process = subprocess.Popen(KRL + ["serve", "--port", str(port), "--token-file", str(token_path),
                                      "--devices", "cpu", "--cpu-workers", "1", *extra],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 180
        client = None
        while client is None:
            assert process.poll() is None, process.stderr.read()
            try:
                client = HttpEvaluator(url, token="serve-test-token", retries=0)
            except EvaluatorError:
                assert time.monotonic() < end
                time.sleep(0.3)
        with client:
            assert client.evaluate(request(GOOD, measure_timing=False)).verdict == Verdict.CORRECT
        with pytest.raises(EvaluatorError, match="rejected the token"):
            HttpEvaluator(url, token="wrong", retries=0)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    stderr = process.stderr.read()
    assert f"krl serve: http://127.0.0.1:{port}" in stderr
    assert "warning: binding" not in stderr  # loopback: no network-exposure warning
    default_store = tmp_path / "home" / ".cache" / "kernelrl" / "serve" / f"results-{port}.sqlite"
    assert f"results in {default_store}" in stderr
    assert stat.S_IMODE(default_store.stat().st_mode) == 0o600  # it holds candidate source


def test_results_store_mistakes_exit_2_before_any_worker_starts(tmp_path):
    from evaluator.scale.result_store import ResultStore

    token_path = tmp_path / "token"
    token_path.write_text("serve-test-token\n")
    token_path.chmod(0o600)
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database " * 300)
    damaged.chmod(0o600)
    readable = tmp_path / "readable.sqlite"
    readable.touch()
    readable.chmod(0o644)
    held = str(tmp_path / "held.sqlite")
    holder = ResultStore(held)  # as another krl serve on the same file would
    try:
        for path, needle in ((damaged, "move it aside"), (readable, "chmod 600"), (held, "in use by another")):
            done = _krl("serve", "--token-file", str(token_path), "--devices", "cpu", "--results-db", str(path))
            assert done.returncode == 2, done.stderr
            assert needle in done.stderr and "Traceback" not in done.stderr
    finally:
        holder.close()
