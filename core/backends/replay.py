"""The `replay` backend: sampling only, answers with recorded responses from a JSONL file (per problem, sample, turn).
Used to re-score old generations through the real evaluator and reward, and for the CPU demo."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from core.backends.base import (STOP_EOS, STOP_LENGTH, Prompt, SampleContext, SampledSequence, SamplingOnlyBackend,
                                SamplingParams)
from core.errors import KrlError

PACKAGED_DEMO = "core/data/demo/recordings.jsonl"


def resolve_recordings_path(path: str | None) -> Path:
    """A file path, or the packaged demo recordings for None / '' / 'demo' / the package-relative name."""
    if not path or path in ("demo", PACKAGED_DEMO):
        return Path(str(resources.files("core") / "data" / "demo" / "recordings.jsonl"))
    return Path(path).expanduser()


def load_recordings(path: Path) -> dict[str, dict[int, dict[int, tuple[str, bool]]]]:
    """{problem_id: {sample: {turn: (response, truncated)}}}; KrlError with the line number on a bad line.
    Optional keys: "truncated" (the recorded generation hit its token limit), "recorded" (a label, ignored)."""
    if not path.is_file():
        raise KrlError(f"replay recordings {path} do not exist. Set replay.path to a JSONL file of "
                       '{"problem_id", "sample", "turn", "response"} objects.')
    recordings: dict[str, dict[int, dict[int, tuple[str, bool]]]] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problem_id, response = row["problem_id"], row["response"]
            sample, turn = int(row["sample"]), int(row["turn"])
        except (ValueError, KeyError, TypeError) as exc:
            raise KrlError(f"{path}:{number}: not a recording ({exc}). Each line must be a JSON object with "
                           "problem_id, sample, turn and response.") from None
        entry = (str(response), bool(row.get("truncated", False)))
        recordings.setdefault(problem_id, {}).setdefault(sample, {})[turn] = entry
    if not recordings:
        raise KrlError(f"replay recordings {path} are empty.")
    return recordings


class ReplayBackend(SamplingOnlyBackend):
    name = "replay"
    can_train = False

    def __init__(self, path: str | None = None) -> None:
        self.path = resolve_recordings_path(path)
        self.recordings = load_recordings(self.path)

    def problem_ids(self) -> list[str]:
        return sorted(self.recordings)

    def response(self, problem_id: str, sample: int, turn: int) -> tuple[str, bool]:
        """(text, truncated) recorded for the problem, sample (modulo the samples recorded) and turn."""
        samples = self.recordings.get(problem_id)
        if not samples:
            raise KrlError(f"replay recordings {self.path} have nothing for problem '{problem_id}'. Recorded: "
                           f"{', '.join(self.problem_ids()[:8])}{' …' if len(self.recordings) > 8 else ''}.")
        keys = sorted(samples)
        turns = samples[keys[sample % len(keys)]]
        # A recording shorter than the episode repeats its last turn (the model "insists").
        if turn in turns:
            return turns[turn]
        earlier = [t for t in turns if t <= turn]
        return turns[max(earlier)] if earlier else turns[min(turns)]

    def sample(self, prompt: Prompt, n: int, params: SamplingParams,
               context: SampleContext | None = None) -> list[SampledSequence]:
        if context is None or not context.problem_id:
            raise ValueError("the replay backend needs a SampleContext naming the problem, turn and samples")
        samples = context.samples or list(range(n))
        if len(samples) != n:
            raise ValueError(f"asked for {n} samples but the context names {len(samples)}")
        out = []
        for s in samples:
            text, truncated = self.response(context.problem_id, s, context.turn)
            out.append(SampledSequence(text=text, stop_reason=STOP_LENGTH if truncated else STOP_EOS))
        return out
