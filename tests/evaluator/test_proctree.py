"""Process-tree helpers on real processes: children are seen, a detached grandchild is found through a subreaper,
resident memory is summed over the tree, and a kill leaves nothing alive."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from evaluator.isolation.proctree import descendants, has_children, kill_tree, process_table, tree_resident_bytes
from tests.evaluator.pool_support import alive

# A subreaper (like an evaluation worker) whose child starts a detached grandchild and exits at once.
SUBREAPER = textwrap.dedent("""
    import subprocess, sys, time
    sys.path.insert(0, {root!r})
    from evaluator.isolation.proctree import become_subreaper
    assert become_subreaper()
    subprocess.run(["sh", "-c", "setsid sleep 300 > /dev/null 2>&1 & echo $! > {pid_file}"], check=True)
    print("ready", flush=True)
    time.sleep(300)
""")


def test_a_detached_grandchild_stays_in_a_subreapers_tree_and_dies_with_it(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    worker = subprocess.Popen([sys.executable, "-c", SUBREAPER.format(root=root, pid_file=pid_file)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert worker.stdout.readline().strip() == "ready"
        grandchild = int(pid_file.read_text())
        assert grandchild in descendants(worker.pid)  # its parent exited: re-parented to the subreaper, not init
        assert has_children(worker.pid)
        table = process_table()
        deadline = time.monotonic() + 10
        while table.get(grandchild, (0, 0))[1] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # `sleep` may still be exec'ing (no resident pages yet) on a loaded machine
            table = process_table()
        assert tree_resident_bytes(worker.pid, table) > table[worker.pid][1] > 0
        assert grandchild in kill_tree(worker.pid)
        worker.wait(10)
        deadline = time.monotonic() + 10
        while alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(grandchild)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_has_children_follows_this_process():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert has_children() and child.pid in descendants(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert child.pid not in descendants(os.getpid())  # reaped: gone from the tree
