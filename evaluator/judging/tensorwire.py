"""Tensors between the judge and a sandboxed runner as files: a JSON header, then the raw bytes of each tensor.
Never pickle: the runner is hostile, so reading checks every field and size before it builds anything."""

from __future__ import annotations

import json
import os
import stat
import struct
from typing import Any, Optional

import torch

MAGIC = b"KRLTENSORS1\n"
_LENGTH = struct.Struct(">Q")
MAX_HEADER_BYTES = 1 << 20
MAX_ITEMS = 256
ALIGN = 64

DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.bool, torch.complex64, torch.complex128)}


class WireError(ValueError):
    """A file that is not a well-formed tensor file within its bounds (a runner that sent garbage)."""


def _item(value: Any) -> dict[str, Any]:
    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "device": value.device.type}
    if isinstance(value, bool):
        return {"kind": "bool", "value": value}
    if isinstance(value, int):
        return {"kind": "int", "value": value}
    if isinstance(value, float):
        return {"kind": "float", "value": repr(value)}  # repr keeps nan/inf, which JSON lacks
    if value is None:
        return {"kind": "none"}
    return {"kind": "other", "type": type(value).__name__[:100]}


class ReusedBuffer:
    """One process's scratch bytes for files read or written one at a time, kept between them: a fresh buffer per file
    costs its pages' first-touch faults, which on a loaded host are most of a large file's cost (reading 256 MiB
    into a fresh buffer took 0.89 s on a 2-core VM, into this one 0.04 s). Beyond REUSE_MAX_BYTES a file gets a
    fresh buffer, so no process keeps more than that. `pinned`: page-locked memory, which a GPU copies from directly
    (a GPU judge's outputs go to its device from here: pageable memory is copied through a staging buffer, ~4 GB/s
    for 256 MiB outputs on an H100 host)."""

    REUSE_MAX_BYTES = 1 << 30

    def __init__(self, pinned: bool = False) -> None:
        self._bytes: Any = bytearray(0)
        self._pinned = pinned

    def get(self, size: int) -> Any:
        """A writable view of `size` bytes; its content is whatever the last file left there."""
        if size > self.REUSE_MAX_BYTES:
            return bytearray(size)
        if size > len(self._bytes):
            # Pinned: torch keeps freed page-locked blocks for reuse, so the buffer doubles, and those it keeps add up
            # to at most its own size.
            grown = 1 << (size - 1).bit_length() if self._pinned else max(size, len(self._bytes) * 5 // 4)
            self._bytes = bytearray(0)  # the old buffer let go first (unless a view still holds it)
            grown = min(self.REUSE_MAX_BYTES, grown)
            self._bytes = self._pinned_bytes(grown) if self._pinned else bytearray(grown)
        return memoryview(self._bytes)[:size]

    @staticmethod
    def _pinned_bytes(size: int) -> Any:
        """`size` bytes of page-locked memory (plain ones where none can be had), kept alive by every view of them:
        the memoryview holds the array, the array its tensor."""
        try:
            return memoryview(torch.empty(size, dtype=torch.uint8, pin_memory=True).numpy())
        except (RuntimeError, ImportError):  # no GPU to pin for, the driver refused, or no numpy: plain memory
            return bytearray(size)


# A file at least this large is written through a mapping of its own pages, straight from the tensors' memory (a
# GPU's included); a smaller one is built in memory and written in one call, which costs fewer system calls.
MAPPED_WRITE_BYTES = 1 << 20


def write_values(path: str, values: Any, scratch: Optional[ReusedBuffer] = None) -> int:
    """Write a tensor, or a tuple/list of tensors and plain scalars, to `path` (a new file). A small file's bytes are
    built in `scratch` when given; a large one's go straight into the file's pages: built in a buffer and then written,
    a 256 MiB output cost two copies and two sets of page faults (an H100 judge spent ~0.27 s a 256 MiB set on them).
    Returns the bytes written."""
    head, blobs, size = _layout(values)
    if size < MAPPED_WRITE_BYTES:
        data = _filled(bytearray(size) if scratch is None else scratch.get(size), head, blobs, scratch is not None)
        with open(path, "wb") as handle:
            handle.write(data)
        return size
    import mmap

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        # Allocated first: a full filesystem is then an OSError here, not a SIGBUS while the pages are filled.
        os.posix_fallocate(fd, 0, size)
        with mmap.mmap(fd, size) as mapped:
            _filled(mapped, head, blobs, reused=False)  # fresh pages read as zeros: the padding is already there
    finally:
        os.close(fd)
    return size


def encode_values(values: Any, scratch: Optional[ReusedBuffer] = None) -> Any:
    """The file contents write_values writes: a fresh bytearray (the judge keeps it to serve the same inputs again), or
    a view of `scratch`, valid until its next use."""
    head, blobs, size = _layout(values)
    return _filled(bytearray(size) if scratch is None else scratch.get(size), head, blobs, scratch is not None)


def _layout(values: Any) -> tuple[bytes, list, int]:
    """(the header's bytes up to where the tensors begin, each tensor's (offset from there, its bytes as uint8), the
    file's size)."""
    structure = type(values).__name__ if isinstance(values, (tuple, list)) else "single"
    items = list(values) if structure != "single" else [values]
    if len(items) > MAX_ITEMS:
        raise WireError(f"{len(items)} values, at most {MAX_ITEMS}")
    header_items, blobs, offset = [], [], 0
    for value in items:
        entry = _item(value)
        if entry["kind"] == "tensor":
            if entry["dtype"] not in DTYPES:
                entry = {"kind": "other", "type": f"tensor of {entry['dtype']}"}
            else:
                # Left on its device: the copy into the file's bytes is then the only one (a GPU tensor moved to the
                # CPU first cost a second 256 MiB copy a set on KernelBench-sized elementwise problems).
                data = value.detach().contiguous().reshape(-1)
                raw = data.view(torch.uint8) if data.numel() else torch.empty(0, dtype=torch.uint8)
                entry.update(offset=offset, nbytes=int(raw.numel()))
                blobs.append((offset, raw))
                offset += -(-raw.numel() // ALIGN) * ALIGN
        header_items.append(entry)
    header = json.dumps({"structure": structure, "items": header_items}).encode()
    start = -(-(len(MAGIC) + _LENGTH.size + len(header)) // ALIGN) * ALIGN
    head = MAGIC + _LENGTH.pack(len(header)) + header
    return head + bytes(start - len(head)), blobs, start + offset


def _filled(data: Any, head: bytes, blobs: list, reused: bool) -> Any:
    """`data` (a writable buffer of the file's size) holding the file's bytes. A `reused` buffer's padding holds the
    last file's bytes: zeroed, as a fresh one reads."""
    start = len(head)
    data[:start] = head
    for at, raw in blobs:
        if raw.numel():
            torch.frombuffer(data, dtype=torch.uint8, count=raw.numel(), offset=start + at).copy_(raw)
        if reused:
            padded = -(-raw.numel() // ALIGN) * ALIGN
            data[start + at + raw.numel():start + at + padded] = bytes(padded - raw.numel())
    return data


def read_values(path: str, max_bytes: int, scratch: Optional[ReusedBuffer] = None) -> Any:
    """The values written by write_values, as CPU tensors and scalars; WireError for anything malformed or larger
    than max_bytes. Symbolic links and special files are refused (the folder is writable by the runner). Read into
    `scratch` when given: the tensors are then views of it, valid until its next use (copy what must outlive it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise WireError(f"cannot open the output file: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise WireError("the output is not a regular file")
        if info.st_size > max_bytes:
            raise WireError(f"the output file holds {info.st_size} bytes, more than the {max_bytes} expected")
        buffer = bytearray(info.st_size) if scratch is None else scratch.get(info.st_size)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            got = handle.readinto(buffer)
        if got != info.st_size:
            raise WireError("the output file changed while it was read")
    finally:
        os.close(fd)
    return decode(buffer)


def map_values(path: str, max_bytes: int) -> Any:
    """The values of a file only the judge writes, as CPU tensors over a private mapping of it: no copy into a fresh
    buffer (a runner on a GPU moves them to the device at once). Never for a file a runner writes: shrunk under the
    mapping, it would fault the reader."""
    import mmap

    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise WireError(f"the file holds {size} bytes, more than the {max_bytes} expected")
        if size == 0:
            raise WireError("not a tensor file")
        mapped = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)  # writes stay in this process
    return decode(mapped)


def decode(buffer: Any) -> Any:
    """The values of a file's bytes (a bytearray, or a writable mapping of the file)."""
    if buffer[:len(MAGIC)] != MAGIC or len(buffer) < len(MAGIC) + _LENGTH.size:
        raise WireError("not a tensor file")
    (length,) = _LENGTH.unpack_from(buffer, len(MAGIC))
    begin = len(MAGIC) + _LENGTH.size
    if length > MAX_HEADER_BYTES or begin + length > len(buffer):
        raise WireError("bad header length")
    try:
        header = json.loads(bytes(buffer[begin:begin + length]))
    except ValueError:
        raise WireError("unreadable header") from None
    start = -(-(begin + length) // ALIGN) * ALIGN
    if not isinstance(header, dict) or header.get("structure") not in ("single", "tuple", "list"):
        raise WireError("bad structure")
    items = header.get("items")
    if not isinstance(items, list) or len(items) > MAX_ITEMS or (header["structure"] == "single" and len(items) != 1):
        raise WireError("bad item list")
    values = [_decode_item(entry, buffer, start) for entry in items]
    if header["structure"] == "single":
        return values[0]
    return tuple(values) if header["structure"] == "tuple" else values


class Opaque:
    """A value the runner could not put on the wire (a str, a dict...): the judge reports its type name."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def _decode_item(entry: Any, buffer: bytearray, start: int) -> Any:
    if not isinstance(entry, dict):
        raise WireError("bad item")
    kind = entry.get("kind")
    if kind == "none":
        return None
    if kind == "bool" and isinstance(entry.get("value"), bool):
        return entry["value"]
    if kind == "int" and type(entry.get("value")) is int:
        if not INT64_MIN <= entry["value"] <= INT64_MAX:  # no tensor holds it: judge.compare raised on 2**70, which
            raise WireError("an integer beyond 64 bits")  # read as the judge's own failure (red team, session 28)
        return entry["value"]
    if kind == "float" and isinstance(entry.get("value"), str) and len(entry["value"]) < 40:
        try:
            return float(entry["value"])
        except ValueError:
            raise WireError("bad float") from None
    if kind == "other":
        return Opaque(str(entry.get("type", "object"))[:100])
    if kind != "tensor":
        raise WireError("unknown item kind")
    dtype = DTYPES.get(entry.get("dtype"))
    shape, offset, nbytes = entry.get("shape"), entry.get("offset"), entry.get("nbytes")
    if dtype is None or not isinstance(shape, list) or len(shape) > 16 or not all(
            type(d) is int and 0 <= d for d in shape) or type(offset) is not int or type(nbytes) is not int:
        raise WireError("bad tensor entry")
    count = 1
    for dim in shape:
        count *= dim
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if count * itemsize != nbytes or offset < 0 or offset % ALIGN or start + offset + nbytes > len(buffer):
        raise WireError("tensor bytes out of bounds")
    if nbytes == 0:
        tensor = torch.empty(shape, dtype=dtype)
    else:
        tensor = torch.frombuffer(buffer, dtype=torch.uint8, count=nbytes, offset=start + offset).view(dtype).reshape(shape)
    tensor.krl_device_type = entry.get("device") if entry.get("device") in ("cpu", "cuda") else "cpu"
    return tensor
