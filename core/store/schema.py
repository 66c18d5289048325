"""The registry's schema as named migrations: each is a function registered in order, and the names of the applied
ones are kept in a `migrations` table. A database from before named migrations (a version number only) is adopted."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from core.errors import KrlError
from core.store.rows import HEADLINE_COLUMNS, headline_values

APP_ID = "kernelrl"

TABLES_SQL = """
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

# metric_blocks: per-block (BLOCK_STEPS consecutive steps) min and max points of each series, a cache that
# downsampling reads instead of scanning every row (write_step fills a block when a run moves past it, readers fill
# what bulk loads left; every write to a block deletes its cached row); and an index so deleting a run can find
# prompt texts no other turn uses.
METRIC_BLOCKS_SQL = """
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


# runs_changes_counter: a counter that moves whenever a run is created, deleted, renamed, re-tagged, annotated or
# changes status, in any process. Viewers poll it to know when a full re-read of the runs list is due; heartbeats
# and steps (which update runs every second) leave it alone.
RUN_LIST_FIELDS = ("name", "status", "tags", "notes")
RUNS_CHANGES_SQL = [
    "CREATE TABLE runs_changes (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)",
    "INSERT INTO runs_changes (id, version) VALUES (1, 0)",
    "CREATE TRIGGER runs_changed_insert AFTER INSERT ON runs "
    "BEGIN UPDATE runs_changes SET version = version + 1; END",
    "CREATE TRIGGER runs_changed_delete AFTER DELETE ON runs "
    "BEGIN UPDATE runs_changes SET version = version + 1; END",
    f"CREATE TRIGGER runs_changed_update AFTER UPDATE OF {', '.join(RUN_LIST_FIELDS)} ON runs "
    f"WHEN {' OR '.join(f'OLD.{f} IS NOT NEW.{f}' for f in RUN_LIST_FIELDS)} "
    "BEGIN UPDATE runs_changes SET version = version + 1; END",
]


@dataclass(frozen=True)
class Migration:
    """One named, forward-only change of the schema; `apply` runs inside the opening transaction."""

    name: str
    apply: Callable[[sqlite3.Connection], None]


def run_statements(conn: sqlite3.Connection, script: str) -> None:
    # Not executescript(): it COMMITs first, which would take the migration out of its transaction.
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def create_tables(conn: sqlite3.Connection) -> None:
    run_statements(conn, TABLES_SQL)


def add_metric_blocks(conn: sqlite3.Connection) -> None:
    run_statements(conn, METRIC_BLOCKS_SQL)


def add_runs_changes_counter(conn: sqlite3.Connection) -> None:
    for statement in RUNS_CHANGES_SQL:  # triggers hold semicolons: one statement per entry
        conn.execute(statement)


def add_headline_columns(conn: sqlite3.Connection) -> None:
    """A run's headline metrics (reward, correct-rate, best speedup) as plain columns written with each step, so
    listing thousands of runs parses no summary JSON; filled here from the summaries already stored."""
    for column, kind in zip(HEADLINE_COLUMNS, ("TEXT", "REAL", "TEXT", "REAL", "REAL")):
        conn.execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")
    rows = conn.execute("SELECT id, summary FROM runs").fetchall()
    for run_id, summary in rows:
        try:
            headline = headline_values(json.loads(summary or "{}"))
        except ValueError:
            continue  # a hand-edited summary: the next step writes the columns
        conn.execute(f"UPDATE runs SET {', '.join(f'{c} = ?' for c in HEADLINE_COLUMNS)} WHERE id = ?",
                     (*headline, run_id))


# In order. A name, once released, never changes: databases record it. The first four are the numbered versions
# 1-4 of the registry before migrations had names (a database at version N has the first N applied).
MIGRATIONS: list[Migration] = [
    Migration("create_tables", create_tables),
    Migration("metric_blocks", add_metric_blocks),
    Migration("runs_changes_counter", add_runs_changes_counter),
    Migration("headline_columns", add_headline_columns),
]
SCHEMA_VERSION = len(MIGRATIONS)


def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Read-only look at an existing database: KrlError if it is foreign or from a newer kernelrl."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return
    if "schema_version" not in tables:
        raise KrlError(f"{path} is an SQLite database but not a kernelrl registry "
                       f"(tables: {', '.join(sorted(tables)[:5])}). Use another --workspace.")
    row = conn.execute("SELECT app, version FROM schema_version").fetchone()
    if row is None or row[0] != APP_ID:
        raise KrlError(f"{path} is not a kernelrl registry (its schema_version names "
                       f"{row[0] if row else 'nothing'}). Use another --workspace.")
    known = {m.name for m in MIGRATIONS}
    unknown = []
    if "migrations" in tables:
        unknown = [r[0] for r in conn.execute("SELECT name FROM migrations") if r[0] not in known]
    if row[1] > len(MIGRATIONS) or unknown:
        raise KrlError(f"{path} was written by a newer kernelrl (schema v{row[1]}, this one knows "
                       f"v{len(MIGRATIONS)}). Upgrade kernelrl: `pip install -U kernelrl`.")


def stored_version(conn: sqlite3.Connection) -> Optional[int]:
    try:
        row = conn.execute("SELECT version FROM schema_version").fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None


def applied_migrations(conn: sqlite3.Connection) -> Optional[list[str]]:
    """Names of the applied migrations in the order they ran; None for a database without the table."""
    try:
        return [row[0] for row in conn.execute("SELECT name FROM migrations ORDER BY rowid")]
    except sqlite3.OperationalError:
        return None


def up_to_date(conn: sqlite3.Connection, unadopted_ok: bool = False) -> bool:
    """True when nothing is left to apply (the common case: opening needs no write lock). unadopted_ok: a database
    from before named migrations at the current version counts too (a read-only one is never adopted)."""
    applied = applied_migrations(conn)
    if applied is None:
        return unadopted_ok and stored_version(conn) == len(MIGRATIONS)
    return set(applied) >= {m.name for m in MIGRATIONS}


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the database to the current schema; the caller holds the write transaction. A database from before
    named migrations is adopted: its version number says which migrations it has, and they are recorded, not run."""
    check_schema(conn, path)  # again under the write lock: another process may have migrated it meanwhile
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema_version" not in tables:
        conn.execute("CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (?, 0)", (APP_ID,))
    if "migrations" not in tables:
        conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL)")
        version = stored_version(conn) or 0
        # applied_at NULL: adopted from the version number, not run by this code.
        conn.executemany("INSERT INTO migrations (name, applied_at) VALUES (?, NULL)",
                         [(m.name,) for m in MIGRATIONS[:version]])
    applied = set(applied_migrations(conn) or ())
    for migration in MIGRATIONS:
        if migration.name not in applied:
            migration.apply(conn)
            conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (migration.name, time.time()))
    # The number stays for older kernelrl versions, which refuse a database whose version is above theirs.
    count = conn.execute("SELECT COUNT(*) FROM migrations").fetchone()[0]
    conn.execute("UPDATE schema_version SET version = ?", (count,))
