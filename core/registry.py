"""The SQLite run registry: one connection per process, transactions and the schema check, with the tables' jobs in
core/store/ (runs, metrics, trajectories, schema). Every part of kernelrl reads and writes runs through `Registry`;
WAL lets one writer per run and many readers coexist."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import quote

import sqlite_utils

from core.errors import KrlError
# The names below stay importable from core.registry: callers knew them here before the split.
from core.run_status import ACTIVE_STATUSES, RUN_STATUSES  # noqa: F401
from core.store.metrics import BLOCK_STEPS, MetricsTable  # noqa: F401
from core.store.rows import (HEADLINE_COLUMNS, TrajectoryRecord, TurnRecord, correct_key,  # noqa: F401
                             headline_values, reward_key)
from core.store.runs import REGISTRY_FILENAME, RUN_KINDS, RunsTable, check_run_name  # noqa: F401
from core.store.schema import APP_ID, MIGRATIONS, SCHEMA_VERSION, check_schema, migrate, up_to_date  # noqa: F401
from core.store.trajectories import TrajectoriesTable

BUSY_TIMEOUT_MS = 30_000
WAL_SIZE_LIMIT_BYTES = 16 * 1024 * 1024


def workspace_path(workspace: str | os.PathLike | None = None) -> Path:
    """The workspace folder: explicit argument, else $KRL_WORKSPACE, else ./runs."""
    return Path(workspace or os.environ.get("KRL_WORKSPACE") or "runs").expanduser().resolve()


class Registry(RunsTable, MetricsTable, TrajectoriesTable):
    """A connection to one workspace's registry. Thread-safe; open one per process. Its methods come from the rooms
    in core/store/; this class holds the connection, the lock and the transactions they share."""

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
            check_schema(conn, self.path)
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
                if not up_to_date(conn, unadopted_ok=True):
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

    @classmethod
    def open_existing(cls, workspace: str | os.PathLike | None = None) -> "Registry | None":
        """The workspace's registry if one exists, else None; never creates a folder or a file (read-only commands
        open this way, so looking around in a new folder leaves no ./runs behind)."""
        path = workspace_path(workspace) / REGISTRY_FILENAME
        if path.exists() or (path.parent.exists() and not path.parent.is_dir()):
            return cls(path, create=False)  # a workspace that is a file gets its own message
        return None

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

    def _migrate(self) -> None:
        if up_to_date(self.conn):
            return  # the common case: no write lock needed to open
        with self.transaction():
            migrate(self.conn, self.path)

    def integrity_problems(self, limit: int = 5, budget_s: float | None = None) -> list[str] | None:
        """What SQLite's quick_check finds wrong with the file (empty when healthy); reads every page, about a
        second per few hundred MB. budget_s: stop after that long and return None (not known), so a look at a
        registry of many GB stays quick."""
        if budget_s is None:
            rows = self.query_rows(f"PRAGMA quick_check({int(limit)})")
        else:
            deadline = time.monotonic() + budget_s
            with self._lock:
                # Called every 100 virtual-machine steps, quick_check's page walk included (about 15% slower).
                self.conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 100)
                try:
                    rows = self.conn.execute(f"PRAGMA quick_check({int(limit)})").fetchall()
                except sqlite3.OperationalError as exc:
                    if "interrupted" not in str(exc):
                        raise
                    return None
                finally:
                    self.conn.set_progress_handler(None, 0)
        return [] if [r[0] for r in rows] == ["ok"] else [str(r[0]) for r in rows]

    @property
    def schema_version(self) -> int:
        return self.query_rows("SELECT version FROM schema_version")[0][0]

    def data_version(self) -> int:
        """Moves when another connection commits to the database (SQLite's data_version): a viewer polls this one
        cheap probe and reads again only when it moved."""
        with self._lock:
            return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def runs_list_version(self) -> int:
        """Moves whenever a run is created, deleted, renamed, re-tagged, annotated or changes status."""
        return self.query_rows("SELECT version FROM runs_changes")[0][0]

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
    def snapshot(self) -> Iterator[sqlite3.Connection]:
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

    def query_dicts(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            cursor = self.conn.execute(sql, params)
            columns = [d[0] for d in cursor.description]
            return [dict(zip(columns, row)) for row in cursor.fetchall()]

    def query_rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple]:
        with self._lock:
            return self.conn.execute(sql, params).fetchall()


def registry_damaged_error(path: Path, exc: BaseException) -> KrlError:
    """The user error for a registry SQLite cannot read (disk image malformed, truncated file …)."""
    return KrlError(f"the registry {path} is damaged ({exc}). `krl doctor` checks it; restore it from a backup, or "
                    "move it away (its run folders stay) and pass --workspace to use another folder.")
