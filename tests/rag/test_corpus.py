"""Normalisation, hashing, languages, names and tags of corpus records."""

from __future__ import annotations

from rag.corpus import Record, code_hash, embedding_text, kernel_language, name_words, normalise_name

PROGRAM = '''
import torch


class Model(torch.nn.Module):
    """Doubles its input."""

    def forward(self, x):
        return x * 2  # the whole op
'''

SAME_PROGRAM_REFORMATTED = '''import torch
# a comment that does not change anything
class Model(torch.nn.Module):
    def forward(self,   x):
        """Docstrings do not count either."""
        return (x*2)
'''


def test_comments_docstrings_and_layout_do_not_change_the_hash():
    assert code_hash(PROGRAM) == code_hash(SAME_PROGRAM_REFORMATTED)


def test_different_code_hashes_differently():
    assert code_hash(PROGRAM) != code_hash(PROGRAM.replace("x * 2", "x * 3"))


def test_c_normalisation_strips_comments_and_whitespace_but_not_code():
    a = "// scale\n__global__ void k(float* x) {\n  /* block */ x[0] *= 2.f;\n}\n"
    b = "__global__ void k(float* x) { x[0] *= 2.f; }"
    assert code_hash(a, "cpp") == code_hash(b, "cpp")
    assert code_hash(a, "cpp") != code_hash(b.replace("2.f", "3.f"), "cpp")


def test_unparseable_python_still_normalises_by_tokens():
    broken = "def f(:\n    return 1  # comment\n"
    assert code_hash(broken) == code_hash("def f(:\n    return 1\n")


def test_kernel_language_follows_the_kernel_format():
    assert kernel_language("triton", "import triton\n") == "python"
    assert kernel_language("cuda", "#include <torch/extension.h>\n__global__ void k() {}\n") == "cpp"
    # A KernelBench CUDA candidate is a Python module around load_inline.
    assert kernel_language("cuda", "import torch\nfrom torch.utils.cpp_extension import load_inline\n") == "python"


def test_names_normalise_for_matching_and_split_for_embedding():
    assert normalise_name("19_ReLU") == normalise_name("relu") == normalise_name("builtin/relu") == "relu"
    assert name_words("ReLU") == "relu"
    assert name_words("23_LayerNorm") == "layer norm"
    assert name_words("SoftmaxCUDA") == "softmax cuda"


def test_record_infers_tags_and_pair_hash_ignores_formatting():
    a = Record(id="a", source="t", backend="Triton", pytorch_code=PROGRAM, kernel_code="import triton\n", name="Softmax")
    b = Record(id="b", source="t", backend="triton", pytorch_code=SAME_PROGRAM_REFORMATTED,
               kernel_code="import triton  # same\n", name="other")
    assert a.backend == "triton"
    assert "softmax" in a.tags
    assert a.pair_hash == b.pair_hash


def test_embedding_text_leads_with_name_and_ops():
    text = embedding_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                          "        return torch.softmax(x, dim=1)\n", "23_Softmax")
    first, ops = text.splitlines()[:2]
    assert first == "softmax"
    assert ops == "ops: softmax"
