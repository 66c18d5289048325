"""CLI tests: JSON schemas of `runs ls`/`runs show`, exit codes, did-you-mean, exports, logs, watch, completion, doctor,
and a detached real run that outlives the `krl` process that started it. `krl` runs in-process through app.cli.main
(the console-script entry) where the process boundary does not matter, as a real process where it does."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import procman, spawn
from core.errors import KrlError
from core.registry import TrajectoryRecord, TurnRecord

REPO = Path(__file__).resolve().parents[2]
STANDIN = "tests.core.procman_job_standin"
RUN_KEYS = {"name", "id", "status", "kind", "pid", "step", "total_steps", "backend", "model", "preset", "problem_set",
            "created_at", "started_at", "ended_at", "heartbeat_at", "host", "gpus", "gpus_requested", "exit_code",
            "error", "tags", "notes", "parent", "parent_step", "segments", "summary", "command", "config"}


@pytest.fixture
def cli(workspace, monkeypatch):
    """Run `krl ARGS…` as a real process in the test's workspace; returns CompletedProcess (text)."""
    env = dict(os.environ, KRL_WORKSPACE=str(workspace), KRL_GPUS="0", KRL_JOB_MODULE=STANDIN,
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="200")
    env.pop("TINKER_API_KEY", None)

    def run(*args, check_rc=None, extra_env=None, timeout=60, argv0=None):
        done = subprocess.run([*(argv0 or [sys.executable, "-m", "app"]), *args], capture_output=True, text=True, cwd=REPO,
                              env=dict(env, **(extra_env or {})), timeout=timeout, stdin=subprocess.DEVNULL)
        if check_rc is not None:
            assert done.returncode == check_rc, (done.returncode, done.stdout, done.stderr)
        return done

    run.env = env
    return run


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def krl(workspace, monkeypatch, capsys):
    """`krl ARGS…` in this process through app.cli.main (exit codes as the console script sets them)."""
    from tests.app.fixtures import run_krl

    monkeypatch.setenv("KRL_GPUS", "0")
    monkeypatch.setenv("KRL_JOB_MODULE", STANDIN)
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.chdir(REPO)

    def run(*args, check_rc=None, extra_env=None, timeout=None):  # timeout: same signature as `cli`
        code, out, err = run_krl(capsys, monkeypatch, args, env=extra_env)
        if check_rc is not None:
            assert code == check_rc, (code, out, err)
        return Result(code, out, err)

    yield run
    kill_runs(workspace)


@pytest.fixture
def filled(registry):
    """A finished run with three steps of metrics and trajectories, and a second run tagged 'keep'."""
    run = registry.create_run("alpha-run", config={"model": "m", "backend": "replay", "max_steps": 3}, model="m",
                              backend="replay", total_steps=3)
    for step in range(3):
        turns = [TurnRecord(turn=0, prompt="p", response="r", kernel="k", verdict="correct", step_score=1.0)]
        registry.write_step(run["id"], step, {"reward/mean": 0.5 + step, "correct_rate": step / 2},
                            [TrajectoryRecord(group=0, sample=0, problem_id="builtin/relu", turns=turns,
                                              total_return=1.0 + step, solved=True, best_speedup=1.5)])
    registry.add_checkpoint(run["id"], 2, "step2", "/tmp/state")
    registry.set_status(run["id"], "finished", ended_at=time.time())
    other = registry.create_run("beta-run", config={}, tags=["keep"])
    registry.set_status(other["id"], "stopped")
    return registry


def wait_for_step(workspace: Path, name: str, step: int, timeout_s: float = 30) -> None:
    from core.registry import Registry

    reg = Registry.for_workspace(workspace)
    try:
        deadline = time.monotonic() + timeout_s
        while (reg.get_run(name)["last_step"] or -1) < step:
            assert time.monotonic() < deadline, f"{name} did not reach step {step}"
            time.sleep(0.05)
    finally:
        reg.close()


def kill_runs(workspace: Path) -> None:
    from core.registry import Registry

    try:
        reg = Registry.for_workspace(workspace, create=False)
        rows = reg.list_runs()
    except (KrlError, sqlite3.DatabaseError):  # no registry, or one a test damaged on purpose: nothing was started
        return
    for row in rows:
        if row["pid"] != os.getpid() and procman.run_process_alive(row):
            spawn.signal_run(row, signal.SIGKILL)
    reg.close()


# ---------------------------------------------------------------- JSON schemas and exit codes

def test_runs_ls_and_show_json_schema(krl, filled):
    listed = json.loads(krl("runs", "ls", "--json", check_rc=0).stdout)
    assert [r["name"] for r in listed] == ["beta-run", "alpha-run"]
    for item in listed:
        assert RUN_KEYS <= set(item)
    alpha = listed[1]
    assert alpha["status"] == "finished" and alpha["step"] == 2 and alpha["kind"] == "train"
    assert alpha["backend"] == "replay" and alpha["model"] == "m" and isinstance(alpha["created_at"], float)
    assert alpha["config"]["max_steps"] == 3 and alpha["summary"]["last"]["reward/mean"] == 2.5
    shown = json.loads(krl("runs", "show", "alpha-run", "--json", check_rc=0).stdout)
    assert RUN_KEYS | {"checkpoints", "events", "log_path"} <= set(shown)
    assert shown["checkpoints"][0]["step"] == 2 and shown["pid"] is None
    tagged = json.loads(krl("runs", "ls", "--tag", "keep", "--json", check_rc=0).stdout)
    assert [r["name"] for r in tagged] == ["beta-run"]
    assert json.loads(krl("runs", "ls", "--status", "finished", "--json").stdout)[0]["name"] == "alpha-run"


def test_human_output_goes_to_stderr_and_json_to_stdout(krl, filled):
    done = krl("runs", "ls", check_rc=0)
    assert done.stdout == "" and "alpha-run" in done.stderr
    done = krl("runs", "show", "alpha-run", check_rc=0)
    assert done.stdout == "" and "finished" in done.stderr


def test_unknown_run_names_say_did_you_mean_and_exit_2(cli, krl, filled):
    done = cli("runs", "show", "alpha-rn")  # once as a real process: the console script's exit code
    assert done.returncode == 2 and "Did you mean: alpha-run" in done.stderr and done.stdout == ""
    assert "Traceback" not in done.stderr
    for args in (("logs", "alpha-rn"), ("runs", "stop", "alpha-rn"), ("watch", "alpha-rn"), ("runs", "rm", "alpha-rn")):
        done = krl(*args)
        assert done.returncode == 2 and "Did you mean: alpha-run" in done.stderr and done.stdout == "", args
    assert krl("runs", "ls", "--status", "runing").returncode == 2
    assert krl("runs", "resume", "alpha-run").returncode == 2  # finished runs are forked, not resumed
    assert krl("train", "demoo").returncode == 2
    assert "--yes" in krl("runs", "rm", "alpha-run").stderr  # no tty: confirmation cannot be asked


def test_export_metrics_and_trajectories(krl, filled):
    rows = list(csv.DictReader(io.StringIO(krl("runs", "export", "alpha-run", "--format", "csv", check_rc=0).stdout)))
    assert [int(r["step"]) for r in rows] == [0, 1, 2]
    assert [float(r["reward/mean"]) for r in rows] == [0.5, 1.5, 2.5] and "correct_rate" in rows[0]
    lines = krl("runs", "export", "alpha-run", "--format", "jsonl", check_rc=0).stdout.splitlines()
    assert [json.loads(line)["correct_rate"] for line in lines] == [0.0, 0.5, 1.0]
    trajectories = [json.loads(line) for line in krl("runs", "export", "alpha-run", "--what", "trajectories",
                                                     check_rc=0).stdout.splitlines()]
    assert len(trajectories) == 3 and trajectories[0]["turns"][0]["verdict"] == "correct"
    assert trajectories[2]["solved"] is True and trajectories[2]["total_return"] == 3.0
    flat = list(csv.DictReader(io.StringIO(krl("runs", "export", "alpha-run", "--what", "trajectories",
                                               "--format", "csv", check_rc=0).stdout)))
    assert [r["problem_id"] for r in flat] == ["builtin/relu"] * 3
    assert krl("runs", "export", "alpha-run", "--format", "xml").returncode == 2


def test_tag_note_rename_rm(krl, filled, workspace):
    krl("runs", "tag", "alpha-run", "a", "b", check_rc=0)
    krl("runs", "note", "alpha-run", "looks good", check_rc=0)
    (workspace / "alpha-run").mkdir()
    krl("runs", "rename", "alpha-run", "gamma-run", check_rc=0)
    shown = json.loads(krl("runs", "show", "gamma-run", "--json", check_rc=0).stdout)
    assert shown["tags"] == ["a", "b"] and shown["notes"] == "looks good"
    assert (workspace / "gamma-run").is_dir() and not (workspace / "alpha-run").exists()
    krl("runs", "rm", "gamma-run", "--yes", check_rc=0)
    assert [r["name"] for r in json.loads(krl("runs", "ls", "--json").stdout)] == ["beta-run"]
    assert not (workspace / "gamma-run").exists()


def test_watch_renders_a_finished_run_and_exits(krl, filled):
    done = krl("watch", "alpha-run", check_rc=0, timeout=30)
    assert "alpha-run" in done.stderr and "finished" in done.stderr
    assert "reward/mean" in done.stderr and "correct" in done.stderr and "builtin/relu" in done.stderr


def test_shell_completion_lists_run_names(cli, filled):
    # Click names the completion variable after the program, so this runs the installed `krl` script.
    krl = Path(sys.executable).parent / "krl"
    done = cli(argv0=[str(krl)], timeout=20,
               extra_env={"_KRL_COMPLETE": "complete_bash", "COMP_WORDS": "krl runs show al", "COMP_CWORD": "3"})
    assert "alpha-run" in done.stdout and "beta-run" not in done.stdout


def test_doctor_reports_without_printing_the_key(krl, filled):
    done = krl("doctor", "--json", check_rc=0, extra_env={"TINKER_API_KEY": "sk-very-secret"})
    report = json.loads(done.stdout)
    assert report["tinker_api_key"] is True and "sk-very-secret" not in done.stdout + done.stderr
    assert report["workspace"]["schema_version"] == report["schema_version_supported"]
    assert report["workspace"]["runs"] == {"finished": 1, "stopped": 1}
    assert "torch" in report and "triton" in report

def test_doctor_human_report(filled, monkeypatch):
    # In-process (torch is imported once per test worker anyway); the report goes to stderr.
    from typer.testing import CliRunner

    from app.cli import app

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "workspace" in result.stderr and "TINKER_API_KEY: not set" in result.stderr and "torch" in result.stderr


# ---------------------------------------------------------------- detached runs through the CLI

DEMO = ["max_steps=200", "dataset.batch_size=1", "dataset.group_size=2", "max_turns=1", "eval.devices=cpu",
        "eval.cpu_workers=1"]


@pytest.mark.slow
def test_detached_real_run_outlives_the_cli(cli, workspace):
    t0 = time.monotonic()
    done = cli("train", "demo", *DEMO, "--detach", "--name", "bg", "--json", check_rc=0,
               extra_env={"KRL_JOB_MODULE": ""})
    assert time.monotonic() - t0 < 20  # returns at once, long before the job's first step
    row = json.loads(done.stdout)
    try:
        assert row["status"] == "running" and row["preset"] == "demo" and row["config"]["backend"] == "replay"
        assert row["command"]["argv"][1:3] == ["-m", "core.train"]
        assert procman.pid_matches(row["pid"], row["segments"][0]["pid_start_time"])  # the CLI is gone; the run goes on
        listed = json.loads(cli("runs", "ls", "--json", check_rc=0).stdout)
        assert [(r["name"], r["status"], r["pid"]) for r in listed] == [("bg", "running", row["pid"])]
        assert cli("runs", "rm", "bg", "--yes").returncode == 2  # refuses a running run
        assert "stopped" in cli("runs", "stop", "bg", "--force", check_rc=0).stderr
        assert not procman.pid_matches(row["pid"], row["segments"][0]["pid_start_time"])
    finally:
        kill_runs(workspace)


def test_stop_and_resume_through_the_cli(krl, workspace):
    krl("train", "demo", "--detach", "--name", "bg", check_rc=0,
        extra_env={"KRL_STANDIN": json.dumps({"max_steps": 10_000, "step_s": 0.05})})
    try:
        wait_for_step(workspace, "bg", 2)
        assert "stopped" in krl("runs", "stop", "bg", "--grace", "10", check_rc=0).stderr
        logs = krl("logs", "bg", "-f", check_rc=0, timeout=30).stdout  # -f on an ended run prints all and returns
        assert "segment 0 of run bg" in logs and "standin: starting at step 0" in logs
        # Foreground resume follows the new segment's log on stderr; a failing job exits 3 …
        failing = krl("runs", "resume", "bg", extra_env={"KRL_STANDIN": json.dumps({"exit_code": 4})}, timeout=60)
        assert failing.returncode == 3 and "boom: the last line" in failing.stderr and "failed" in failing.stderr
        assert "segment 0 of run bg" not in failing.stderr  # only the new segment's lines
        # The resume line numbers the segment as the log does (from 0), issue 26 item 6.
        assert "(segment 1)" in failing.stderr and "segment 1 of run bg" in failing.stderr, failing.stderr
        # … and a good one runs to the end and exits 0.
        done = krl("runs", "resume", "bg", check_rc=0, timeout=60,
                   extra_env={"KRL_STANDIN": json.dumps({"extra_steps": 3, "step_s": 0.01})})
        assert "finished" in done.stderr
        shown = json.loads(krl("runs", "show", "bg", "--json", check_rc=0).stdout)
        assert shown["status"] == "finished" and [s["end_status"] for s in shown["segments"]] == \
            ["stopped", "failed", "finished"]
        assert shown["segments"][1]["start_step"] == shown["segments"][2]["start_step"] == \
            shown["checkpoints"][0]["step"] + 1
    finally:
        kill_runs(workspace)


def test_logs_follow_streams_until_the_run_ends(krl, workspace):
    done = krl("train", "demo", "--detach", "--name", "short", check_rc=0,
               extra_env={"KRL_STANDIN": json.dumps({"max_steps": 20, "step_s": 0.05})})
    try:
        follow = krl("logs", "short", "-f", check_rc=0, timeout=30)
        assert "standin: starting at step 0" in follow.stdout and "finished" in follow.stderr
    finally:
        kill_runs(workspace)
    assert done.returncode == 0


def test_watch_follows_a_running_run_until_it_ends(krl, workspace):
    krl("train", "demo", "--detach", "--name", "w", check_rc=0,
        extra_env={"KRL_STANDIN": json.dumps({"max_steps": 30, "step_s": 0.05})})
    done = krl("watch", "w", "--interval", "0.2", check_rc=0)
    assert "finished" in done.stderr and "reward" in done.stderr
    assert json.loads(krl("runs", "show", "w", "--json").stdout)["status"] == "finished"


def test_fork_starts_a_child_from_the_parent_checkpoint_with_changes(krl, registry):
    from core.config import load_config

    parent = registry.create_run("parent", config=load_config("demo").model_dump(mode="json"))
    registry.add_checkpoint(parent["id"], 3, "step-3", None)
    registry.add_checkpoint(parent["id"], 5, "step-5", None)
    registry.set_status(parent["id"], "stopped")
    child = json.loads(krl("runs", "fork", "parent", "max_steps=9", "optim.lr=0.001", "--name", "child", "--step", "4",
                           "--json", check_rc=0).stdout)
    assert child["parent"] == "parent" and child["parent_step"] == 3 and child["status"] == "running"
    assert child["config"]["max_steps"] == 9 and child["config"]["optim"]["lr"] == 0.001
    assert child["segments"][0]["start_step"] == 4
    bad = krl("runs", "fork", "parent", "optim.lrr=1", "--name", "child2")
    assert bad.returncode == 2 and "optim.lr" in bad.stderr


def test_an_empty_workspace_lists_no_runs(krl, workspace):
    assert json.loads(krl("runs", "ls", "--json", check_rc=0).stdout) == []
    assert not (workspace / "registry.db").exists()  # reading never creates a registry


def test_foreground_train_that_fails_exits_3(krl):
    done = krl("train", "demo", "problems=./no-such-problems", "--name", "fg")
    assert done.returncode == 3 and "failed" in done.stderr
    shown = json.loads(krl("runs", "show", "fg", "--json", check_rc=0).stdout)
    assert shown["status"] == "failed" and "no-such-problems" in shown["error"]


# ---------------------------------------------------------------- usage errors (issue 13, bug 2)

@pytest.mark.parametrize("args", [("runs", "show"), ("check",), ("foo",), ("runs", "ls", "--bogus"),
                                  ("train", "demo", "--gpus", "abc"), ("runs",)],
                         ids=["missing-argument", "missing-problem", "unknown-command", "unknown-option",
                              "bad-integer", "group-alone"])
def test_usage_errors_exit_2_with_the_usage_line(krl, workspace, args):
    done = krl(*args)
    assert done.returncode == 2, (done.returncode, done.stderr)
    # A group given alone prints its whole help (typer's rich help writes it to stdout).
    assert "Usage: " in done.stderr + done.stdout and "Traceback" not in done.stderr


def test_usage_error_as_a_real_process_has_no_traceback(cli):
    done = cli("runs", "ls", "--bogus")
    assert done.returncode == 2 and "No such option" in done.stderr and "Traceback" not in done.stderr


def test_a_crashed_tui_makes_krl_exit_non_zero(workspace, monkeypatch):
    from app import tui

    def crash(self) -> None:
        raise RuntimeError("a bug in the app")

    monkeypatch.setattr(tui.KrlApp, "on_mount", crash)
    monkeypatch.setenv("KRL_CONFIG_DIR", str(workspace / "config"))
    with pytest.raises(SystemExit) as exit_info:
        tui.run_tui(workspace=workspace, headless=True)
    assert exit_info.value.code not in (0, None)


@pytest.mark.parametrize("follow", [("watch",), ("logs", "-f")], ids=["watch", "logs-follow"])
def test_following_a_run_that_fails_exits_3(krl, workspace, follow):
    krl("train", "demo", "--detach", "--name", "doomed", check_rc=0,
        extra_env={"KRL_STANDIN": json.dumps({"exit_code": 1})})
    done = krl(*follow, "doomed", timeout=30)
    assert done.returncode == 3, (done.returncode, done.stderr)
    assert "failed" in done.stderr


def test_runs_ls_and_the_tui_show_the_same_reward_metric(krl, registry):
    """One choice of the 'reward' and 'correct' columns for `krl runs ls`, `krl watch` and the TUI's runs table."""
    from app.screens.loaders import run_row

    run = registry.create_run("odd-keys", status="finished")
    registry.log_metrics(run["id"], 0, {"reward/stage": 0.0, "env/all/reward/turn_mean": 0.75,
                                        "eval/correct_count": 3.0, "turn0/correct_rate": 0.5})
    row = run_row(registry.get_run("odd-keys"))
    table = krl("runs", "ls", check_rc=0).stderr
    cells = next(line for line in table.splitlines() if line.strip().startswith("odd-keys")).split()
    assert (float(cells[6]), float(cells[7])) == (row.reward, row.correct)


def test_step_counts_agree_for_a_finished_one_step_run(krl, registry):
    """Steps are counted as steps done (last step index + 1) by `runs ls`, `runs show`, `watch` and the TUI."""
    from app.widgets.format import fmt_steps

    run = registry.create_run("one-step", total_steps=1, status="finished")
    registry.write_step(run["id"], 0, {"reward/mean": 1.0})
    assert fmt_steps(registry.get_run("one-step")) == "1/1"
    listing = krl("runs", "ls", check_rc=0).stderr
    assert next(line for line in listing.splitlines() if "one-step" in line).split()[2] == "1/1"
    assert "1/1" in krl("runs", "show", "one-step", check_rc=0).stderr.replace(" / ", "/")
    assert "step 1/1" in krl("watch", "one-step", check_rc=0).stderr


def test_escape_sequences_in_stored_names_never_reach_the_terminal(krl, registry):
    """Names are checked at creation; a registry written before that check still prints them defanged."""
    run = registry.create_run("plain", status="finished", notes="note \x1b]0;pwned\x07")
    registry.conn.execute("UPDATE runs SET name = ?, error = ? WHERE id = ?",
                          ("evil\x1b[2J", "boom \x1b[31mred", run["id"]))
    for args in (("runs", "ls"), ("runs", "show", "evil\x1b[2J"), ("watch", "evil\x1b[2J")):
        done = krl(*args)
        assert "\x1b" not in done.stderr + done.stdout and "evil" in done.stderr, args


def test_detached_train_without_a_gpu_runs_on_cpu_and_says_so(krl, workspace):
    """--gpus defaults to auto: the config's GPUs where the machine has them, else CPU (issue 13, bug 3)."""
    done = krl("train", "demo", "gpus=1", "--detach", "--name", "cpu-run", "--json", check_rc=0,
               extra_env={"KRL_STANDIN": json.dumps({"max_steps": 2, "step_s": 0.01})})
    row = json.loads(done.stdout)
    assert row["gpus_requested"] == 0 and row["config"]["gpus"] == 0
    assert "no GPU" in done.stderr and "CPU" in done.stderr
    with_gpus = krl("train", "demo", "gpus=1", "--detach", "--name", "gpu-run", "--json", check_rc=0,
                    extra_env={"KRL_GPUS": "2", "KRL_STANDIN": json.dumps({"max_steps": 2, "step_s": 0.01})})
    assert json.loads(with_gpus.stdout)["gpus_requested"] == 1
    explicit = krl("train", "demo", "--gpus", "3", "--detach", "--name", "too-many")
    assert explicit.returncode == 2 and "offers 0" in explicit.stderr


# ---------------------------------------------------------------- workspace errors (issue 13, bug 5)

def test_a_file_as_workspace_is_a_clean_error(krl, tmp_path):
    not_a_folder = tmp_path / "ws-file"
    not_a_folder.write_text("oops")
    for args in (("runs", "ls"), ("train", "demo", "--detach"), ("runs", "show", "x")):
        done = krl("--workspace", str(not_a_folder), *args)
        assert done.returncode == 2 and "not a folder" in done.stderr, (args, done.stderr)
    assert krl("--workspace", str(not_a_folder), "doctor").returncode not in (0, 1)


def test_a_corrupted_registry_is_a_clean_error_and_doctor_fails(krl, recorded_demo_source, workspace):
    from tests.app.recorded import copy_workspace
    from tests.app.test_tui_errors import corrupt

    copy_workspace(recorded_demo_source, workspace)
    corrupt(workspace / "registry.db")
    done = krl("runs", "ls")
    assert done.returncode == 2 and "malformed" in done.stderr and "krl doctor" in done.stderr, done.stderr
    doctor = krl("doctor")
    assert doctor.returncode == 2 and "malformed" in doctor.stderr, doctor.stderr


def test_damaged_data_pages_found_by_a_query_are_a_clean_error(krl, recorded_demo_source, workspace):
    from tests.app.recorded import RECORDED_RUN, copy_workspace
    from tests.app.test_tui_errors import corrupt

    copy_workspace(recorded_demo_source, workspace)
    corrupt(workspace / "registry.db", from_fraction=0.5)  # the schema opens; the turns' pages are damaged
    done = krl("runs", "export", RECORDED_RUN, "--what", "trajectories")
    said = " ".join(done.stderr.split())  # the console wraps long paths: compare words, not lines
    assert done.returncode == 2 and "is damaged" in said and "krl doctor" in said, done.stderr
    doctor = krl("doctor")
    assert doctor.returncode == 2 and "is damaged" in " ".join(doctor.stderr.split()), doctor.stderr


def test_a_read_only_copy_of_a_workspace_can_be_browsed(krl, recorded_demo_source, workspace, make_read_only):
    from tests.app.recorded import RECORDED_RUN, copy_workspace

    copy_workspace(recorded_demo_source, workspace)
    make_read_only(workspace / "registry.db", workspace)
    listing = json.loads(krl("runs", "ls", "--json", check_rc=0).stdout)
    assert [run["name"] for run in listing] == [RECORDED_RUN]
    assert "finished" in krl("runs", "show", RECORDED_RUN, check_rc=0).stderr
    assert krl("runs", "export", RECORDED_RUN, check_rc=0).stdout.count("\n") == listing[0]["step"] + 1
    refused = krl("train", "demo", "--detach", "--name", "new-run")
    assert refused.returncode == 2 and "read-only" in refused.stderr, refused.stderr
    assert not list(workspace.glob("registry.db-*"))


def test_a_read_only_empty_folder_is_a_clean_error(krl, workspace, make_read_only):
    make_read_only(workspace)
    assert "no runs yet" in krl("runs", "ls", check_rc=0).stderr
    refused = krl("train", "demo", "--detach", "--name", "new-run")
    assert refused.returncode == 2 and "read-only" in refused.stderr, refused.stderr
