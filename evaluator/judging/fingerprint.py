"""An output's fingerprint: what the judge keeps of a candidate's earlier outputs to recognise one replayed for other
inputs, in place of the outputs themselves (eight judges keeping five 256 MiB trial outputs each filled a GPU)."""

from __future__ import annotations

import secrets
from typing import Any, Optional

import torch

from evaluator.judging.judge import flatten_output

CHUNK = 1 << 23  # elements hashed at a time: the temporaries stay ~200 MB for any output
_INTEGER_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# Secret per judge process, odd: the weights of the positional sum below cannot be aimed at by a candidate
_KEY, _OFFSET = secrets.randbits(61) * 2 + 1, secrets.randbits(62)


def fingerprint(output: Any) -> Optional[tuple]:
    """Equal for outputs judge.outputs_identical calls identical (the same tensors, dtypes, shapes and devices; NaN
    equal to NaN, -0.0 to 0.0), different otherwise but for a hash collision. None for an output holding anything but
    tensors, which outputs_identical never calls identical."""
    marks = []
    for value in flatten_output(output):
        if not isinstance(value, torch.Tensor):
            return None
        marks.append((str(value.dtype), tuple(value.shape), str(value.device), _digest(value)))
    return tuple(marks)


def _digest(value: torch.Tensor) -> tuple[int, int]:
    """(a plain sum, a sum weighted by position) of the value's bits, in wrapping 64-bit arithmetic."""
    with torch.no_grad():
        flat = value.detach().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.to(torch.uint8)
        plain, weighted = 0, 0
        for start in range(0, flat.numel(), CHUNK):
            part = flat[start:start + CHUNK]
            if part.is_floating_point():
                part = part + 0  # -0.0 becomes 0.0
                part = torch.where(torch.isnan(part), torch.full_like(part, float("nan")), part)  # one NaN's bits
            bits = part.contiguous().view(_INTEGER_OF_SIZE[part.element_size()]).to(torch.int64)
            index = torch.arange(start, start + bits.numel(), device=bits.device, dtype=torch.int64)
            plain += int(bits.sum())
            weighted += int((bits * (index * _KEY + _OFFSET)).sum())
    return plain & (2**64 - 1), weighted & (2**64 - 1)
