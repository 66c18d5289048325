"""Retrieval-augmented prompts: kernel corpus, embeddings, FAISS index, prompt examples.
Usable on its own; imports nothing from core/."""
