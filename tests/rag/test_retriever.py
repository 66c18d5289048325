"""Retrieval: relevance, backend restriction, MMR, token budgets counted by a tokenizer, language fences."""

from __future__ import annotations

import pytest

from rag.prompt import fence, format_examples
from rag.retriever import IndexRetriever

from tests.rag.conftest import problem_file

KEYS = {"id", "name", "backend", "pytorch_code", "kernel_code", "speedup", "score", "language"}


@pytest.fixture(scope="module")
def retriever(built_index, embedder):
    retriever = IndexRetriever(built_index, embedder=embedder)
    yield retriever
    retriever.close()


def test_a_softmax_problem_retrieves_a_softmax_kernel_first(retriever, data_dir):
    problem_id, source = problem_file(data_dir, "online_softmax")
    triton = retriever.examples(source, problem_id, "triton", k=3)
    assert triton[0]["name"] == "RowSoftmax"
    assert KEYS <= set(triton[0]) and all(e["backend"] == "triton" for e in triton)
    assert [e["score"] for e in triton] == sorted((e["score"] for e in triton), reverse=True)
    cuda = retriever.examples(source, problem_id, "cuda", k=2)
    assert cuda[0]["name"] == "SoftmaxCUDA" and all(e["backend"] == "cuda" for e in cuda)


def test_one_example_per_program(retriever, data_dir):
    problem_id, source = problem_file(data_dir, "gelu_variant")
    examples = retriever.examples(source, problem_id, None, k=20)
    programs = [e["pytorch_code"] for e in examples]
    assert len(programs) == len(set(programs))


def test_unknown_backend_gives_nothing(retriever, data_dir):
    problem_id, source = problem_file(data_dir, "online_softmax")
    assert retriever.examples(source, problem_id, "torch", k=3) == []


def test_mmr_trades_relevance_for_variety(retriever, data_dir):
    problem_id, source = problem_file(data_dir, "online_softmax")
    plain = retriever.examples(source, problem_id, None, k=3)
    diverse = retriever.examples(source, problem_id, None, k=3, mmr_lambda=0.3)
    assert plain[0]["id"] == diverse[0]["id"]  # the most relevant always leads
    assert sum("softmax" in e["tags"] for e in diverse) < sum("softmax" in e["tags"] for e in plain)


def test_token_budget_is_respected_with_the_embedding_tokenizer(retriever, data_dir, embedder):
    problem_id, source = problem_file(data_dir, "online_softmax")
    unlimited = retriever.examples(source, problem_id, "triton", k=4)
    full = embedder.count_tokens(retriever.format(unlimited))
    budget = full // 2
    fitted = retriever.examples(source, problem_id, "triton", k=4, token_budget=budget)
    assert 0 < len(fitted) < len(unlimited)
    assert embedder.count_tokens(retriever.format(fitted)) <= budget
    stored = {e["id"]: e for e in retriever.examples(source, problem_id, "triton", k=50)}
    for example in fitted:  # whole examples: never cut
        assert example["kernel_code"] == stored[example["id"]]["kernel_code"]
        assert example["pytorch_code"] == stored[example["id"]]["pytorch_code"]
        assert example["tokens"] > 0


def test_token_budget_with_a_supplied_counter(retriever, data_dir):
    problem_id, source = problem_file(data_dir, "online_softmax")

    def words(text: str) -> int:
        return len(text.split())

    for budget in (60, 150, 400):
        fitted = retriever.examples(source, problem_id, "triton", k=3, token_budget=budget, count_tokens=words)
        assert words(retriever.format(fitted)) <= budget
    assert retriever.examples(source, problem_id, "triton", k=3, token_budget=5, count_tokens=words) == []


def test_language_fences(retriever, data_dir):
    problem_id, source = problem_file(data_dir, "online_softmax")
    by_name = {e["name"]: e for backend in ("triton", "cuda")
               for e in retriever.examples(source, problem_id, backend, k=30)}
    assert by_name["SoftmaxCUDA"]["language"] == "cpp"  # raw CUDA C++
    assert by_name["SigmoidCUDA"]["language"] == "python"  # load_inline module
    assert by_name["RowSoftmax"]["language"] == "python"
    text = format_examples([by_name["SoftmaxCUDA"], by_name["RowSoftmax"]])
    assert "```cpp\n#include <torch/extension.h>" in text
    assert text.count("```python\n") == 3  # two PyTorch programs and one Triton kernel
    assert "1.90x faster" in text


def test_fence_outgrows_backticks_in_code():
    fenced = fence('doc = """\n```python\nx\n```\n"""', "python")
    assert fenced.startswith("````python\n") and fenced.endswith("\n````")


def test_concurrent_queries_from_threads(retriever, data_dir):
    """Training evaluates groups in threads: queries (and token counting) must not trip over each other."""
    from concurrent.futures import ThreadPoolExecutor

    problems = [problem_file(data_dir, stem) for stem in ("online_softmax", "gelu_variant", "relu_problem")] * 4
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda p: retriever.examples(p[1], p[0], "triton", 2, token_budget=2000), problems))
    assert all(results) and results[0][0]["name"] == "RowSoftmax"
    assert [r[0]["id"] for r in results[:3]] == [r[0]["id"] for r in results[3:6]]
