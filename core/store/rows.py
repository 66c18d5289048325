"""What the registry stores and reads back as Python: the trajectory and turn records a step writes, the JSON-valued
columns and how they are decoded, and a run's headline metrics (the reward and correct-rate a runs list shows)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

# JSON-valued columns of `runs`, decoded on read.
RUN_JSON_COLUMNS = ("config", "gpus", "tags", "segments", "summary", "command")
TURN_JSON_COLUMNS = ("eval_result", "reward_breakdown", "retrieved")
REPEATED_JSON_COLUMNS = ("gpus", "tags")  # lists of scalars, the same few texts across many runs
# A run's headline metrics as plain columns of `runs` (migration headline_columns), written with each step.
HEADLINE_COLUMNS = ("reward_key", "reward_value", "correct_key", "correct_value", "best_speedup")


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


def headline_values(summary: dict[str, Any]) -> tuple[Optional[str], Optional[float], Optional[str], Optional[float],
                                                 Optional[float]]:
    """HEADLINE_COLUMNS' values from a run's summary."""
    last = summary.get("last") or {}
    rkey, ckey = reward_key(list(last)), correct_key(list(last))
    return rkey, last.get(rkey) if rkey else None, ckey, last.get(ckey) if ckey else None, summary.get("best_speedup")


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


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def loads_json(value: str) -> Any:
    # Most JSON columns hold an empty list or object; skipping the parser for those halves listing time.
    if value == "[]":
        return []
    if value == "{}":
        return {}
    return json.loads(value)


def decode_json_columns(row: dict[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    for column in columns:
        value = row.get(column)
        if isinstance(value, str) and value[:1] in "{[":
            row[column] = loads_json(value)
    return row


def series_columns(rows: Sequence[tuple]) -> dict[str, list[Any]]:
    return {"step": [r[0] for r in rows], "value": [r[1] for r in rows], "wall_time": [r[2] for r in rows]}
