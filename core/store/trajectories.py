"""The registry's trajectories and turns, and the per-step write that stores a training step's metrics,
trajectories and events in one transaction. A room of `Registry` (core/registry.py)."""

from __future__ import annotations

import json
import time
from typing import Any, Optional, Sequence

from core.errors import KrlError
from core.store.metrics import BLOCK_STEPS
from core.store.rows import TURN_JSON_COLUMNS, TrajectoryRecord, decode_json_columns, text_hash


class TrajectoriesTable:
    """Trajectory writes and queries. Needs the registry's conn, transaction, query_dicts, query_rows and the
    metric and event writers of its other rooms."""

    def write_step(self, run_id: int, step: int, metrics: dict[str, float],
                   trajectories: Sequence[TrajectoryRecord] = (), events: Sequence[tuple[str, str]] = (),
                   wall_time: float | None = None) -> None:
        """Everything a training step produced, in one transaction (a crash loses at most this step).
        Rewriting a step (after a resume) replaces its earlier rows: metrics, trajectories and turns."""
        now = wall_time if wall_time is not None else time.time()
        with self.transaction():
            summary, last_step = self.run_progress(run_id)
            if last_step is not None and step <= last_step:
                self.delete_step_metrics(run_id, step)
            elif last_step is not None and step // BLOCK_STEPS > last_step // BLOCK_STEPS:
                # The previous block is complete: cache its min/max now so readers of a live run never write.
                self.cache_metric_blocks(run_id, list(metrics), last_step // BLOCK_STEPS)
            self.insert_metrics(run_id, step, metrics, now)
            self.conn.execute("DELETE FROM turns WHERE trajectory_id IN "
                              "(SELECT id FROM trajectories WHERE run_id = ? AND step = ?)", (run_id, step))
            self.conn.execute("DELETE FROM trajectories WHERE run_id = ? AND step = ?", (run_id, step))
            best = None
            for trajectory in trajectories:
                self._insert_trajectory(run_id, step, trajectory)
                if trajectory.best_speedup is not None and trajectory.solved:
                    best = max(best or 0.0, trajectory.best_speedup)
            for kind, message in events:
                self.write_event(run_id, kind, message, now)
            self.update_summary(run_id, step, metrics, best, summary, last_step)

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
            prompt_hash = text_hash(turn.prompt)
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
        return self.query_dicts(f"SELECT * FROM trajectories WHERE {where} ORDER BY {order_by} LIMIT ? OFFSET ?",
                           (*params, limit, offset))

    def trajectory_samples(self, run_id: int) -> list[tuple]:
        """(problem id, sample index) of every stored trajectory of a run: what an evaluation has already played."""
        return self.query_rows("SELECT problem_id, sample_index FROM trajectories WHERE run_id = ?", (run_id,))

    def trajectory_outcomes(self, run_id: int) -> list[tuple]:
        """(step, problem id, total return, best speedup, solved, id) of every trajectory of a run in step order:
        what the TUI's distributions and best-kernel-per-problem views aggregate (six columns, no turns)."""
        return self.query_rows("SELECT step, problem_id, total_return, best_speedup, solved, id FROM trajectories "
                          "WHERE run_id = ? ORDER BY step, id", (run_id,))

    def count_trajectories(self, run_id: int, *, problem_id: str | None = None, outcome: str | None = None,
                           solved_at_turn: int | None = None, step_min: int | None = None,
                           step_max: int | None = None) -> int:
        """How many trajectories `trajectories` would page through with the same filters."""
        where, params = self._trajectory_filter(run_id, problem_id, outcome, solved_at_turn, step_min, step_max)
        return self.query_rows(f"SELECT COUNT(*) FROM trajectories WHERE {where}", params)[0][0]

    def trajectory(self, trajectory_id: int) -> dict[str, Any]:
        rows = self.query_dicts("SELECT * FROM trajectories WHERE id = ?", (trajectory_id,))
        if not rows:
            raise KrlError(f"no trajectory with id {trajectory_id}.")
        return rows[0]

    def trajectory_turns(self, trajectory_id: int) -> list[dict[str, Any]]:
        rows = self.query_dicts("SELECT turns.*, texts.text AS prompt FROM turns JOIN texts ON texts.hash = turns.prompt_hash "
                           "WHERE trajectory_id = ? ORDER BY turn", (trajectory_id,))
        return [decode_json_columns(row, TURN_JSON_COLUMNS) for row in rows]

    def neighbour_trajectory(self, trajectory_id: int, direction: int) -> Optional[int]:
        """The next (+1) or previous (-1) trajectory of the same run and problem, by id."""
        current = self.trajectory(trajectory_id)
        op, order = (">", "ASC") if direction > 0 else ("<", "DESC")
        rows = self.query_rows(f"SELECT id FROM trajectories WHERE run_id = ? AND problem_id = ? AND id {op} ? "
                          f"ORDER BY id {order} LIMIT 1", (current["run_id"], current["problem_id"], trajectory_id))
        return rows[0][0] if rows else None

    def problem_summary(self, run_id: int) -> list[dict[str, Any]]:
        """Per problem: attempts, solve rate, best speedup, hacks — where the model is stuck."""
        return self.query_dicts(
            "SELECT problem_id, COUNT(*) AS attempts, AVG(solved) AS solve_rate, SUM(solved) AS solved, "
            "MAX(CASE WHEN solved THEN best_speedup END) AS best_speedup, SUM(hack) AS hacks, "
            "AVG(total_return) AS mean_return, AVG(solved_at_turn) AS mean_solved_turn "
            "FROM trajectories WHERE run_id = ? GROUP BY problem_id ORDER BY solve_rate, problem_id", (run_id,))

    def recent_turn_verdicts(self, run_id: int, limit: int = 20) -> list[dict[str, Any]]:
        return self.query_dicts(
            "SELECT t.step, t.problem_id, u.turn, u.verdict, u.step_score FROM turns u "
            "JOIN trajectories t ON t.id = u.trajectory_id WHERE t.run_id = ? ORDER BY u.id DESC LIMIT ?",
            (run_id, limit))
