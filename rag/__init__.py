"""Retrieval-augmented prompts: kernel corpus, embeddings, FAISS index, prompt examples.
Usable on its own; imports nothing from core/ (callers hand it plain problems and records)."""

from __future__ import annotations


class RagError(Exception):
    """A user-facing RAG error (missing package, bad corpus file, model mismatch): the message says what to do."""

    exit_code = 2


DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

__all__ = ["RagError", "DEFAULT_MODEL"]
