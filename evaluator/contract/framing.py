"""The message framing on every pipe between the evaluator's processes: a 4-byte big-endian length, then JSON.
JSON, never pickle: the other end may run candidate code, and unpickling what it sends would hand it our process."""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Optional

HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 * 2**20


def encode_message(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return HEADER.pack(len(body)) + body


def write_message(fd: int, message: dict[str, Any]) -> None:
    data = memoryview(encode_message(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def read_message(fd: int) -> Optional[dict[str, Any]]:
    """Blocking read of one message; None at end of file."""
    header = read_exactly(fd, HEADER.size)
    if header is None:
        return None
    (length,) = HEADER.unpack(header)
    body = read_exactly(fd, length)
    if body is None:
        return None
    return json.loads(body)


def read_exactly(fd: int, n: int) -> Optional[bytes]:
    """n bytes from fd, or None at end of file before them."""
    chunks, remaining = [], n
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
