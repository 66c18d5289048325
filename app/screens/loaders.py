"""Plain functions that read the registry and return what a screen shows (dataclasses and dicts).
Only screen workers call these, off the UI thread; widgets receive their results through messages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from core.progress import steps_done
from core.config import flatten  # re-exported: screens and widgets flatten configs for display
from core.registry import HEADLINE_COLUMNS, Registry, correct_key, reward_key  # noqa: F401 - re-exported

# The runs table's reward / correct-rate columns use core.registry's choice, as `krl runs ls` does.
# kl_sample_train: the first sign that sampler and trainer disagree (tinker-cookbook's name), so it opens by default.
DEFAULT_CURVE_PATTERNS = (r"correct_rate$|rate/correct", r"compile", r"kl_sample_train_v1$",
                          r"format_rate|rate/format", r"hack", r"speedup/mean|speedup", r"time/eval_mean|eval.*time",
                          r"solved_rate", r"turn\W?\d+/correct")


def default_curve_keys(keys: Sequence[str], limit: int = 7) -> list[str]:
    """The curves a run opens with: reward, then rates, sampler/trainer KL, speedup, eval time (whatever exists)."""
    first = reward_key(keys)
    chosen: list[str] = [first] if first else []
    for pattern in DEFAULT_CURVE_PATTERNS:
        regex = re.compile(pattern)
        for key in sorted(keys, key=len):
            if regex.search(key) and key not in chosen:
                chosen.append(key)
                break
    return chosen[:limit] or list(keys[:limit])


@dataclass
class RunRow:
    """One line of the runs table."""

    id: int
    name: str
    status: str
    kind: str
    model: str
    backend: str
    preset: str
    step: Optional[int]
    total_steps: Optional[int]
    reward: Optional[float]
    correct: Optional[float]
    reward_key: Optional[str]
    correct_key: Optional[str]
    best_speedup: Optional[float]
    created_at: float
    started_at: Optional[float]
    ended_at: Optional[float]
    heartbeat_at: Optional[float]
    gpus: list[int]
    gpus_requested: int
    tags: list[str]
    error: str = ""
    done: Optional[int] = None  # steps (training) or finished samples (evaluation): core.progress.steps_done


def run_row(run: dict[str, Any]) -> RunRow:
    """A runs-table line from a run row: its headline columns (core.registry.HEADLINE_COLUMNS), which the registry
    keeps equal to what reward_key/correct_key pick from the summary."""
    return RunRow(
        id=run["id"], name=run["name"], status=run["status"], kind=run.get("kind") or "",
        model=run.get("model") or "", backend=run.get("backend") or "", preset=run.get("preset") or "",
        step=run.get("last_step"), total_steps=run.get("total_steps"),
        reward=run.get("reward_value"), correct=run.get("correct_value"),
        reward_key=run.get("reward_key"), correct_key=run.get("correct_key"), best_speedup=run.get("best_speedup"),
        created_at=run.get("created_at") or 0.0, started_at=run.get("started_at"), ended_at=run.get("ended_at"),
        heartbeat_at=run.get("heartbeat_at"), gpus=list(run.get("gpus") or []),
        gpus_requested=run.get("gpus_requested") or 0, tags=list(run.get("tags") or []), error=run.get("error") or "",
        done=steps_done(run))


def _with_progress(reg: Registry, run: dict[str, Any]) -> dict[str, Any]:
    """An evaluation's progress lives in its summary, which the light run columns leave out: read it for those."""
    if run.get("kind") == "eval" and "summary" not in run:
        found = reg.find_run(run["id"])
        run = {**run, "summary": (found or {}).get("summary") or {}}
    return run


# What a run row shows: reading only these keeps listing thousands of runs fast (no config, command, segments …).
RUN_ROW_COLUMNS = ("name", "status", "kind", "model", "backend", "preset", "last_step", "total_steps", *HEADLINE_COLUMNS,
                   "created_at", "started_at", "ended_at", "heartbeat_at", "gpus", "gpus_requested", "tags", "error")


def load_runs(reg: Registry) -> list[RunRow]:
    return [run_row(_with_progress(reg, run)) for run in reg.list_runs(columns=RUN_ROW_COLUMNS)]


def refresh_active(reg: Registry, rows: Sequence[RunRow]) -> list[RunRow]:
    """`rows` with every active run re-read: runs that are active now, and runs that were active before
    (their status changed, or they were deleted). Newly created runs are active (queued), so they appear."""
    active = {run["id"]: run_row(_with_progress(reg, run))
              for run in reg.list_runs(status=("queued", "running", "stopping"), columns=RUN_ROW_COLUMNS)}
    out = []
    for row in rows:
        if row.id in active:
            out.append(active.pop(row.id))
        elif row.status in ("queued", "running", "stopping"):
            run = reg.find_run(row.id)
            if run is not None:
                out.append(run_row(run))
        else:
            out.append(row)
    # New runs are the newest: they go first, as list_runs orders by id descending.
    return sorted(active.values(), key=lambda r: -r.id) + out


def load_sparklines(reg: Registry, rows: Sequence[RunRow], points: int = 16) -> dict[int, tuple[list[float], list[float]]]:
    """Recent reward and correct-rate values per run, downsampled in SQLite to a few points."""
    out = {}
    for row in rows:
        reward = reg.metric_series(row.id, row.reward_key, max_points=points)["value"] if row.reward_key else []
        correct = reg.metric_series(row.id, row.correct_key, max_points=points)["value"] if row.correct_key else []
        out[row.id] = ([v for v in reward if v is not None], [v for v in correct if v is not None])
    return out


@dataclass
class Series:
    key: str
    steps: list[int]
    values: list[float]
    wall_times: list[float]


def load_series(reg: Registry, run_id: int, keys: Sequence[str], max_points: int) -> dict[str, Series]:
    out = {}
    for key in keys:
        data = reg.metric_series(run_id, key, max_points=max_points)
        pairs = [(s, v, w) for s, v, w in zip(data["step"], data["value"], data["wall_time"]) if v is not None]
        out[key] = Series(key, [p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs])
    return out


@dataclass
class TrajectoryFilter:
    problem_id: Optional[str] = None
    outcome: Optional[str] = None  # solved | unsolved | hack | "turn:<k>"
    step_min: Optional[int] = None
    step_max: Optional[int] = None
    order: str = "return"


TRAJECTORY_PAGE = 500


def load_trajectories(reg: Registry, run_id: int, flt: TrajectoryFilter, offset: int = 0,
                      limit: int = TRAJECTORY_PAGE) -> tuple[list[dict[str, Any]], int]:
    """One page of the run's trajectories under the filter, and how many match in all."""
    outcome, solved_at = flt.outcome, None
    if outcome and outcome.startswith("turn:"):
        outcome, solved_at = "solved", int(outcome.split(":", 1)[1])
    where = dict(problem_id=flt.problem_id, outcome=outcome, solved_at_turn=solved_at, step_min=flt.step_min,
                 step_max=flt.step_max)
    rows = reg.trajectories(run_id, **where, order=flt.order, limit=limit, offset=offset)
    # A short page is the last one: counting is only needed when more may follow.
    total = offset + len(rows) if len(rows) < limit else reg.count_trajectories(run_id, **where)
    return rows, total


@dataclass
class TrajectoryDetail:
    trajectory: dict[str, Any]
    turns: list[dict[str, Any]]
    run_name: str
    backend: str
    kernel_language: str  # cuda | triton | torch: the run's kernel.backend


def load_trajectory(reg: Registry, trajectory_id: int) -> TrajectoryDetail:
    trajectory = reg.trajectory(trajectory_id)
    run = reg.get_run(int(trajectory["run_id"]))
    language = ((run.get("config") or {}).get("kernel") or {}).get("backend") or "cuda"
    return TrajectoryDetail(trajectory, reg.trajectory_turns(trajectory_id), run["name"], run.get("backend") or "",
                            language)


def config_overrides(run: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys where the run's config differs from its preset (empty when that cannot be known)."""
    config, preset = run.get("config") or {}, run.get("preset")
    try:
        from core import config as core_config
    except ImportError:
        return {}
    try:
        if hasattr(core_config, "overrides_of"):
            result = core_config.overrides_of(config) if preset is None else _call_overrides(core_config, config, preset)
            return dict(result) if result else {}
        if preset:
            base = core_config.load_config(preset).model_dump(mode="json")
            return {k: v[1] for k, v in core_config.config_diff(base, config).items()}
    except Exception:  # an unreadable preset must not break the config tab
        return {}
    return {}


def _call_overrides(core_config: Any, config: dict[str, Any], preset: str) -> Any:
    try:
        return core_config.overrides_of(config, preset)
    except TypeError:
        return core_config.overrides_of(config)


def compare_configs(configs: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """Dotted key -> values per run, only for keys whose values differ between the runs."""
    flat = [flatten(c or {}) for c in configs]
    keys = sorted(set().union(*flat)) if flat else []
    return {k: [f.get(k) for f in flat] for k in keys if len({repr(f.get(k)) for f in flat}) > 1}
