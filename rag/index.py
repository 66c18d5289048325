"""The on-disk kernel index: FAISS vectors (exact inner product, HNSW above a size threshold) plus SQLite metadata.
It records the embedding model, dimension and normalisation, refuses other models, and grows by incremental adds."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from rag import RagError
from rag.corpus import Record
from rag.embed import canonical_model_name

FORMAT_VERSION = 1
VECTORS_FILE = "index.faiss"
META_FILE = "meta.sqlite"
# Exact search reads every vector (100k × 384 float32 = 154 MB per query: ~15-20 ms of memory bandwidth on one
# core), so above 50k records the index turns into HNSW (< 1 ms). KernelBook + Sakana's correct kernels stay exact.
DEFAULT_HNSW_THRESHOLD = 50_000
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 128

_SCHEMA = """
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    row INTEGER PRIMARY KEY,          -- the vector's position in the FAISS index
    id TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL,
    backend TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '[]',
    pytorch_code TEXT NOT NULL,
    kernel_code TEXT NOT NULL,
    speedup REAL,
    origin TEXT NOT NULL DEFAULT '',
    problem_id TEXT NOT NULL DEFAULT '',
    pytorch_hash TEXT NOT NULL,
    pair_hash TEXT NOT NULL,
    language TEXT NOT NULL,
    added_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS records_backend ON records(backend);
CREATE INDEX IF NOT EXISTS records_pair_hash ON records(pair_hash);
"""

RECORD_COLUMNS = ("row", "id", "source", "backend", "name", "tags", "pytorch_code", "kernel_code", "speedup",
                  "origin", "problem_id", "pytorch_hash", "pair_hash", "language")


def already_exists_error(directory: str | os.PathLike) -> RagError:
    return RagError(f"an index already exists at {directory}. Add to it (--append), replace it (--replace), "
                    "or choose another --out.")


def _faiss():
    try:
        import faiss
    except ImportError:
        raise RagError("the RAG index needs faiss: `pip install 'kernelrl[rag]'` (faiss-cpu).") from None
    return faiss


class KernelIndex:
    """A directory holding index.faiss + meta.sqlite. Open with `KernelIndex.open(dir)` or `KernelIndex.create(...)`."""

    def __init__(self, directory: Path, vectors: Any, conn: sqlite3.Connection):
        self.directory = directory
        self._vectors = vectors
        self._conn = conn
        self._lock = threading.RLock()
        self._selectors: dict[str, Any] = {}
        self.info = self._read_info()

    # ------------------------------------------------------------ lifecycle

    @staticmethod
    def exists(directory: str | os.PathLike) -> bool:
        return (Path(directory) / META_FILE).is_file()

    @classmethod
    def create(cls, directory: str | os.PathLike, model_name: str, dimension: int, normalized: bool = True,
               hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD, overwrite: bool = False) -> "KernelIndex":
        directory = Path(directory).expanduser()
        if cls.exists(directory):
            if not overwrite:
                raise already_exists_error(directory)
            for name in (VECTORS_FILE, META_FILE, META_FILE + "-wal", META_FILE + "-shm"):
                (directory / name).unlink(missing_ok=True)
        directory.mkdir(parents=True, exist_ok=True)
        faiss = _faiss()
        conn = cls._connect(directory, create=True)
        now = time.time()
        info = {"format_version": FORMAT_VERSION, "model": canonical_model_name(model_name), "dimension": int(dimension),
                "normalized": bool(normalized), "metric": "inner_product", "index_type": "flat",
                "hnsw_threshold": int(hnsw_threshold), "created_at": now, "updated_at": now}
        with conn:
            conn.executemany("INSERT OR REPLACE INTO info (key, value) VALUES (?, ?)",
                             [(k, json.dumps(v)) for k, v in info.items()])
        index = cls(directory, faiss.IndexFlatIP(int(dimension)), conn)
        index._save_vectors()
        return index

    @classmethod
    def open(cls, directory: str | os.PathLike) -> "KernelIndex":
        directory = Path(directory).expanduser()
        if not cls.exists(directory) or not (directory / VECTORS_FILE).is_file():
            raise RagError(f"no RAG index at {directory}. Build one with `krl rag build --source PATH --out {directory}` "
                           "(or pass --index to point at another).")
        faiss = _faiss()
        conn = cls._connect(directory)
        try:
            vectors = faiss.read_index(str(directory / VECTORS_FILE))
        except RuntimeError as exc:
            raise RagError(f"{directory / VECTORS_FILE} is not a readable FAISS index ({exc}). Rebuild the index.") from None
        index = cls(directory, vectors, conn)
        version = index.info.get("format_version")
        if version != FORMAT_VERSION:
            raise RagError(f"the index at {directory} has format v{version}; this kernelrl reads v{FORMAT_VERSION}. "
                           "Rebuild it with `krl rag build`.")
        if vectors.d != index.dimension:
            raise RagError(f"the index at {directory} is inconsistent (vectors of dimension {vectors.d}, metadata says "
                           f"{index.dimension}). Rebuild it.")
        return index

    @staticmethod
    def _connect(directory: Path, create: bool = False) -> sqlite3.Connection:
        # Rollback journal, not WAL, and no schema writes on open: readers then need no write access
        # (an index may sit in a read-only place).
        conn = sqlite3.connect(str(directory / META_FILE), check_same_thread=False, timeout=30)
        try:
            if create:
                conn.executescript(_SCHEMA)
            conn.execute("SELECT key, value FROM info LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise RagError(f"{directory / META_FILE} is not a RAG index database ({exc}). Rebuild the index.") from None
        return conn

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "KernelIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ metadata

    def _read_info(self) -> dict[str, Any]:
        return {key: json.loads(value) for key, value in self._conn.execute("SELECT key, value FROM info")}

    @property
    def model_name(self) -> str:
        return self.info["model"]

    @property
    def dimension(self) -> int:
        return int(self.info["dimension"])

    @property
    def index_type(self) -> str:
        return self.info.get("index_type", "flat")

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    def check_model(self, model_name: Optional[str], dimension: Optional[int] = None) -> None:
        """RagError unless `model_name` is the model this index was built with (vectors from others are meaningless)."""
        if model_name is not None and canonical_model_name(model_name) != self.model_name:
            raise RagError(f"the index at {self.directory} was built with embedding model '{self.model_name}' "
                           f"(dimension {self.dimension}); it cannot be used with '{canonical_model_name(model_name)}'. "
                           f"Query it with --model {self.model_name} (or no --model), or rebuild it with the new "
                           "model: `krl rag build --model NAME --replace`.")
        if dimension is not None and int(dimension) != self.dimension:
            raise RagError(f"the index at {self.directory} holds {self.dimension}-dimensional vectors but the model gives "
                           f"{dimension}. Rebuild the index with this model.")

    def pair_hashes(self) -> set[str]:
        return {row[0] for row in self._conn.execute("SELECT pair_hash FROM records")}

    def stats(self) -> dict[str, Any]:
        def grouped(column: str) -> dict[str, int]:
            return dict(self._conn.execute(f"SELECT {column}, COUNT(*) FROM records GROUP BY {column} ORDER BY 2 DESC"))

        tags: dict[str, int] = {}
        for (raw,) in self._conn.execute("SELECT tags FROM records"):
            for tag in json.loads(raw):
                tags[tag] = tags.get(tag, 0) + 1
        with_speedup = self._conn.execute(
            "SELECT COUNT(speedup), AVG(speedup), MAX(speedup) FROM records WHERE speedup IS NOT NULL").fetchone()
        size = sum((self.directory / name).stat().st_size for name in (VECTORS_FILE, META_FILE)
                   if (self.directory / name).exists())
        return {"path": str(self.directory), "records": len(self), "vectors": int(self._vectors.ntotal),
                "model": self.model_name, "dimension": self.dimension, "normalized": self.info.get("normalized"),
                "metric": self.info.get("metric"), "index_type": self.index_type,
                "hnsw_threshold": self.info.get("hnsw_threshold"), "by_backend": grouped("backend"),
                "by_source": grouped("source"), "by_tag": dict(sorted(tags.items(), key=lambda kv: -kv[1])),
                "with_speedup": with_speedup[0], "mean_speedup": with_speedup[1], "max_speedup": with_speedup[2],
                "created_at": self.info.get("created_at"), "updated_at": self.info.get("updated_at"),
                "size_bytes": size}

    # ------------------------------------------------------------ writes

    def add(self, records: Sequence[Record], vectors: np.ndarray) -> int:
        """Append records with their vectors (one row each). Vectors and rows land together or not at all."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if len(records) != len(vectors):
            raise ValueError(f"{len(records)} records but {len(vectors)} vectors")
        if not len(records):
            return 0
        self.check_model(None, vectors.shape[1])
        with self._lock:
            base = int(self._vectors.ntotal)
            taken = {row[0] for row in self._conn.execute("SELECT id FROM records")}
            now = time.time()
            rows = []
            for offset, record in enumerate(records):
                record_id, suffix = record.id, 1
                while record_id in taken:
                    suffix += 1
                    record_id = f"{record.id}#{suffix}"
                taken.add(record_id)
                rows.append((base + offset, record_id, record.source, record.backend, record.name,
                             json.dumps(record.tags), record.pytorch_code, record.kernel_code, record.speedup,
                             record.origin, record.problem_id, record.pytorch_hash, record.pair_hash, record.language,
                             now))
            self._vectors.add(vectors)
            self._maybe_switch_to_hnsw()
            self._selectors.clear()
            tmp = self.directory / (VECTORS_FILE + ".tmp")
            _faiss().write_index(self._vectors, str(tmp))
            # Rename inside the transaction: a crash leaves at worst vectors without rows, which search skips.
            with self._conn:
                self._conn.executemany(f"INSERT INTO records ({', '.join(RECORD_COLUMNS)}, added_at) "
                                       f"VALUES ({', '.join('?' * (len(RECORD_COLUMNS) + 1))})", rows)
                self._set_info(updated_at=now, index_type=self.index_type)
                os.replace(tmp, self.directory / VECTORS_FILE)
            return len(rows)

    def _set_info(self, **values: Any) -> None:
        self._conn.executemany("INSERT OR REPLACE INTO info (key, value) VALUES (?, ?)",
                               [(k, json.dumps(v)) for k, v in values.items()])
        self.info.update(values)

    def _maybe_switch_to_hnsw(self) -> None:
        if self.info.get("index_type") == "hnsw" or self._vectors.ntotal <= int(self.info["hnsw_threshold"]):
            return
        faiss = _faiss()
        stored = self._vectors.reconstruct_n(0, self._vectors.ntotal)
        hnsw = faiss.IndexHNSWFlat(self.dimension, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        hnsw.add(stored)
        self._vectors = hnsw
        self.info["index_type"] = "hnsw"

    def _save_vectors(self) -> None:
        tmp = self.directory / (VECTORS_FILE + ".tmp")
        _faiss().write_index(self._vectors, str(tmp))
        os.replace(tmp, self.directory / VECTORS_FILE)

    # ------------------------------------------------------------ reads

    def _selector(self, backend: Optional[str]):
        """An ID selector restricting search to one backend, or None when most rows match anyway."""
        if backend is None:
            return None
        if backend not in self._selectors:
            rows = np.array([r[0] for r in self._conn.execute("SELECT row FROM records WHERE backend = ?", (backend,))],
                            dtype=np.int64)
            self._selectors[backend] = (_faiss().IDSelectorBatch(rows), len(rows)) if len(rows) else (None, 0)
        return self._selectors[backend]

    def search(self, vector: np.ndarray, n: int, backend: Optional[str] = None) -> list[tuple[int, float]]:
        """Up to n (row, score) pairs, best first, restricted to `backend` when given."""
        faiss = _faiss()
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        with self._lock:
            total = int(self._vectors.ntotal)
            if total == 0:
                return []
            params = None
            if backend is not None:
                selector, matching = self._selector(backend)
                if selector is None:
                    return []
                n = min(n, matching)
                if self.index_type == "hnsw":
                    params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(HNSW_EF_SEARCH, n))
                else:
                    params = faiss.SearchParameters(sel=selector)
            elif self.index_type == "hnsw":
                params = faiss.SearchParametersHNSW(efSearch=max(HNSW_EF_SEARCH, n))
            scores, rows = self._vectors.search(query, min(n, total), params=params)
        return [(int(row), float(score)) for row, score in zip(rows[0], scores[0]) if row >= 0]

    def records(self, rows: Iterable[int]) -> dict[int, dict[str, Any]]:
        """Metadata rows by FAISS row (rows without metadata are simply absent)."""
        rows = [int(r) for r in rows]
        if not rows:
            return {}
        with self._lock:
            cursor = self._conn.execute(f"SELECT {', '.join(RECORD_COLUMNS)} FROM records WHERE row IN "
                                        f"({', '.join('?' * len(rows))})", rows)
            found = {}
            for values in cursor.fetchall():
                record = dict(zip(RECORD_COLUMNS, values))
                record["tags"] = json.loads(record["tags"])
                found[record["row"]] = record
        return found

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        with self._lock:
            return np.stack([self._vectors.reconstruct(int(r)) for r in rows]) if rows else \
                np.zeros((0, self.dimension), dtype=np.float32)
