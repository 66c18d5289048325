"""evaluator/slot/task_isolation.py, runner side, inside a real bubblewrap sandbox started as the slot starts its
zygote: a forked runner gets fresh tmpfs over /tmp, /dev/shm, HOME and its outputs (binds below /tmp kept, read-only
ones read-only), no capabilities, no_new_privs, both filters, and cannot make namespaces or mounts of its own."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from evaluator.isolation.sandbox import get_sandbox, runner_sandbox_why_not, worker_spec
from evaluator.isolation.environment import project_root
from evaluator.slot import task_isolation

pytestmark = pytest.mark.skipif(get_sandbox().kind != "bwrap" or bool(runner_sandbox_why_not("bwrap")),
                                reason="per-task sandboxes need bubblewrap, user namespaces and libseccomp")

# Stands in for the zygote: leaves a file in the shared /tmp and HOME, then forks a runner that looks around.
INSIDE = """
import ctypes, json, os, sys
from evaluator.slot.task_isolation import enter_runner_sandbox, prepare_zygote
prepare_zygote()
for folder in ("/tmp", os.environ["HOME"], "/dev/shm"):
    open(os.path.join(folder, "shared-view"), "w").close()
read, write = os.pipe()
if os.fork() == 0:
    out = {"state": enter_runner_sandbox()}
    status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
    out.update({k: status[k].strip() for k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")})
    out["seen"] = sorted(n for f in ("/tmp", os.environ["HOME"], "/dev/shm") for n in os.listdir(f))
    out["inputs"] = open(os.path.join(sys.argv[1], "input")).read()
    try:
        open(os.path.join(sys.argv[1], "new"), "w")
        out["inputs_writable"] = True
    except OSError:
        out["inputs_writable"] = False
    mounts = [l.split(" - ")[-1] for l in open("/proc/self/mountinfo") if l.split()[4] == sys.argv[2]]
    out["outputs_huge"] = any("huge=within_size" in m for m in mounts)
    libc = ctypes.CDLL(None, use_errno=True)
    out["unshare"] = libc.unshare(0x10000000)
    out["mount"] = libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None)
    try:
        os.kill(os.getppid(), 0)
        out["signal_parent"] = True
    except OSError:
        out["signal_parent"] = False
    os.write(write, json.dumps(out).encode())
    os._exit(0)
os.wait()
print(os.read(read, 65536).decode())
"""


def test_a_runner_gets_a_fresh_view_and_no_privileges(tmp_path):
    private, outputs, inputs = tmp_path / "private", tmp_path / "out", tmp_path / "in"
    for folder in (private, outputs, inputs):
        folder.mkdir()
    (inputs / "input").write_text("from the judge")
    os.chmod(private, 0o777)
    os.chmod(outputs, 0o777)
    sandbox = get_sandbox("bwrap")
    extra = task_isolation.zygote_environment(sandbox.kind, {"resident_bytes": 2**30}, str(private), str(outputs))
    assert extra
    spec = worker_spec(str(private), os.environ, extra_env=extra, writable=[str(outputs)], read_only=[str(inputs)])
    spec = dataclasses.replace(spec, filters_in_runner=True,
                               env={**spec.env, "PYTHONPATH": project_root()})
    process = sandbox.popen(spec, [sys.executable, "-c", INSIDE, str(inputs), str(outputs)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    seen = json.loads(out)
    assert seen["state"] == "on", seen
    assert seen["CapEff"] == seen["CapBnd"] == "0000000000000000"
    assert seen["NoNewPrivs"] == "1" and seen["Seccomp"] == "2"
    assert "shared-view" not in seen["seen"]  # the zygote's /tmp, /dev/shm and HOME are not the runner's
    assert seen["inputs"] == "from the judge" and seen["inputs_writable"] is False
    assert seen["unshare"] == -1 and seen["mount"] == -1
    assert seen["signal_parent"] is False
    assert not (inputs / "new").exists()
    # the outputs' tmpfs with huge pages where the kernel has them for tmpfs
    assert seen["outputs_huge"] or not os.path.exists("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
