"""Issue 23, leftovers: what one task leaves behind (mode-0000 folders, a SysV segment, an idle scheduling class on
the zygote, a niced autogroup, a shared stdout's offset, a process escaped through clone(CLONE_PARENT), TCP sockets in
TIME_WAIT) must not reach the next. Each attack under slot_attacks/ runs through the real Evaluator in CPU mode with
bubblewrap, followed on the same slot by an honest probe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evaluator.contract.types import Verdict
from evaluator.isolation.sandbox import get_sandbox
from tests.evaluator.pool_support import make_evaluator, request

ATTACKS = Path(__file__).resolve().parent / "slot_attacks"
LEFTOVERS = ("leftover_mode0000_folder", "leftover_sysv_shm", "leftover_sched_idle", "leftover_clone_parent_escape",
             "leftover_autogroup_nice", "leftover_stdio_offset", "leftover_timewait_sockets")

pytestmark = pytest.mark.skipif(os.getuid() != 0 or get_sandbox().kind != "bwrap",
                                reason="per-task sandboxes need bubblewrap, and per-task cgroups root")


def source(name: str) -> str:
    return (ATTACKS / f"{name}.py").read_text()


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    # One slot (no spare pool worker), so every probe runs where the attack before it ran.
    ev = make_evaluator(str(tmp_path_factory.mktemp("cache")), cpu_workers=1, spare_per_device=0,
                        memory_limit_bytes=2 * 2**30)
    yield ev
    ev.close()


def test_leftovers_do_not_reach_the_next_task(evaluator):
    failures, setups = [], []
    for name in LEFTOVERS:
        attack = evaluator.evaluate(request(source(name), run_timeout_s=60.0))
        probe = evaluator.evaluate(request(source("probe_clean_slate"), run_timeout_s=60.0))
        setups.append((probe.phase_times_s or {}).get("task_setup", 1.0))
        if probe.verdict != Verdict.CORRECT:
            failures.append(f"{name} (attack: {attack.verdict.value}): probe {probe.verdict.value}: "
                            f"{probe.error_message[-600:]}")
    assert not failures, "\n".join(failures)
    # The probes' groups were made while the attacks ran (slot/groups_ahead.py), into which the attacks reached nothing.
    assert min(setups) < 0.003, setups


def test_the_hosts_counters_and_secret_memory_are_out_of_reach(evaluator):
    """/proc/vmstat's cumulative counters carried a chosen value from one task to every later one on the host, and
    memfd_secret split the host's direct map for good (red team, session 28); the host's page cache carried 512 bytes
    a task, evicted by fadvise or madvise and read exactly through preadv2's RWF_NOWAIT (red team, session 29)."""
    result = evaluator.evaluate(request(source("leftover_host_counters"), run_timeout_s=60.0))
    assert result.verdict == Verdict.CORRECT, result.error_message


def test_a_candidate_that_kills_the_zygote_gets_its_own_verdict(evaluator):
    """Killing the zygote (a pidfd of /proc/<pid>, or a pipe whose owner it is made) turned a wrong candidate's verdict
    into an infrastructure failure (red team, session 29); both ways are refused now."""
    result = evaluator.evaluate(request(source("zygote_killed_from_the_task"), run_timeout_s=60.0))
    assert result.verdict == Verdict.WRONG_OUTPUT, (result.verdict, result.error_message)


def test_an_honest_probe_passes_on_a_fresh_slot(evaluator):
    """The probe itself is honest: on a slot no attack touched it is correct (guards against a probe that always
    fails, which would make the test above meaningless in the other direction)."""
    result = evaluator.evaluate(request(source("probe_clean_slate"), run_timeout_s=60.0))
    assert result.verdict == Verdict.CORRECT, result.error_message
