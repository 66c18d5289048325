"""A workspace recorded by the code under test: `krl demo --headless` (replay backend, real training loop, real CPU
evaluator) run once per test session, then copied per test with its non-deterministic fields made fixed.

What varies between two recordings is time: clocks (created/started/ended, heartbeats, events, wall times) and
timings (kernel and reference runtimes, hence speedups, the speed reward, step scores, returns, advantages and the
Runtime/Speedup lines of the feedback). `normalise` replaces each timing with one derived from the kernel's text and
recomputes what follows from it with core.reward's own functions, so snapshots are identical on every machine while
every record keeps the shape the evaluator and training loop gave it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from core.registry import REGISTRY_FILENAME

RECORDED_RUN = "demo-recorded"
FIXED_NOW = 1_790_000_000.0  # the same frozen "now" as tests/app/fixtures.py
_RUNTIME_LINE = re.compile(r"^Runtime: .*$", re.M)
_SPEEDUP_LINE = re.compile(r"^Speedup: .*$", re.M)
_GUIDANCE_LINE = re.compile(r"^Guidance: .*$", re.M)


def record_demo(target: Path, timeout_s: float = 300.0) -> Path:
    """Run `krl demo --headless` into `target` (a new workspace folder) and return it."""
    target.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KRL_WORKSPACE": str(target)}
    proc = subprocess.run([sys.executable, "-m", "app", "demo", "--headless", "--json", "--name", RECORDED_RUN],
                          env=env, capture_output=True, text=True, timeout=timeout_s, cwd=target)
    if proc.returncode != 0:
        raise RuntimeError(f"krl demo --headless failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return target


def copy_workspace(source: Path, dest: Path) -> Path:
    """A private copy of a recorded workspace (registry through SQLite's backup API, run folders as files)."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.is_dir():
            shutil.copytree(entry, dest / entry.name)
    src = sqlite3.connect(str(source / REGISTRY_FILENAME))
    dst = sqlite3.connect(str(dest / REGISTRY_FILENAME))
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return dest


def _stand_in_speedup(kernel: str) -> float:
    """A fixed speedup in [0.5, 3.0) per kernel text."""
    return 0.5 + int(hashlib.sha1(kernel.encode()).hexdigest()[:6], 16) % 250 / 100


def _stats(median_ms: float, n: int) -> dict:
    return {"median_ms": median_ms, "mean_ms": median_ms, "std_ms": 0.0, "min_ms": median_ms, "max_ms": median_ms,
            "iqr_ms": 0.0, "n": n}


def _fixed_feedback(text: str, verdict: str, speedup: float | None, kernel_ms: float | None, ref_ms: float) -> str:
    from core.env import GUIDANCE

    if kernel_ms is not None:
        text = _RUNTIME_LINE.sub(f"Runtime: {kernel_ms:.4g} ms, reference {ref_ms:.4g} ms", text)
    if speedup is not None:
        relation = "faster" if speedup >= 1 else "slower"
        text = _SPEEDUP_LINE.sub(f"Speedup: {speedup:.2f}x ({relation} than the PyTorch reference)", text)
        if verdict == "correct" and "Guidance: " in text:
            guidance = GUIDANCE.get(verdict, "") if speedup >= 1 else \
                "Correct but slower than PyTorch: find where time goes and fuse or restructure to beat it."
            text = _GUIDANCE_LINE.sub(lambda _: f"Guidance: {guidance}", text, count=1)
    return text


def normalise(workspace: Path, now: float = FIXED_NOW) -> None:
    """Make a recorded workspace's clocks and timings fixed (see the module docstring)."""
    from core.config import RunConfig
    from core.reward import per_turn_advantages, speed_value

    conn = sqlite3.connect(str(workspace / REGISTRY_FILENAME), isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN IMMEDIATE")
        run_configs = {row["id"]: RunConfig.model_validate(json.loads(row["config"]))
                       for row in conn.execute("SELECT id, config FROM runs")}
        feedback_map: dict[str, str] = {}
        scores: dict[int, list[tuple[int, float]]] = {}
        turns = conn.execute("SELECT u.id, u.trajectory_id, u.turn, u.kernel, u.verdict, u.eval_result, u.feedback, "
                             "u.reward_breakdown, u.step_score, t.run_id FROM turns u "
                             "JOIN trajectories t ON t.id = u.trajectory_id ORDER BY u.id").fetchall()
        for index, turn in enumerate(turns):
            reward_cfg = run_configs[turn["run_id"]].reward
            result = json.loads(turn["eval_result"]) if turn["eval_result"] else None
            breakdown = json.loads(turn["reward_breakdown"])
            step_score, feedback = turn["step_score"], turn["feedback"]
            if result is not None:
                result["request_id"] = f"req-{index:05d}"
                result["phase_times_s"] = {k: 0.01 for k in result.get("phase_times_s") or {}}
                speedup = _stand_in_speedup(turn["kernel"]) if result.get("speedup") is not None else None
                ref_ms = 1.0
                kernel_ms = ref_ms / speedup if speedup else None
                if result.get("reference_runtime"):
                    result["reference_runtime"] = _stats(ref_ms, result["reference_runtime"].get("n", 0))
                if result.get("kernel_runtime"):
                    result["kernel_runtime"] = _stats(kernel_ms or ref_ms, result["kernel_runtime"].get("n", 0))
                result["speedup"] = speedup
                if turn["verdict"] == "correct" and "speed" in breakdown:
                    weight = reward_cfg.weights.speed
                    new_speed = weight * speed_value(speedup, reward_cfg.speed_mode, reward_cfg.speed_clip,
                                                     reward_cfg.speed_floor)
                    step_score += new_speed - breakdown["speed"]
                    breakdown["speed"] = new_speed
                    if "total" in breakdown:
                        breakdown["total"] = step_score
                new_feedback = _fixed_feedback(feedback, turn["verdict"], speedup, kernel_ms, ref_ms)
                if new_feedback != feedback:
                    feedback_map[feedback] = new_feedback
                feedback = new_feedback
            conn.execute("UPDATE turns SET eval_result = ?, reward_breakdown = ?, step_score = ?, feedback = ? "
                         "WHERE id = ?", (json.dumps(result) if result is not None else None, json.dumps(breakdown),
                                          step_score, feedback, turn["id"]))
            scores.setdefault(turn["trajectory_id"], []).append((turn["turn"], step_score))
        # Later prompts quote earlier feedback.
        for text_row in conn.execute("SELECT hash, text FROM texts").fetchall():
            text = text_row["text"]
            for old, new in feedback_map.items():
                text = text.replace(old, new)
            if text != text_row["text"]:
                conn.execute("UPDATE texts SET text = ? WHERE hash = ?", (text, text_row["hash"]))
        # Returns and advantages per group, as the training loop computes them.
        groups: dict[tuple, list[sqlite3.Row]] = {}
        for trajectory in conn.execute("SELECT * FROM trajectories ORDER BY id").fetchall():
            groups.setdefault((trajectory["run_id"], trajectory["step"], trajectory["group_index"]), []).append(trajectory)
        for (run_id, _, _), members in groups.items():
            reward_cfg = run_configs[run_id].reward
            per_sample = [[s for _, s in sorted(scores.get(m["id"], []))] for m in members]
            result = per_turn_advantages(per_sample, reward_cfg.gamma, reward_cfg.normalise_std,
                                         reward_cfg.leave_one_out)
            for member, returns, advantages in zip(members, result.returns, result.advantages):
                for turn_number, (ret, adv) in zip(sorted(t for t, _ in scores.get(member["id"], [])),
                                                   zip(returns, advantages)):
                    conn.execute("UPDATE turns SET return_ = ?, advantage = ? WHERE trajectory_id = ? AND turn = ?",
                                 (ret, adv, member["id"], turn_number))
                best = [json.loads(r[0])["speedup"] for r in conn.execute(
                    "SELECT eval_result FROM turns WHERE trajectory_id = ? AND verdict = 'correct'", (member["id"],))]
                best = [b for b in best if b is not None]
                conn.execute("UPDATE trajectories SET total_return = ?, best_speedup = ? WHERE id = ?",
                             (returns[0] if returns else 0.0, max(best) if best else None, member["id"]))
        # Clocks: each run as if created an hour before `now`, steps a minute apart.
        for run in conn.execute("SELECT id, started_at, ended_at, summary FROM runs").fetchall():
            created = now - 3600
            summary = json.loads(run["summary"] or "{}")
            bests = [r[0] for r in conn.execute("SELECT best_speedup FROM trajectories WHERE run_id = ? AND solved "
                                                "AND best_speedup IS NOT NULL", (run["id"],))]
            if bests:
                summary["best_speedup"] = max(bests)
            conn.execute("UPDATE runs SET created_at = ?, started_at = ?, ended_at = ?, heartbeat_at = ?, "
                         "pid = NULL, pid_start_time = NULL, host = 'recorded', summary = ? WHERE id = ?",
                         (created, created + 5, created + 1800 if run["ended_at"] else None,
                          created + 1800, json.dumps(summary), run["id"]))
            conn.execute("UPDATE metrics SET wall_time = ? + step * 60 WHERE run_id = ?", (created + 10, run["id"]))
            conn.execute("UPDATE events SET time = ? WHERE run_id = ?", (created, run["id"]))
            conn.execute("UPDATE checkpoints SET created_at = ? + step * 60 WHERE run_id = ?", (created + 30, run["id"]))
        conn.execute("DELETE FROM metric_blocks")
        conn.execute("COMMIT")
    finally:
        conn.close()


def recorded_workspace(source: Path, dest: Path, fixed: bool = True) -> Path:
    """A private, normalised copy of the session's recorded demo workspace."""
    copy_workspace(source, dest)
    if fixed:
        normalise(dest)
    return dest
