"""Corpus loaders: KernelBook and the Sakana AI CUDA Engineer archive (hub or local copies), JSONL/JSON/parquet
files and folders of PyTorch → kernel pairs. Every row format is recognised by its columns and becomes a Record."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from rag import RagError
from rag.corpus import Record

HUB_DATASETS = {
    "kernelbook": "GPUMODE/KernelBook",
    "sakana": "SakanaAI/AI-CUDA-Engineer-Archive",
}
PAIR_FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
_PYTORCH_NAMES = ("pytorch.py", "reference.py", "model.py", "problem.py")
_KERNEL_NAMES = {"kernel.py": None, "kernel.cu": "cuda", "kernel.cpp": "cuda", "kernel.cuh": "cuda"}


# ---------------------------------------------------------------- row formats

def _float_or_none(value: Any) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def _bool_or_none(value: Any) -> Optional[bool]:
    if value is None:
        return None
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "1", "yes", "correct"):
            return True
        if lowered in ("false", "0", "no", ""):
            return False
        return None
    try:
        return bool(value)
    except (TypeError, ValueError):
        return None


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _pairs_row(row: dict[str, Any], source: str, index: int) -> Record:
    backend = str(row.get("backend") or "").lower()
    if not backend:
        raise RagError(f"{source}: row {index + 1} has no 'backend' field. Each pair needs backend "
                       "'triton' or 'cuda' (fields: pytorch_code, kernel_code, backend, optional name, speedup).")
    pytorch_code, kernel_code = str(row["pytorch_code"]), str(row["kernel_code"])
    return Record(
        id=str(row.get("id") or f"{source}/{_short_hash(pytorch_code, kernel_code)}"),
        source=source,
        backend=backend,
        pytorch_code=pytorch_code,
        kernel_code=kernel_code,
        name=str(row.get("name") or ""),
        tags=list(row.get("tags") or []),
        speedup=_float_or_none(row.get("speedup")),
        origin=str(row.get("origin") or source),
        # User pairs are taken as verified unless a row says otherwise.
        correct=_bool_or_none(row["correct"]) if "correct" in row else True,
        problem_id=str(row.get("problem_id") or ""),
    )


def _kernelbook_row(row: dict[str, Any], source: str, index: int) -> Record:
    # KernelBook's Triton side was produced by torch inductor from the PyTorch module, so pairs are correct by
    # construction; the dataset carries no speedups.
    uuid = row.get("uuid")
    name = str(row.get("entry_point") or row.get("module_name") or "")
    return Record(
        id=f"kernelbook/{uuid if uuid is not None else _short_hash(str(row['python_code']))}",
        source="kernelbook",
        backend="triton",
        pytorch_code=str(row["python_code"]),
        kernel_code=str(row["triton_code"]),
        name=name,
        origin=str(row.get("repo_link") or row.get("repo_name") or source),
        correct=True,
    )


def _sakana_row(row: dict[str, Any], source: str, index: int) -> Record:
    level, task, kernel_name = row.get("Level_ID"), row.get("Task_ID"), row.get("Kernel_Name")
    return Record(
        id=f"sakana/L{level}/T{task}/{kernel_name or _short_hash(str(row['CUDA_Code']))}",
        source="sakana",
        backend="cuda",
        pytorch_code=str(row["PyTorch_Code_Module"]),
        kernel_code=str(row["CUDA_Code"]),
        name=str(row.get("Op_Name") or ""),
        speedup=_float_or_none(row.get("CUDA_Speedup_Native")),
        # The archive's tasks are KernelBench's own problems: decontaminate before training on KernelBench.
        origin=f"sakana level {level} task {task}",
        correct=_bool_or_none(row.get("Correct")),
    )


ROW_FORMATS: list[tuple[str, tuple[str, ...], Callable[[dict[str, Any], str, int], Record]]] = [
    ("pairs", ("pytorch_code", "kernel_code"), _pairs_row),
    ("kernelbook", ("python_code", "triton_code"), _kernelbook_row),
    ("sakana", ("PyTorch_Code_Module", "CUDA_Code"), _sakana_row),
]


def detect_format(columns: Iterable[str]) -> Optional[str]:
    present = set(columns)
    for name, required, _ in ROW_FORMATS:
        if set(required) <= present:
            return name
    return None


def rows_to_records(rows: Iterable[dict[str, Any]], source: str, limit: Optional[int] = None) -> Iterator[Record]:
    """Records from dict rows of any known format (decided by the first row's columns)."""
    converter = None
    for index, row in enumerate(rows):
        if limit is not None and index >= limit:
            return
        if converter is None:
            fmt = detect_format(row.keys())
            if fmt is None:
                raise RagError(
                    f"{source}: rows have columns {', '.join(sorted(row.keys())[:12])}, which match no known format. "
                    "Use pairs (pytorch_code, kernel_code, backend[, name, speedup]), KernelBook (python_code, "
                    "triton_code) or the Sakana archive (PyTorch_Code_Module, CUDA_Code).")
            converter = next(conv for name, _, conv in ROW_FORMATS if name == fmt)
        yield converter(row, source, index)


# ---------------------------------------------------------------- files

def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RagError(f"{path}:{line_number}: not valid JSON ({exc.msg}). Fix the line or remove it.") from None
            if not isinstance(row, dict):
                raise RagError(f"{path}:{line_number}: expected a JSON object per line, got {type(row).__name__}.")
            yield row


def _read_json(path: Path) -> Iterator[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # Many "*.json" dataset dumps are JSON lines.
        yield from _read_jsonl(path)
        return
    if isinstance(data, dict):
        data = data.get("data") or data.get("rows") or data.get("train") or [data]
    if not isinstance(data, list):
        raise RagError(f"{path}: expected a JSON array of objects (or JSON lines).")
    for row in data:
        if isinstance(row, dict):
            yield row.get("row", row) if isinstance(row.get("row"), dict) else row


def _read_parquet(path: Path) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise RagError(f"reading {path} needs pyarrow, which is not installed: `pip install pyarrow`, "
                       "or convert the file to JSONL first.") from None
    parquet = pq.ParquetFile(str(path))
    for batch in parquet.iter_batches(batch_size=1024):
        yield from batch.to_pylist()


def _read_pair_folder(folder: Path) -> Optional[dict[str, Any]]:
    """A folder with pytorch.py (or reference.py/model.py) and kernel.py/.cu (+ optional meta.json)."""
    pytorch = next((folder / n for n in _PYTORCH_NAMES if (folder / n).is_file()), None)
    kernel = next(((folder / n, backend) for n, backend in _KERNEL_NAMES.items() if (folder / n).is_file()), None)
    if pytorch is None or kernel is None:
        return None
    meta: dict[str, Any] = {}
    if (folder / "meta.json").is_file():
        try:
            meta = json.loads((folder / "meta.json").read_text())
        except json.JSONDecodeError as exc:
            raise RagError(f"{folder / 'meta.json'}: not valid JSON ({exc.msg}).") from None
    backend = meta.get("backend") or kernel[1] or "triton"
    return {"pytorch_code": pytorch.read_text(), "kernel_code": kernel[0].read_text(), "backend": backend,
            "name": meta.get("name") or folder.name, "speedup": meta.get("speedup"),
            "correct": meta.get("correct", True), "id": meta.get("id") or f"{folder.parent.name}/{folder.name}",
            "origin": str(folder)}


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix == ".json":
        return _read_json(path)
    if suffix == ".parquet":
        return _read_parquet(path)
    raise RagError(f"{path}: unknown corpus file type '{suffix}'. Use .jsonl, .json or .parquet, or a folder of pairs.")


def load_path(path: str | Path, limit: Optional[int] = None) -> list[Record]:
    """A corpus file, or a folder holding corpus files and/or pair folders (searched recursively)."""
    path = Path(path).expanduser()
    if path.is_file():
        return list(rows_to_records(read_rows(path), path.name, limit))
    if not path.is_dir():
        raise RagError(f"corpus source '{path}' is not 'kernelbook', 'sakana', 'runs', nor an existing file or folder.")
    records: list[Record] = []
    pair_rows = []
    for child in sorted(path.rglob("*")):
        if child.is_file() and child.suffix.lower() in PAIR_FILE_SUFFIXES and child.name != "meta.json":
            records += rows_to_records(read_rows(child), child.name)
        elif child.is_dir():
            row = _read_pair_folder(child)
            if row is not None:
                pair_rows.append(row)
    records += rows_to_records(pair_rows, path.name)
    if not records:
        raise RagError(f"{path} holds no corpus: expected *.jsonl/*.json/*.parquet files or pair folders "
                       f"({'/'.join(_PYTORCH_NAMES)} + kernel.py|kernel.cu).")
    return records[:limit] if limit is not None else records


# ---------------------------------------------------------------- hub

def load_hub(name: str, limit: Optional[int] = None, split: Optional[str] = None) -> list[Record]:
    """'kernelbook', 'sakana' or any hub dataset id whose columns match a known format (all splits by default)."""
    dataset_id = HUB_DATASETS.get(name, name)
    try:
        import datasets
    except ImportError:
        local_hint = {"kernelbook": "dataset_permissive.json or .parquet", "sakana": "level_1.parquet …"}.get(name,
                                                                                                         "its files")
        raise RagError(f"loading '{dataset_id}' from the Hugging Face hub needs the `datasets` package, which is not "
                       f"installed: `pip install datasets`, or download {local_hint} yourself and pass the file or "
                       "folder as --source PATH (parquet files also need `pip install pyarrow`).") from None
    try:
        loaded = datasets.load_dataset(dataset_id, split=split)
    except Exception as exc:  # the hub raises many types: offline, missing, gated
        raise RagError(f"could not load '{dataset_id}' from the hub ({type(exc).__name__}: {exc}). Check the network "
                       "(HF_HUB_OFFLINE unset) or pass a local copy as --source PATH.") from None
    splits = [loaded] if split else [loaded[s] for s in loaded]
    records: list[Record] = []
    for part in splits:
        remaining = None if limit is None else limit - len(records)
        if remaining is not None and remaining <= 0:
            break
        records += rows_to_records(iter(part), name, remaining)
    return records


def load_source(spec: str, limit: Optional[int] = None) -> list[Record]:
    """'kernelbook' | 'sakana' | 'hub:OWNER/NAME' | a path. ('runs' is the CLI's: it reads the registry.)"""
    if spec in HUB_DATASETS and not Path(spec).exists():
        return load_hub(spec, limit)
    if spec.startswith("hub:"):
        return load_hub(spec[4:], limit)
    return load_path(spec, limit)
