"""Top-k retrieval of solved examples for a problem: never the problem itself, optional MMR diversity,
one example per PyTorch program, and the chosen set fitted to a token budget counted by a real tokenizer."""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable, Optional

import numpy as np

from rag import RagError
from rag.corpus import code_hash, embedding_text, name_from_problem_id
from rag.embed import Embedder
from rag.index import KernelIndex
from rag.prompt import DEFAULT_HEADER, format_example, format_examples

TokenCounter = Callable[[str], int]

# A record this close to the problem is the problem (reformatted); KernelBench-style reference code is otherwise
# rarely above ~0.97 against a different program.
DEFAULT_SELF_SIMILARITY = 0.995


class IndexRetriever:
    """`IndexRetriever(index_dir).examples(problem_source, problem_id, backend, k, token_budget=None)`.

    Each example is a dict: id, name, backend, pytorch_code, kernel_code, speedup, score, language (plus source,
    origin, tags, tokens). `count_tokens` (text -> int) should be the policy model's tokenizer when a budget is
    used; without one the embedding model's tokenizer counts. `mmr_lambda` in (0, 1] turns on diversity
    (1 = pure relevance). backend None means any backend."""

    def __init__(self, index_dir: str | os.PathLike, model: Optional[str] = None, device: Optional[str] = None,
                 count_tokens: Optional[TokenCounter] = None, mmr_lambda: Optional[float] = None,
                 self_similarity: float = DEFAULT_SELF_SIMILARITY, distinct_programs: bool = True,
                 header: str = DEFAULT_HEADER, embedder: Optional[Embedder] = None):
        self.index = KernelIndex.open(index_dir)
        self.index.check_model(model)
        if embedder is not None:
            self.index.check_model(embedder.model_name, embedder.dimension)
        self._embedder = embedder
        self._device = device
        self._count_tokens = count_tokens
        self.mmr_lambda = mmr_lambda
        self.self_similarity = self_similarity
        self.distinct_programs = distinct_programs
        self.header = header
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        # Loaded on first use: constructing a retriever (e.g. while validating a config) stays cheap.
        with self._lock:
            if self._embedder is None:
                embedder = Embedder(self.index.model_name, device=self._device)
                self.index.check_model(embedder.model_name, embedder.dimension)
                self._embedder = embedder
            return self._embedder

    def count_tokens(self, text: str) -> int:
        return (self._count_tokens or self.embedder.count_tokens)(text)

    def close(self) -> None:
        self.index.close()

    def examples(self, problem_source: str, problem_id: str, backend: Optional[str], k: int,
                 token_budget: Optional[int] = None,
                 *, mmr_lambda: Optional[float] = None, count_tokens: Optional[TokenCounter] = None) -> list[dict]:
        if k <= 0:
            return []
        candidates = self.candidates(problem_source, problem_id, backend, n=max(4 * k, k + 20))
        lam = self.mmr_lambda if mmr_lambda is None else mmr_lambda
        if lam is not None and 0 < lam < 1 and len(candidates) > 1:
            candidates = self._mmr(candidates, lam)
        if token_budget is not None:
            candidates = self.fit_to_budget(candidates, k, token_budget, count_tokens or self.count_tokens)
        return [public(c) for c in candidates[:k]]

    def candidates(self, problem_source: str, problem_id: str, backend: Optional[str], n: int) -> list[dict]:
        """Ranked examples with the problem itself (and duplicates of one program) removed."""
        text, problem_hash = _problem_features(problem_source, problem_id)
        query = self.embedder.encode([text])[0]
        hits = self.index.search(query, n, backend=backend)
        records = self.index.records(row for row, _ in hits)
        chosen, programs = [], set()
        for row, score in hits:
            record = records.get(row)
            if record is None:
                continue
            if (problem_id and record["problem_id"] == problem_id) or record["pytorch_hash"] == problem_hash \
                    or score >= self.self_similarity:
                continue
            if self.distinct_programs:
                if record["pytorch_hash"] in programs:
                    continue
                programs.add(record["pytorch_hash"])
            chosen.append(_example(record, score))
        return chosen

    def _mmr(self, candidates: list[dict], lam: float) -> list[dict]:
        """Maximal marginal relevance: trade similarity to the problem against similarity to what was picked."""
        vectors = self.index.vectors([c["_row"] for c in candidates])
        relevance = np.array([c["score"] for c in candidates])
        picked: list[int] = [0]
        left = list(range(1, len(candidates)))
        while left:
            redundancy = (vectors[left] @ vectors[picked].T).max(axis=1)
            best = int(np.argmax(lam * relevance[left] - (1 - lam) * redundancy))
            picked.append(left.pop(best))
        return [candidates[i] for i in picked]

    def fit_to_budget(self, candidates: list[dict], k: int, token_budget: int, count: TokenCounter) -> list[dict]:
        """Up to k whole examples, in rank order, whose formatted block fits `token_budget` tokens; an example
        too long for what is left is skipped, never cut."""
        header_tokens = count(self.header + "\n\n")
        if header_tokens >= token_budget:
            return []
        used, chosen = header_tokens, []
        for candidate in candidates:
            tokens = count(format_example(candidate, len(chosen) + 1) + "\n")
            if used + tokens > token_budget:
                continue
            candidate["tokens"] = tokens
            chosen.append(candidate)
            used += tokens
            if len(chosen) == k:
                break
        # Token counts of pieces need not add up exactly for every tokenizer: check the real block.
        while chosen and count(format_examples(chosen, self.header)) > token_budget:
            chosen.pop()
        return chosen

    def format(self, examples: list[dict]) -> str:
        return format_examples(examples, self.header)


@functools.lru_cache(maxsize=4096)
def _problem_features(problem_source: str, problem_id: str) -> tuple[str, Optional[str]]:
    """(embedding text, normalised code hash) of a problem; parsing costs more than a search, and training asks
    about the same problems every step."""
    text = embedding_text(problem_source, name_from_problem_id(problem_id))
    return text, code_hash(problem_source, "python") if problem_source.strip() else None


def _example(record: dict[str, Any], score: float) -> dict[str, Any]:
    return {"id": record["id"], "name": record["name"], "backend": record["backend"],
            "pytorch_code": record["pytorch_code"], "kernel_code": record["kernel_code"], "speedup": record["speedup"],
            "score": round(float(score), 6), "language": record["language"], "source": record["source"],
            "origin": record["origin"], "tags": record["tags"], "_row": record["row"]}


def public(example: dict[str, Any]) -> dict[str, Any]:
    """The example without private fields (for JSON output and the registry)."""
    return {k: v for k, v in example.items() if not k.startswith("_")}


__all__ = ["IndexRetriever", "RagError", "public"]
