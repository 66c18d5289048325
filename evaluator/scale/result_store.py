"""The evaluation service's durable memory: each accepted request and its one result, in a SQLite file (WAL), so a
restarted `krl serve` answers finished ids from disk and evaluates the unfinished ones again, once each."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import sqlite3
import stat
import threading
import time
from typing import Any, Iterator, Optional

from evaluator.contract.types import EvaluatorError

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 5.0  # how long a write waits for another process's lock before failing with what to do
MEMORY = ":memory:"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    request_id   TEXT PRIMARY KEY,
    fingerprint  TEXT NOT NULL,     -- sha256 of the request's JSON: a reused id with other work is refused
    request_json TEXT,              -- kept until the result is stored (then NULL: the store stays small)
    accepted_at  REAL NOT NULL,
    submissions  INTEGER NOT NULL,  -- times handed to the evaluator (across service lives)
    finished_seq INTEGER UNIQUE,    -- order of finishing (NULL while unfinished); the oldest are evicted
    finished_at  REAL,
    result_json  TEXT
);
"""


@dataclasses.dataclass(frozen=True)
class StoredRequest:
    """One row: a request the service accepted, with its result once it has one."""

    request_id: str
    fingerprint: str
    request_json: Optional[str]
    submissions: int
    result_json: Optional[str]

    @property
    def finished(self) -> bool:
        return self.result_json is not None


class ResultStore:
    """Accepted requests and their results, one transaction per state change. One service at a time per file (an
    exclusive lock on PATH.lock); `keep_results` bounds the finished rows kept (the oldest-finished go first).
    ":memory:" keeps the same behaviour for one process life (tests, in-process apps)."""

    def __init__(self, path: str = MEMORY, *, keep_results: int = 50_000, busy_timeout_s: float = BUSY_TIMEOUT_S):
        if keep_results < 1:
            raise EvaluatorError("keep_results must be at least 1.")
        self.path = path
        self.keep_results = keep_results
        self._lock = threading.Lock()
        self.busy_timeout_s = busy_timeout_s
        self._lock_file: Optional[int] = None
        self._db: Optional[sqlite3.Connection] = None
        if path != MEMORY:
            _prepare_private_file(path)
            self._lock_file = _lock_exclusively(path)
        try:
            self._db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: a result or an acceptance we answered for survives a power cut too, not only a killed process.
            self._db.execute("PRAGMA synchronous=FULL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise EvaluatorError(f"the results store {path} was written by a newer kernelrl (schema {version}); "
                                     "upgrade kernelrl or pass another --results-db.")
            with _Transaction(self._db):
                self._db.execute(_SCHEMA)
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            self.close()
            raise _store_error(path, exc, busy_timeout_s) from None
        except EvaluatorError:
            self.close()
            raise

    # ---------------------------------------------------------------- state changes (one transaction each)

    def accept(self, rows: list[tuple[str, str, str]]) -> None:
        """Record requests handed to the evaluator (request_id, fingerprint, request JSON), all or none: a new id is
        inserted, an unfinished one (its evaluation failed on our side) counts one more submission."""
        now = time.time()
        self._write("INSERT INTO requests (request_id, fingerprint, request_json, accepted_at, submissions) "
                    "VALUES (?, ?, ?, ?, 1) ON CONFLICT (request_id) DO UPDATE SET submissions = submissions + 1 "
                    "WHERE result_json IS NULL", [(rid, fp, body, now) for rid, fp, body in rows])

    def release(self, new_ids: list[str], retried_ids: list[str]) -> None:
        """Undo accept() for requests the evaluator refused (busy, closed) before anything was answered for them:
        new ids are dropped, retried ones lose the submission just counted."""
        with self._changing() as db:
            db.executemany("DELETE FROM requests WHERE request_id = ? AND result_json IS NULL",
                           [(r,) for r in new_ids])
            db.executemany("UPDATE requests SET submissions = submissions - 1 WHERE request_id = ? "
                           "AND result_json IS NULL", [(r,) for r in retried_ids])

    def resubmitted(self, request_ids: list[str], delta: int = 1) -> None:
        """Count another hand-over to the evaluator (or, with delta=-1, take back one that did not run to its end
        because the service was stopped cleanly)."""
        self._write("UPDATE requests SET submissions = submissions + ? WHERE request_id = ? AND result_json IS NULL",
                    [(delta, r) for r in request_ids])

    def finish(self, request_id: str, result_json: str) -> bool:
        """Store the one result of a request and evict the oldest finished rows past keep_results. False when the
        request already had a result or is not here (nothing is overwritten)."""
        with self._changing() as db:
            seq = db.execute("SELECT COALESCE(MAX(finished_seq), 0) + 1 FROM requests").fetchone()[0]
            updated = db.execute(
                "UPDATE requests SET result_json = ?, request_json = NULL, finished_seq = ?, finished_at = ? "
                "WHERE request_id = ? AND result_json IS NULL", (result_json, seq, time.time(), request_id)).rowcount
            db.execute("DELETE FROM requests WHERE finished_seq <= ?", (seq - self.keep_results,))
        return bool(updated)

    # ---------------------------------------------------------------- reads

    def get(self, request_id: str) -> Optional[StoredRequest]:
        with self._lock:
            row = self._read("SELECT request_id, fingerprint, request_json, submissions, result_json FROM requests "
                             "WHERE request_id = ?", (request_id,)).fetchone()
        return StoredRequest(*row) if row else None

    def unfinished(self) -> list[StoredRequest]:
        """Accepted requests without a result, oldest first."""
        with self._lock:
            rows = self._read("SELECT request_id, fingerprint, request_json, submissions, result_json FROM requests "
                              "WHERE result_json IS NULL ORDER BY rowid").fetchall()
        return [StoredRequest(*row) for row in rows]

    def counts(self) -> dict[str, int]:
        """{"unfinished": n, "finished": m} rows in the store."""
        with self._lock:
            finished = self._read("SELECT COUNT(*) FROM requests WHERE finished_seq IS NOT NULL").fetchone()[0]
            total = self._read("SELECT COUNT(*) FROM requests").fetchone()[0]
        return {"unfinished": total - finished, "finished": finished}

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
        if self._lock_file is not None:
            os.close(self._lock_file)  # releases the flock
            self._lock_file = None

    # ---------------------------------------------------------------- inside

    @contextlib.contextmanager
    def _changing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the store's lock; SQLite's errors become EvaluatorErrors saying what to do."""
        with self._lock:
            if self._db is None:
                raise EvaluatorError("the results store is closed.")
            try:
                with _Transaction(self._db) as db:
                    yield db
            except sqlite3.IntegrityError as exc:
                raise EvaluatorError(f"the results store refused a write ({exc}).") from None
            except sqlite3.Error as exc:
                raise _store_error(self.path, exc, self.busy_timeout_s) from None

    def _write(self, sql: str, rows: list[tuple]) -> None:
        if rows:
            with self._changing() as db:
                db.executemany(sql, rows)

    def _read(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        if self._db is None:
            raise EvaluatorError("the results store is closed.")
        try:
            return self._db.execute(sql, args)
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc, self.busy_timeout_s) from None


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT, ROLLBACK on any error (the connection is in autocommit mode otherwise)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.Error:
                self._roll_back()  # a failed COMMIT (disk full, busy) may leave the transaction open
                raise
        self._roll_back()

    def _roll_back(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")


def result_row(result_dict: dict[str, Any]) -> str:
    """A result's stored text (strict JSON: the caller has already replaced NaN/inf with null)."""
    return json.dumps(result_dict, allow_nan=False, separators=(",", ":"))


def _prepare_private_file(path: str) -> None:
    """Create the store file readable by its owner only (it holds candidate source), or refuse an existing one that
    every user can read. SQLite gives its -wal and -shm files the database file's mode."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
        info = os.stat(path)
    except OSError as exc:
        raise EvaluatorError(f"cannot create the results store {path}: {exc.strerror}. Pass --results-db with a "
                             "writable path.") from None
    if not stat.S_ISREG(info.st_mode):
        raise EvaluatorError(f"the results store {path} is not a regular file; pass another --results-db.")
    if info.st_mode & (stat.S_IROTH | stat.S_IWOTH):
        raise EvaluatorError(f"the results store {path} is readable by every user and holds candidate source: "
                             f"chmod 600 {path}.")


def _lock_exclusively(path: str) -> int:
    """An exclusive lock held for the store's life: two services on one file would both re-evaluate its work."""
    lock_path = path + ".lock"
    try:
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:
        raise EvaluatorError(f"cannot create {lock_path}: {exc.strerror}. Pass --results-db with a writable "
                             "path.") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise EvaluatorError(f"the results store {path} is in use by another krl serve: stop that one, or give "
                             "this one its own --results-db.") from None
    return fd


def _store_error(path: str, exc: sqlite3.Error, busy_timeout_s: float) -> EvaluatorError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return EvaluatorError(f"the results store {path} is locked by another process ({text}) for over "
                              f"{busy_timeout_s:g} s: close whatever holds it (an sqlite3 shell?) and retry.")
    if isinstance(exc, sqlite3.DatabaseError) and ("not a database" in text or "malformed" in text
                                                   or "corrupt" in text):
        return EvaluatorError(f"the results store {path} is damaged ({text}): move it aside (its stored results "
                              "are then no longer served) and start again, or pass another --results-db.")
    return EvaluatorError(f"the results store {path} failed: {text}. Check the disk (full? read-only?) and retry.")
