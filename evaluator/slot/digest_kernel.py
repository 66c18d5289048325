"""The Triton kernel of a GPU output's digest (slot/output_digest.py): one level of its tree, each lane absorbing up to
`chunk` 64-bit words. Its own module, imported only where a digest is made on the device (`tl` must be a global)."""

import triton
import triton.language as tl


@triton.jit
def _mix(x, m1, m2):
    # MurmurHash3's 64-bit finaliser: a bijection of uint64 in which every input bit reaches every output bit
    x ^= x >> 33
    x *= m1
    x ^= x >> 33
    x *= m2
    x ^= x >> 33
    return x


# Nothing specialised on its values: a key or a length divisible by 16 would otherwise compile another variant in the
# middle of a task's timing (Triton specialises integers equal to 1 or divisible by 16, and pointers' alignment).
@triton.jit(do_not_specialize=["src", "dst", "words", "lanes", "chunk", "src_row", "dst_row", "key", "m1_signed",
                               "m2_signed"])
def absorb_level(src, dst, words, lanes, chunk, src_row, dst_row, key, m1_signed, m2_signed, BLOCK: tl.constexpr):
    """Row r of `src` holds `words` int64 words; lane l of it absorbs words l, l + lanes, l + 2 lanes, ... (coalesced
    loads), and its state goes to dst[r, l]. The multipliers arrive as int64 arguments (their uint64 values pass 2^63,
    which Triton's literals do not take) and are reinterpreted here."""
    row = tl.program_id(1).to(tl.int64)
    lane = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    live = lane < lanes
    m1 = m1_signed.to(tl.uint64, bitcast=True)
    m2 = m2_signed.to(tl.uint64, bitcast=True)
    k = key.to(tl.uint64, bitcast=True)
    size = words.to(tl.uint64)
    # Each lane starts from the key, its index and the row's length, so that no lane's words stand in for another's.
    state = _mix(k ^ (lane.to(tl.uint64) * m1 + size), m1, m2)
    for step in range(chunk):
        index = step * lanes + lane
        present = live & (index < words)
        word = tl.load(src + row * src_row + index, mask=present, other=0).to(tl.uint64, bitcast=True)
        # s' = P(s ^ w) ^ w with P = _mix(. ^ key): for a given state no word can be solved for from a wanted next
        # state without inverting u -> P(u) ^ u, which P's structure does not offer (a plain P(s ^ w) chain would let
        # the last word of a lane be read off backwards).
        mixed = _mix(state ^ word ^ k, m1, m2) ^ word
        state = tl.where(present, mixed, state)
    tl.store(dst + row * dst_row + lane, state.to(tl.int64, bitcast=True), mask=live)
