"""Response parsing: a model's answer split into its thinking and its kernel (from <KERNEL>…</KERNEL>, else the first
fenced block), with how the kernel was found. Pure text work: the environment and the reward both read the result."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Optional


class ParseOutcome(StrEnum):
    """What a response held, as far as finding its kernel goes."""

    OK = "ok"
    """<KERNEL> holding exactly one fenced block (format_ok True)."""
    FALLBACK = "fallback"
    """No usable <KERNEL>; the first fenced block after the thinking is used (format_ok False)."""
    MULTIPLE_BLOCKS = "multiple_blocks"
    """<KERNEL> holds several blocks; the first Python block is used (format_ok False)."""
    NO_CODE = "no_code"
    """No fenced block at all (kernel None)."""
    TRUNCATED = "truncated"
    """The response hit the token limit; the kernel is kept only if its block was complete."""


OUTCOMES = tuple(ParseOutcome)

_THINK_RE = re.compile(r"<(think|thinking)>(.*?)</\1>", re.S | re.I)
_THINK_CLOSE_RE = re.compile(r"</(think|thinking)>", re.I)
_THINK_OPEN_RE = re.compile(r"<(think|thinking)>", re.I)
_KERNEL_RE = re.compile(r"<KERNEL>(.*?)(?:</KERNEL>|$)", re.S | re.I)
_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
_OPEN_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*)\Z", re.S | re.M)
_PYTHON_LANGS = ("", "python", "py", "python3")


@dataclass
class ParsedResponse:
    """What a response contained; `outcome` says how its kernel was found (ParseOutcome)."""

    thought: str
    kernel: Optional[str]
    format_ok: bool
    truncated: bool
    outcome: ParseOutcome
    answer: str = ""  # the response after the thinking
    language: str = ""
    n_blocks: int = 0

    @property
    def has_thinking(self) -> bool:
        return bool(self.thought.strip())


def _split_thinking(text: str, prefilled_think: bool) -> tuple[str, str]:
    """(thought, answer). A pre-filled <think> (renderer put it in the prompt) shows up as a lone </think>."""
    closing = _THINK_CLOSE_RE.search(text)
    opening = _THINK_OPEN_RE.search(text)
    if closing and (prefilled_think or not opening or opening.start() > closing.start()):
        return text[: closing.start()].strip(), text[closing.end():]
    match = _THINK_RE.search(text)
    if match:
        return match.group(2).strip(), text[: match.start()] + text[match.end():]
    if opening or prefilled_think:
        # Thinking never closed: all of it is thought (usually truncation), unless a <KERNEL> follows it.
        start = opening.end() if opening else 0
        kernel_tag = _KERNEL_RE.search(text, start)
        if kernel_tag:
            return text[start:kernel_tag.start()].strip(), text[kernel_tag.start():]
        return text[start:].strip(), ""
    return "", text


def _blocks(text: str, allow_open: bool) -> list[tuple[str, str]]:
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE_RE.finditer(text)]
    if allow_open:
        tail_from = 0
        for m in _FENCE_RE.finditer(text):
            tail_from = m.end()
        open_block = _OPEN_FENCE_RE.search(text, tail_from)
        if open_block and open_block.group(2).strip():
            blocks.append((open_block.group(1).lower(), open_block.group(2)))
    return blocks


def parse_response(text: str, truncated: bool = False, prefilled_think: bool = False) -> ParsedResponse:
    """Thinking, then the kernel from <KERNEL>…</KERNEL>, else the first fenced block; see ParsedResponse."""
    thought, answer = _split_thinking(text, prefilled_think)
    # An unclosed fence is accepted when the model stopped on its own; after truncation its code is cut off.
    allow_open = not truncated
    kernel_match = _KERNEL_RE.search(answer)
    kernel_blocks = _blocks(kernel_match.group(1), allow_open) if kernel_match else []
    if kernel_blocks:
        blocks = kernel_blocks
        outcome = ParseOutcome.OK if len(kernel_blocks) == 1 else ParseOutcome.MULTIPLE_BLOCKS
    else:
        blocks, outcome = _blocks(answer, allow_open), ParseOutcome.FALLBACK
    if not blocks:
        return ParsedResponse(thought, None, False, truncated,
                              ParseOutcome.TRUNCATED if truncated else ParseOutcome.NO_CODE, answer)
    chosen = next((b for b in blocks if b[0] in _PYTHON_LANGS), blocks[0]) \
        if outcome == ParseOutcome.MULTIPLE_BLOCKS else blocks[0]
    kernel = chosen[1].rstrip() + "\n"
    format_ok = outcome == ParseOutcome.OK and not truncated
    return ParsedResponse(thought, kernel, format_ok, truncated, ParseOutcome.TRUNCATED if truncated else outcome,
                          answer, chosen[0], len(blocks))
