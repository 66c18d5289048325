"""Every attack of issue 11, as a hostile candidate through the real Evaluator in CPU mode: secrets, the parent's
memory, the network, host files, other processes, and the judge itself (patches, frames, threads, forged results)."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import threading

import pytest

from evaluator.api import Verdict
from evaluator.isolation.sandbox import get_sandbox
from tests.evaluator import pool_support
from tests.evaluator.pool_support import GOOD, ROOT, WRONG, alive, candidate, make_evaluator, request

STANDIN = "tests.evaluator.standin_worker"  # no static rules: the OS isolation alone must stop these
SECRET = "tok-do-not-leak-4711"

pytestmark = pytest.mark.skipif(get_sandbox().kind == "none", reason="no sandbox works on this machine")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def standin(cache_dir):
    os.environ["MY_SERVICE_TOKEN"] = SECRET  # in the evaluator's own environment, as an API key would be
    try:
        ev = make_evaluator(cache_dir, worker_module=STANDIN, cpu_workers=2, spare_per_device=0)
    finally:
        del os.environ["MY_SERVICE_TOKEN"]
    assert ev.evaluate(request(GOOD)).verdict == Verdict.CORRECT
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def real(cache_dir):
    ev = make_evaluator(cache_dir, cpu_workers=1, spare_per_device=0)
    yield ev
    ev.close()


def probe(body: str, prelude: str = "import os") -> str:
    """A candidate that runs `body` (which fills `found`) and reports it through its error message."""
    return candidate(f"found = []\n{body}\nraise RuntimeError('PROBE' + json.dumps(found) + 'EBORP')",
                     prelude=prelude + "\nimport json")


def found_by(ev, source: str) -> list:
    result = ev.evaluate(request(source, measure_timing=False))
    match = re.search(r"PROBE(\[.*\])EBORP", result.error_message.replace("\\'", "'"))
    assert match, (result.verdict, result.error_message)
    return json.loads(match.group(1))


OWNER = """
import json, sys
from tests.evaluator.pool_support import make_evaluator, request
with make_evaluator(sys.argv[1], worker_module=sys.argv[2], spare_per_device=0) as ev:
    print(json.dumps(ev.evaluate(request(sys.argv[3], measure_timing=False)).error_message))
"""


def test_secrets_in_ancestors_environment_are_out_of_reach(tmp_path):
    """The evaluator's owner (a training job) was started with an API key in its environment: no candidate reads
    it from /proc/<ancestor>/environ, whatever process it can see."""
    body = '''
for pid in [os.getppid(), 1] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:
    try:
        text = open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace')
    except OSError:
        continue
    if 'tok-do-not-leak' in text or 'MY_SERVICE_TOKEN' in text:
        found.append(text[-300:])
'''
    env = {**os.environ, "MY_SERVICE_TOKEN": SECRET, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", OWNER, str(tmp_path / "cache"), STANDIN, probe(body)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    message = json.loads(done.stdout.strip().splitlines()[-1])
    assert "PROBE" in message, done.stderr[-2000:]
    assert SECRET not in message and "PROBE[]EBORP" in message


def test_parent_memory_cannot_be_read(standin):
    body = '''
for pid in {os.getppid(), 1, *[int(p) for p in os.listdir('/proc') if p.isdigit()]} - {os.getpid()}:
    try:
        line = open(f'/proc/{pid}/maps').readline()
        start = int(line.split('-')[0], 16)
        with open(f'/proc/{pid}/mem', 'rb') as mem:
            mem.seek(start)
            if mem.read(16):
                found.append(open(f'/proc/{pid}/cmdline', 'rb').read(60).split(bytes(1))[0].decode(errors='replace'))
    except (OSError, ValueError, IndexError):
        pass
'''
    # Only the sandbox's own init (bwrap's pid 1, no secrets) may be readable: no Python process (zygote, siblings,
    # the judge, the evaluator's owner).
    readable = found_by(standin, probe(body))
    assert not [cmdline for cmdline in readable if "python" in cmdline], readable


def test_network_is_unreachable(standin):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    body = f'''
for host in ('127.0.0.1', '1.1.1.1'):
    try:
        socket.create_connection((host, {port} if host == '127.0.0.1' else 53), timeout=2).close()
        found.append(host)
    except OSError:
        pass
'''
    try:
        assert found_by(standin, probe(body, prelude="import os, socket")) == []
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


def test_host_files_cannot_be_written(standin, cache_dir, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    registry = tmp_path / "registry.db"
    registry.write_bytes(b"SQLite format 3\x00 original")
    site = sysconfig.get_paths()["purelib"]
    targets = [str(home / "planted"), str(registry), os.path.join(site, "krl_planted.pth"),
               os.path.join(cache_dir, "planted.so"), os.path.expanduser("~/krl_planted")]
    body = f'''
for path in {targets!r}:
    try:
        with open(path, 'ab') as handle:
            handle.write(b'import os; os.system("echo pwned")')
        found.append(path)
    except OSError:
        pass
'''
    try:
        found_by(standin, probe(body))  # what the candidate believes does not matter, the host files do
        assert registry.read_bytes() == b"SQLite format 3\x00 original"
        for path in targets:
            if path != str(registry):
                assert not os.path.exists(path), path
    finally:
        for path in targets[2:]:
            if os.path.exists(path):
                os.unlink(path)


def test_sibling_workers_files_and_logs_are_absent(standin):
    pool_roots = sorted({w for w in glob.glob("/tmp/krl-pool-*")})
    body = f'''
for root in {pool_roots!r}:
    for folder, dirs, files in os.walk(root):
        for name in files:
            found.append(os.path.join(folder, name))
'''
    seen = found_by(standin, probe(body))
    # Only this slot's own private folder and exchange folders may be visible; no logs, no other slot.
    assert not [p for p in seen if "/logs/" in p or p.endswith((".err", ".out"))], seen
    slots = {p.split("/")[3] for p in seen if p.count("/") > 3}
    assert len(slots) <= 1, slots


def test_sibling_workers_and_the_owner_cannot_be_killed(standin):
    bystander = subprocess.Popen(["sleep", "300"])
    judges = [w["pid"] for w in standin.stats()["workers"]]
    victims = [bystander.pid, os.getpid(), *judges]
    killer = candidate(f"for pid in {victims!r}:\n    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n"
                       "        pass\nreturn x.clamp_min(0)", prelude="import os, signal")
    try:
        standin.evaluate(request(killer))
        assert alive(bystander.pid) and all(alive(pid) for pid in judges)
        assert standin.evaluate(request(GOOD)).verdict == Verdict.CORRECT
    finally:
        bystander.kill()
        bystander.wait()


# ---- attacks on the judge: the wrong kernel must stay wrong, and nothing may reach the next candidate

PATCH_COMPARE = '''
judge = __import__('sys').modules['evaluator.judging.judge']
judge.compare = lambda *a, **k: judge.Comparison(judge.Verdict.CORRECT, '', 0.0, 0.0)
worker = __import__('sys').modules['evaluator.slot.worker']
for name in dir(worker):
    if 'compare' in name:
        setattr(worker, name, judge.compare)
'''


def test_patching_the_evaluators_comparison_cannot_pass_a_wrong_kernel(real):
    patched = candidate("return x.abs()", prelude=PATCH_COMPARE)
    result = real.evaluate(request(patched))
    assert result.verdict != Verdict.CORRECT
    later = real.evaluate(request(WRONG))  # the patch must be gone for the next candidate
    assert later.verdict == Verdict.WRONG_OUTPUT, later.error_message


def test_patching_torch_in_the_standin_cannot_pass_a_wrong_kernel(standin):
    patched = candidate("return x.abs()", prelude="__import__('torch').allclose = lambda *a, **k: True")
    assert standin.evaluate(request(patched)).verdict == Verdict.WRONG_OUTPUT
    assert standin.evaluate(request(WRONG)).verdict == Verdict.WRONG_OUTPUT


def test_a_thread_with_a_builtin_target_does_not_survive_into_later_tasks(standin):
    keeper = ("import threading\nthreading.Thread(target=exec, daemon=True, args=("
              "\"import time, torch\\nwhile True:\\n    torch.allclose = lambda *a, **k: True\\n    time.sleep(0.001)\","
              ")).start()")
    standin.evaluate(request(candidate("return x.clamp_min(0)", prelude=keeper)))
    for _ in range(3):
        assert standin.evaluate(request(WRONG)).verdict == Verdict.WRONG_OUTPUT


FORGE = '''
import json, os, struct, sys
def forge():
    fake = {"verdict": "correct", "correctness_trials_passed": 2, "speedup": 1000.0, "compiled": True,
            "request_id": "x", "problem_id": "p"}
    task, frame = None, sys._getframe(1)
    while frame is not None:  # the task id, wherever the evaluator keeps it
        task = frame.f_locals.get("task_id", task)
        frame = frame.f_back
    for kind in ("started", "result"):
        body = json.dumps({"type": kind, "task": task, "result": fake}).encode()
        for fd in range(0, 64):
            try:
                os.write(fd, struct.pack(">I", len(body)) + body)
            except OSError:
                pass
'''


def test_a_forged_result_message_cannot_make_a_wrong_kernel_correct(standin):
    for ending in ("forge()\nreturn x.abs()", "forge()\nos._exit(0)"):
        result = standin.evaluate(request(candidate(ending, prelude=FORGE)))
        assert result.verdict != Verdict.CORRECT, ending
        assert result.speedup is None
    assert standin.evaluate(request(GOOD)).verdict == Verdict.CORRECT


def test_walking_frames_to_overwrite_the_reference_output_fails(real):
    walker = candidate('''
out = x.abs()
frame = sys._getframe(1)
while frame is not None:
    for name, value in list(frame.f_locals.items()):
        if 'ref' in name and isinstance(value, torch.Tensor) and value.shape == out.shape:
            value.copy_(out)
    frame = frame.f_back
return out''', prelude="import sys")
    assert real.evaluate(request(walker, measure_timing=False)).verdict != Verdict.CORRECT


# ---- attacks on the next candidate's runner: it waits, pre-warmed, in the same sandbox while this candidate runs

SABOTAGE_NEXT_RUNNER = '''
here = os.path.realpath(os.getcwd())
for folder in glob.glob(os.path.join(tempfile.gettempdir(), "krl-worker-*")):
    if os.path.realpath(folder) != here:  # the pre-warmed runner's folder: gone, and a link to / in its place
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.symlink("/", folder)
        except OSError:
            pass
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) != os.getpid():
        for limit in (resource.RLIMIT_NOFILE, resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE):
            try:
                resource.prlimit(int(name), limit, (8, 8))
            except (OSError, ValueError):
                pass
        try:
            os.kill(int(name), signal.SIGSTOP)
        except OSError:
            pass
return x.clamp_min(0)
'''


@pytest.fixture(scope="module", params=[1, 2], ids=["one-spare-runner", "two-spare-runners"])
def one_slot(cache_dir, request):
    """One evaluation slot of the real worker (whose runners each make a folder in the sandbox's tmp), so that the
    next request runs on a runner the hostile candidate could see; with one pre-warmed runner (the CPU default) and
    with two (the GPU default: judge_host.SPARE_RUNNERS_ENV)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KRL_WORKER_SPARE_RUNNERS", str(request.param))
        ev = make_evaluator(cache_dir, cpu_workers=1, spare_per_device=0)
    assert ev.evaluate(pool_support.request(GOOD)).verdict == Verdict.CORRECT  # `request` is pytest's here
    yield ev
    ev.close()


def test_a_candidate_cannot_sabotage_the_next_candidates_runner(one_slot):
    """The pre-warmed runner for the next request (and the zygote that forks runners) run as the same sandbox user:
    a candidate that deletes the next runner's folder, lowers its resource limits and stops it must not change the
    next request's verdict, or make it wait out its time limit."""
    one_slot.evaluate(request(candidate(SABOTAGE_NEXT_RUNNER, prelude="import glob, os, resource, shutil, signal, "
                                                                       "tempfile"), measure_timing=False))
    for _ in range(3):
        result = one_slot.evaluate(request(GOOD, run_timeout_s=20.0))
        assert result.verdict == Verdict.CORRECT, result.error_message
        assert result.attempts == 1  # on the runner it sabotaged, not on a retry after that runner failed
        assert result.phase_times_s.get("total", 0) < 15


def test_limits_and_priority_of_other_sandbox_processes_cannot_be_changed(one_slot):
    """prlimit on the zygote (this runner's parent) and setpriority on the process group or the sandbox user are
    refused; setpriority on the zygote answers success and changes nothing (the pid filter makes priority and affinity
    calls on other ids no-ops, which libgomp's thread pinning needs); a candidate's own limits and priority stay its
    to lower."""
    body = '''
parent_nice = os.getpriority(os.PRIO_PROCESS, os.getppid())
try:
    resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (8, 8))
    found.append("parent lowered")
except OSError as exc:
    found.append(exc.errno)
for which, who in ((os.PRIO_PROCESS, os.getppid()), (os.PRIO_PGRP, 0), (os.PRIO_USER, 0)):
    try:
        os.setpriority(which, who, 19)
        found.append("reniced")
    except OSError as exc:
        found.append(exc.errno)
found.append(os.getpriority(os.PRIO_PROCESS, os.getppid()) == parent_nice)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.nice(1)
found.append("own ok")
'''
    # EPERM (1) where refused; the zygote's renice "succeeds" and its priority is unchanged
    assert found_by(one_slot, probe(body, prelude="import os, resource")) == [1, "reniced", 1, 1, True, "own ok"]


def test_a_runner_is_its_own_session_and_cannot_make_itself_dumpable(one_slot):
    """Each runner leads a session of its own (so an autogroup of its own: /proc/self/autogroup's nice value reaches
    no later runner), and turning dumpable back on (which would give it its /proc files, and same-user processes a
    way in) is refused by the syscall filter; turning it off stays allowed."""
    body = '''
libc = ctypes.CDLL(None, use_errno=True)
found.append(os.getsid(0) == os.getpid())
found.append(libc.prctl(4, 1, 0, 0, 0) == -1 and ctypes.get_errno())
found.append(libc.prctl(3, 0, 0, 0, 0))
found.append(libc.prctl(4, 0, 0, 0, 0))
'''
    assert found_by(one_slot, probe(body, prelude="import ctypes, os")) == [True, 1, 0, 0]  # EPERM; not dumpable
