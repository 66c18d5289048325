"""Tests for the SQLite run registry: concurrent writer processes, SIGKILL mid-step, migrations, refusals, queries.
Real SQLite files in tmp dirs and real subprocesses throughout."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import core.store.schema as schema_module
from core.errors import KrlError
from core.registry import (
    BLOCK_STEPS,
    SCHEMA_VERSION,
    Registry,
    TrajectoryRecord,
    TurnRecord,
)

REPO = Path(__file__).resolve().parents[2]


def _turn(turn: int, prompt: str = "write a relu kernel", verdict: str = "correct", **kwargs) -> TurnRecord:
    return TurnRecord(turn=turn, prompt=prompt, response=f"response {turn}", kernel=f"kernel {turn}",
                      verdict=verdict, **kwargs)


def _trajectory(group: int = 0, sample: int = 0, problem_id: str = "builtin/relu", n_turns: int = 2,
                prompt: str = "write a relu kernel", **kwargs) -> TrajectoryRecord:
    return TrajectoryRecord(group=group, sample=sample, problem_id=problem_id,
                            turns=[_turn(t, prompt=f"{prompt} (turn {t})") for t in range(n_turns)], **kwargs)


# ---------------------------------------------------------------- concurrency

WRITER = """
import os, sys, time
from pathlib import Path
from core.registry import Registry, TrajectoryRecord, TurnRecord
index, steps, go = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
while not go.exists():
    time.sleep(0.005)
reg = Registry.for_workspace()
run = reg.create_run(f"writer-{index}", status="running")
for step in range(steps):
    # The shared prompt text makes every writer race on the same `texts` row.
    trajectories = [TrajectoryRecord(group=0, sample=s, problem_id=f"builtin/p{s}", total_return=float(step),
                                     turns=[TurnRecord(turn=t, prompt="shared prompt" if t == 0 else f"{index}-{step}",
                                                       response="r") for t in range(2)])
                    for s in range(2)]
    reg.write_step(run["id"], step, {f"m{k}": index * 1000 + step + k / 100 for k in range(20)}, trajectories,
                   events=[("step", f"step {step}")])
    reg.heartbeat(run["id"])
reg.set_status(run["id"], "finished")
reg.close()
"""


def test_four_writer_processes_and_a_reader_never_see_database_is_locked(workspace, tmp_path):
    steps, writers = 20, 4
    Registry.for_workspace(workspace).close()  # created up front so writers only race on data, not schema
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(i), str(steps), str(go)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(writers)]
    reader_errors: list[BaseException] = []
    reads = [0]
    stop = threading.Event()

    def read_loop() -> None:
        reg = Registry.for_workspace(workspace)
        try:
            while not stop.is_set():
                for run in reg.list_runs():
                    reg.metric_series(run["id"], "m0", max_points=10)
                    for trajectory in reg.trajectories(run["id"], limit=3):
                        reg.trajectory_turns(trajectory["id"])
                    reg.events(run["id"])
                reads[0] += 1
        except BaseException as exc:  # noqa: BLE001 - the test reports whatever the reader hit
            reader_errors.append(exc)
        finally:
            reg.close()

    reader = threading.Thread(target=read_loop)
    reader.start()
    go.touch()
    try:
        outputs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        stop.set()
        reader.join(timeout=30)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, (_, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr
        assert "locked" not in stderr
    assert not reader_errors, reader_errors
    assert reads[0] > 0

    reg = Registry.for_workspace(workspace)
    runs = {run["name"]: run for run in reg.list_runs()}
    assert set(runs) == {f"writer-{i}" for i in range(writers)}
    for index in range(writers):
        run = runs[f"writer-{index}"]
        assert run["status"] == "finished" and run["last_step"] == steps - 1
        assert reg.metric_keys(run["id"]) == sorted(f"m{k}" for k in range(20))
        series = reg.metric_series(run["id"], "m3")
        assert series["step"] == list(range(steps))
        assert series["value"] == [index * 1000 + step + 0.03 for step in range(steps)]
        assert len(reg.trajectories(run["id"], limit=10_000)) == 2 * steps
        assert len(reg.events(run["id"], limit=10_000)) >= steps
    # One shared prompt row for all writers, plus one per (writer, step) for the second turns.
    assert reg.conn.execute("SELECT COUNT(*) FROM texts").fetchone()[0] == 1 + writers * steps
    assert reg.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    reg.close()


def test_concurrent_first_opens_create_the_schema_once(tmp_path):
    path = tmp_path / "fresh" / "registry.db"
    errors, barrier = [], threading.Barrier(4)

    def open_it() -> None:
        try:
            barrier.wait()
            Registry(path).close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    with Registry(path) as reg:
        assert reg.schema_version == SCHEMA_VERSION
        assert reg.conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 1


# ---------------------------------------------------------------- crash safety

CRASHER = """
import os, sys, time
from pathlib import Path
from core.registry import Registry, TrajectoryRecord, TurnRecord
marker = Path(sys.argv[1])
reg = Registry.for_workspace()
run = reg.create_run("crash", status="running")
def traj(step):
    return [TrajectoryRecord(group=0, sample=0, problem_id="builtin/relu", solved=True, best_speedup=1.0 + step,
                             turns=[TurnRecord(turn=0, prompt=f"prompt {step}", response="r")])]
for step in range(5):
    reg.write_step(run["id"], step, {"loss": float(step)}, traj(step))
original = Registry.update_summary
def block_inside_the_transaction(self, *args, **kwargs):
    original(self, *args, **kwargs)   # the whole step is written, only COMMIT is missing
    marker.touch()
    time.sleep(120)
Registry.update_summary = block_inside_the_transaction
reg.write_step(run["id"], 5, {"loss": 5.0, "extra": 1.0}, traj(5), events=[("note", "step five")])
"""


def test_sigkill_inside_write_step_keeps_earlier_steps_and_drops_the_partial_one(workspace, tmp_path):
    marker = tmp_path / "inside"
    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(marker)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the writer never reached the blocking point"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    reg = Registry.for_workspace(workspace)
    assert reg.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    run = reg.get_run("crash")
    assert run["last_step"] == 4
    assert run["summary"]["last"] == {"loss": 4.0}
    assert run["summary"]["best_speedup"] == 5.0
    assert reg.metric_series(run["id"], "loss")["step"] == [0, 1, 2, 3, 4]
    assert reg.metric_keys(run["id"]) == ["loss"]
    assert [t["step"] for t in reg.trajectories(run["id"], order="step")] == [0, 1, 2, 3, 4]
    assert reg.conn.execute("SELECT COUNT(*) FROM texts WHERE text = 'prompt 5'").fetchone()[0] == 0
    assert not [e for e in reg.events(run["id"]) if e["message"] == "step five"]
    # The lock died with the process: the step can be written again at once.
    reg.write_step(run["id"], 5, {"loss": 5.0}, [_trajectory()])
    assert reg.get_run("crash")["last_step"] == 5
    reg.close()


# ---------------------------------------------------------------- migrations and refusals

def _file_state(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def test_fresh_registry_is_at_the_current_schema(registry):
    assert registry.schema_version == SCHEMA_VERSION == len(schema_module.MIGRATIONS)
    assert registry.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = set(registry.db.table_names())
    assert {"runs", "metrics", "texts", "trajectories", "turns", "checkpoints", "events", "schema_version",
            "metric_blocks"} <= tables


def test_version_0_database_is_migrated(tmp_path):
    path = tmp_path / "registry.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES ('kernelrl', 0)")
    conn.commit()
    conn.close()
    with Registry(path) as reg:
        assert reg.schema_version == SCHEMA_VERSION
        run = reg.create_run("after-migration")
        reg.write_step(run["id"], 0, {"loss": 1.0})
        assert reg.metric_series(run["id"], "loss")["value"] == [1.0]


def test_version_1_database_keeps_its_data_through_migration(tmp_path):
    path = tmp_path / "registry.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES ('kernelrl', 1)")
    schema_module.create_tables(conn)
    conn.execute("BEGIN")  # one transaction: autocommit would sync once per row
    conn.execute("INSERT INTO runs (name, created_at, summary) VALUES ('old', 1.0, '{\"last\": {\"loss\": 2.0}}')")
    conn.executemany("INSERT INTO metrics VALUES (1, 'loss', ?, ?, 0)", [(s, float(s)) for s in range(20_000)])
    conn.execute("COMMIT")
    conn.close()
    with Registry(path) as reg:
        assert reg.schema_version == SCHEMA_VERSION
        run = reg.get_run("old")
        assert run["summary"]["last"] == {"loss": 2.0}
        series = reg.metric_series(run["id"], "loss", max_points=101)
        assert 0 < len(series["step"]) <= 101 and series["value"][-1] == 19_999.0


def test_test_only_migration_runs_once_and_keeps_data(tmp_path, monkeypatch):
    path = tmp_path / "registry.db"
    with Registry(path) as reg:
        reg.create_run("kept")

    def add_column(conn):
        conn.execute("ALTER TABLE runs ADD COLUMN colour TEXT NOT NULL DEFAULT 'blue'")

    monkeypatch.setattr(schema_module, "MIGRATIONS",
                        [*schema_module.MIGRATIONS, schema_module.Migration("test_colour", add_column)])
    with Registry(path) as reg:
        assert reg.schema_version == SCHEMA_VERSION + 1
        assert reg.get_run("kept")["colour"] == "blue"
    with Registry(path) as reg:  # a second open must not run it again (ALTER would fail)
        assert reg.schema_version == SCHEMA_VERSION + 1


def test_failing_migration_leaves_the_database_at_its_old_version(tmp_path, monkeypatch):
    path = tmp_path / "registry.db"
    with Registry(path) as reg:
        reg.create_run("kept")

    def half_done(conn):
        conn.execute("CREATE TABLE half (x)")
        raise RuntimeError("migration bug")

    monkeypatch.setattr(schema_module, "MIGRATIONS",
                        [*schema_module.MIGRATIONS, schema_module.Migration("test_half_done", half_done)])
    with pytest.raises(RuntimeError, match="migration bug"):
        Registry(path)
    monkeypatch.undo()
    with Registry(path) as reg:
        assert reg.schema_version == SCHEMA_VERSION
        assert "half" not in reg.db.table_names()
        assert reg.get_run("kept")["name"] == "kept"


def test_a_database_from_before_named_migrations_is_adopted_without_running_them(tmp_path):
    """A real file made by the current code, then turned into what older kernelrl left (a version number, no
    `migrations` table): opening it records the migrations its version says it has and runs none of them (running
    headline_columns again would fail on its ALTER TABLE), and the data stays."""
    path = tmp_path / "registry.db"
    with Registry(path) as reg:
        run = reg.create_run("old")
        reg.write_step(run["id"], 0, {"reward/mean": 0.5})
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TABLE migrations")
    conn.close()
    with Registry(path) as reg:
        names = [row[0] for row in reg.conn.execute("SELECT name FROM migrations ORDER BY rowid")]
        adopted = reg.conn.execute("SELECT COUNT(*) FROM migrations WHERE applied_at IS NULL").fetchone()[0]
        assert names == [m.name for m in schema_module.MIGRATIONS] and adopted == SCHEMA_VERSION
        assert reg.schema_version == SCHEMA_VERSION
        assert reg.get_run("old")["reward_value"] == 0.5
        assert reg.metric_series(run["id"], "reward/mean")["value"] == [0.5]


def test_an_unknown_named_migration_means_a_newer_kernelrl(tmp_path):
    path = tmp_path / "registry.db"
    with Registry(path) as reg:
        reg.conn.execute("INSERT INTO migrations (name, applied_at) VALUES ('from_the_future', 1.0)")
    with pytest.raises(KrlError, match="newer kernelrl"):
        Registry(path)


def test_newer_schema_is_refused_and_the_file_is_untouched(tmp_path):
    path = tmp_path / "registry.db"
    with Registry(path) as reg:
        reg.create_run("future")
        reg.conn.execute("UPDATE schema_version SET version = 99")
        reg.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = _file_state(path)
    time.sleep(0.01)
    with pytest.raises(KrlError, match=r"newer kernelrl \(schema v99.*knows v%d\).*Upgrade" % SCHEMA_VERSION):
        Registry(path)
    assert _file_state(path) == before


def test_non_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "registry.db"
    path.write_text("just some notes, not a database\n" * 10)
    before = _file_state(path)
    with pytest.raises(KrlError, match="not a kernelrl registry \\(not an SQLite database\\)"):
        Registry(path)
    assert _file_state(path) == before


def test_foreign_sqlite_database_is_refused_and_untouched(tmp_path):
    path = tmp_path / "registry.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    before = _file_state(path)
    with pytest.raises(KrlError, match="SQLite database but not a kernelrl registry \\(tables: users\\)"):
        Registry(path)
    assert _file_state(path) == before
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL
    conn.close()


def test_schema_version_of_another_app_is_refused(tmp_path):
    path = tmp_path / "registry.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES ('otherapp', 1)")
    conn.commit()
    conn.close()
    with pytest.raises(KrlError, match="names otherapp"):
        Registry(path)


def test_missing_registry_without_create(tmp_path):
    with pytest.raises(KrlError, match="no registry at"):
        Registry.for_workspace(tmp_path / "nowhere", create=False)
    assert not (tmp_path / "nowhere").exists()


# ---------------------------------------------------------------- runs

def test_create_get_and_errors(registry):
    run = registry.create_run("alpha", config={"lr": 1e-5}, preset="kevin", tags=["b", "a", "a"], gpus_requested=2)
    assert run["status"] == "queued" and run["config"] == {"lr": 1e-5} and run["tags"] == ["a", "b"]
    assert registry.get_run(run["id"])["name"] == "alpha"
    with pytest.raises(KrlError, match="already exists"):
        registry.create_run("alpha")
    with pytest.raises(KrlError, match="no run named 'alpah'.*Did you mean: alpha"):
        registry.get_run("alpah")
    with pytest.raises(KrlError, match="invalid run name"):
        registry.create_run("has space")
    with pytest.raises(KrlError, match="run kind"):
        registry.create_run("beta", kind="party")
    assert registry.find_run("nope") is None
    with pytest.raises(ValueError, match="no column"):
        registry.update_run(run["id"], colour="red")


def test_list_runs_filters_summary_and_order(registry):
    a = registry.create_run("a", tags=["sweep"], kind="train")
    b = registry.create_run("b", tags=["sweep", "best"], kind="eval")
    c = registry.create_run("c", kind="train")
    registry.set_status(a["id"], "running")
    registry.set_status(b["id"], "finished", "done", exit_code=0)
    registry.write_step(a["id"], 0, {"reward": 0.1, "loss": 2.0},
                        [_trajectory(solved=True, best_speedup=1.5), _trajectory(sample=1, solved=False, best_speedup=9.0)])
    registry.write_step(a["id"], 1, {"reward": 0.3}, [_trajectory(solved=True, best_speedup=1.2)])
    assert [r["name"] for r in registry.list_runs()] == ["c", "b", "a"]  # newest first
    assert [r["name"] for r in registry.list_runs(status="running")] == ["a"]
    assert [r["name"] for r in registry.list_runs(status=["running", "finished"])] == ["b", "a"]
    assert [r["name"] for r in registry.list_runs(tag="sweep")] == ["b", "a"]
    assert [r["name"] for r in registry.list_runs(tag="best")] == ["b"]
    assert [r["name"] for r in registry.list_runs(kind="train")] == ["c", "a"]
    assert [r["name"] for r in registry.list_runs(kind="train", tag="sweep")] == ["a"]
    row = registry.list_runs(status="running")[0]
    assert row["last_step"] == 1
    # Last value per key across steps; best speedup only from solved trajectories (9.0 was unsolved).
    assert row["summary"] == {"last": {"reward": 0.3, "loss": 2.0}, "best_speedup": 1.5}
    assert registry.last_metrics(a["id"], ["reward"]) == {"reward": 0.3}
    assert row["config"] == {} and row["tags"] == ["sweep"] and row["gpus"] == [] and row["segments"] == []
    lean = registry.list_runs(include_config=False)
    assert "config" not in lean[0] and lean[2]["summary"] == row["summary"]
    assert registry.list_runs(status="crashed") == []
    assert c["id"] in [r["id"] for r in registry.list_runs()]


def test_list_runs_survives_a_hand_edited_non_json_cell(registry):
    run = registry.create_run("edited")
    registry.conn.execute("UPDATE runs SET command = 'python -m core.train 1' WHERE id = ?", (run["id"],))
    registry.update_run(run["id"], segments=[{"pid": 1, "started_at": 2.5}])
    (row,) = registry.list_runs()
    assert row["command"] == "python -m core.train 1"
    assert row["segments"] == [{"pid": 1, "started_at": 2.5}]


def test_status_changes_events_tags_notes_checkpoints(registry):
    run = registry.create_run("r")
    assert registry.compare_and_set_status(run["id"], ["queued"], "running", "spawned", pid=123)
    assert not registry.compare_and_set_status(run["id"], ["queued"], "failed")
    assert registry.get_run(run["id"])["pid"] == 123
    assert [e["message"] for e in registry.events(run["id"])] == ["created (queued)", "running: spawned"]
    first_event = registry.events(run["id"])[0]["id"]
    assert len(registry.events(run["id"], after_id=first_event)) == 1
    assert registry.add_tags(run["id"], ["x", "y"]) == ["x", "y"]
    assert registry.remove_tags(run["id"], ["x"]) == ["y"]
    registry.set_notes(run["id"], "promising")
    registry.rename_run(run["id"], "r2")
    assert registry.get_run("r2")["notes"] == "promising"
    registry.add_checkpoint(run["id"], 10, "step-10", "/s/10", "/p/10")
    registry.add_checkpoint(run["id"], 20, "step-20", "/s/20")
    assert [c["step"] for c in registry.checkpoints(run["id"])] == [10, 20]
    assert registry.last_checkpoint(run["id"])["state_path"] == "/s/20"
    before = registry.get_run(run["id"])["heartbeat_at"]
    registry.heartbeat(run["id"])
    assert registry.get_run(run["id"])["heartbeat_at"] != before


# ---------------------------------------------------------------- metrics

def _series_run(registry, values, key="reward", name="series"):
    run = registry.create_run(name)
    registry.insert_metric_rows(run["id"], [(key, step, value, 1000.0 + step) for step, value in enumerate(values)])
    return run["id"]


def _check_downsampled(series, values, max_points):
    steps = series["step"]
    assert 0 < len(steps) <= max_points
    assert steps == sorted(set(steps))
    for step, value, wall in zip(steps, series["value"], series["wall_time"]):
        assert value == values[step] and wall == 1000.0 + step  # real points, not averages
    assert steps[-1] == len(values) - 1  # the latest value is always shown
    assert max(series["value"]) == max(values) and min(series["value"]) == min(values)


@pytest.mark.parametrize("n_points, max_points", [(20_000, 101), (20_000, 1001), (3_000, 1000), (100_000, 1000)],
                         ids=["blocks", "rows", "rows-small", "blocks-100k"])
def test_downsampling_keeps_every_spike_and_dip(registry, n_points, max_points):
    rng = random.Random(n_points + max_points)
    values = [rng.uniform(-1, 1) for _ in range(n_points)]
    # Spikes and dips further apart than a bucket: each one is its bucket's extreme and must survive.
    bucket_width = -(-n_points // ((max_points - 1) // 2))
    spikes = list(range(bucket_width * 3 + 7, n_points - 1, max(bucket_width * 4, n_points // 12)))[:10]
    for index, step in enumerate(spikes):
        values[step] = 50.0 + index if index % 2 == 0 else -50.0 - index
    run_id = _series_run(registry, values)
    series = registry.metric_series(run_id, "reward", max_points=max_points)
    _check_downsampled(series, values, max_points)
    assert set(spikes) <= set(series["step"])
    assert len(series["step"]) > max_points // 3  # buckets are actually used, not a handful of points
    again = registry.metric_series(run_id, "reward", max_points=max_points)  # second call reads the block cache
    assert again == series


def test_downsampling_sees_rewritten_and_appended_points(registry):
    values = [float(i % 7) for i in range(20_000)]
    run_id = _series_run(registry, values)
    first = registry.metric_series(run_id, "reward", max_points=101)
    assert registry.conn.execute("SELECT COUNT(*) FROM metric_blocks WHERE run_id = ?", (run_id,)).fetchone()[0] > 0
    assert 100.0 not in first["value"]
    # A step inside an already cached block is rewritten (a resume), and another is bulk-loaded.
    registry.write_step(run_id, 7_000, {"reward": 100.0})
    registry.insert_metric_rows(run_id, [("reward", 12_345, -100.0, 1.0)])
    values[7_000], values[12_345] = 100.0, -100.0
    later = registry.metric_series(run_id, "reward", max_points=101)
    assert 7_000 in later["step"] and 12_345 in later["step"]
    registry.write_step(run_id, 20_000, {"reward": 3.0})
    assert registry.metric_series(run_id, "reward", max_points=101)["step"][-1] == 20_000


def test_metric_series_bounds_small_limits_and_nulls(registry):
    values = [float(i) for i in range(10_000)]
    run_id = _series_run(registry, values)
    raw = registry.metric_series(run_id, "reward", step_min=10, step_max=14)
    assert raw == {"step": [10, 11, 12, 13, 14], "value": [10.0, 11.0, 12.0, 13.0, 14.0],
                   "wall_time": [1010.0, 1011.0, 1012.0, 1013.0, 1014.0]}
    bounded = registry.metric_series(run_id, "reward", max_points=50, step_min=1_000, step_max=8_999)
    assert len(bounded["step"]) <= 50 and bounded["step"][0] == 1_000 and bounded["step"][-1] == 8_999
    assert all(1_000 <= s <= 8_999 for s in bounded["step"])
    assert registry.metric_series(run_id, "reward", max_points=1)["step"] == [9_999]
    assert registry.metric_series(run_id, "reward", max_points=2)["value"] == [0.0, 9_999.0]
    assert registry.metric_series(run_id, "nope", max_points=10) == {"step": [], "value": [], "wall_time": []}
    with pytest.raises(ValueError):
        registry.metric_series(run_id, "reward", max_points=0)
    run = registry.create_run("gaps")
    for step in range(300):
        registry.write_step(run["id"], step, {"acc": None if step % 3 else float(step)})
    full = registry.metric_series(run["id"], "acc")
    assert len(full["step"]) == 300 and full["value"][1] is None
    thin = registry.metric_series(run["id"], "acc", max_points=21)
    assert None not in thin["value"][:-1] and max(v for v in thin["value"] if v is not None) == 297.0


def test_metric_keys_tail_and_multi_series(registry):
    a = registry.create_run("a")
    b = registry.create_run("b")
    empty = registry.create_run("empty")
    for step in range(30):
        registry.write_step(a["id"], step, {"reward": float(step), "loss": -float(step)})
    for step in range(3):
        registry.write_step(b["id"], step, {"reward": 10.0 + step})
    assert registry.metric_keys(a["id"]) == ["loss", "reward"]
    assert registry.metric_count(a["id"], "reward") == 30
    tail = registry.metric_tail([a["id"], b["id"], empty["id"]], "reward", 5)
    assert tail == {a["id"]: [25.0, 26.0, 27.0, 28.0, 29.0], b["id"]: [10.0, 11.0, 12.0], empty["id"]: []}
    assert registry.metric_tail([], "reward", 5) == {}
    many = registry.metric_series_many(a["id"], ["reward", "loss"], max_points=11)
    assert set(many) == {"reward", "loss"} and len(many["loss"]["step"]) <= 11
    per_run = registry.metric_series_runs([a["id"], b["id"]], "reward")
    assert per_run[b["id"]]["value"] == [10.0, 11.0, 12.0]


# ---------------------------------------------------------------- trajectories

def _populate_trajectories(registry):
    run = registry.create_run("traj")
    rows = {
        0: [_trajectory(0, 0, "builtin/relu", total_return=0.5, solved=True, solved_at_turn=1, best_speedup=1.1),
            _trajectory(0, 1, "builtin/relu", total_return=-1.0, hack=True),
            _trajectory(1, 0, "builtin/gelu", total_return=0.2)],
        1: [_trajectory(0, 0, "builtin/relu", total_return=2.0, solved=True, solved_at_turn=0, best_speedup=3.0),
            _trajectory(1, 0, "builtin/gelu", total_return=1.0, solved=True, solved_at_turn=1, best_speedup=0.8)],
    }
    for step, trajectories in rows.items():
        registry.write_step(run["id"], step, {"reward": float(step)}, trajectories)
    return run["id"]


def test_trajectory_filters_and_orders(registry):
    run_id = _populate_trajectories(registry)

    def ids(**kwargs):
        return [(t["step"], t["problem_id"], t["sample_index"]) for t in registry.trajectories(run_id, **kwargs)]

    assert ids(order="return")[0] == (1, "builtin/relu", 0)
    assert ids(order="step") == [(0, "builtin/relu", 0), (0, "builtin/relu", 1), (0, "builtin/gelu", 0),
                                 (1, "builtin/relu", 0), (1, "builtin/gelu", 0)]
    assert [t["best_speedup"] for t in registry.trajectories(run_id, order="speedup")][:3] == [3.0, 1.1, 0.8]
    assert ids(problem_id="builtin/gelu", order="step") == [(0, "builtin/gelu", 0), (1, "builtin/gelu", 0)]
    assert len(ids(outcome="solved")) == 3 and len(ids(outcome="unsolved")) == 2
    assert ids(outcome="hack") == [(0, "builtin/relu", 1)]
    assert ids(outcome="solved", solved_at_turn=0) == [(1, "builtin/relu", 0)]
    assert {s for s, _, _ in ids(step_min=1)} == {1} and {s for s, _, _ in ids(step_max=0)} == {0}
    assert len(ids(limit=2)) == 2
    with pytest.raises(KrlError, match="outcome"):
        registry.trajectories(run_id, outcome="great")
    with pytest.raises(KrlError, match="order"):
        registry.trajectories(run_id, order="vibes")


def test_trajectory_turns_deduplicate_prompts(registry):
    run = registry.create_run("dedupe")
    shared = "the same long prompt " * 200
    turns = [TurnRecord(turn=0, prompt=shared, response="a", eval_result={"verdict": "correct", "speedup": 1.5},
                        reward_breakdown={"correct": 1.0}, retrieved=[{"id": "ex1"}], tokens_in=10, tokens_out=5),
             TurnRecord(turn=1, prompt="follow-up with feedback", response="b", feedback="wrong output")]
    trajectories = [TrajectoryRecord(group=0, sample=s, problem_id="builtin/relu", turns=turns) for s in range(8)]
    registry.write_step(run["id"], 0, {}, trajectories)
    registry.write_step(run["id"], 1, {}, trajectories)
    assert registry.conn.execute("SELECT COUNT(*) FROM texts").fetchone()[0] == 2
    first = registry.trajectories(run["id"], order="step")[0]
    loaded = registry.trajectory_turns(first["id"])
    assert [t["turn"] for t in loaded] == [0, 1]
    assert loaded[0]["prompt"] == shared and loaded[1]["prompt"] == "follow-up with feedback"
    assert loaded[0]["eval_result"] == {"verdict": "correct", "speedup": 1.5}
    assert loaded[0]["reward_breakdown"] == {"correct": 1.0} and loaded[0]["retrieved"] == [{"id": "ex1"}]
    assert loaded[1]["feedback"] == "wrong output" and loaded[1]["eval_result"] is None
    assert registry.trajectory(first["id"])["n_turns"] == 2
    with pytest.raises(KrlError, match="no trajectory"):
        registry.trajectory(10**9)
    verdicts = registry.recent_turn_verdicts(run["id"], limit=3)
    assert len(verdicts) == 3 and verdicts[0]["step"] == 1


def test_neighbour_trajectory_stays_within_run_and_problem(registry):
    run_id = _populate_trajectories(registry)
    other = registry.create_run("other")
    registry.write_step(other["id"], 0, {}, [_trajectory(0, 0, "builtin/relu")])
    relu = [t["id"] for t in registry.trajectories(run_id, problem_id="builtin/relu", order="step")]
    assert registry.neighbour_trajectory(relu[0], +1) == relu[1]
    assert registry.neighbour_trajectory(relu[1], +1) == relu[2]
    assert registry.neighbour_trajectory(relu[2], +1) is None  # the other run's relu is not a neighbour
    assert registry.neighbour_trajectory(relu[1], -1) == relu[0]
    assert registry.neighbour_trajectory(relu[0], -1) is None


def test_problem_summary(registry):
    run_id = _populate_trajectories(registry)
    summary = {row["problem_id"]: row for row in registry.problem_summary(run_id)}
    relu, gelu = summary["builtin/relu"], summary["builtin/gelu"]
    assert relu["attempts"] == 3 and relu["solved"] == 2 and relu["hacks"] == 1
    assert relu["solve_rate"] == pytest.approx(2 / 3) and relu["best_speedup"] == 3.0
    assert gelu["attempts"] == 2 and gelu["solve_rate"] == 0.5 and gelu["best_speedup"] == 0.8
    assert [row["problem_id"] for row in registry.problem_summary(run_id)] == ["builtin/gelu", "builtin/relu"]


def test_rewriting_a_step_replaces_it(registry):
    run = registry.create_run("resume")
    registry.write_step(run["id"], 0, {"a": 0.0})
    registry.write_step(run["id"], 1, {"a": 1.0, "b": 1.0}, [_trajectory(sample=0), _trajectory(sample=1)])
    registry.write_step(run["id"], 2, {"a": 2.0, "b": 2.0})
    registry.write_step(run["id"], 1, {"a": 10.0}, [_trajectory(sample=0, n_turns=1, total_return=7.0)])
    assert registry.metric_series(run["id"], "a")["value"] == [0.0, 10.0, 2.0]
    assert registry.metric_series(run["id"], "b")["step"] == [2]  # b at step 1 was not rewritten: gone
    (only,) = registry.trajectories(run["id"], step_min=1, step_max=1)
    assert only["total_return"] == 7.0 and only["n_turns"] == 1
    assert registry.conn.execute("SELECT COUNT(*) FROM turns").fetchone()[0] == 1
    assert registry.get_run(run["id"])["last_step"] == 2


def test_delete_run_removes_everything(registry):
    keep = registry.create_run("keep")
    doomed = registry.create_run("doomed")
    child = registry.create_run("child", parent_run_id=doomed["id"], parent_step=3)
    shared = _trajectory(prompt="shared prompt")
    registry.write_step(keep["id"], 0, {"reward": 1.0}, [shared])
    registry.write_step(doomed["id"], 0, {"reward": 2.0}, [shared, _trajectory(sample=1, prompt="only doomed")])
    registry.insert_metric_rows(doomed["id"], [("reward", s, float(s), 0.0) for s in range(1, 20_000)])
    registry.metric_series(doomed["id"], "reward", max_points=101)  # fills the block cache
    registry.add_checkpoint(doomed["id"], 0, "c0", "/s")
    registry.delete_run(doomed["id"])
    for table in ("metrics", "metric_blocks", "trajectories", "checkpoints", "events"):
        assert registry.conn.execute(f"SELECT COUNT(*) FROM {table} WHERE run_id = ?",
                                     (doomed["id"],)).fetchone()[0] == 0, table
    texts = {row[0] for row in registry.conn.execute("SELECT text FROM texts")}
    assert texts == {"shared prompt (turn 0)", "shared prompt (turn 1)"}
    assert registry.conn.execute("SELECT COUNT(*) FROM turns").fetchone()[0] == 2
    assert registry.get_run(child["id"])["parent_run_id"] is None
    assert registry.find_run("doomed") is None
    assert registry.metric_series(keep["id"], "reward")["value"] == [1.0]


def test_write_to_unknown_run_is_refused(registry):
    with pytest.raises(KrlError, match="does not exist"):
        registry.write_step(999, 0, {"a": 1.0})
    with pytest.raises(KrlError, match="does not exist"):
        registry.insert_metric_rows(999, [("a", 0, 1.0, 0.0)])
    assert registry.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0


def test_live_run_blocks_are_cached_by_the_writer_so_readers_stay_read_only(workspace):
    writer = Registry.for_workspace(workspace)
    reader = Registry.for_workspace(workspace)
    run = writer.create_run("live")
    rng = random.Random(3)
    values = []
    for step in range(BLOCK_STEPS * 12 + 5):
        values.append(rng.uniform(-1, 1) if step != 300 else 9.0)
        writer.write_step(run["id"], step, {"reward": values[-1]})
    cached = writer.conn.execute("SELECT COUNT(*) FROM metric_blocks WHERE run_id = ?", (run["id"],)).fetchone()[0]
    assert cached == 12  # every block the run has moved past; not the one it is writing
    before = reader.conn.total_changes
    series = reader.metric_series(run["id"], "reward", max_points=13)
    assert reader.conn.total_changes == before
    assert 300 in series["step"] and series["step"][-1] == len(values) - 1
    assert min(series["value"]) == min(values)
    writer.close()
    reader.close()


def test_opening_a_second_registry_keeps_the_first_ones_locks(tmp_path):
    """POSIX locks belong to the process: closing any descriptor of the database file drops them all. Opening a
    second Registry in the same process must not do that, or another process closing its last connection deletes
    the shared-memory file under the first one (seen as 'disk I/O error')."""
    path = tmp_path / "registry.db"
    first = Registry(path)
    first.create_run("a")
    second = Registry(path)
    closer = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM runs').fetchall(); c.close()"
    subprocess.run([sys.executable, "-c", closer, str(path)], check=True)
    assert Path(str(path) + "-shm").exists()
    assert [row["name"] for row in first.list_runs()] == ["a"]
    second.create_run("b")
    assert sorted(row["name"] for row in first.list_runs()) == ["a", "b"]
    first.close()
    second.close()


def test_runs_list_version_moves_on_list_changes_only(registry):
    version = registry.runs_list_version()

    def moved() -> bool:
        nonlocal version
        now = registry.runs_list_version()
        changed, version = now != version, now
        return changed

    run = registry.create_run("one", status="running")
    assert moved()
    registry.heartbeat(run["id"])
    registry.write_step(run["id"], 0, {"reward/total": 1.0}, [])
    registry.update_run(run["id"], last_step=0, summary={"reward/total": 1.0})
    registry.set_status(run["id"], "running")  # same status: nothing a list shows changed
    assert not moved()
    registry.set_status(run["id"], "finished")
    assert moved()
    registry.rename_run(run["id"], "uno")
    assert moved()
    registry.update_run(run["id"], tags=["keep"])
    assert moved()
    registry.update_run(run["id"], notes="good one")
    assert moved()
    registry.delete_run(run["id"])
    assert moved()


def test_list_runs_reads_only_the_columns_asked_for(registry):
    registry.create_run("a", tags=["x"], config={"lr": 1})
    rows = registry.list_runs(columns=("name", "tags", "summary"))
    assert rows == [{"id": rows[0]["id"], "name": "a", "tags": ["x"], "summary": {}}]
    assert registry.list_runs(columns=("name", "config"))[0]["config"] == {"lr": 1}
    with pytest.raises(KrlError, match="unknown run column"):
        registry.list_runs(columns=("name", "colour"))


def test_an_inner_transaction_that_fails_rolls_back_alone(registry, tmp_path):
    """Nested transaction() uses a SAVEPOINT: the caller catches the inner failure, the outer one commits, and the
    inner block's partial writes are gone (seen from a second connection)."""
    from core.registry import Registry

    run = registry.create_run("outer")
    with registry.transaction():
        registry.add_event(run["id"], "note", "outer write")
        try:
            with registry.transaction():
                registry.add_event(run["id"], "note", "inner partial write")
                raise RuntimeError("inner failure")
        except RuntimeError:
            pass
        registry.add_event(run["id"], "note", "after the inner failure")
    other = Registry(registry.path)
    try:
        messages = [e["message"] for e in other.events(run["id"]) if e["kind"] == "note"]
    finally:
        other.close()
    assert messages == ["outer write", "after the inner failure"]


def test_an_outer_failure_rolls_back_a_committed_inner_block(registry):
    run = registry.create_run("outer2")
    with pytest.raises(RuntimeError):
        with registry.transaction():
            with registry.transaction():
                registry.add_event(run["id"], "note", "inner")
            raise RuntimeError("outer failure")
    assert [e for e in registry.events(run["id"]) if e["kind"] == "note"] == []


@pytest.mark.parametrize("name", ["evil\x1b[2Jname", "bell\x07", "tab\tname", "nul\x00", "back\\slash"])
def test_run_names_with_control_characters_are_refused(registry, name):
    with pytest.raises(KrlError) as error:
        registry.create_run(name)
    assert "\x1b" not in str(error.value) and "\x07" not in str(error.value)


def test_the_wal_is_cut_back_once_readers_let_a_checkpoint_through(registry):
    """A reader holding an old snapshot keeps checkpoints from resetting the WAL, which grows meanwhile; afterwards
    the file must shrink back to WAL_SIZE_LIMIT_BYTES instead of keeping its peak (GBs with many writers)."""
    import random
    import string

    from core.registry import WAL_SIZE_LIMIT_BYTES, Registry, TrajectoryRecord, TurnRecord

    run = registry.create_run("big-writes")
    wal = Path(str(registry.path) + "-wal")
    reader = Registry(registry.path)
    rng = random.Random(0)

    def write(step: int) -> None:
        text = "".join(rng.choices(string.ascii_letters, k=1 << 20))  # 1 MiB, never deduplicated
        turn = TurnRecord(turn=0, prompt=text, response="r")
        registry.write_step(run["id"], step, {"m": 1.0}, [TrajectoryRecord(0, 0, "p", [turn])])

    try:
        reader.conn.execute("BEGIN")
        reader.conn.execute("SELECT COUNT(*) FROM runs").fetchone()  # holds its snapshot
        for step in range(24):
            write(step)
        assert wal.stat().st_size > WAL_SIZE_LIMIT_BYTES
        reader.conn.execute("COMMIT")
        for step in range(24, 32):
            write(step)
        registry.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        write(32)
        assert wal.stat().st_size <= WAL_SIZE_LIMIT_BYTES + (2 << 20)
    finally:
        reader.close()


def test_the_runs_headline_metrics_are_kept_in_columns(registry):
    """A runs list reads a run's reward, correct rate and best speedup from plain columns written with each step
    (no summary JSON to parse per row), chosen by the same function as the summary (reward_key/correct_key)."""
    from core.registry import correct_key, reward_key

    run = registry.create_run("headline")
    registry.write_step(run["id"], 0, {"env/all/reward/total": 0.5, "env/all/correct_rate": 0.25, "loss": 1.0},
                        [TrajectoryRecord(0, 0, "p", [TurnRecord(turn=0, prompt="p", response="r")], solved=True,
                                          best_speedup=1.5)])
    registry.log_metrics(run["id"], 0, {"reward/stage": 2.0})
    row = registry.list_runs(columns=("reward_key", "reward_value", "correct_key", "correct_value",
                                      "best_speedup"))[0]
    last = registry.get_run(run["id"])["summary"]["last"]
    assert (row["reward_key"], row["correct_key"]) == (reward_key(list(last)), correct_key(list(last)))
    assert (row["reward_value"], row["correct_value"], row["best_speedup"]) == (0.5, 0.25, 1.5)
    registry.update_run(run["id"], summary={"last": {"reward/mean": 0.1}})  # evaluation runs write it whole
    row = registry.get_run(run["id"])
    assert (row["reward_key"], row["reward_value"], row["correct_key"]) == ("reward/mean", 0.1, None)


def test_migration_fills_the_headline_columns_of_existing_runs(tmp_path, monkeypatch):
    path = tmp_path / "registry.db"
    monkeypatch.setattr(schema_module, "MIGRATIONS", schema_module.MIGRATIONS[:3])
    with Registry(path) as reg:  # a v3 registry, its summary as v3 code wrote it
        reg.create_run("before-v4")
        reg.conn.execute("UPDATE runs SET summary = ?, last_step = 3",
                         ('{"last": {"reward/mean": 0.75, "rate/correct": 0.5}}',))
    monkeypatch.undo()
    with Registry(path) as reg:
        row = reg.get_run("before-v4")
        assert (row["reward_key"], row["reward_value"], row["correct_key"], row["correct_value"]) == \
            ("reward/mean", 0.75, "rate/correct", 0.5)


def test_the_page_check_stops_at_its_budget_and_leaves_the_connection_as_it_was(registry):
    registry.create_run("checked", config={})
    assert registry.integrity_problems(budget_s=0.0) is None  # not known: stopped at once
    assert registry.integrity_problems(budget_s=60.0) == [] == registry.integrity_problems()
    assert registry.get_run("checked")["name"] == "checked"  # no progress handler left to interrupt later queries
