"""The SQLite run registry: schema, migrations, writes (one transaction per step) and the queries the UI needs.
Every part of kernelrl reads and writes runs through this module; WAL lets one writer per run and many readers coexist."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

import sqlite_utils

from core.errors import KrlError, did_you_mean

APP_ID = "kernelrl"
REGISTRY_FILENAME = "registry.db"
BUSY_TIMEOUT_MS = 30_000

RUN_STATUSES = ("queued", "running", "stopping", "stopped", "finished", "failed", "crashed")
ACTIVE_STATUSES = ("queued", "running", "stopping")
RUN_KINDS = ("train", "eval", "replay")

# JSON-valued columns of `runs`, decoded on read.
_RUN_JSON_COLUMNS = ("config", "gpus", "tags", "segments", "summary", "command")
_TURN_JSON_COLUMNS = ("eval_result", "reward_breakdown", "retrieved")


def workspace_path(workspace: str | os.PathLike | None = None) -> Path:
    """The workspace folder: explicit argument, else $KRL_WORKSPACE, else ./runs."""
    return Path(workspace or os.environ.get("KRL_WORKSPACE") or "runs").expanduser().resolve()


@dataclass
class TurnRecord:
    """One turn of one trajectory, as stored."""

    turn: int
    prompt: str
    response: str
    kernel: str = ""
    thought: str = ""
    verdict: str = ""
    eval_result: Optional[dict[str, Any]] = None
    feedback: str = ""
    step_score: float = 0.0
    return_: float = 0.0
    advantage: float = 0.0
    reward_breakdown: dict[str, float] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    retrieved: list[dict[str, Any]] = field(default_factory=list)  # RAG examples shown in the prompt


@dataclass
class TrajectoryRecord:
    """One episode (a sample of a group), with its turns."""

    group: int
    sample: int
    problem_id: str
    turns: list[TurnRecord]
    total_return: float = 0.0
    solved: bool = False
    solved_at_turn: Optional[int] = None
    best_speedup: Optional[float] = None
    hack: bool = False


# ---------------------------------------------------------------- schema and migrations

def _migration_1(db: sqlite_utils.Database) -> None:
    db.executescript(
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL DEFAULT 'train',
            status TEXT NOT NULL DEFAULT 'queued',
            config TEXT NOT NULL DEFAULT '{}',
            preset TEXT,
            model TEXT,
            backend TEXT,
            problem_set TEXT,
            created_at REAL NOT NULL,
            started_at REAL,
            ended_at REAL,
            pid INTEGER,
            pid_start_time REAL,
            host TEXT,
            command TEXT,
            gpus TEXT NOT NULL DEFAULT '[]',
            gpus_requested INTEGER NOT NULL DEFAULT 0,
            heartbeat_at REAL,
            exit_code INTEGER,
            error TEXT,
            tags TEXT NOT NULL DEFAULT '[]',
            notes TEXT NOT NULL DEFAULT '',
            parent_run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
            parent_step INTEGER,
            segments TEXT NOT NULL DEFAULT '[]',
            total_steps INTEGER,
            last_step INTEGER,
            summary TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX runs_status ON runs(status);
        CREATE TABLE metrics (
            run_id INTEGER NOT NULL,
            key TEXT NOT NULL,
            step INTEGER NOT NULL,
            value REAL,
            wall_time REAL NOT NULL,
            PRIMARY KEY (run_id, key, step)
        ) WITHOUT ROWID;
        CREATE TABLE texts (
            hash TEXT PRIMARY KEY,
            text TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE trajectories (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            group_index INTEGER NOT NULL,
            sample_index INTEGER NOT NULL,
            problem_id TEXT NOT NULL,
            n_turns INTEGER NOT NULL,
            total_return REAL NOT NULL DEFAULT 0,
            solved INTEGER NOT NULL DEFAULT 0,
            solved_at_turn INTEGER,
            best_speedup REAL,
            hack INTEGER NOT NULL DEFAULT 0,
            UNIQUE (run_id, step, group_index, sample_index)
        );
        CREATE INDEX trajectories_run_step ON trajectories(run_id, step);
        CREATE INDEX trajectories_run_problem ON trajectories(run_id, problem_id);
        CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            trajectory_id INTEGER NOT NULL REFERENCES trajectories(id) ON DELETE CASCADE,
            turn INTEGER NOT NULL,
            prompt_hash TEXT NOT NULL REFERENCES texts(hash),
            response TEXT NOT NULL DEFAULT '',
            thought TEXT NOT NULL DEFAULT '',
            kernel TEXT NOT NULL DEFAULT '',
            verdict TEXT NOT NULL DEFAULT '',
            eval_result TEXT,
            feedback TEXT NOT NULL DEFAULT '',
            step_score REAL NOT NULL DEFAULT 0,
            return_ REAL NOT NULL DEFAULT 0,
            advantage REAL NOT NULL DEFAULT 0,
            reward_breakdown TEXT NOT NULL DEFAULT '{}',
            tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0,
            retrieved TEXT NOT NULL DEFAULT '[]',
            UNIQUE (trajectory_id, turn)
        );
        CREATE TABLE checkpoints (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            name TEXT NOT NULL,
            state_path TEXT,
            sampler_path TEXT,
            created_at REAL NOT NULL
        );
        CREATE INDEX checkpoints_run ON checkpoints(run_id, step);
        CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            time REAL NOT NULL,
            kind TEXT NOT NULL,
            message TEXT NOT NULL DEFAULT ''
        );
        CREATE INDEX events_run ON events(run_id, id);
        """
    )


# Forward migrations: MIGRATIONS[i] brings a database from version i to i + 1.
MIGRATIONS = [_migration_1]
SCHEMA_VERSION = len(MIGRATIONS)


def _text_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _decode(row: dict[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    for column in columns:
        value = row.get(column)
        if isinstance(value, str) and value[:1] in "{[":
            row[column] = json.loads(value)
    return row


class Registry:
    """A connection to one workspace's registry. Thread-safe; open one per process."""

    def __init__(self, path: str | os.PathLike, create: bool = True):
        self.path = Path(path)
        if not self.path.exists() and not create:
            raise KrlError(f"no registry at {self.path}. Start a run first, or pass --workspace.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._check_is_registry_file()
        self._lock = threading.RLock()
        self._depth = 0
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError:
            conn.close()
            raise KrlError(f"{self.path} is not a kernelrl registry (not an SQLite database). "
                           "Pass --workspace to point at a workspace folder.") from None
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        self._migrate()

    @classmethod
    def for_workspace(cls, workspace: str | os.PathLike | None = None, create: bool = True) -> "Registry":
        return cls(workspace_path(workspace) / REGISTRY_FILENAME, create=create)

    @property
    def workspace(self) -> Path:
        return self.path.parent

    def run_dir(self, name: str) -> Path:
        return self.workspace / name

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ plumbing

    def _check_is_registry_file(self) -> None:
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as handle:
                if not handle.read(16).startswith(b"SQLite format 3"):
                    raise KrlError(f"{self.path} is not a kernelrl registry (not an SQLite database). "
                                   "Move it away or pass --workspace to use another folder.")

    def _migrate(self) -> None:
        with self.transaction():
            tables = set(self.db.table_names())
            if "schema_version" not in tables:
                if tables:
                    raise KrlError(f"{self.path} is an SQLite database but not a kernelrl registry "
                                   f"(tables: {', '.join(sorted(tables)[:5])}). Use another --workspace.")
                self.conn.execute("CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL)")
                self.conn.execute("INSERT INTO schema_version VALUES (?, 0)", (APP_ID,))
            row = self.conn.execute("SELECT app, version FROM schema_version").fetchone()
            if row is None or row[0] != APP_ID:
                raise KrlError(f"{self.path} is not a kernelrl registry. Use another --workspace.")
            version = row[1]
            if version > SCHEMA_VERSION:
                raise KrlError(f"{self.path} was written by a newer kernelrl (schema v{version}, this one knows "
                               f"v{SCHEMA_VERSION}). Upgrade kernelrl: `pip install -U kernelrl`.")
            for index in range(version, SCHEMA_VERSION):
                MIGRATIONS[index](self.db)
            if version != SCHEMA_VERSION:
                self.conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))

    @property
    def schema_version(self) -> int:
        return self.conn.execute("SELECT version FROM schema_version").fetchone()[0]

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT; nested uses join the outer transaction."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self.conn
                finally:
                    self._depth -= 1
                return
            self.conn.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield self.conn
            except BaseException:
                self._depth = 0
                self.conn.execute("ROLLBACK")
                raise
            self._depth = 0
            self.conn.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            cursor = self.conn.execute(sql, params)
            columns = [d[0] for d in cursor.description]
            return [dict(zip(columns, row)) for row in cursor.fetchall()]

    # ------------------------------------------------------------ runs

    def create_run(self, name: str, *, kind: str = "train", config: dict[str, Any] | None = None,
                   preset: str | None = None, model: str | None = None, backend: str | None = None,
                   problem_set: str | None = None, gpus_requested: int = 0, total_steps: int | None = None,
                   tags: Iterable[str] = (), notes: str = "", parent_run_id: int | None = None,
                   parent_step: int | None = None, status: str = "queued") -> dict[str, Any]:
        if kind not in RUN_KINDS:
            raise KrlError(f"run kind must be one of {', '.join(RUN_KINDS)}, not '{kind}'.")
        _check_run_name(name)
        with self.transaction():
            if self.conn.execute("SELECT 1 FROM runs WHERE name = ?", (name,)).fetchone():
                raise KrlError(f"a run named '{name}' already exists. Choose another --name, or resume it with "
                               f"`krl runs resume {name}`.")
            now = time.time()
            cursor = self.conn.execute(
                "INSERT INTO runs (name, kind, status, config, preset, model, backend, problem_set, created_at, "
                "gpus_requested, total_steps, tags, notes, parent_run_id, parent_step, host) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, kind, status, json.dumps(config or {}), preset, model, backend, problem_set, now,
                 gpus_requested, total_steps, json.dumps(sorted(set(tags))), notes, parent_run_id, parent_step,
                 socket.gethostname()),
            )
            run_id = cursor.lastrowid
            self._event(run_id, "status", f"created ({status})", now)
        return self.get_run(run_id)

    def get_run(self, name_or_id: str | int) -> dict[str, Any]:
        """A run by id or name; KrlError with suggestions when unknown."""
        if isinstance(name_or_id, int):
            rows = self._query("SELECT * FROM runs WHERE id = ?", (name_or_id,))
        else:
            rows = self._query("SELECT * FROM runs WHERE name = ?", (name_or_id,))
        if not rows:
            names = [r["name"] for r in self._query("SELECT name FROM runs")]
            raise KrlError(f"no run named '{name_or_id}'.{did_you_mean(str(name_or_id), names)} "
                           "List runs with `krl runs ls`.")
        return _decode(rows[0], _RUN_JSON_COLUMNS)

    def find_run(self, name_or_id: str | int) -> Optional[dict[str, Any]]:
        try:
            return self.get_run(name_or_id)
        except KrlError:
            return None

    def list_runs(self, status: str | Sequence[str] | None = None, tag: str | None = None,
                  kind: str | None = None) -> list[dict[str, Any]]:
        """All runs, newest first, with `summary` (last metric values, best speedup) and `last_step`."""
        clauses, params = [], []
        if status:
            statuses = [status] if isinstance(status, str) else list(status)
            clauses.append(f"status IN ({','.join('?' * len(statuses))})")
            params += statuses
        if kind:
            clauses.append("kind = ?")
            params.append(kind)
        if tag:
            clauses.append("EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE json_each.value = ?)")
            params.append(tag)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._query(f"SELECT * FROM runs {where} ORDER BY id DESC", params)
        return [_decode(row, _RUN_JSON_COLUMNS) for row in rows]

    def update_run(self, run_id: int, **fields: Any) -> None:
        if not fields:
            return
        for key in _RUN_JSON_COLUMNS:
            if key in fields and not isinstance(fields[key], str):
                fields[key] = json.dumps(fields[key])
        assignments = ", ".join(f"{key} = ?" for key in fields)
        with self.transaction():
            self.conn.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*fields.values(), run_id))

    def set_status(self, run_id: int, status: str, message: str = "", **fields: Any) -> None:
        """Change status and record an event in the same transaction."""
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown status {status}")
        with self.transaction():
            self.update_run(run_id, status=status, **fields)
            self._event(run_id, "status", f"{status}{': ' + message if message else ''}")

    def compare_and_set_status(self, run_id: int, expected: Sequence[str], status: str, message: str = "",
                               **fields: Any) -> bool:
        """Set status only if the current one is in `expected` (atomic); True when it changed."""
        with self.transaction():
            row = self.conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row[0] not in expected:
                return False
            self.set_status(run_id, status, message, **fields)
            return True

    def heartbeat(self, run_id: int) -> None:
        with self.transaction():
            self.conn.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", (time.time(), run_id))

    def rename_run(self, run_id: int, new_name: str) -> None:
        _check_run_name(new_name)
        with self.transaction():
            if self.conn.execute("SELECT 1 FROM runs WHERE name = ?", (new_name,)).fetchone():
                raise KrlError(f"a run named '{new_name}' already exists; choose another name.")
            self.conn.execute("UPDATE runs SET name = ? WHERE id = ?", (new_name, run_id))
            self._event(run_id, "rename", f"renamed to {new_name}")

    def add_tags(self, run_id: int, tags: Iterable[str]) -> list[str]:
        with self.transaction():
            current = set(self.get_run(run_id)["tags"])
            updated = sorted(current | set(tags))
            self.update_run(run_id, tags=updated)
        return updated

    def remove_tags(self, run_id: int, tags: Iterable[str]) -> list[str]:
        with self.transaction():
            updated = sorted(set(self.get_run(run_id)["tags"]) - set(tags))
            self.update_run(run_id, tags=updated)
        return updated

    def set_notes(self, run_id: int, notes: str) -> None:
        self.update_run(run_id, notes=notes)

    def delete_run(self, run_id: int) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM turns WHERE trajectory_id IN (SELECT id FROM trajectories WHERE run_id = ?)",
                              (run_id,))
            for table in ("trajectories", "checkpoints", "events", "metrics"):
                self.conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            self.conn.execute("UPDATE runs SET parent_run_id = NULL WHERE parent_run_id = ?", (run_id,))
            self.conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    # ------------------------------------------------------------ per-step writes

    def write_step(self, run_id: int, step: int, metrics: dict[str, float],
                   trajectories: Sequence[TrajectoryRecord] = (), events: Sequence[tuple[str, str]] = (),
                   wall_time: float | None = None) -> None:
        """Everything a training step produced, in one transaction (a crash loses at most this step).
        Rewriting a step (after a resume) replaces its earlier rows."""
        now = wall_time if wall_time is not None else time.time()
        with self.transaction():
            self._insert_metrics(run_id, step, metrics, now)
            self.conn.execute("DELETE FROM turns WHERE trajectory_id IN "
                              "(SELECT id FROM trajectories WHERE run_id = ? AND step = ?)", (run_id, step))
            self.conn.execute("DELETE FROM trajectories WHERE run_id = ? AND step = ?", (run_id, step))
            best = None
            for trajectory in trajectories:
                self._insert_trajectory(run_id, step, trajectory)
                if trajectory.best_speedup is not None and trajectory.solved:
                    best = max(best or 0.0, trajectory.best_speedup)
            for kind, message in events:
                self._event(run_id, kind, message, now)
            self._update_summary(run_id, step, metrics, best)

    def log_metrics(self, run_id: int, step: int, metrics: dict[str, float], wall_time: float | None = None) -> None:
        with self.transaction():
            self._insert_metrics(run_id, step, metrics, wall_time if wall_time is not None else time.time())
            self._update_summary(run_id, step, metrics, None)

    def insert_metric_rows(self, run_id: int, rows: Iterable[tuple[str, int, float, float]]) -> None:
        """Bulk load (key, step, value, wall_time) rows in one transaction (imports, benchmarks)."""
        with self.transaction():
            self.conn.executemany("INSERT OR REPLACE INTO metrics (run_id, key, step, value, wall_time) "
                                  "VALUES (?, ?, ?, ?, ?)", ((run_id, k, s, v, w) for k, s, v, w in rows))

    def _insert_metrics(self, run_id: int, step: int, metrics: dict[str, float], now: float) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO metrics (run_id, key, step, value, wall_time) VALUES (?, ?, ?, ?, ?)",
            [(run_id, key, step, None if value is None else float(value), now) for key, value in metrics.items()],
        )

    def _update_summary(self, run_id: int, step: int, metrics: dict[str, float], best_speedup: float | None) -> None:
        row = self.conn.execute("SELECT summary, last_step FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KrlError(f"run id {run_id} does not exist in {self.path}.")
        summary = json.loads(row[0] or "{}")
        last = summary.get("last", {})
        last.update({k: v for k, v in metrics.items() if v is not None})
        summary["last"] = last
        if best_speedup is not None:
            summary["best_speedup"] = max(summary.get("best_speedup") or 0.0, best_speedup)
        last_step = max(step, row[1] if row[1] is not None else step)
        self.conn.execute("UPDATE runs SET summary = ?, last_step = ?, heartbeat_at = ? WHERE id = ?",
                          (json.dumps(summary), last_step, time.time(), run_id))

    def _insert_trajectory(self, run_id: int, step: int, trajectory: TrajectoryRecord) -> int:
        cursor = self.conn.execute(
            "INSERT INTO trajectories (run_id, step, group_index, sample_index, problem_id, n_turns, total_return, "
            "solved, solved_at_turn, best_speedup, hack) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, step, trajectory.group, trajectory.sample, trajectory.problem_id, len(trajectory.turns),
             trajectory.total_return, int(trajectory.solved), trajectory.solved_at_turn, trajectory.best_speedup,
             int(trajectory.hack)),
        )
        trajectory_id = cursor.lastrowid
        for turn in trajectory.turns:
            prompt_hash = _text_hash(turn.prompt)
            self.conn.execute("INSERT OR IGNORE INTO texts (hash, text) VALUES (?, ?)", (prompt_hash, turn.prompt))
            self.conn.execute(
                "INSERT INTO turns (trajectory_id, turn, prompt_hash, response, thought, kernel, verdict, eval_result, "
                "feedback, step_score, return_, advantage, reward_breakdown, tokens_in, tokens_out, retrieved) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (trajectory_id, turn.turn, prompt_hash, turn.response, turn.thought, turn.kernel, turn.verdict,
                 json.dumps(turn.eval_result) if turn.eval_result is not None else None, turn.feedback,
                 turn.step_score, turn.return_, turn.advantage, json.dumps(turn.reward_breakdown), turn.tokens_in,
                 turn.tokens_out, json.dumps(turn.retrieved)),
            )
        return trajectory_id

    # ------------------------------------------------------------ events and checkpoints

    def _event(self, run_id: int, kind: str, message: str, now: float | None = None) -> None:
        self.conn.execute("INSERT INTO events (run_id, time, kind, message) VALUES (?, ?, ?, ?)",
                          (run_id, now if now is not None else time.time(), kind, message))

    def add_event(self, run_id: int, kind: str, message: str) -> None:
        with self.transaction():
            self._event(run_id, kind, message)

    def events(self, run_id: int, after_id: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        return self._query("SELECT * FROM events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
                           (run_id, after_id, limit))

    def add_checkpoint(self, run_id: int, step: int, name: str, state_path: str | None,
                       sampler_path: str | None = None) -> None:
        with self.transaction():
            self.conn.execute("INSERT INTO checkpoints (run_id, step, name, state_path, sampler_path, created_at) "
                              "VALUES (?, ?, ?, ?, ?, ?)", (run_id, step, name, state_path, sampler_path, time.time()))
            self._event(run_id, "checkpoint", f"{name} at step {step}")

    def checkpoints(self, run_id: int) -> list[dict[str, Any]]:
        return self._query("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step, id", (run_id,))

    def last_checkpoint(self, run_id: int) -> Optional[dict[str, Any]]:
        rows = self._query("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step DESC, id DESC LIMIT 1", (run_id,))
        return rows[0] if rows else None

    # ------------------------------------------------------------ metric queries

    def metric_keys(self, run_id: int) -> list[str]:
        # Skip-scan over the (run_id, key, step) key: one probe per distinct key.
        keys, last = [], ""
        with self._lock:
            while True:
                row = self.conn.execute("SELECT key FROM metrics WHERE run_id = ? AND key > ? ORDER BY key LIMIT 1",
                                        (run_id, last)).fetchone()
                if row is None:
                    return keys
                keys.append(row[0])
                last = row[0]

    def metric_count(self, run_id: int, key: str) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM metrics WHERE run_id = ? AND key = ?", (run_id, key)).fetchone()[0]

    def metric_series(self, run_id: int, key: str, max_points: int | None = None,
                      step_min: int | None = None, step_max: int | None = None) -> dict[str, list[float]]:
        """{'step': [...], 'value': [...], 'wall_time': [...]} ordered by step.
        With max_points, the series is cut into max_points // 2 step buckets and each keeps its min and max
        point, so spikes survive downsampling (done inside SQLite, not in Python)."""
        bounds = "run_id = ? AND key = ?"
        params: list[Any] = [run_id, key]
        if step_min is not None:
            bounds += " AND step >= ?"
            params.append(step_min)
        if step_max is not None:
            bounds += " AND step <= ?"
            params.append(step_max)
        with self._lock:
            count, lo, hi = self.conn.execute(f"SELECT COUNT(*), MIN(step), MAX(step) FROM metrics WHERE {bounds}",
                                              params).fetchone()
            if not count:
                return {"step": [], "value": [], "wall_time": []}
            if max_points is None or count <= max_points:
                rows = self.conn.execute(f"SELECT step, value, wall_time FROM metrics WHERE {bounds} ORDER BY step",
                                         params).fetchall()
            else:
                buckets = max(1, max_points // 2)
                width = (hi - lo + 1) / buckets
                # SQLite's bare-column rule: with a single MIN()/MAX() aggregate, step and wall_time come from
                # the row holding that extreme.
                rows = []
                for aggregate in ("MIN", "MAX"):
                    rows += self.conn.execute(
                        f"SELECT step, {aggregate}(value), wall_time FROM metrics WHERE {bounds} AND value IS NOT NULL "
                        f"GROUP BY CAST((step - ?) / ? AS INTEGER)", (*params, lo, width)).fetchall()
                rows = sorted(set(rows))
        return {"step": [r[0] for r in rows], "value": [r[1] for r in rows], "wall_time": [r[2] for r in rows]}

    def last_metrics(self, run_id: int, keys: Sequence[str] | None = None) -> dict[str, float]:
        last = self.get_run(run_id)["summary"].get("last", {})
        return {k: v for k, v in last.items() if keys is None or k in keys}

    # ------------------------------------------------------------ trajectories

    def trajectories(self, run_id: int, *, problem_id: str | None = None, outcome: str | None = None,
                     solved_at_turn: int | None = None, step_min: int | None = None, step_max: int | None = None,
                     order: str = "return", limit: int = 500, offset: int = 0) -> list[dict[str, Any]]:
        """outcome: solved | unsolved | hack; order: return | step | speedup."""
        clauses, params = ["run_id = ?"], [run_id]
        if problem_id:
            clauses.append("problem_id = ?")
            params.append(problem_id)
        if outcome == "solved":
            clauses.append("solved = 1")
        elif outcome == "unsolved":
            clauses.append("solved = 0")
        elif outcome == "hack":
            clauses.append("hack = 1")
        elif outcome is not None:
            raise KrlError(f"trajectory outcome must be solved, unsolved or hack, not '{outcome}'.")
        if solved_at_turn is not None:
            clauses.append("solved_at_turn = ?")
            params.append(solved_at_turn)
        if step_min is not None:
            clauses.append("step >= ?")
            params.append(step_min)
        if step_max is not None:
            clauses.append("step <= ?")
            params.append(step_max)
        order_by = {"return": "total_return DESC, id", "step": "step, group_index, sample_index",
                    "speedup": "best_speedup DESC NULLS LAST, id"}.get(order)
        if order_by is None:
            raise KrlError(f"order must be return, step or speedup, not '{order}'.")
        return self._query(f"SELECT * FROM trajectories WHERE {' AND '.join(clauses)} ORDER BY {order_by} "
                           "LIMIT ? OFFSET ?", (*params, limit, offset))

    def trajectory(self, trajectory_id: int) -> dict[str, Any]:
        rows = self._query("SELECT * FROM trajectories WHERE id = ?", (trajectory_id,))
        if not rows:
            raise KrlError(f"no trajectory with id {trajectory_id}.")
        return rows[0]

    def trajectory_turns(self, trajectory_id: int) -> list[dict[str, Any]]:
        rows = self._query("SELECT turns.*, texts.text AS prompt FROM turns JOIN texts ON texts.hash = turns.prompt_hash "
                           "WHERE trajectory_id = ? ORDER BY turn", (trajectory_id,))
        return [_decode(row, _TURN_JSON_COLUMNS) for row in rows]

    def neighbour_trajectory(self, trajectory_id: int, direction: int) -> Optional[int]:
        """The next (+1) or previous (-1) trajectory of the same run and problem, by id."""
        current = self.trajectory(trajectory_id)
        op, order = (">", "ASC") if direction > 0 else ("<", "DESC")
        row = self.conn.execute(f"SELECT id FROM trajectories WHERE run_id = ? AND problem_id = ? AND id {op} ? "
                                f"ORDER BY id {order} LIMIT 1",
                                (current["run_id"], current["problem_id"], trajectory_id)).fetchone()
        return row[0] if row else None

    def problem_summary(self, run_id: int) -> list[dict[str, Any]]:
        """Per problem: attempts, solve rate, best speedup, hacks — where the model is stuck."""
        return self._query(
            "SELECT problem_id, COUNT(*) AS attempts, AVG(solved) AS solve_rate, SUM(solved) AS solved, "
            "MAX(CASE WHEN solved THEN best_speedup END) AS best_speedup, SUM(hack) AS hacks, "
            "AVG(total_return) AS mean_return, AVG(solved_at_turn) AS mean_solved_turn "
            "FROM trajectories WHERE run_id = ? GROUP BY problem_id ORDER BY solve_rate, problem_id", (run_id,))

    def recent_turn_verdicts(self, run_id: int, limit: int = 20) -> list[dict[str, Any]]:
        return self._query(
            "SELECT t.step, t.problem_id, u.turn, u.verdict, u.step_score FROM turns u "
            "JOIN trajectories t ON t.id = u.trajectory_id WHERE t.run_id = ? ORDER BY u.id DESC LIMIT ?",
            (run_id, limit))


def _check_run_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or len(name) > 120 or any(c.isspace() for c in name):
        raise KrlError(f"invalid run name '{name}': use letters, digits, '-', '_' and '.', no spaces or '/'.")
