"""The registry's metrics: narrow (run, key, step, value) rows, each run's summary of last values, and series read
back downsampled inside SQLite through per-block min/max rows. A room of `Registry` (core/registry.py)."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Iterable, Optional, Sequence

from core.errors import KrlError
from core.store.rows import HEADLINE_COLUMNS, headline_values, series_columns

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


class MetricsTable:
    """Metric writes and queries. Needs the registry's conn, transaction, snapshot, query_rows, _lock, get_run."""

    def log_metrics(self, run_id: int, step: int, metrics: dict[str, float], wall_time: float | None = None) -> None:
        """Metrics alone (evaluation runs, late additions to a step); only these keys at that step are replaced.
        Log extra metrics for a step after its write_step, not before: write_step replaces the whole step."""
        with self.transaction():
            summary, last_step = self.run_progress(run_id)
            self.insert_metrics(run_id, step, metrics, wall_time if wall_time is not None else time.time())
            self.update_summary(run_id, step, metrics, None, summary, last_step)

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
            self.run_progress(run_id)  # KrlError for an unknown run
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

    def cache_metric_blocks(self, run_id: int, keys: Sequence[str], block: int) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO metric_blocks (block, min_step, min_value, min_wall, max_step, max_value, "
            f"max_wall, run_id, key) SELECT *, :run, :key FROM ({_BLOCKS_SQL})",
            [{"run": run_id, "key": key, "b0": block, "b1": block, "slo": _MIN_STEP, "shi": 2**63 - 1}
             for key in keys])

    def run_progress(self, run_id: int) -> tuple[dict[str, Any], Optional[int]]:
        row = self.conn.execute("SELECT summary, last_step FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KrlError(f"run id {run_id} does not exist in {self.path}.")
        return json.loads(row[0] or "{}"), row[1]

    def delete_step_metrics(self, run_id: int, step: int) -> None:
        # One probe per key: the (run_id, key, step) key cannot find "every key at this step" directly.
        self.conn.executemany("DELETE FROM metrics WHERE run_id = ? AND key = ? AND step = ?",
                              [(run_id, key, step) for key in self.metric_keys(run_id)])
        self.conn.execute("DELETE FROM metric_blocks WHERE run_id = ? AND block = ?", (run_id, step // BLOCK_STEPS))

    def insert_metrics(self, run_id: int, step: int, metrics: dict[str, float], now: float) -> None:
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

    def update_summary(self, run_id: int, step: int, metrics: dict[str, float], best_speedup: float | None,
                        summary: dict[str, Any], last_step: Optional[int]) -> None:
        last = summary.get("last", {})
        last.update({k: float(v) for k, v in metrics.items() if v is not None and v == v})
        summary["last"] = last
        if best_speedup is not None:
            summary["best_speedup"] = max(summary.get("best_speedup") or 0.0, best_speedup)
        new_last_step = max(step, last_step if last_step is not None else step)
        self.conn.execute(f"UPDATE runs SET summary = ?, last_step = ?, heartbeat_at = ?, "
                          f"{', '.join(f'{c} = ?' for c in HEADLINE_COLUMNS)} WHERE id = ?",
                          (json.dumps(summary), new_last_step, time.time(), *headline_values(summary), run_id))

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
                return series_columns(rows)
            if max_points == 1:
                return series_columns(self._points_at(run_id, key, [hi]))
            buckets = max(1, (max_points - 1) // 2) if max_points >= 3 else 1
            span_blocks = hi // BLOCK_STEPS - lo // BLOCK_STEPS + 1
            if span_blocks >= 2 * buckets and span_blocks <= _MAX_BLOCKS:
                points = self._downsample_blocks(run_id, key, lo, hi, buckets)
            else:
                points = self.conn.execute(_DOWNSAMPLE_ROWS_SQL, {"run": run_id, "key": key, "lo": lo,
                                                                  "span": hi - lo + 1, "n": buckets}).fetchall()
            if max_points >= 3 and (not points or points[-1][0] != hi):
                points += self._points_at(run_id, key, [hi])
        return series_columns(points)

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
        rows = self.query_rows(
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
        with self.snapshot():
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
