"""Retrieved examples as prompt text: each pair fenced in its own language (python for PyTorch and Triton,
cpp for raw CUDA C++), with a fence long enough that code containing backticks cannot break out of it."""

from __future__ import annotations

import re
from typing import Any, Sequence

DEFAULT_HEADER = "Here are solved examples of similar problems (a PyTorch program and a faster kernel for it):"


def fence(code: str, language: str) -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", code)), default=2)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{code.rstrip()}\n{ticks}"


def format_example(example: dict[str, Any], number: int | None = None) -> str:
    name = example.get("name") or example.get("id") or "example"
    backend = example.get("backend", "")
    speedup = example.get("speedup")
    speed = f", {speedup:.2f}x faster than PyTorch" if isinstance(speedup, (int, float)) else ""
    title = f"### Example {number}: {name}" if number is not None else f"### Example: {name}"
    return (f"{title} ({backend}{speed})\n"
            f"Reference PyTorch:\n{fence(example['pytorch_code'], 'python')}\n"
            f"{backend.capitalize() or 'Kernel'} implementation:\n"
            f"{fence(example['kernel_code'], example.get('language') or 'python')}\n")


def format_examples(examples: Sequence[dict[str, Any]], header: str = DEFAULT_HEADER) -> str:
    """The whole block for a prompt; '' when there is nothing to show."""
    if not examples:
        return ""
    blocks = [format_example(example, number) for number, example in enumerate(examples, 1)]
    return header + "\n\n" + "\n".join(blocks)
