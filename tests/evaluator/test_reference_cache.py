"""The judge's reference cache: byte-bounded LRU, keyed on what the inputs and reference outputs depend on (the
reference source itself, never the caller's problem_hash), and served again through the real Evaluator."""

from __future__ import annotations

from dataclasses import replace

import torch

from evaluator.api import Verdict
from evaluator.judging.reference_cache import ReferenceCache, nbytes, problem_key
from tests.evaluator.pool_support import GOOD, REFERENCE, WRONG, candidate, make_evaluator, request


def test_least_recently_used_entries_go_first_once_the_bound_is_passed():
    cache = ReferenceCache(max_bytes=400)
    cache.put("a", "A", 100)
    cache.put("b", "B", 100)
    cache.put("c", "C", 100)
    assert cache.get("a") == "A"  # a is now the most recent
    cache.put("d", "D", 100)
    cache.put("e", "E", 100)  # 500 > 400: the least recent (b) goes
    assert cache.get("b") is None and cache.get("a") == "A" and cache.get("e") == "E"
    assert cache.used_bytes <= 400


def test_an_entry_over_a_quarter_of_the_bound_is_not_kept_and_zero_turns_it_off():
    cache = ReferenceCache(max_bytes=400)
    cache.put("big", "X", 101)
    assert cache.get("big") is None and cache.used_bytes == 0
    off = ReferenceCache(max_bytes=0)
    off.put("a", "A", 1)
    assert off.get("a") is None


def test_the_key_follows_the_source_sizes_precision_seed_and_device():
    base = problem_key(REFERENCE, {}, "fp32", 42, "cpu")
    assert base == problem_key(REFERENCE, {}, "fp32", 42, "cpu")
    assert len({base, problem_key(REFERENCE + "\n", {}, "fp32", 42, "cpu"), problem_key(REFERENCE, {"N": 8}, "fp32", 42, "cpu"),
                problem_key(REFERENCE, {}, "fp16", 42, "cpu"), problem_key(REFERENCE, {}, "fp32", 7, "cpu"),
                problem_key(REFERENCE, {}, "fp32", 42, "cuda:0")}) == 6
    assert nbytes((torch.zeros(4), [torch.zeros(2, dtype=torch.float16)], b"abc")) == 16 + 4 + 3


def test_served_again_a_wrong_kernel_stays_wrong_and_a_stale_problem_hash_serves_nothing(tmp_path):
    doubled = REFERENCE.replace("return torch.relu(x)", "return 2 * torch.relu(x)")
    ev = make_evaluator(str(tmp_path), cpu_workers=1)
    try:
        first = ev.evaluate(request(GOOD, problem_hash="same"))
        again = ev.evaluate(request(GOOD, problem_hash="same"))
        wrong = ev.evaluate(request(WRONG, problem_hash="same"))
        # Another problem under the same (stale) problem_hash: its own reference decides.
        other = ev.evaluate(replace(request(candidate("return 2 * x.clamp_min(0)"), problem_hash="same"),
                                    reference_source=doubled))
        relu_there = ev.evaluate(replace(request(GOOD, problem_hash="same"), reference_source=doubled))
        hits = ev.stats()["stats"].get("judge_cache_hits", 0)
    finally:
        ev.close()
    assert first.verdict == again.verdict == Verdict.CORRECT, (first.error_message, again.error_message)
    assert wrong.verdict == Verdict.WRONG_OUTPUT
    assert other.verdict == Verdict.CORRECT, other.error_message
    assert relu_there.verdict == Verdict.WRONG_OUTPUT
    # Served from the judge's cache: every set of the 2nd, 3rd and 5th evaluation (model + trial/timing/recheck).
    assert hits >= 3 * 4, hits


def test_the_cache_says_ahead_whether_it_could_keep_an_entry():
    """A GPU judge builds a set the cache would not keep in a reused buffer (task_judge.TaskJudge.make): the answer
    matches what put does with an entry of that size."""
    cache = ReferenceCache(4096)
    assert cache.keeps(0) and cache.keeps(1024) and not cache.keeps(1025)
    cache.put("small", b"x", 1024)
    cache.put("large", b"y", 1025)
    assert cache.get("small") == b"x" and cache.get("large") is None
    assert not ReferenceCache(0).keeps(0)
