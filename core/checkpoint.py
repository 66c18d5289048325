"""Training checkpoints on disk: the trainer's own state (step, data order, RNG) beside the backend's weights,
and the run folder's checkpoints.jsonl (tinker-cookbook's format: name, batch, state_path, sampler_path)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
import time
from pathlib import Path
from typing import Any, Optional

from core.errors import KrlError

TRAINER_STATE_FILE = "trainer.json"
CHECKPOINTS_JSONL = "checkpoints.jsonl"


def checkpoint_name(step: int) -> str:
    # Step -1 is the state before any step (a run stopped before finishing its first step).
    return f"step-{step:06d}" if step >= 0 else "initial"


def checkpoint_dir(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / "checkpoints" / name


def capture_rng() -> str:
    """Python, numpy and torch global RNG states, pickled and base64'd (the loop seeds its own draws, so this only
    matters for code that uses the global generators)."""
    import numpy as np
    import torch

    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    return base64.b64encode(pickle.dumps(states)).decode()


def restore_rng(blob: str | None) -> None:
    if not blob:
        return
    import numpy as np
    import torch

    states = pickle.loads(base64.b64decode(blob))
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


def save_trainer_state(folder: Path, state: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TRAINER_STATE_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)  # never a half-written state under the real name
    return path


def load_trainer_state(folder: Path) -> dict[str, Any]:
    path = Path(folder) / TRAINER_STATE_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise KrlError(f"checkpoint state {path} is missing; the run folder was moved or cleaned. "
                       "Start a new run, or fork from another checkpoint.") from None
    except json.JSONDecodeError as exc:
        raise KrlError(f"checkpoint state {path} is corrupt ({exc}). Resume from an earlier checkpoint by "
                       "forking: `krl runs fork NAME --name NEW`.") from None


def checkpoint_expiry(run_dir: Path, name: str) -> Optional[float]:
    """When checkpoint `name` expires on the service (epoch seconds), from its newest line in checkpoints.jsonl (a
    stop that keeps it writes a later line without a TTL); None when it never expires or nothing says so."""
    path = Path(run_dir) / CHECKPOINTS_JSONL
    expiry: Optional[float] = None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("name") == name:
            ttl, made = record.get("ttl_s"), record.get("time")
            expiry = float(made) + float(ttl) if isinstance(ttl, (int, float)) and isinstance(made, (int, float)) \
                else None
    return expiry


def append_checkpoint_record(run_dir: Path, record: dict[str, Any]) -> None:
    line = dict(record)
    line.setdefault("time", time.time())
    with open(Path(run_dir) / CHECKPOINTS_JSONL, "a") as handle:
        handle.write(json.dumps(line) + "\n")
