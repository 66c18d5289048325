"""Decontamination: drop corpus records that are (or nearly are) a benchmark problem, so retrieval never leaks a
problem's solution into its own prompt. Three tests — same normalised code, same name, embedding similarity."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from rag.corpus import Record, code_hash, embedding_text, normalise_name

# MiniLM cosine between a KernelBench reference and the same program lightly edited (renamed, re-sized,
# comments changed) sits above ~0.93; different ops with the same boilerplate stay below.
DEFAULT_SIMILARITY_THRESHOLD = 0.93
# Names this short or generic would match half a corpus ("model", "net"): never used for name matching.
_GENERIC_NAMES = {"model", "modelnew", "net", "module", "network", "test", "kernel", ""}


@dataclass(frozen=True)
class ProblemRef:
    """What decontamination needs to know about a problem; the caller builds these from its problem set."""

    id: str
    name: str
    source: str


@dataclass
class DecontaminationReport:
    problems: int = 0
    checked: int = 0
    dropped: Counter = field(default_factory=Counter)  # reason -> count
    examples: list[dict] = field(default_factory=list)  # a few (record, problem, reason) for the report

    @property
    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def to_dict(self) -> dict:
        return {"problems": self.problems, "checked": self.checked, "dropped": dict(self.dropped),
                "total_dropped": self.total_dropped, "examples": self.examples}


def problem_vectors(problems: Sequence[ProblemRef], embedder) -> np.ndarray:
    return embedder.encode([embedding_text(p.source, p.name) for p in problems])


def decontaminate(records: Sequence[Record], problems: Sequence[ProblemRef], *,
                  record_vectors: Optional[np.ndarray] = None, embedder=None,
                  similarity_threshold: Optional[float] = DEFAULT_SIMILARITY_THRESHOLD,
                  match_names: bool = True, max_examples: int = 20) -> tuple[list[int], DecontaminationReport]:
    """Indices of the records to keep, and a report counting drops per reason (code_match, name_match, similarity).
    The similarity test runs when record vectors (or an embedder to compute them) are given and the threshold is set."""
    report = DecontaminationReport(problems=len(problems), checked=len(records))
    if not problems:
        return list(range(len(records))), report
    by_hash = {code_hash(p.source, "python"): p for p in problems}
    by_name = {normalise_name(p.name): p for p in problems if normalise_name(p.name) not in _GENERIC_NAMES}
    by_name.update({normalise_name(p.id): p for p in problems if normalise_name(p.id) not in _GENERIC_NAMES})

    use_similarity = similarity_threshold is not None and (record_vectors is not None or embedder is not None)
    nearest_score = nearest_problem = None
    if use_similarity:
        if record_vectors is None:
            record_vectors = embedder.encode([embedding_text(r.pytorch_code, r.name) for r in records])
        problem_matrix = problem_vectors(problems, embedder) if embedder is not None else None
        if problem_matrix is None:
            raise ValueError("similarity decontamination needs an embedder for the problems")
        if len(records):
            similarities = record_vectors @ problem_matrix.T
            nearest_problem = similarities.argmax(axis=1)
            nearest_score = similarities[np.arange(len(records)), nearest_problem]

    keep = []
    for index, record in enumerate(records):
        reason, problem = None, None
        problem = by_hash.get(record.pytorch_hash)
        if problem is not None:
            reason = "code_match"
        elif match_names and record.name and normalise_name(record.name) in by_name:
            reason, problem = "name_match", by_name[normalise_name(record.name)]
        elif use_similarity and nearest_score[index] >= similarity_threshold:
            reason, problem = "similarity", problems[int(nearest_problem[index])]
        if reason is None:
            keep.append(index)
            continue
        report.dropped[reason] += 1
        if len(report.examples) < max_examples:
            entry = {"record": record.id, "name": record.name, "problem": problem.id, "reason": reason}
            if reason == "similarity":
                entry["similarity"] = round(float(nearest_score[index]), 4)
            report.examples.append(entry)
    return keep, report
