"""Issue 23, host resources: a candidate that lifts its soft file-size cap and floods HOME must not reach the host's
disk, memfds beyond the memory limit must be seen and stopped, and socket buffers must not hold the host's memory.
Attacks under slot_attacks/, run through the real Evaluator in CPU mode with bubblewrap; an honest probe after each
must stay correct."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from evaluator.contract.types import Verdict
from evaluator.isolation.sandbox import get_sandbox
from tests.evaluator.pool_support import make_evaluator, request

ATTACKS = Path(__file__).resolve().parent / "slot_attacks"
MEMORY_LIMIT = 2 * 2**30

pytestmark = pytest.mark.skipif(os.getuid() != 0 or get_sandbox().kind != "bwrap",
                                reason="per-task sandboxes need bubblewrap, and per-task cgroups root")


def source(name: str) -> str:
    return (ATTACKS / f"{name}.py").read_text()


@pytest.fixture(scope="module")
def slot(tmp_path_factory):
    """(evaluator, the folder holding its pool's work folders on the host)."""
    host = tmp_path_factory.mktemp("host")
    old, tempfile.tempdir = tempfile.tempdir, str(host)  # the pool makes its work folders here
    try:
        ev = make_evaluator(str(tmp_path_factory.mktemp("cache")), cpu_workers=1, spare_per_device=0,
                            memory_limit_bytes=MEMORY_LIMIT)
    finally:
        tempfile.tempdir = old
    yield ev, host
    ev.close()


def flood_files(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("krl-flood*")]


def test_a_lifted_file_size_cap_does_not_reach_the_host_disk(slot):
    ev, host = slot
    ev.evaluate(request(source("host_fsize_home_flood"), run_timeout_s=60.0))
    # Checked right after the reply: the runner's own wipe at the next task's start would hide a host-disk write.
    assert flood_files(host) == []
    probe = ev.evaluate(request(source("probe_clean_slate"), run_timeout_s=60.0))
    assert probe.verdict == Verdict.CORRECT, probe.error_message


def test_a_flood_of_prints_does_not_reach_the_host_disk(slot):
    """Stdout and stderr are the slot's log files: on a tmpfs of the judge host's own (runner_slot.LOGS_TMPFS_BYTES),
    not the pool's folder on the disk, where a candidate that lifted its soft file-size cap wrote 320 MiB to each."""
    ev, host = slot
    ev.evaluate(request(source("host_stdio_flood"), run_timeout_s=60.0))
    on_disk = sum(p.stat().st_size for p in host.rglob("runner.*") if p.is_file())
    assert on_disk < 2**20, on_disk
    probe = ev.evaluate(request(source("probe_clean_slate"), run_timeout_s=60.0))
    assert probe.verdict == Verdict.CORRECT, probe.error_message


def test_the_judge_reads_the_runners_outputs_folder_and_nothing_a_link_above_it_names(slot, tmp_path):
    """A candidate that swaps a folder above its outputs for a link to a host folder: the judge still reads (and
    empties) the runner's own outputs folder, never the host file the link leads to."""
    ev, _host = slot
    target = tmp_path / "redirect"
    planted = target / "xfer-out" / "trial-0.krlt"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"\0" * 12345)
    result = ev.evaluate(request(source("exchange_redirect").replace('"/tmp/krl-redirect"', repr(str(target))),
                                 run_timeout_s=60.0))
    assert planted.exists() and planted.stat().st_size == 12345
    assert "12345" not in (result.error_message or ""), result.error_message
    probe = ev.evaluate(request(source("probe_clean_slate"), run_timeout_s=60.0))
    assert probe.verdict == Verdict.CORRECT, probe.error_message


def test_memfds_beyond_the_memory_limit_are_stopped(slot):
    ev, _host = slot
    result = ev.evaluate(request(source("host_memfd_hoard"), run_timeout_s=60.0))
    # Stopped by the judge's watch (runtime_error), the kernel's limit (crashed), or a refused write at import.
    stopped = result.verdict in (Verdict.RUNTIME_ERROR, Verdict.CRASHED) or (
        result.verdict == Verdict.COMPILE_ERROR and "Cannot allocate memory" in result.error_message)
    assert stopped, (result.verdict, result.error_message)
    probe = ev.evaluate(request(source("probe_clean_slate"), run_timeout_s=60.0))
    assert probe.verdict == Verdict.CORRECT, probe.error_message


def host_tcp_pages() -> int:
    """Pages the kernel's TCP holds, every network namespace together (/proc/net/sockstat)."""
    with open("/proc/net/sockstat", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("mem") + 1])
    return 0


def test_socket_buffers_do_not_hold_the_hosts_memory(slot):
    """Loopback connections filled and never read held 2.2 GiB of the host's beside a 2 GiB limit (cgroup v1 books TCP
    buffers only under a tcp limit): the runner's own network namespace has its loopback down, and a v1 group's TCP
    buffers are capped (cgroups.TCP_BUFFER_BYTES)."""
    import threading

    ev, _host = slot
    before, most, done = host_tcp_pages(), [0], threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            most[0] = max(most[0], host_tcp_pages())
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        ev.evaluate(request(source("host_tcp_buffer_hoard"), run_timeout_s=60.0))
    finally:
        done.set()
        watcher.join()
    assert (most[0] - before) * os.sysconf("SC_PAGE_SIZE") < 64 * 2**20, (before, most[0])
    probe = ev.evaluate(request(source("probe_clean_slate"), run_timeout_s=60.0))
    assert probe.verdict == Verdict.CORRECT, probe.error_message
