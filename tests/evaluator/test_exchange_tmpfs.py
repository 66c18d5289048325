"""The slot's exchange folders on tmpfs mounts that only its judge host and its children see
(evaluator/isolation/exchange_tmpfs.py): real mounts, in a real forked process and through the real pool."""

from __future__ import annotations

import glob
import os

import pytest

from evaluator.contract.types import Verdict
from evaluator.isolation import exchange_tmpfs
from tests.evaluator.pool_support import GOOD, make_evaluator, request

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


def mounted_in(process: str) -> list[str]:
    """The krl-exchange mount points a process sees (its mountinfo's fifth field)."""
    try:
        with open(f"/proc/{process}/mountinfo", encoding="utf-8") as handle:
            return [line.split()[4] for line in handle if " krl-exchange " in line]
    except OSError:
        return []


@needs_root
def test_the_folders_become_tmpfs_for_that_process_alone(tmp_path):
    """Mounted with huge pages where the kernel has them for tmpfs."""
    if exchange_tmpfs.is_tmpfs(str(tmp_path)):
        pytest.skip("the temporary folder is on tmpfs already")
    folders = [str(tmp_path / "xfer-in"), str(tmp_path / "xfer-out")]
    for folder in folders:
        os.makedirs(folder)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child with one thread, as the judge host is when it mounts
        try:
            why = exchange_tmpfs.mount_private_tmpfs(folders)
            with open(os.path.join(folders[0], "written-inside"), "w") as handle:
                handle.write("x")
            on_tmpfs = all(exchange_tmpfs.is_tmpfs(folder) for folder in folders)
            with open("/proc/self/mountinfo", encoding="utf-8") as handle:
                huge = all("huge=within_size" in line for line in handle if " krl-exchange " in line)
            huge_here = os.path.exists("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
            ok = why == "" and on_tmpfs and (huge or not huge_here)
            os.write(write_end, b"ok" if ok else (why or f"tmpfs {on_tmpfs}, huge pages {huge}").encode())
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 500)
    os.waitpid(pid, 0)
    assert answer == b"ok", answer
    # The host's view never changed: the same folders, on the same disk, without the file written inside.
    assert not any(exchange_tmpfs.is_tmpfs(folder) for folder in folders)
    assert not os.path.exists(os.path.join(folders[0], "written-inside"))
    assert mounted_in("self") == []


def test_turned_off_it_mounts_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(exchange_tmpfs.EXCHANGE_TMPFS_ENV, "0")
    assert exchange_tmpfs.mount_private_tmpfs([str(tmp_path)]) == "turned off"
    assert mounted_in("self") == []


@needs_root
def test_the_judge_host_moves_tensors_through_its_own_tmpfs(tmp_path):
    evaluator = make_evaluator(str(tmp_path / "cache"), cpu_workers=1, spare_per_device=0)
    try:
        result = evaluator.evaluate(request(GOOD, request_id="exchange", run_timeout_s=60.0))
        assert result.verdict == Verdict.CORRECT, result.error_message
        seen = {point for process in glob.glob("/proc/[0-9]*") for point in mounted_in(os.path.basename(process))}
    finally:
        evaluator.close()
    if not seen and exchange_tmpfs.is_tmpfs("/tmp"):
        pytest.skip("the pool's root is on tmpfs already: nothing to mount")
    assert any(point.endswith("/slot/xfer-in") for point in seen), seen
    assert mounted_in("self") == []  # the pool's own process (and the host) never sees them


def test_doctor_names_an_exchange_left_on_the_pool_filesystem(monkeypatch):
    from evaluator.isolation.sandbox import isolation_report

    monkeypatch.setenv(exchange_tmpfs.EXCHANGE_TMPFS_ENV, "0")
    assert any("exchange folders stay" in note for note in isolation_report().notes)
    monkeypatch.setenv(exchange_tmpfs.EXCHANGE_TMPFS_ENV, "1")
    if os.geteuid() == 0:
        assert not any("exchange folders stay" in note for note in isolation_report().notes)
