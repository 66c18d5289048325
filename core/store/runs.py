"""The registry's runs table and what hangs off a run as a whole: creating, reading, listing, updating and deleting
runs, status changes, events and checkpoints. A room of `Registry` (core/registry.py), which supplies the connection."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from typing import Any, Iterable, Optional, Sequence

from core.errors import KrlError, did_you_mean
from core.run_status import ACTIVE_STATUSES, RUN_STATUSES, RunStatus
from core.store.rows import (HEADLINE_COLUMNS, REPEATED_JSON_COLUMNS, RUN_JSON_COLUMNS, decode_json_columns,
                             headline_values, loads_json)

REGISTRY_FILENAME = "registry.db"
RUN_KINDS = ("train", "eval", "replay")


class RunsTable:
    """Runs, their status, events and checkpoints. Needs the registry's conn, transaction, snapshot, query_dicts,
    query_rows and _run_columns."""

    def create_run(self, name: str, *, kind: str = "train", config: dict[str, Any] | None = None,
                   preset: str | None = None, model: str | None = None, backend: str | None = None,
                   problem_set: str | None = None, gpus_requested: int = 0, total_steps: int | None = None,
                   tags: Iterable[str] = (), notes: str = "", parent_run_id: int | None = None,
                   parent_step: int | None = None, status: str = RunStatus.QUEUED) -> dict[str, Any]:
        if kind not in RUN_KINDS:
            raise KrlError(f"run kind must be one of {', '.join(RUN_KINDS)}, not '{kind}'.")
        check_run_name(name)
        with self.transaction():
            existing = self.conn.execute("SELECT status FROM runs WHERE name = ?", (name,)).fetchone()
            if existing:
                # Only a run that can resume is offered a resume; a finished one is forked to train further.
                resume = f", or resume it with `krl runs resume {name}`"
                hint = {"stopped": resume, "failed": resume, "crashed": resume,
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
            self.write_event(run_id, "status", f"created ({status})", now)
        return self.get_run(run_id)

    def get_run(self, name_or_id: str | int) -> dict[str, Any]:
        """A run by id or name; KrlError with suggestions when unknown."""
        if isinstance(name_or_id, int):
            rows = self.query_dicts("SELECT * FROM runs WHERE id = ?", (name_or_id,))
        else:
            rows = self.query_dicts("SELECT * FROM runs WHERE name = ?", (name_or_id,))
        if not rows:
            names = [r["name"] for r in self.query_dicts("SELECT name FROM runs")]
            raise KrlError(f"no run named '{name_or_id}'.{did_you_mean(str(name_or_id), names)} "
                           "List runs with `krl runs ls`.")
        return decode_json_columns(rows[0], RUN_JSON_COLUMNS)

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
        repeated = [c for c in REPEATED_JSON_COLUMNS if c in columns]
        packed_columns = [c for c in RUN_JSON_COLUMNS if c in columns and c != "config" and c not in repeated]
        plain = [c for c in columns if c not in packed_columns]
        decoded: Optional[list] = []
        with self.snapshot():
            rows = self.query_dicts(f"SELECT {', '.join(plain)} FROM runs {where} ORDER BY id DESC", params)
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
            full = self.query_dicts(f"SELECT {', '.join(columns)} FROM runs {where} ORDER BY id DESC", params)
            return [decode_json_columns(row, RUN_JSON_COLUMNS) for row in full]
        for row, values in zip(rows, decoded or ()):
            row.update(zip(packed_columns, values[1:]))
        parsed: dict[str, list] = {}
        for row in rows:
            for column in repeated:
                text = row[column]
                if isinstance(text, str) and text[:1] == "[":
                    value = parsed.get(text)
                    if value is None:
                        value = parsed[text] = loads_json(text)
                    row[column] = list(value)  # a copy: callers may change a row's list
            if include_config:
                decode_json_columns(row, ("config",))
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
            fields.update(zip(HEADLINE_COLUMNS, headline_values(summary or {})))
        for key in RUN_JSON_COLUMNS:
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
            self.write_event(run_id, "status", f"{status}{': ' + message if message else ''}")

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
            self.write_event(run_id, "rename", f"renamed to {new_name}")

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

    # ------------------------------------------------------------ events and checkpoints

    def write_event(self, run_id: int, kind: str, message: str, now: float | None = None) -> None:
        self.conn.execute("INSERT INTO events (run_id, time, kind, message) VALUES (?, ?, ?, ?)",
                          (run_id, now if now is not None else time.time(), kind, message))

    def add_event(self, run_id: int, kind: str, message: str) -> None:
        with self.transaction():
            self.write_event(run_id, kind, message)

    def events(self, run_id: int, after_id: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        return self.query_dicts("SELECT * FROM events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
                           (run_id, after_id, limit))

    def add_checkpoint(self, run_id: int, step: int, name: str, state_path: str | None,
                       sampler_path: str | None = None) -> None:
        with self.transaction():
            self.conn.execute("INSERT INTO checkpoints (run_id, step, name, state_path, sampler_path, created_at) "
                              "VALUES (?, ?, ?, ?, ?, ?)", (run_id, step, name, state_path, sampler_path, time.time()))
            self.write_event(run_id, "checkpoint", f"{name} at step {step}")

    def checkpoints(self, run_id: int) -> list[dict[str, Any]]:
        return self.query_dicts("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step, id", (run_id,))

    def last_checkpoint(self, run_id: int) -> Optional[dict[str, Any]]:
        rows = self.query_dicts("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step DESC, id DESC LIMIT 1",
                                (run_id,))
        return rows[0] if rows else None

    def config_values(self, run_ids: Sequence[int], keys: Sequence[str]) -> dict[int, dict[str, Any]]:
        """{run id: {dotted key: value}} read inside SQLite (json_extract), so config columns in the runs table
        never load whole configs."""
        if not run_ids or not keys:
            return {}
        paths = ", ".join("json_extract(config, ?)" for _ in keys)
        out: dict[int, dict[str, Any]] = {}
        for start in range(0, len(run_ids), 500):
            chunk = list(run_ids[start:start + 500])
            rows = self.query_rows(f"SELECT id, {paths} FROM runs WHERE id IN ({', '.join('?' for _ in chunk)})",
                              (*("$." + k for k in keys), *chunk))
            for row in rows:
                out[row[0]] = dict(zip(keys, row[1:]))
        return out


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
