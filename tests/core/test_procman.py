"""Process-manager tests with real detached processes: start, stop, resume, crash detection, GPU queueing, pid identity.
Mechanics use a stand-in job (tests/core/procman_job_standin.py); the lifecycle test runs the real core.train job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core import procman, spawn
from core.identity import proc_stat
from core.segments import last_segment
from core.errors import KrlError

REPO = Path(__file__).resolve().parents[2]
STANDIN = "tests.core.procman_job_standin"


def wait_for(predicate, timeout_s: float = 20.0, poll_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"condition not met within {timeout_s}s")


def kill_all_runs(reg) -> None:
    """Leave no process behind: SIGKILL every live run group, then every child this process spawned."""
    for row in reg.list_runs():
        if row["pid"] != os.getpid() and procman.run_process_alive(row):
            spawn.signal_run(row, signal.SIGKILL)
    for run_id, proc in list(spawn.CHILDREN.items()):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.wait(10)
        spawn.CHILDREN.pop(run_id, None)


@pytest.fixture
def pm(registry, monkeypatch):
    """The registry, with jobs spawned from the stand-in module and no GPUs unless a test says otherwise."""
    monkeypatch.setenv("KRL_JOB_MODULE", STANDIN)
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("KRL_GPUS", "0")
    monkeypatch.delenv("KRL_HEARTBEAT_LIMIT_S", raising=False)
    monkeypatch.delenv("KRL_STANDIN", raising=False)
    monkeypatch.chdir(REPO)
    yield registry
    kill_all_runs(registry)


def standin(max_steps=1000, step_s=0.05, gpus=0, **knobs):
    return {"backend": "standin", "max_steps": max_steps, "gpus": gpus, "standin": dict(step_s=step_s, **knobs)}


def status(reg, name):
    procman.reconcile(reg)
    return reg.get_run(name)["status"]


# ---------------------------------------------------------------- start / stop / resume mechanics

def test_detached_job_runs_in_its_own_session_and_logs_to_the_run_folder(pm):
    row = procman.start_run(standin(), name="a", registry=pm)
    assert row["status"] == "running" and row["pid"] and row["pid_start_time"]
    assert os.getpgid(row["pid"]) == row["pid"] and os.getsid(row["pid"]) == row["pid"]
    assert row["command"]["argv"][-4:] == ["-m", STANDIN, str(row["id"]), "--workspace", str(pm.workspace)][-4:]
    wait_for(lambda: pm.get_run("a")["last_step"] is not None and pm.get_run("a")["last_step"] >= 2)
    log = (pm.workspace / "a" / "logs.log").read_text()
    assert "segment 0 of run a" in log and "standin: starting at step 0" in log
    assert procman.tail_log(pm, "a", 1) == log.splitlines()[-1:]
    assert row["segments"][0]["pid"] == row["pid"] and row["segments"][0]["start_step"] == 0


def test_stop_checkpoints_then_resume_continues_at_the_next_step(pm):
    procman.start_run(standin(), name="a", registry=pm)
    wait_for(lambda: (pm.get_run("a")["last_step"] or 0) >= 3)
    stopped = procman.stop_run(pm, "a", grace_s=10)
    assert stopped["status"] == "stopped"
    checkpoint = pm.last_checkpoint(stopped["id"])
    assert checkpoint is not None and checkpoint["step"] == stopped["last_step"]
    assert not procman.run_process_alive(stopped)
    resumed = procman.resume_run(pm, "a")
    assert resumed["status"] == "running" and len(resumed["segments"]) == 2
    assert resumed["segments"][1]["start_step"] == checkpoint["step"] + 1
    wait_for(lambda: (pm.get_run("a")["last_step"] or 0) >= checkpoint["step"] + 2)
    steps = pm.metric_series(stopped["id"], "reward/mean")["step"]
    assert steps == list(range(len(steps)))  # continuous: no gap, no restart from 0
    view = procman.run_json(pm, procman.stop_run(pm, "a", grace_s=10))
    assert [s["end_status"] for s in view["segments"]] == ["stopped", "stopped"]


def test_finished_run_is_not_resumable_and_wait_returns_final_row(pm):
    final = procman.start_run(standin(max_steps=3), name="a", registry=pm, detach=False)
    assert final["status"] == "finished" and final["last_step"] == 2
    with pytest.raises(KrlError, match="fork"):
        procman.resume_run(pm, "a")


def test_sigterm_ignored_escalates_to_sigkill_after_grace(pm):
    row = procman.start_run(standin(ignore_term=True), name="a", registry=pm)
    wait_for(lambda: pm.get_run("a")["last_step"] is not None)
    t0 = time.monotonic()
    final = procman.stop_run(pm, "a", grace_s=1.0)
    assert 0.9 < time.monotonic() - t0 < 8
    assert final["status"] == "stopped"
    assert "SIGKILL" in last_segment(final)["note"]
    assert not procman.pid_matches(row["pid"], row["pid_start_time"])


def test_stop_without_wait_is_escalated_by_a_later_reconcile(pm):
    procman.start_run(standin(ignore_term=True), name="a", registry=pm)
    wait_for(lambda: pm.get_run("a")["last_step"] is not None)
    assert procman.stop_run(pm, "a", grace_s=2, wait=False)["status"] == "stopping"
    assert status(pm, "a") == "stopping"  # still inside its grace period
    wait_for(lambda: status(pm, "a") == "stopped", timeout_s=10)


def test_force_stop_kills_at_once(pm):
    row = procman.start_run(standin(), name="a", registry=pm)
    final = procman.stop_run(pm, "a", force=True)
    assert final["status"] == "stopped" and "--force" in final["segments"][-1]["note"]
    assert not procman.pid_matches(row["pid"], row["pid_start_time"])


# ---------------------------------------------------------------- crash and failure detection

def test_kill_9_is_crashed_on_the_next_read_and_its_leftover_workers_are_killed(pm):
    row = procman.start_run(standin(child=True), name="a", registry=pm)
    wait_for(lambda: pm.get_run("a")["last_step"] is not None)
    log = (pm.workspace / "a" / "logs.log").read_text()
    child_pid = int(log.split("standin: child pid ")[1].split()[0])
    child_start = procman.process_start_time(child_pid)
    os.kill(row["pid"], signal.SIGKILL)
    t0 = time.monotonic()
    wait_for(lambda: status(pm, "a") == "crashed", timeout_s=procman.heartbeat_limit_s())
    assert time.monotonic() - t0 < 10  # seen on the next read, not after the heartbeat limit
    assert "signal 9" in pm.events(row["id"])[-1]["message"]
    assert "killed 1 leftover" in pm.events(row["id"])[-1]["message"]
    wait_for(lambda: not procman.pid_matches(child_pid, child_start), timeout_s=5)
    assert procman.resume_run(pm, "a")["status"] == "running"  # crashed runs resume


def test_kill_9_seen_by_another_reader_is_crashed_with_the_log_tail(pm):
    row = procman.start_run(standin(), name="a", registry=pm)
    wait_for(lambda: pm.get_run("a")["last_step"] is not None)
    spawn.CHILDREN.pop(row["id"])  # this process is now just a reader, as the TUI would be
    os.kill(row["pid"], signal.SIGKILL)
    wait_for(lambda: status(pm, "a") == "crashed", timeout_s=10)
    crashed = pm.get_run("a")
    assert "standin: starting at step 0" in crashed["error"]
    wait_for(lambda: proc_stat(row["pid"]) is None, timeout_s=5)  # reaped by procman, no zombie


def test_stale_heartbeat_of_a_hung_job_is_crashed(pm, monkeypatch):
    monkeypatch.setenv("KRL_HEARTBEAT_LIMIT_S", "3")
    row = procman.start_run(standin(hang_at_step=3), name="a", registry=pm)  # alive, but no heartbeat any more
    wait_for(lambda: (proc_stat(row["pid"]) or ("?",))[0] == "T")
    try:
        assert status(pm, "a") == "running"
        wait_for(lambda: status(pm, "a") == "crashed", timeout_s=12)
        assert "no heartbeat" in pm.events(row["id"])[-1]["message"]
        with pytest.raises(KrlError, match="live process"):
            procman.resume_run(pm, "a")
        procman.stop_run(pm, "a", force=True)
        assert not procman.pid_matches(row["pid"], row["pid_start_time"])
    finally:
        try:
            os.killpg(row["pid"], signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_a_job_hung_inside_a_write_transaction_is_killed_so_the_registry_can_be_written(pm, monkeypatch):
    """SIGSTOP inside the job's step transaction holds the registry's write lock for good: reconcile waits briefly,
    then kills the job whose heartbeat is overdue and records it, instead of failing with 'database is locked'."""
    monkeypatch.setenv("KRL_HEARTBEAT_LIMIT_S", "2")
    row = procman.start_run(standin(hang_in_transaction_at_step=3), name="a", registry=pm)
    wait_for(lambda: (proc_stat(row["pid"]) or ("?",))[0] == "T")
    wait_for(lambda: status(pm, "a") == "crashed", timeout_s=30)
    message = pm.events(row["id"])[-1]["message"]
    assert "write lock" in message and "heartbeat" in message
    assert not procman.pid_matches(row["pid"], row["pid_start_time"])
    pm.add_tags(row["id"], ["written-after"])  # the lock is free again


def test_a_job_gets_a_startup_grace_before_its_first_heartbeat(pm, monkeypatch):
    monkeypatch.setenv("KRL_HEARTBEAT_LIMIT_S", "0.5")
    monkeypatch.setenv("KRL_STARTUP_GRACE_S", "4")
    t0 = time.monotonic()
    procman.start_run(standin(startup_sleep_s=30), name="slow", registry=pm)
    time.sleep(1.0)
    assert status(pm, "slow") == "running"  # past the heartbeat limit, inside the startup grace
    wait_for(lambda: status(pm, "slow") == "crashed", timeout_s=12)
    assert time.monotonic() - t0 >= 4


def test_nonzero_exit_is_failed_with_the_last_log_lines(pm):
    final = procman.start_run(standin(exit_code=3), name="a", registry=pm, detach=False)
    assert final["status"] == "failed" and final["exit_code"] == 3
    assert "boom: the last line of the log" in final["error"]


# ---------------------------------------------------------------- pid identity

def test_a_recycled_pid_is_never_taken_for_the_run(pm):
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        real_start = procman.process_start_time(stranger.pid)
        assert procman.pid_matches(stranger.pid, real_start)
        assert not procman.pid_matches(stranger.pid, real_start - 100)
        row = pm.create_run("recycled", config={}, status="running")
        pm.update_run(row["id"], pid=stranger.pid, pid_start_time=real_start - 100, heartbeat_at=time.time(),
                      host=procman.process_identity()["host"])
        assert status(pm, "recycled") == "crashed"  # the pid is alive, but it is not our job
        with pytest.raises(KrlError):
            procman.stop_run(pm, "recycled", force=True)
        assert stranger.poll() is None  # never signalled
        # The same pid with the right start time is the run's process: it stays running.
        same = pm.create_run("same", config={}, status="running")
        pm.update_run(same["id"], pid=stranger.pid, pid_start_time=real_start, heartbeat_at=time.time(),
                      host=procman.process_identity()["host"])
        assert status(pm, "same") == "running"
    finally:
        stranger.kill()
        stranger.wait()


# ---------------------------------------------------------------- GPUs and queueing

def test_two_runs_competing_for_one_gpu_queue_in_order(pm, monkeypatch):
    monkeypatch.setenv("KRL_GPUS", "1")
    first = procman.start_run(standin(max_steps=8, gpus=1), name="first", registry=pm)
    second = procman.start_run(standin(max_steps=2, gpus=1), name="second", registry=pm)
    cpu = procman.start_run(standin(max_steps=2, gpus=0), name="cpu", registry=pm)
    assert first["status"] == "running" and first["gpus"] == [0]
    assert second["status"] == "queued" and second["pid"] is None
    assert cpu["status"] == "running" and cpu["gpus"] == []  # CPU runs never wait for GPUs
    assert procman.gpu_usage(pm)["free"] == []
    procman.wait_run(pm, "first", timeout_s=20)
    assert pm.get_run("first")["status"] == "finished"
    started = wait_for(lambda: pm.get_run("second") if status(pm, "second") != "queued" else None)
    assert started["gpus"] == [0]
    assert procman.wait_run(pm, "second", timeout_s=20)["status"] == "finished"
    assert "CUDA_VISIBLE_DEVICES='0'" in (pm.workspace / "second" / "logs.log").read_text()
    assert "CUDA_VISIBLE_DEVICES=''" in (pm.workspace / "cpu" / "logs.log").read_text()


def test_gpus_stay_held_until_the_ended_job_has_exited(pm, monkeypatch):
    monkeypatch.setenv("KRL_GPUS", "1")
    first = procman.start_run(standin(max_steps=2, gpus=1, linger_s=2), name="first", registry=pm)
    procman.start_run(standin(max_steps=2, gpus=1), name="second", registry=pm)
    wait_for(lambda: pm.get_run("first")["status"] == "finished")
    assert procman.pid_matches(first["pid"], first["pid_start_time"])  # still closing down
    assert status(pm, "second") == "queued"
    assert procman.gpu_usage(pm)["held"] == {0: "first"}
    wait_for(lambda: status(pm, "second") != "queued", timeout_s=10)
    assert not procman.pid_matches(first["pid"], first["pid_start_time"])


def test_concurrent_readers_start_a_queued_run_once(pm, monkeypatch):
    monkeypatch.setenv("KRL_GPUS", "1")
    # Queued without anyone reconciling yet, as after a run ended while no reader was around.
    waiting = pm.create_run("waiting", config=standin(max_steps=3, gpus=1), gpus_requested=1)
    pm.update_run(waiting["id"], command={"argv": spawn.job_argv(waiting["id"], pm.workspace), "cwd": str(REPO)})
    # The readers import first, then all reconcile at the same moment (a start barrier), so they really race.
    script = textwrap.dedent(f"""
        import os, sys, time
        from core import procman
        from core.registry import Registry
        reg = Registry.for_workspace({str(pm.workspace)!r})
        open(sys.argv[1], "w").close()
        while not os.path.exists({str(pm.workspace / "go")!r}):
            time.sleep(0.001)
        procman.reconcile(reg)
    """)
    readers = [subprocess.Popen([sys.executable, "-c", script, str(pm.workspace / f"ready{i}")]) for i in range(3)]
    wait_for(lambda: all((pm.workspace / f"ready{i}").exists() for i in range(3)), timeout_s=60)
    (pm.workspace / "go").touch()
    assert all(r.wait(30) == 0 for r in readers)
    procman.reconcile(pm)
    row = pm.get_run("waiting")
    assert row["status"] in ("running", "finished") and len(row["segments"]) == 1
    log = (pm.workspace / "waiting" / "logs.log").read_text()
    assert log.count("=== krl: segment") == 1  # one job spawned, not one per reader


def test_a_run_needing_more_gpus_than_the_machine_has_is_refused(pm, monkeypatch):
    monkeypatch.setenv("KRL_GPUS", "2")
    with pytest.raises(KrlError, match="offers 2"):
        procman.start_run(standin(gpus=3), name="big", registry=pm)
    monkeypatch.setenv("KRL_GPUS", "0,3")
    assert procman.detect_gpus() == [0, 3]


def test_stopping_a_queued_run_takes_it_off_the_queue(pm, monkeypatch):
    monkeypatch.setenv("KRL_GPUS", "1")
    procman.start_run(standin(gpus=1), name="holder", registry=pm)
    procman.start_run(standin(gpus=1), name="queued", registry=pm)
    assert procman.stop_run(pm, "queued")["status"] == "stopped"
    procman.stop_run(pm, "holder", force=True)
    assert status(pm, "queued") == "stopped"  # it does not start once the GPU is free


# ---------------------------------------------------------------- delete, rename, tag, note

def test_delete_refuses_a_running_run_and_removes_the_folder(pm):
    procman.start_run(standin(), name="a", registry=pm)
    with pytest.raises(KrlError, match="stop it first"):
        procman.delete_run(pm, "a")
    procman.stop_run(pm, "a", grace_s=10)
    procman.rename_run(pm, "a", "b")
    assert (pm.workspace / "b" / "logs.log").exists() and not (pm.workspace / "a").exists()
    procman.tag_run(pm, "b", ["x", "y"])
    procman.note_run(pm, "b", "hello")
    assert pm.get_run("b")["tags"] == ["x", "y"] and pm.get_run("b")["notes"] == "hello"
    procman.delete_run(pm, "b")
    assert pm.find_run("b") is None and not (pm.workspace / "b").exists()


# ---------------------------------------------------------------- the real job (core.train) on CPU

def demo_config(**changes):
    """The demo preset (replay backend: recorded responses through the real evaluator and reward) on CPU, one problem
    per step and a checkpoint every step: the real training job, at its fastest."""
    from core.config import load_config

    overrides = {"max_steps": 200, "dataset.batch_size": 1, "dataset.group_size": 2, "max_turns": 1,
                 "eval.devices": "cpu", "eval.cpu_workers": 1, "checkpoint_every": 1, **changes}
    return load_config("demo", [f"{k}={v}" for k, v in overrides.items()])


@pytest.fixture
def real_pm(pm, monkeypatch):
    monkeypatch.delenv("KRL_JOB_MODULE")
    return pm


def last_step(reg, name):
    procman.reconcile(reg)
    row = reg.get_run(name)
    assert row["status"] in ("queued", "running", "stopping"), (row["status"], row["error"])
    return row["last_step"] if row["last_step"] is not None else -1


@pytest.mark.slow
def test_real_job_queue_stop_resume_continues_then_kill_9_crashes(real_pm, monkeypatch):
    """The real core.train job on CPU through its whole life, sharing one GPU slot with a second run."""
    monkeypatch.setenv("KRL_GPUS", "1")
    reg = real_pm
    row = procman.start_run(demo_config(), name="real", gpus=1, registry=reg)
    other = procman.start_run(demo_config(max_steps=1), name="other", gpus=1, registry=reg)
    assert (row["status"], row["gpus"], other["status"]) == ("running", [0], "queued")
    wait_for(lambda: last_step(reg, "real") >= 1, timeout_s=150, poll_s=0.5)
    assert status(reg, "other") == "queued"  # the slot is still taken

    stopped = procman.stop_run(reg, "real", grace_s=60)
    assert stopped["status"] == "stopped", stopped["error"]
    checkpoint = reg.last_checkpoint(stopped["id"])
    assert checkpoint is not None and checkpoint["step"] == stopped["last_step"] >= 1
    started = reg.get_run("other")  # the first run ended: the queued one got the GPU
    assert started["status"] == "running" and started["gpus"] == [0]

    assert procman.resume_run(reg, "real")["status"] == "queued"  # now it waits for the other run
    procman.stop_run(reg, "other", force=True)
    resumed = reg.get_run("real")
    assert resumed["status"] == "running" and resumed["segments"][-1]["start_step"] == checkpoint["step"] + 1
    wait_for(lambda: last_step(reg, "real") >= checkpoint["step"] + 1, timeout_s=150, poll_s=0.5)
    steps = reg.metric_series(stopped["id"], "progress/step")["step"]
    assert steps == list(range(len(steps))) and len(steps) >= checkpoint["step"] + 2  # continues, no restart

    os.kill(reg.get_run("real")["pid"], signal.SIGKILL)
    t0 = time.monotonic()
    wait_for(lambda: status(reg, "real") == "crashed", timeout_s=procman.heartbeat_limit_s())
    assert time.monotonic() - t0 < 10  # seen on the next read, not after the heartbeat limit
    crashed = reg.get_run("real")
    assert [s["end_status"] for s in crashed["segments"]] == ["stopped", "crashed"]
    assert spawn.orphans(crashed, reg.workspace) == []  # its evaluator workers went with it


# ---------------------------------------------------------------- a workspace never wedges (issue 13, bug 4)

@pytest.mark.parametrize("name", ["registry.db", "registry.db-wal", "registry.db-shm", "registry.db-journal"])
def test_the_registry_files_names_are_reserved(pm, name):
    with pytest.raises(KrlError, match="reserved"):
        procman.start_run(standin(), name=name, registry=pm)
    assert pm.list_runs() == []
    assert procman.reconcile(pm) == []


def test_start_refuses_a_name_whose_folder_is_a_file(pm):
    (pm.workspace / "taken").write_text("not a folder")
    with pytest.raises(KrlError, match="taken"):
        procman.start_run(standin(), name="taken", registry=pm)
    assert pm.find_run("taken") is None


def _queue(pm, name: str) -> None:
    pm.create_run(name, config=standin(max_steps=3), status="queued")


@pytest.mark.parametrize("obstacle", ["file-as-run-folder", "folder-as-log"])
def test_a_run_that_cannot_be_spawned_fails_alone_and_the_queue_moves_on(pm, obstacle):
    _queue(pm, "blocked")
    if obstacle == "file-as-run-folder":
        (pm.workspace / "blocked").write_text("a file where the run folder goes")
    else:  # writing the log header fails (as on a full disk): the log path is a folder
        (pm.workspace / "blocked" / "logs.log").mkdir(parents=True)
    _queue(pm, "next")
    changes = procman.reconcile(pm)
    assert {c["name"]: c["to"] for c in changes} == {"blocked": "failed", "next": "running"}
    blocked = pm.get_run("blocked")
    assert blocked["status"] == "failed" and "could not start the job" in blocked["error"]
    assert str(pm.workspace / "blocked") in blocked["error"]
    assert procman.reconcile(pm) == [] or all(c["name"] == "next" for c in procman.reconcile(pm))
    wait_for(lambda: status(pm, "next") == "finished")


# ---------------------------------------------------------------- day-to-day edge cases (issue 13, bug 7)

@pytest.mark.slow
def test_metrics_jsonl_has_no_repeated_steps_after_a_crash_before_the_first_checkpoint(real_pm):
    reg = real_pm
    procman.start_run(demo_config(max_steps=3, checkpoint_every=100), name="early-crash", registry=reg)
    wait_for(lambda: last_step(reg, "early-crash") >= 1, timeout_s=150, poll_s=0.2)
    os.kill(reg.get_run("early-crash")["pid"], signal.SIGKILL)
    wait_for(lambda: status(reg, "early-crash") == "crashed", timeout_s=30)
    assert reg.last_checkpoint(reg.get_run("early-crash")["id"]) is None
    procman.resume_run(reg, "early-crash")
    wait_for(lambda: status(reg, "early-crash") == "finished", timeout_s=150, poll_s=0.5)
    lines = (reg.run_dir("early-crash") / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]


@pytest.mark.slow
def test_a_job_stopped_past_the_heartbeat_limit_stops_itself_once_continued(real_pm):
    """SIGSTOP past the limit: reconcile marks it crashed. After SIGCONT the real job sees that when its step ends
    and exits without writing a status, so the recorded one stays true (its GPUs may already be someone else's)."""
    reg = real_pm
    row = procman.start_run(demo_config(max_steps=50, checkpoint_every=100), name="frozen", registry=reg)
    wait_for(lambda: last_step(reg, "frozen") >= 1, timeout_s=150, poll_s=0.2)
    row = reg.get_run("frozen")
    os.kill(row["pid"], signal.SIGSTOP)
    try:
        time.sleep(0.5)
        changes = procman.reconcile(reg, heartbeat_limit=0.3)
        assert [(c["name"], c["to"]) for c in changes] == [("frozen", "crashed")]
        steps_when_marked = reg.get_run("frozen")["last_step"]
    finally:
        os.kill(row["pid"], signal.SIGCONT)
    wait_for(lambda: not procman.run_process_alive(row), timeout_s=60, poll_s=0.2)
    final = reg.get_run("frozen")
    assert final["status"] == "crashed"
    assert final["last_step"] <= steps_when_marked + 1  # at most the step it was in the middle of
    assert any("found its run marked crashed" in e["message"] for e in reg.events(final["id"]))


def test_a_job_started_here_leaves_no_zombie_without_further_reads(pm):
    """The TUI starts runs from its own process and stops reconciling once nothing is active: a finished job must
    still be reaped (no <defunct> entry left behind)."""
    row = procman.start_run(standin(max_steps=2, step_s=0.01), name="reaped", registry=pm)
    wait_for(lambda: pm.get_run("reaped")["status"] == "finished")
    wait_for(lambda: proc_stat(row["pid"]) is None, timeout_s=10)


def test_deleting_a_just_stopped_run_waits_for_its_exiting_process(pm):
    """A job that wrote `stopped` but is still closing (evaluator workers) is not 'running': delete waits briefly
    for it instead of answering 'is stopped …; stop it first'."""
    procman.start_run(standin(max_steps=10_000, step_s=0.02, linger_s=1.5), name="just-stopped", registry=pm)
    wait_for(lambda: (pm.get_run("just-stopped")["last_step"] or -1) >= 1)
    stopped = procman.stop_run(pm, "just-stopped", wait=False)
    # 20 s were once not enough under CI's load (two test processes on two cores); the job's own stop takes ~0.1 s
    wait_for(lambda: pm.get_run("just-stopped")["status"] == "stopped", timeout_s=60.0)
    assert procman.run_process_alive(stopped)  # still lingering
    procman.delete_run(pm, "just-stopped")
    assert pm.find_run("just-stopped") is None


def test_a_tinker_run_without_credentials_is_refused_before_it_starts(pm, monkeypatch, tmp_path):
    """Checked by the SDK's own rules (core.backends.tinker.check_tinker_credentials) before a row exists, instead
    of a detached job that fails five seconds later."""
    pytest.importorskip("tinker")
    for name in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.tinker/credentials.json
    from core.config import load_config

    with pytest.raises(KrlError, match="Tinker credential"):
        procman.start_run(load_config("kevin", ["gpus=0"]), name="no-key", registry=pm)
    assert pm.find_run("no-key") is None
