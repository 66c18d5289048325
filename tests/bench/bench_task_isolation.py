"""Per-task isolation cost on this machine: the runner's own namespaces, tmpfs and filters (inside bubblewrap, as a
forked runner does it), and the judge's cgroup setup and teardown around a runner. Prints milliseconds per task."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from evaluator.isolation.sandbox import get_sandbox, worker_spec
from evaluator.slot import task_isolation

ROUNDS = int(os.environ.get("ROUNDS", "20"))

INSIDE = """
import json, os, sys, time
sys.path.insert(0, os.environ["KRL_BENCH_ROOT"])
from evaluator.slot.task_isolation import enter_runner_sandbox
from evaluator.isolation.syscall_filter import filter_bpf
filter_bpf()  # computed once in the zygote before its forks, as the runners find it after theirs
times = []
for _ in range(int(sys.argv[1])):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        start = time.perf_counter()
        state = enter_runner_sandbox()
        os.write(write, json.dumps([time.perf_counter() - start, state]).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    times.append(json.loads(os.read(read, 4096)))
print(json.dumps(times))
"""


def runner_side_ms() -> list[float]:
    sandbox = get_sandbox("bwrap")
    with tempfile.TemporaryDirectory() as private:
        outputs = os.path.join(private, "out")
        os.makedirs(outputs)
        os.chmod(private, 0o777)
        extra = task_isolation.zygote_environment(sandbox.kind, {"resident_bytes": 2**30}, private, outputs)
        extra["KRL_BENCH_ROOT"] = os.path.dirname(os.path.dirname(task_isolation.__file__)).rsplit("/", 1)[0]
        spec = worker_spec(private, os.environ, extra_env=extra, writable=[outputs])
        spec = type(spec)(**{**spec.__dict__, "filters_in_runner": bool(extra)})
        process = sandbox.popen(spec, [sys.executable, "-c", INSIDE, str(ROUNDS)], stdout=subprocess.PIPE, text=True)
        out, _ = process.communicate(timeout=600)
    results = json.loads(out)
    assert all(state == "on" for _t, state in results), results
    return [t * 1000 for t, _state in results]


def judge_side_ms() -> tuple[list[float], list[float]]:
    setups, teardowns = [], []
    for index in range(ROUNDS):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        task = task_isolation.begin_task(f"bench{index}", child.pid, 2 * 2**30, runner_namespaces=True)
        setups.append(task.setup_s * 1000)
        start = time.perf_counter()
        report = task_isolation.end_task(task)
        teardowns.append((time.perf_counter() - start) * 1000)
        assert report.clean, report
        child.wait()
    return setups, teardowns


def describe(name: str, values: list[float]) -> str:
    return f"{name}: median {statistics.median(values):.1f} ms, max {max(values):.1f} ms over {len(values)}"


if __name__ == "__main__":
    print(describe("runner: own namespaces + tmpfs + filters (off the verdict path: spares do it while warming)",
                   runner_side_ms()))
    setups, teardowns = judge_side_ms()
    print(describe("judge: cgroup made, runner moved in (on the path, before the task is sent)", setups))
    print(describe("judge: cgroup killed and removed, one idle process (after the reply)", teardowns))
