"""The tokenizer every token-level backend hands out: an adapter over a transformers tokenizer (chat template,
encode/decode, stop tokens). The local backend wraps its own tokenizer in it; the Tinker backend wraps the SDK's."""

from __future__ import annotations

from typing import Any, Sequence


class HFTokenizer:
    """Adapter over a transformers tokenizer: chat template, encode/decode, stop tokens."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.eos_token_id = tokenizer.eos_token_id
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        if getattr(self.tok, "chat_template", None):
            return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "

    def stop_ids(self) -> set[int]:
        ids = {self.eos_token_id} if self.eos_token_id is not None else set()
        for text in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
            token = self.tok.convert_tokens_to_ids(text) if text in self.tok.get_vocab() else None
            if isinstance(token, int):
                ids.add(token)
        return ids
