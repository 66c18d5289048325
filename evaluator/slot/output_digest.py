"""Digests of a timed batch's outputs, what a hand-over commits to: SHA-256 of the bytes on a CPU, a keyed tree of
64-bit lanes made on the device on a GPU (digest_kernel.py), so that no output is copied to the host to be digested."""

# Why digests at all: the picked outputs are handed over after the judge names them, uncharged, so without a commitment
# a runner ran its batch approximately (or not at all, where outputs are small next to the tolerance and a projection of
# zeros passes) and computed the picked calls exactly once named: 1.4-2.1x and 80-106x in CPU mode (red team, session
# 28). Each charged hand-over digests every output; each picked output handed over later must match its call's digest.
#
# Why not sums: a digest that is a sum of per-element terms can be met by moving many elements a little, each within
# the tolerance (generalised birthday), and a projection linear in the terms can be solved for outright. SHA-256 has no
# such structure. On a GPU its bytes would go to the host first, on both sides' charge; there the digest is a tree:
# each level's lanes absorb up to CHUNK words in sequence, s' = P(s ^ w) ^ w with P a keyed 64-bit mixing bijection,
# until one lane is left, whose 8 bytes (copied to the host) and 8 bytes of SHA-256 over the tensor's dtype and shape
# are its digest. The key comes from the hand-over's seed, drawn after the batch. Not a standard cryptographic hash:
# meeting a committed digest with another output asks for a preimage of a 64-bit value through P, ~2^64 evaluations of
# the top lane where nothing in P's structure is known to help (docs/known-gaps.md).

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

from evaluator.contract.framing import DIGEST_BYTES

CHUNK = 64  # words a lane absorbs below the last level: a 16 MiB output is 3 levels (2M words, 32K, 512, 1)
FINAL_WORDS = 1024  # a level of at most this many words is absorbed by one lane (level_chunk)
BLOCK = 256  # lanes a program of the kernel
M1, M2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53  # MurmurHash3's finaliser (digest_kernel._mix)
STACKED_DIGEST_BYTES = 2**16  # CPU: outputs up to this size are digested from one stacked buffer


def digests(outputs: list, seed: int) -> list[bytes]:
    """Per output, DIGEST_BYTES, on both sides' charge in a hand-over. A CUDA tensor: its device tree's top lane keyed
    by `seed` (8 bytes) and 8 bytes of SHA-256 over its dtype and shape (row_digests). Anything else: SHA-256 over its
    tensors' dtypes, shapes and contents (their bytes, or a CUDA tensor's top lane) and its Python numbers' values
    (other values by their type's name)."""
    import torch

    from evaluator.judging import judge
    from evaluator.slot.projection import stacked

    first = outputs[0] if outputs else None
    rows = stacked(outputs, torch) if type(first) is torch.Tensor else None
    if rows is not None and rows.dtype == first.dtype:
        if rows.is_cuda:  # one launch a level for the whole batch, one copy to the host
            return row_digests(device_tops(rows, seed), rows.dtype, rows.shape[1:])
        if first.nbytes <= STACKED_DIGEST_BYTES:
            # Small CPU outputs of one shape: a row each of one buffer, ~1.5 us a call where each output's own
            # conversions took ~8; larger ones are not stacked: the copy cost more than the per-output path (9.4
            # against 6.2 ms for ten 1 MiB outputs, 2-core VM).
            header = hashlib.sha256(f"{rows.dtype}{tuple(rows.shape[1:])}".encode())
            contents = _raw_bytes(rows, torch)
            size = len(contents) // len(outputs)
            return [_finished(header, contents[start:start + size]) for start in range(0, len(contents), size)]
    found = []
    for output in outputs:
        if type(output) is torch.Tensor and output.is_cuda:  # as the stacked path makes it, whichever path is taken
            found += row_digests(device_tops(output.unsqueeze(0), seed), output.dtype, output.shape)
            continue
        digest = hashlib.sha256()
        for value in judge.flatten_output(output):
            if isinstance(value, torch.Tensor):
                digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
                digest.update(device_tops(value.unsqueeze(0), seed) if value.is_cuda else _raw_bytes(value, torch))
            elif isinstance(value, (bool, int, float)) or value is None:  # by value: by type alone, a batch of
                digest.update(f"{type(value).__name__}:{value!r};".encode())  # .item() losses bound nothing
            else:
                digest.update(type(value).__name__.encode())
        found.append(digest.digest()[:DIGEST_BYTES])
    return found


def row_digests(tops: bytes, dtype: Any, shape: Any) -> list[bytes]:
    """Each row's 8-byte top and 8 bytes of SHA-256 over the rows' dtype and shape: no hash a row on the host (a
    SHA-256 of each costs ~1.5 us on the 2-core VM, so ~0.6 ms of a 400-call hand-over, estimated, on both sides'
    charge)."""
    tag = hashlib.sha256(f"{dtype}{tuple(shape)}".encode()).digest()[:DIGEST_BYTES - 8]
    return [tops[start:start + 8] + tag for start in range(0, len(tops), 8)]


@functools.lru_cache(maxsize=1)
def device_digests_work() -> bool:
    """Whether this process can make digests on a GPU: Triton imports (the judge asks once; its runners share it).
    KRL_WORKER_GPU_DIGESTS=0 in the evaluator's environment turns them off, for measuring what they cost."""
    if os.environ.get("KRL_WORKER_GPU_DIGESTS", "1") == "0":
        return False
    try:
        import evaluator.slot.digest_kernel  # noqa: F401
    except Exception:  # noqa: BLE001 - no Triton, or one that cannot build the kernel: the picks stay unbound
        return False
    return True


def warm_digest_kernel(shared_dir: str) -> str:
    """In the trusted judge host (CUDA initialised, no candidate code): the digest kernel built into Triton's shared
    cache level (build/triton_cache.py), so that no runner compiles it in its task, and its tree checked against the
    NumPy mirror's. Returns '' or why it did not work."""
    try:
        import torch

        from evaluator.build.triton_cache import trusted_level

        rows = torch.arange(200, dtype=torch.float32, device="cuda").reshape(2, 100)
        with trusted_level(shared_dir):
            made = device_tops(rows, 1)
        return "" if made == host_tops(rows, 1) else "the digest kernel's tree differs from its NumPy mirror"
    except Exception as exc:  # noqa: BLE001 - runners then compile it privately, as without the shared level
        return f"{type(exc).__name__}: {exc}"[:500]


def _finished(header: Any, contents: Any) -> bytes:
    digest = header.copy()
    digest.update(contents)
    return digest.digest()[:DIGEST_BYTES]


def _resolved(tensor: Any) -> Any:
    """`tensor`'s values, contiguous, a conjugate or negative view resolved first: its lazy bit is not in its bytes,
    and a byte view of it is refused (an honest `x.conj()` output failed its hand-over)."""
    return tensor.detach().resolve_conj().resolve_neg().contiguous()


def _raw_bytes(tensor: Any, torch: Any) -> memoryview:
    """`tensor`'s values as bytes, in order (_resolved)."""
    return memoryview(_resolved(tensor).reshape(-1).view(torch.uint8).cpu().numpy())


def device_tops(rows: Any, seed: int) -> bytes:
    """Each row of `rows` (a CUDA tensor, a row per output) through the device tree: 8 bytes a row, one copy to the
    host for them all."""
    from evaluator.slot.digest_kernel import absorb_level

    import torch

    words = row_words(rows, torch)
    count, size = words.shape
    key = key_of(seed)
    m1, m2 = _signed(M1), _signed(M2)
    while True:
        chunk = level_chunk(size)
        lanes = -(-size // chunk)
        states = torch.empty((count, lanes), dtype=torch.int64, device=words.device)
        grid = (-(-lanes // BLOCK), count)
        absorb_level[grid](words, states, size, lanes, chunk, words.stride(0), lanes, key, m1, m2, BLOCK=BLOCK)
        if lanes == 1:
            return states.cpu().numpy().tobytes()
        words, size = states, lanes


def level_chunk(size: int) -> int:
    """The words each lane of a level of `size` words absorbs: all of them in one lane up to FINAL_WORDS (one thread's
    chain of ~10 us on a GPU, cheaper than another launch), else CHUNK."""
    return max(1, size) if size <= FINAL_WORDS else CHUNK


def row_words(rows: Any, torch: Any) -> Any:
    """`rows` (a row per output) as int64 words, each row's bytes zero-padded to a multiple of 8: [rows, words]. A
    view where the bytes already are (contiguous, 8-byte rows), else one copy."""
    flat = _resolved(rows).reshape(rows.shape[0], -1).view(torch.uint8)
    width = flat.shape[1]
    extra = (-width) % 8 if width else 8
    if extra:
        flat = torch.nn.functional.pad(flat, (0, extra))
    elif flat.storage_offset() % 8:
        flat = flat.clone()
    return flat.view(torch.int64)


def key_of(seed: int) -> int:
    """The tree's key (as a signed int64, as the kernel takes it) from a hand-over's seed. Bit 62 always set: Triton
    types an integer argument that fits 32 bits as int32, another signature and another compile in mid-task."""
    return _signed(_mix(int(seed) * 0x9E3779B97F4A7C15 % 2**64 ^ 0x6B72_6C64_6967_6573) | 1 << 62)  # "krldiges"


def host_tops(rows: Any, seed: int) -> bytes:
    """What device_tops computes, in NumPy on the host: the kernel's reference (tests) and a check for any device."""
    import numpy as np
    import torch

    words = row_words(rows.cpu(), torch).numpy().view(np.uint64)
    key = np.uint64(key_of(seed) % 2**64)
    with np.errstate(over="ignore"):
        while True:
            count, size = words.shape
            chunk = level_chunk(size)
            lanes = -(-size // chunk)
            lane = np.arange(lanes, dtype=np.uint64)
            state = _np_mix(key ^ (lane * np.uint64(M1) + np.uint64(size)))
            state = np.repeat(state[None, :], count, axis=0)
            for step in range(chunk):
                index = step * lanes + np.arange(lanes)
                present = index < size
                if not present.any():
                    break
                word = words[:, index[present]]
                live = state[:, present]
                state[:, present] = _np_mix(live ^ word ^ key) ^ word
            if lanes == 1:
                return state.astype("<u8").tobytes()
            words = state


def _np_mix(x: Any) -> Any:
    import numpy as np

    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(M1)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(M2)
    return x ^ (x >> np.uint64(33))


def _mix(x: int) -> int:
    x ^= x >> 33
    x = x * M1 % 2**64
    x ^= x >> 33
    x = x * M2 % 2**64
    return x ^ (x >> 33)


def _signed(value: int) -> int:
    return value - 2**64 if value >= 2**63 else value
