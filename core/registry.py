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
from urllib.parse import quote

import sqlite_utils

from core.errors import KrlError, did_you_mean

APP_ID = "kernelrl"
REGISTRY_FILENAME = "registry.db"
BUSY_TIMEOUT_MS = 30_000
WAL_SIZE_LIMIT_BYTES = 16 * 1024 * 1024

RUN_STATUSES = ("queued", "running", "stopping", "stopped", "finished", "failed", "crashed")
ACTIVE_STATUSES = ("queued", "running", "stopping")
RUN_KINDS = ("train", "eval", "replay")

# JSON-valued columns of `runs`, decoded on read.
_RUN_JSON_COLUMNS = ("config", "gpus", "tags", "segments", "summary", "command")
_TURN_JSON_COLUMNS = ("eval_result", "reward_breakdown", "retrieved")
_REPEATED_JSON_COLUMNS = ("gpus", "tags")  # lists of scalars, the same few texts across many runs


# The metrics a runs list shows as a run's "reward" and "correct" (the CLI and the TUI alike): these exact names
# first, then a key holding the word that is a mean, total or rate, then the shortest key holding it.
REWARD_KEYS = ("env/all/reward/total", "reward/total", "reward/mean", "env/reward/mean", "reward_mean", "reward")
CORRECT_KEYS = ("env/all/correct_rate", "rate/correct", "correct_rate", "env/correct_rate", "eval/correct_rate")


def headline_key(keys: Sequence[str], preferred: Sequence[str], word: str) -> Optional[str]:
    for key in preferred:
        if key in keys:
            return key
    matching = sorted((k for k in keys if word in k), key=lambda k: (len(k), k))
    for key in matching:
        if any(kind in key for kind in ("mean", "total", "rate")):
            return key
    return matching[0] if matching else None


def reward_key(keys: Sequence[str]) -> Optional[str]:
    return headline_key(keys, REWARD_KEYS, "reward")


def correct_key(keys: Sequence[str]) -> Optional[str]:
    return headline_key(keys, CORRECT_KEYS, "correct")


def _headline(summary: dict[str, Any]) -> tuple[Optional[str], Optional[float], Optional[str], Optional[float],
                                                 Optional[float]]:
    """HEADLINE_COLUMNS' values from a run's summary."""
    last = summary.get("last") or {}
    rkey, ckey = reward_key(list(last)), correct_key(list(last))
    return rkey, last.get(rkey) if rkey else None, ckey, last.get(ckey) if ckey else None, summary.get("best_speedup")


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

_SCHEMA_V1 = """
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
CREATE INDEX events_run ON events(run_id, id)
"""

# v2: per-block (BLOCK_STEPS consecutive steps) min and max points of each series, a cache that downsampling reads
# instead of scanning every row (write_step fills a block when a run moves past it, readers fill what bulk loads
# left; every write to a block deletes its cached row); and an index so deleting a run can find prompt texts no
# other turn uses.
_SCHEMA_V2 = """
CREATE TABLE metric_blocks (
    run_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    block INTEGER NOT NULL,
    min_step INTEGER,
    min_value REAL,
    min_wall REAL,
    max_step INTEGER,
    max_value REAL,
    max_wall REAL,
    PRIMARY KEY (run_id, key, block)
) WITHOUT ROWID;
CREATE INDEX metric_blocks_run_block ON metric_blocks(run_id, block);
CREATE INDEX turns_prompt ON turns(prompt_hash)
"""


def _run_statements(db: sqlite_utils.Database, script: str) -> None:
    # Not executescript(): it COMMITs first, which would take the migration out of its transaction.
    for statement in script.split(";"):
        if statement.strip():
            db.conn.execute(statement)


def _migration_1(db: sqlite_utils.Database) -> None:
    _run_statements(db, _SCHEMA_V1)


def _migration_2(db: sqlite_utils.Database) -> None:
    _run_statements(db, _SCHEMA_V2)


# v3: a counter that moves whenever a run is created, deleted, renamed, re-tagged, annotated or changes status, in
# any process. Viewers poll it to know when a full re-read of the runs list is due; heartbeats and steps (which
# update runs every second) leave it alone.
_RUN_LIST_FIELDS = ("name", "status", "tags", "notes")
_SCHEMA_V3 = [
    "CREATE TABLE runs_changes (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)",
    "INSERT INTO runs_changes (id, version) VALUES (1, 0)",
    "CREATE TRIGGER runs_changed_insert AFTER INSERT ON runs "
    "BEGIN UPDATE runs_changes SET version = version + 1; END",
    "CREATE TRIGGER runs_changed_delete AFTER DELETE ON runs "
    "BEGIN UPDATE runs_changes SET version = version + 1; END",
    f"CREATE TRIGGER runs_changed_update AFTER UPDATE OF {', '.join(_RUN_LIST_FIELDS)} ON runs "
    f"WHEN {' OR '.join(f'OLD.{f} IS NOT NEW.{f}' for f in _RUN_LIST_FIELDS)} "
    "BEGIN UPDATE runs_changes SET version = version + 1; END",
]


def _migration_3(db: sqlite_utils.Database) -> None:
    for statement in _SCHEMA_V3:  # triggers hold semicolons: one statement per entry
        db.conn.execute(statement)


# v4: a run's headline metrics (the reward and correct-rate a runs list shows, and the best speedup) as plain columns
# written with each step, so listing thousands of runs parses no summary JSON.
HEADLINE_COLUMNS = ("reward_key", "reward_value", "correct_key", "correct_value", "best_speedup")


def _migration_4(db: sqlite_utils.Database) -> None:
    for column, kind in zip(HEADLINE_COLUMNS, ("TEXT", "REAL", "TEXT", "REAL", "REAL")):
        db.conn.execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")
    rows = db.conn.execute("SELECT id, summary FROM runs").fetchall()
    for run_id, summary in rows:
        try:
            headline = _headline(json.loads(summary or "{}"))
        except ValueError:
            continue  # a hand-edited summary: the next step writes the columns
        db.conn.execute(f"UPDATE runs SET {', '.join(f'{c} = ?' for c in HEADLINE_COLUMNS)} WHERE id = ?",
                        (*headline, run_id))


# Forward migrations: MIGRATIONS[i] brings a database from version i to i + 1 (all inside one transaction).
MIGRATIONS = [_migration_1, _migration_2, _migration_3, _migration_4]
SCHEMA_VERSION = len(MIGRATIONS)

BLOCK_STEPS = 64  # steps per metric_blocks row
_MAX_BLOCKS = 100_000  # beyond this many blocks in a range (very sparse steps), downsample from rows directly
_INSERT_CHUNK_ROWS = 200  # rows per multi-row INSERT (5 params each, well under SQLite's 32766)
_MIN_STEP = -(2**63)

# Two scalar subqueries per bucket: SQLite's bare-column rule makes `SELECT step, MIN(value)` return the step of the
# minimum, and each subquery is an index range scan, so nothing is sorted.
_BUCKET_PICKS = """
(SELECT step FROM (SELECT step, MIN(value) FROM metrics WHERE run_id = :run AND key = :key
                   AND step BETWEEN s0 AND s1 AND value IS NOT NULL)) AS smin,
(SELECT step FROM (SELECT step, MAX(value) FROM metrics WHERE run_id = :run AND key = :key
                   AND step BETWEEN s0 AND s1 AND value IS NOT NULL)) AS smax
"""

# Min and max point of `:n` equal step buckets spanning [:lo, :lo + :span).
_DOWNSAMPLE_ROWS_SQL = f"""
WITH RECURSIVE b(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM b WHERE i + 1 < :n),
e AS (SELECT :lo + (i * :span) / :n AS s0, :lo + ((i + 1) * :span) / :n - 1 AS s1 FROM b),
p AS (SELECT {_BUCKET_PICKS} FROM e WHERE s1 >= s0)
SELECT step, value, wall_time FROM metrics
WHERE run_id = :run AND key = :key AND step IN (SELECT smin FROM p UNION SELECT smax FROM p)
ORDER BY step
"""

# Min and max point of each block in [:b0, :b1], restricted to steps [:slo, :shi].
_BLOCKS_SQL = f"""
WITH RECURSIVE b(i) AS (SELECT :b0 UNION ALL SELECT i + 1 FROM b WHERE i < :b1),
e AS (SELECT i, MAX(i * {BLOCK_STEPS}, :slo) AS s0, MIN(i * {BLOCK_STEPS} + {BLOCK_STEPS - 1}, :shi) AS s1 FROM b),
p AS (SELECT i, {_BUCKET_PICKS} FROM e)
SELECT p.i, mn.step, mn.value, mn.wall_time, mx.step, mx.value, mx.wall_time FROM p
LEFT JOIN metrics mn ON mn.run_id = :run AND mn.key = :key AND mn.step = p.smin
LEFT JOIN metrics mx ON mx.run_id = :run AND mx.key = :key AND mx.step = p.smax
ORDER BY p.i
"""


def _text_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _loads(value: str) -> Any:
    # Most JSON columns hold an empty list or object; skipping the parser for those halves listing time.
    if value == "[]":
        return []
    if value == "{}":
        return {}
    return json.loads(value)


def _decode(row: dict[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    for column in columns:
        value = row.get(column)
        if isinstance(value, str) and value[:1] in "{[":
            row[column] = _loads(value)
    return row


def _missing_ranges(wanted: range, have: set[int]) -> list[tuple[int, int]]:
    """Inclusive (first, last) runs of numbers in `wanted` that are not in `have`."""
    ranges: list[tuple[int, int]] = []
    for number in wanted:
        if number in have:
            continue
        if ranges and ranges[-1][1] == number - 1:
            ranges[-1] = (ranges[-1][0], number)
        else:
            ranges.append((number, number))
    return ranges


class Registry:
    """A connection to one workspace's registry. Thread-safe; open one per process."""

    def __init__(self, path: str | os.PathLike, create: bool = True):
        self.path = Path(path)
        folder = self.path.parent
        if folder.exists() and not folder.is_dir():
            raise KrlError(f"the workspace {folder} is a file, not a folder. Pass --workspace (or set "
                           "$KRL_WORKSPACE) to a folder.")
        if not self.path.exists() and not create:
            raise KrlError(f"no registry at {self.path}. Start a run first, or pass --workspace.")
        # A registry we cannot write (a read-only copy, someone else's workspace) is opened for browsing only.
        self.read_only = self.path.exists() and not (os.access(self.path, os.W_OK) and os.access(folder, os.W_OK))
        if not self.path.exists():
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise KrlError(f"cannot create the workspace folder {folder}: {exc.strerror}. Pass --workspace "
                               "to a folder you can write.") from None
            if not os.access(folder, os.W_OK):
                raise KrlError(f"the workspace {folder} is read-only and holds no registry yet. Pass --workspace "
                               "to a folder you can write.")
        self._lock = threading.RLock()
        self._depth = 0
        conn = self._connect()
        try:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            # Refuse foreign or newer databases before anything (WAL switch, migration) writes to the file.
            self._check_schema(conn)
            if not self.read_only:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                # Readers that hold old snapshots keep checkpoints from resetting the WAL, which then grows; once
                # a checkpoint gets through, the file is cut back to this size instead of keeping its peak.
                conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA cache_size=-32768")  # 32 MiB: series scans and listings stay in memory
            conn.execute("PRAGMA temp_store=MEMORY")
        except sqlite3.DatabaseError as exc:
            conn.close()
            # The header is judged by SQLite itself: reading the file with open()/close() here would drop every
            # POSIX lock this process holds on it (they are per process), breaking its other connections.
            if "file is not a database" in str(exc):
                raise KrlError(f"{self.path} is not a kernelrl registry (not an SQLite database). "
                               "Move it away or pass --workspace to use another folder.") from None
            raise registry_damaged_error(self.path, exc) from None
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        try:
            if self.read_only:
                if self._schema_version_or_none() != len(MIGRATIONS):
                    raise KrlError(f"{self.path} is read-only and written by an older kernelrl; open it once "
                                   "where it is writable to upgrade it.")
            else:
                self._migrate()
        except BaseException:
            conn.close()
            raise
        self._run_columns = [row[1] for row in conn.execute("PRAGMA table_info(runs)")]

    def _connect(self) -> sqlite3.Connection:
        options = dict(timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        if not self.read_only:
            return sqlite3.connect(str(self.path), **options)
        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, **options)
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            # A WAL database in a folder we cannot write, without its -shm file: SQLite can only read it as an
            # immutable file (what was checkpointed into it; nobody can be writing a folder nobody can write).
            conn.close()
            return sqlite3.connect(uri + "&immutable=1", uri=True, **options)

    def require_writable(self) -> None:
        """KrlError when this registry was opened read-only (for commands that would change it)."""
        if self.read_only:
            raise KrlError(f"the registry {self.path} is read-only here (a read-only folder or file): it can be "
                           "browsed, not changed. Copy the workspace somewhere writable to run or change runs.")

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

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """Read-only look at an existing database: KrlError if it is foreign or from a newer kernelrl."""
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return
        if "schema_version" not in tables:
            raise KrlError(f"{self.path} is an SQLite database but not a kernelrl registry "
                           f"(tables: {', '.join(sorted(tables)[:5])}). Use another --workspace.")
        row = conn.execute("SELECT app, version FROM schema_version").fetchone()
        if row is None or row[0] != APP_ID:
            raise KrlError(f"{self.path} is not a kernelrl registry (its schema_version names "
                           f"{row[0] if row else 'nothing'}). Use another --workspace.")
        if row[1] > len(MIGRATIONS):
            raise KrlError(f"{self.path} was written by a newer kernelrl (schema v{row[1]}, this one knows "
                           f"v{len(MIGRATIONS)}). Upgrade kernelrl: `pip install -U kernelrl`.")

    def _migrate(self) -> None:
        known = len(MIGRATIONS)
        if self._schema_version_or_none() == known:
            return  # the common case: no write lock needed to open
        with self.transaction():
            # Again under the write lock: another process may have created or migrated it meanwhile.
            self._check_schema(self.conn)
            if "schema_version" not in set(self.db.table_names()):
                self.conn.execute("CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL)")
                self.conn.execute("INSERT INTO schema_version VALUES (?, 0)", (APP_ID,))
            version = self.conn.execute("SELECT version FROM schema_version").fetchone()[0]
            for index in range(version, known):
                MIGRATIONS[index](self.db)
            if version != known:
                self.conn.execute("UPDATE schema_version SET version = ?", (known,))

    def _schema_version_or_none(self) -> Optional[int]:
        try:
            row = self.conn.execute("SELECT version FROM schema_version").fetchone()
        except sqlite3.OperationalError:
            return None
        return row[0] if row else None

    def integrity_problems(self, limit: int = 5) -> list[str]:
        """What SQLite's quick_check finds wrong with the file (empty when healthy); reads every page."""
        rows = self._rows(f"PRAGMA quick_check({int(limit)})")
        return [] if [r[0] for r in rows] == ["ok"] else [str(r[0]) for r in rows]

    @property
    def schema_version(self) -> int:
        return self._rows("SELECT version FROM schema_version")[0][0]

    def runs_list_version(self) -> int:
        """Moves whenever a run is created, deleted, renamed, re-tagged, annotated or changes status."""
        return self._rows("SELECT version FROM runs_changes")[0][0]

    @contextmanager
    def transaction(self, busy_timeout_s: float | None = None) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT. A nested use is a SAVEPOINT (as sqlite-utils' atomic()): when it fails, its
        own writes are rolled back and the exception goes on; a caller that catches it can still commit the rest.
        `busy_timeout_s`: how long BEGIN waits for another writer, when not the usual BUSY_TIMEOUT_MS."""
        if self.read_only:
            self.require_writable()
        with self._lock:
            if self._depth:
                savepoint = f"krl_nested_{self._depth}"
                self.conn.execute(f"SAVEPOINT {savepoint}")
                self._depth += 1
                try:
                    yield self.conn
                except BaseException:
                    if self.conn.in_transaction:  # SQLite may have rolled everything back itself (disk full)
                        self.conn.execute(f"ROLLBACK TO {savepoint}")
                        self.conn.execute(f"RELEASE {savepoint}")
                    raise
                else:
                    self.conn.execute(f"RELEASE {savepoint}")
                finally:
                    self._depth -= 1
                return
            if busy_timeout_s is None:
                self.conn.execute("BEGIN IMMEDIATE")
            else:
                self.conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                finally:
                    self.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._depth = 1
            try:
                yield self.conn
            except BaseException:
                self._depth = 0
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            self._depth = 0
            self.conn.execute("COMMIT")

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: several queries see one consistent state (joins an open transaction)."""
        with self._lock:
            if self._depth:
                yield self.conn
                return
            self.conn.execute("BEGIN")
            self._depth = 1
            try:
                yield self.conn
            finally:
                self._depth = 0
                self.conn.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
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
        check_run_name(name)
        with self.transaction():
            existing = self.conn.execute("SELECT status FROM runs WHERE name = ?", (name,)).fetchone()
            if existing:
                # Only a run that can resume is offered a resume; a finished one is forked to train further.
                hint = {"stopped": f", or resume it with `krl runs resume {name}`",
                        "failed": f", or resume it with `krl runs resume {name}`",
                        "crashed": f", or resume it with `krl runs resume {name}`",
                        "finished": f", or fork it to train further (`krl runs fork {name} --name NEW`)"}
                raise KrlError(f"a run named '{name}' already exists ({existing[0]}). Choose another "
                               f"--name{hint.get(existing[0], '')}.")
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
                  kind: str | None = None, include_config: bool = True,
                  columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """All runs, newest first, with `summary` (last metric values, best speedup) and `last_step`.
        include_config=False leaves out the (large) config column: a run table does not need it; `columns` reads
        only those (plus id), which matters with thousands of runs (each value read is a Python object made)."""
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
        if columns is not None:
            unknown = set(columns) - set(self._run_columns)
            if unknown:
                raise KrlError(f"unknown run column(s): {', '.join(sorted(unknown))}.")
            columns = ["id", *(c for c in self._run_columns if c in columns and c != "id")]
        else:
            columns = self._run_columns if include_config else [c for c in self._run_columns if c != "config"]
        include_config = "config" in columns
        # config is large: SQLite's json() re-renders it slower than json.loads parses it, so it stays per row.
        # tags and gpus are short lists that repeat from run to run: each distinct text is parsed once. The other
        # JSON columns come packed into one JSON array: one json.loads instead of one per cell.
        repeated = [c for c in _REPEATED_JSON_COLUMNS if c in columns]
        packed_columns = [c for c in _RUN_JSON_COLUMNS if c in columns and c != "config" and c not in repeated]
        plain = [c for c in columns if c not in packed_columns]
        decoded: Optional[list] = []
        with self._snapshot():
            rows = self._query(f"SELECT {', '.join(plain)} FROM runs {where} ORDER BY id DESC", params)
            if packed_columns:
                try:
                    packed = self.conn.execute(
                        f"SELECT json_group_array(json_array(id, {', '.join(f'json({c})' for c in packed_columns)})) "
                        f"FROM (SELECT * FROM runs {where} ORDER BY id DESC)", params).fetchone()[0]
                    decoded = json.loads(packed)
                except (sqlite3.OperationalError, ValueError):
                    decoded = None  # a cell that is not valid JSON (hand-edited row): decode row by row below
        if packed_columns and (decoded is None or len(decoded) != len(rows)
                               or any(d[0] != r["id"] for d, r in zip(decoded, rows))):
            full = self._query(f"SELECT {', '.join(columns)} FROM runs {where} ORDER BY id DESC", params)
            return [_decode(row, _RUN_JSON_COLUMNS) for row in full]
        for row, values in zip(rows, decoded or ()):
            row.update(zip(packed_columns, values[1:]))
        parsed: dict[str, list] = {}
        for row in rows:
            for column in repeated:
                text = row[column]
                if isinstance(text, str) and text[:1] == "[":
                    value = parsed.get(text)
                    if value is None:
                        value = parsed[text] = _loads(text)
                    row[column] = list(value)  # a copy: callers may change a row's list
            if include_config:
                _decode(row, ("config",))
        return rows

    def update_run(self, run_id: int, **fields: Any) -> None:
        if not fields:
            return
        unknown = sorted(set(fields) - set(self._run_columns))
        if unknown:
            raise ValueError(f"runs has no column(s) {', '.join(unknown)}")
        if "summary" in fields:  # the headline columns follow the summary, whoever writes it
            summary = fields["summary"]
            summary = json.loads(summary) if isinstance(summary, str) else summary
            fields.update(zip(HEADLINE_COLUMNS, _headline(summary or {})))
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

    def heartbeat(self, run_id: int) -> bool:
        """Record that the run's job is alive; False when the run is no longer active (a reader marked it crashed
        while the job was frozen, e.g. SIGSTOPped past the heartbeat limit): the job must then stop."""
        with self.transaction():
            cursor = self.conn.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ? AND status IN (?, ?, ?)",
                                       (time.time(), run_id, *ACTIVE_STATUSES))
            return cursor.rowcount > 0

    def rename_run(self, run_id: int, new_name: str) -> None:
        check_run_name(new_name)
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
        """The run and everything it wrote; prompt texts no other run shares go too."""
        with self.transaction():
            hashes = [row[0] for row in self.conn.execute(
                "SELECT DISTINCT prompt_hash FROM turns WHERE trajectory_id IN "
                "(SELECT id FROM trajectories WHERE run_id = ?)", (run_id,))]
            self.conn.execute("DELETE FROM turns WHERE trajectory_id IN (SELECT id FROM trajectories WHERE run_id = ?)",
                              (run_id,))
            self.conn.executemany("DELETE FROM texts WHERE hash = ? AND NOT EXISTS "
                                  "(SELECT 1 FROM turns WHERE prompt_hash = ?)", [(h, h) for h in hashes])
            for table in ("trajectories", "checkpoints", "events", "metrics", "metric_blocks"):
                self.conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            self.conn.execute("UPDATE runs SET parent_run_id = NULL WHERE parent_run_id = ?", (run_id,))
            self.conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    # ------------------------------------------------------------ per-step writes

    def write_step(self, run_id: int, step: int, metrics: dict[str, float],
                   trajectories: Sequence[TrajectoryRecord] = (), events: Sequence[tuple[str, str]] = (),
                   wall_time: float | None = None) -> None:
        """Everything a training step produced, in one transaction (a crash loses at most this step).
        Rewriting a step (after a resume) replaces its earlier rows: metrics, trajectories and turns."""
        now = wall_time if wall_time is not None else time.time()
        with self.transaction():
            summary, last_step = self._run_progress(run_id)
            if last_step is not None and step <= last_step:
                self._delete_step_metrics(run_id, step)
            elif last_step is not None and step // BLOCK_STEPS > last_step // BLOCK_STEPS:
                # The previous block is complete: cache its min/max now so readers of a live run never write.
                self._cache_blocks(run_id, list(metrics), last_step // BLOCK_STEPS)
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
            self._update_summary(run_id, step, metrics, best, summary, last_step)

    def log_metrics(self, run_id: int, step: int, metrics: dict[str, float], wall_time: float | None = None) -> None:
        """Metrics alone (evaluation runs, late additions to a step); only these keys at that step are replaced.
        Log extra metrics for a step after its write_step, not before: write_step replaces the whole step."""
        with self.transaction():
            summary, last_step = self._run_progress(run_id)
            self._insert_metrics(run_id, step, metrics, wall_time if wall_time is not None else time.time())
            self._update_summary(run_id, step, metrics, None, summary, last_step)

    def insert_metric_rows(self, run_id: int, rows: Iterable[tuple[str, int, float, float]]) -> int:
        """Bulk load (key, step, value, wall_time) rows in one transaction (imports, benchmarks); returns the count.
        Multi-row INSERTs: binding is per value either way, but one statement per 200 rows saves the per-row
        statement overhead, which dominates executemany."""
        rows = rows if isinstance(rows, list) else list(rows)
        if not rows:
            return 0
        run_id = int(run_id)
        steps = [row[1] for row in rows]
        full = len(rows) - len(rows) % _INSERT_CHUNK_ROWS
        chunk_sql = ("INSERT OR REPLACE INTO metrics (run_id, key, step, value, wall_time) VALUES "
                     + ", ".join([f"({run_id}, ?, ?, ?, ?)"] * _INSERT_CHUNK_ROWS))
        with self.transaction():
            self._run_progress(run_id)  # KrlError for an unknown run
            if full:
                self.conn.executemany(chunk_sql, (
                    [value for row in rows[start:start + _INSERT_CHUNK_ROWS] for value in row]
                    for start in range(0, full, _INSERT_CHUNK_ROWS)))
            if full < len(rows):
                self.conn.executemany("INSERT OR REPLACE INTO metrics (run_id, key, step, value, wall_time) "
                                      f"VALUES ({run_id}, ?, ?, ?, ?)", rows[full:])
            self.conn.execute("DELETE FROM metric_blocks WHERE run_id = ? AND block BETWEEN ? AND ?",
                              (run_id, min(steps) // BLOCK_STEPS, max(steps) // BLOCK_STEPS))
        return len(rows)

    def _cache_blocks(self, run_id: int, keys: Sequence[str], block: int) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO metric_blocks (block, min_step, min_value, min_wall, max_step, max_value, "
            f"max_wall, run_id, key) SELECT *, :run, :key FROM ({_BLOCKS_SQL})",
            [{"run": run_id, "key": key, "b0": block, "b1": block, "slo": _MIN_STEP, "shi": 2**63 - 1}
             for key in keys])

    def _run_progress(self, run_id: int) -> tuple[dict[str, Any], Optional[int]]:
        row = self.conn.execute("SELECT summary, last_step FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KrlError(f"run id {run_id} does not exist in {self.path}.")
        return json.loads(row[0] or "{}"), row[1]

    def _delete_step_metrics(self, run_id: int, step: int) -> None:
        # One probe per key: the (run_id, key, step) key cannot find "every key at this step" directly.
        self.conn.executemany("DELETE FROM metrics WHERE run_id = ? AND key = ? AND step = ?",
                              [(run_id, key, step) for key in self.metric_keys(run_id)])
        self.conn.execute("DELETE FROM metric_blocks WHERE run_id = ? AND block = ?", (run_id, step // BLOCK_STEPS))

    def _insert_metrics(self, run_id: int, step: int, metrics: dict[str, float], now: float) -> None:
        items = list(metrics.items())
        if not items:
            return
        for start in range(0, len(items), _INSERT_CHUNK_ROWS):
            chunk = items[start:start + _INSERT_CHUNK_ROWS]
            values: list[Any] = []
            for key, value in chunk:
                values += (run_id, key, step, None if value is None else float(value), now)
            self.conn.execute("INSERT OR REPLACE INTO metrics (run_id, key, step, value, wall_time) VALUES "
                              + ", ".join(["(?, ?, ?, ?, ?)"] * len(chunk)), values)
        # A cached min/max for this step's block is stale now.
        self.conn.execute("DELETE FROM metric_blocks WHERE run_id = ? AND block = ?", (run_id, step // BLOCK_STEPS))

    def _update_summary(self, run_id: int, step: int, metrics: dict[str, float], best_speedup: float | None,
                        summary: dict[str, Any], last_step: Optional[int]) -> None:
        last = summary.get("last", {})
        last.update({k: float(v) for k, v in metrics.items() if v is not None and v == v})
        summary["last"] = last
        if best_speedup is not None:
            summary["best_speedup"] = max(summary.get("best_speedup") or 0.0, best_speedup)
        new_last_step = max(step, last_step if last_step is not None else step)
        self.conn.execute(f"UPDATE runs SET summary = ?, last_step = ?, heartbeat_at = ?, "
                          f"{', '.join(f'{c} = ?' for c in HEADLINE_COLUMNS)} WHERE id = ?",
                          (json.dumps(summary), new_last_step, time.time(), *_headline(summary), run_id))

    def _insert_trajectory(self, run_id: int, step: int, trajectory: TrajectoryRecord) -> int:
        cursor = self.conn.execute(
            "INSERT INTO trajectories (run_id, step, group_index, sample_index, problem_id, n_turns, total_return, "
            "solved, solved_at_turn, best_speedup, hack) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, step, trajectory.group, trajectory.sample, trajectory.problem_id, len(trajectory.turns),
             trajectory.total_return, int(trajectory.solved), trajectory.solved_at_turn, trajectory.best_speedup,
             int(trajectory.hack)),
        )
        trajectory_id = cursor.lastrowid
        rows = []
        for turn in trajectory.turns:
            prompt_hash = _text_hash(turn.prompt)
            self.conn.execute("INSERT OR IGNORE INTO texts (hash, text) VALUES (?, ?)", (prompt_hash, turn.prompt))
            rows.append((trajectory_id, turn.turn, prompt_hash, turn.response, turn.thought, turn.kernel, turn.verdict,
                         json.dumps(turn.eval_result) if turn.eval_result is not None else None, turn.feedback,
                         turn.step_score, turn.return_, turn.advantage, json.dumps(turn.reward_breakdown),
                         turn.tokens_in, turn.tokens_out, json.dumps(turn.retrieved)))
        self.conn.executemany(
            "INSERT INTO turns (trajectory_id, turn, prompt_hash, response, thought, kernel, verdict, eval_result, "
            "feedback, step_score, return_, advantage, reward_breakdown, tokens_in, tokens_out, retrieved) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
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
        with self._lock:
            return self.conn.execute("SELECT COUNT(*) FROM metrics WHERE run_id = ? AND key = ?",
                                     (run_id, key)).fetchone()[0]

    def metric_series(self, run_id: int, key: str, max_points: int | None = None,
                      step_min: int | None = None, step_max: int | None = None) -> dict[str, list[Any]]:
        """{'step': [...], 'value': [...], 'wall_time': [...]} ordered by step.
        With max_points, at most max_points points: the step range is cut into (max_points - 1) // 2 buckets,
        each keeps its min and max point (spikes survive), plus the last point; done inside SQLite. Long series
        read per-block min/max rows (metric_blocks) instead of every row, so the cost follows max_points."""
        if max_points is not None and max_points < 1:
            raise ValueError("max_points must be at least 1")
        with self._lock:
            lo, hi = self._step_bounds(run_id, key, step_min, step_max)
            if lo is None:
                return {"step": [], "value": [], "wall_time": []}
            if max_points is None or self._count_upto(run_id, key, lo, hi, max_points + 1) <= max_points:
                rows = self.conn.execute("SELECT step, value, wall_time FROM metrics WHERE run_id = ? AND key = ? "
                                         "AND step BETWEEN ? AND ? ORDER BY step", (run_id, key, lo, hi)).fetchall()
                return _columns(rows)
            if max_points == 1:
                return _columns(self._points_at(run_id, key, [hi]))
            buckets = max(1, (max_points - 1) // 2) if max_points >= 3 else 1
            span_blocks = hi // BLOCK_STEPS - lo // BLOCK_STEPS + 1
            if span_blocks >= 2 * buckets and span_blocks <= _MAX_BLOCKS:
                points = self._downsample_blocks(run_id, key, lo, hi, buckets)
            else:
                points = self.conn.execute(_DOWNSAMPLE_ROWS_SQL, {"run": run_id, "key": key, "lo": lo,
                                                                  "span": hi - lo + 1, "n": buckets}).fetchall()
            if max_points >= 3 and (not points or points[-1][0] != hi):
                points += self._points_at(run_id, key, [hi])
        return _columns(points)

    def metric_series_many(self, run_id: int, keys: Sequence[str], max_points: int | None = None,
                           step_min: int | None = None, step_max: int | None = None) -> dict[str, dict[str, list]]:
        """metric_series for several keys of one run: {key: series}."""
        return {key: self.metric_series(run_id, key, max_points, step_min, step_max) for key in keys}

    def metric_series_runs(self, run_ids: Sequence[int], key: str,
                           max_points: int | None = None) -> dict[int, dict[str, list]]:
        """metric_series of one key for several runs (compare view): {run_id: series}."""
        return {run_id: self.metric_series(run_id, key, max_points) for run_id in run_ids}

    def metric_tail(self, run_ids: Sequence[int], key: str, n: int) -> dict[int, list[float]]:
        """The last n non-null values of `key` for each run, oldest first, in one query (sparklines):
        {run_id: [values]}; runs without the metric map to []."""
        out: dict[int, list[float]] = {int(run_id): [] for run_id in run_ids}
        if not out or n < 1:
            return out
        # Per run: an index seek finds the n-th newest step, then a short range scan reads the tail.
        rows = self._rows(
            "SELECT r.value, m.value FROM json_each(?) AS r JOIN metrics AS m "
            "ON m.run_id = r.value AND m.key = ? AND m.value IS NOT NULL AND m.step >= COALESCE("
            "(SELECT step FROM metrics WHERE run_id = r.value AND key = ? AND value IS NOT NULL "
            "ORDER BY step DESC LIMIT 1 OFFSET ?), ?) ORDER BY r.value, m.step",
            (json.dumps(list(out)), key, key, n - 1, _MIN_STEP))
        for run_id, value in rows:
            out[run_id].append(value)
        return out

    def last_metrics(self, run_id: int, keys: Sequence[str] | None = None) -> dict[str, float]:
        last = self.get_run(run_id)["summary"].get("last", {})
        return {k: v for k, v in last.items() if keys is None or k in keys}

    # Downsampling internals --------------------------------------------------

    def _rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple]:
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    def _step_bounds(self, run_id: int, key: str, step_min: int | None,
                     step_max: int | None) -> tuple[Optional[int], Optional[int]]:
        # Two index seeks; COUNT(*) or MIN/MAX with a range would scan the whole series.
        bounds = "run_id = ? AND key = ? AND step BETWEEN ? AND ?"
        params = (run_id, key, _MIN_STEP if step_min is None else step_min, 2**63 - 1 if step_max is None else step_max)
        lo = self.conn.execute(f"SELECT step FROM metrics WHERE {bounds} ORDER BY step LIMIT 1", params).fetchone()
        if lo is None:
            return None, None
        hi = self.conn.execute(f"SELECT step FROM metrics WHERE {bounds} ORDER BY step DESC LIMIT 1", params).fetchone()
        return lo[0], hi[0]

    def _count_upto(self, run_id: int, key: str, lo: int, hi: int, limit: int) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM (SELECT 1 FROM metrics WHERE run_id = ? AND key = ? "
                                 "AND step BETWEEN ? AND ? LIMIT ?)", (run_id, key, lo, hi, limit)).fetchone()[0]

    def _points_at(self, run_id: int, key: str, steps: Sequence[int]) -> list[tuple]:
        return [row for step in steps for row in self.conn.execute(
            "SELECT step, value, wall_time FROM metrics WHERE run_id = ? AND key = ? AND step = ?",
            (run_id, key, step)).fetchall()]

    def _downsample_blocks(self, run_id: int, key: str, lo: int, hi: int, buckets: int) -> list[tuple]:
        """Buckets made of whole blocks: interior blocks come from metric_blocks (filled here when missing) and are
        reduced per bucket inside SQLite; the two edge blocks (and any block invalidated meanwhile) are computed
        from rows and merged in."""
        first, last = lo // BLOCK_STEPS, hi // BLOCK_STEPS
        interior = range(first + 1, last)  # never the series' last block: it is still being written
        width = -(-(last - first + 1) // buckets)  # blocks per bucket, rounded up: at most `buckets` buckets
        if len(interior):
            self._fill_blocks(run_id, key, interior)
        params = {"run": run_id, "key": key, "b0": interior.start, "b1": interior.stop - 1, "first": first,
                  "width": width}
        lows: dict[int, tuple] = {}
        highs: dict[int, tuple] = {}
        with self._snapshot():
            for extreme, target in (("MIN", lows), ("MAX", highs)):
                prefix = extreme.lower()
                for bucket, step, value, wall in self.conn.execute(
                        f"SELECT (block - :first) / :width AS bucket, {prefix}_step, {extreme}({prefix}_value), "
                        f"{prefix}_wall FROM metric_blocks WHERE run_id = :run AND key = :key "
                        f"AND block BETWEEN :b0 AND :b1 AND {prefix}_step IS NOT NULL GROUP BY bucket", params):
                    target[bucket] = (step, value, wall)
            have = self.conn.execute("SELECT COUNT(*) FROM metric_blocks WHERE run_id = :run AND key = :key "
                                     "AND block BETWEEN :b0 AND :b1", params).fetchone()[0]
            missing = []
            if have < len(interior):
                cached = {row[0] for row in self.conn.execute(
                    "SELECT block FROM metric_blocks WHERE run_id = :run AND key = :key AND block BETWEEN :b0 AND :b1",
                    params)}
                missing = _missing_ranges(interior, cached)
            extra = []
            for start, end in [(first, first), *missing, (last, last)]:
                extra += self.conn.execute(_BLOCKS_SQL, {"run": run_id, "key": key, "b0": start, "b1": end,
                                                         "slo": lo, "shi": hi}).fetchall()
        for block, min_step, min_value, min_wall, max_step, max_value, max_wall in extra:
            if min_step is None:
                continue
            bucket = (block - first) // width
            low = lows.get(bucket)
            if low is None or min_value < low[1]:
                lows[bucket] = (min_step, min_value, min_wall)
            high = highs.get(bucket)
            if high is None or max_value > high[1]:
                highs[bucket] = (max_step, max_value, max_wall)
        return sorted(set(lows.values()) | set(highs.values()))

    def _fill_blocks(self, run_id: int, key: str, interior: range) -> None:
        count = self.conn.execute("SELECT COUNT(*) FROM metric_blocks WHERE run_id = ? AND key = ? AND block "
                                  "BETWEEN ? AND ?", (run_id, key, interior.start, interior.stop - 1)).fetchone()[0]
        if count >= len(interior) or self.read_only:
            return
        try:
            with self.transaction():
                have = {row[0] for row in self.conn.execute(
                    "SELECT block FROM metric_blocks WHERE run_id = ? AND key = ? AND block BETWEEN ? AND ?",
                    (run_id, key, interior.start, interior.stop - 1))}
                for start, end in _missing_ranges(interior, have):
                    self.conn.execute(
                        "INSERT OR REPLACE INTO metric_blocks (block, min_step, min_value, min_wall, max_step, "
                        f"max_value, max_wall, run_id, key) SELECT *, :run, :key FROM ({_BLOCKS_SQL})",
                        {"run": run_id, "key": key, "b0": start, "b1": end, "slo": _MIN_STEP, "shi": 2**63 - 1})
        except sqlite3.OperationalError as exc:
            # A read-only file or a lock we could not get: the query computes what it needs from rows.
            if "readonly" not in str(exc) and "locked" not in str(exc):
                raise

    # ------------------------------------------------------------ trajectories

    @staticmethod
    def _trajectory_filter(run_id: int, problem_id: str | None, outcome: str | None, solved_at_turn: int | None,
                           step_min: int | None, step_max: int | None) -> tuple[str, list[Any]]:
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
        return " AND ".join(clauses), params

    def trajectories(self, run_id: int, *, problem_id: str | None = None, outcome: str | None = None,
                     solved_at_turn: int | None = None, step_min: int | None = None, step_max: int | None = None,
                     order: str = "return", limit: int = 500, offset: int = 0) -> list[dict[str, Any]]:
        """outcome: solved | unsolved | hack; order: return | step | speedup."""
        where, params = self._trajectory_filter(run_id, problem_id, outcome, solved_at_turn, step_min, step_max)
        order_by = {"return": "total_return DESC, id", "step": "step, group_index, sample_index",
                    "speedup": "best_speedup DESC NULLS LAST, id"}.get(order)
        if order_by is None:
            raise KrlError(f"order must be return, step or speedup, not '{order}'.")
        return self._query(f"SELECT * FROM trajectories WHERE {where} ORDER BY {order_by} LIMIT ? OFFSET ?",
                           (*params, limit, offset))

    def trajectory_outcomes(self, run_id: int) -> list[tuple]:
        """(step, problem id, total return, best speedup, solved, id) of every trajectory of a run in step order:
        what the TUI's distributions and best-kernel-per-problem views aggregate (six columns, no turns)."""
        return self._rows("SELECT step, problem_id, total_return, best_speedup, solved, id FROM trajectories "
                          "WHERE run_id = ? ORDER BY step, id", (run_id,))

    def config_values(self, run_ids: Sequence[int], keys: Sequence[str]) -> dict[int, dict[str, Any]]:
        """{run id: {dotted key: value}} read inside SQLite (json_extract), so config columns in the runs table
        never load whole configs."""
        if not run_ids or not keys:
            return {}
        paths = ", ".join("json_extract(config, ?)" for _ in keys)
        out: dict[int, dict[str, Any]] = {}
        for start in range(0, len(run_ids), 500):
            chunk = list(run_ids[start:start + 500])
            rows = self._rows(f"SELECT id, {paths} FROM runs WHERE id IN ({', '.join('?' for _ in chunk)})",
                              (*("$." + k for k in keys), *chunk))
            for row in rows:
                out[row[0]] = dict(zip(keys, row[1:]))
        return out

    def count_trajectories(self, run_id: int, *, problem_id: str | None = None, outcome: str | None = None,
                           solved_at_turn: int | None = None, step_min: int | None = None,
                           step_max: int | None = None) -> int:
        """How many trajectories `trajectories` would page through with the same filters."""
        where, params = self._trajectory_filter(run_id, problem_id, outcome, solved_at_turn, step_min, step_max)
        return self._rows(f"SELECT COUNT(*) FROM trajectories WHERE {where}", params)[0][0]

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
        rows = self._rows(f"SELECT id FROM trajectories WHERE run_id = ? AND problem_id = ? AND id {op} ? "
                          f"ORDER BY id {order} LIMIT 1", (current["run_id"], current["problem_id"], trajectory_id))
        return rows[0][0] if rows else None

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


def registry_damaged_error(path: Path, exc: BaseException) -> KrlError:
    """The user error for a registry SQLite cannot read (disk image malformed, truncated file …)."""
    return KrlError(f"the registry {path} is damaged ({exc}). `krl doctor` checks it; restore it from a backup, or "
                    "move it away (its run folders stay) and pass --workspace to use another folder.")


def check_run_name(name: str) -> None:
    """KrlError unless `name` can name a run."""
    # Names become folder names beside the registry and are printed to terminals: no path separators, no control
    # characters (an escape sequence in a name would reach every terminal that lists runs), none of the registry's
    # own files.
    if not name or "/" in name or "\\" in name or name.startswith(".") or len(name) > 120 \
            or not name.isprintable() or any(c.isspace() for c in name):
        shown = name.encode("unicode_escape").decode("ascii")
        raise KrlError(f"invalid run name '{shown}': use letters, digits, '-', '_' and '.', no spaces, control "
                       "characters or '/'.")
    if name.startswith(REGISTRY_FILENAME):
        raise KrlError(f"the run name '{name}' is reserved: the workspace keeps its registry in {REGISTRY_FILENAME}* "
                       "files. Choose another name.")


def _columns(rows: Sequence[tuple]) -> dict[str, list[Any]]:
    return {"step": [r[0] for r in rows], "value": [r[1] for r in rows], "wall_time": [r[2] for r in rows]}
