"""Index building: filter → dedup → embed → decontaminate → add, for a new index or an existing one (incremental).
Returns a report of what was kept and dropped at each stage, for `krl rag build` to print."""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any, Optional, Sequence

from rag import RagError
from rag.corpus import Record, embedding_text
from rag.decontaminate import DEFAULT_SIMILARITY_THRESHOLD, ProblemRef, decontaminate
from rag.embed import Embedder
from rag.filters import FilterOptions, dedup, filter_records
from rag.index import DEFAULT_HNSW_THRESHOLD, KernelIndex, already_exists_error


def build_index(records: Sequence[Record], out_dir: str | os.PathLike, *, model: Optional[str] = None,
                device: Optional[str] = None, problems: Sequence[ProblemRef] = (),
                filters: Optional[FilterOptions] = None, append: bool = False, replace: bool = False,
                similarity_threshold: Optional[float] = DEFAULT_SIMILARITY_THRESHOLD, match_names: bool = True,
                hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD, progress: bool = False,
                embedder: Optional[Embedder] = None, batch_size: int = 64) -> dict[str, Any]:
    """Add `records` to the index at out_dir (created unless append and it exists). Errors before any write
    when the existing index uses another model or exists without append/replace."""
    started = time.perf_counter()
    report: dict[str, Any] = {"index": str(out_dir), "input_records": len(records),
                              "by_source": dict(Counter(r.source for r in records))}
    existing = KernelIndex.open(out_dir) if append and KernelIndex.exists(out_dir) else None
    if existing is not None:
        existing.check_model(model)
        model = existing.model_name
    elif KernelIndex.exists(out_dir) and not replace:
        raise already_exists_error(out_dir)  # before the expensive steps

    kept, dropped = filter_records(records, filters or FilterOptions())
    report["filtered_out"] = dict(dropped)
    kept, duplicates = dedup(kept, existing.pair_hashes() if existing is not None else ())
    report["duplicates"] = duplicates

    embedder = embedder or Embedder(model, device=device, batch_size=batch_size)
    if existing is not None:
        existing.check_model(embedder.model_name, embedder.dimension)
    embed_started = time.perf_counter()
    vectors = embedder.encode([embedding_text(r.pytorch_code, r.name) for r in kept], progress=progress)
    report["embed_seconds"] = round(time.perf_counter() - embed_started, 3)

    keep, decontamination = decontaminate(kept, problems, record_vectors=vectors, embedder=embedder,
                                          similarity_threshold=similarity_threshold, match_names=match_names)
    report["decontamination"] = decontamination.to_dict()
    kept, vectors = [kept[i] for i in keep], vectors[keep]

    if replace and not kept and KernelIndex.exists(out_dir):
        # Every record was filtered, deduplicated or decontaminated away: an empty index would replace a useful one.
        raise RagError(f"--replace would leave an empty index: all {len(records)} records were dropped (filters "
                       f"{report['filtered_out'] or 'none'}, decontamination {decontamination.total_dropped}); "
                       f"the index at {out_dir} is kept.")
    index = existing or KernelIndex.create(out_dir, embedder.model_name, embedder.dimension,
                                           hnsw_threshold=hnsw_threshold, overwrite=replace)
    try:
        report["added"] = index.add(kept, vectors)
        report["stats"] = index.stats()
    finally:
        index.close()
    report["model"] = embedder.model_name
    report["appended"] = existing is not None
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report
