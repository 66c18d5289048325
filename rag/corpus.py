"""The corpus record (one PyTorch → kernel pair) and the code normalisation behind hashing, dedup and embedding.
Normalising strips comments, docstrings and layout so the same program written twice hashes the same."""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import re
import tokenize
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

BACKENDS = ("triton", "cuda", "torch")

# Op tags read from names and PyTorch code; they label records for `krl rag stats` and for people reading examples.
_TAG_PATTERNS = {
    "softmax": r"softmax",
    "activation": r"relu|gelu|silu|swish|sigmoid|tanh|\belu|selu|softplus|softsign|hardtanh|mish|leaky",
    "norm": r"norm\b|layernorm|layer_norm|batchnorm|batch_norm|groupnorm|group_norm|rmsnorm|instancenorm",
    "reduction": r"\bsum\b|\.sum\(|\bmean\b|\.mean\(|\bamax\b|argmax|argmin|\bprod\b|cumsum|reduce",
    "matmul": r"matmul|gemm|\bmm\b|\.mm\(|bmm|linear|einsum",
    "conv": r"conv",
    "pool": r"pool",
    "loss": r"loss|entropy",
    "attention": r"attention|attn|scaled_dot_product",
}


@dataclass
class Record:
    """One example: a PyTorch program and a kernel that computes the same thing."""

    id: str
    source: str  # kernelbook | sakana | pairs | runs | a file name
    backend: str  # triton | cuda | torch
    pytorch_code: str
    kernel_code: str
    name: str = ""
    tags: list[str] = field(default_factory=list)
    speedup: Optional[float] = None
    origin: str = ""  # where it came from: dataset row, file path, "run/step/problem"
    correct: Optional[bool] = True  # None: unknown (dropped when only verified records are wanted)
    problem_id: str = ""  # set for harvested records: the problem this kernel solves

    def __post_init__(self) -> None:
        self.backend = (self.backend or "").strip().lower()
        if not self.tags:
            self.tags = infer_tags(self.name, self.pytorch_code)

    # Cached: normalising parses the code, and a 100k-record build asks for each hash several times.
    # Records are not edited after loading (only `id`, which no hash uses).
    @functools.cached_property
    def pytorch_hash(self) -> str:
        return code_hash(self.pytorch_code, "python")

    @functools.cached_property
    def kernel_hash(self) -> str:
        return code_hash(self.kernel_code, self.language)

    @functools.cached_property
    def pair_hash(self) -> str:
        """Dedup key: the same PyTorch program with the same kernel, however each is formatted."""
        return hashlib.sha256(f"{self.backend}\0{self.pytorch_hash}\0{self.kernel_hash}".encode()).hexdigest()[:20]

    @functools.cached_property
    def language(self) -> str:
        return kernel_language(self.backend, self.kernel_code)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- normalisation

def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]


def normalise_python(code: str) -> str:
    """Comments, docstrings and layout removed: ast round trip, or a token stream when the code does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return _normalise_python_tokens(code)
    _strip_docstrings(tree)
    return ast.unparse(tree).strip()


def _normalise_python_tokens(code: str) -> str:
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
            tokenize.ENDMARKER}
    try:
        tokens = [tok.string for tok in tokenize.generate_tokens(io.StringIO(code).readline) if tok.type not in skip]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return _normalise_c(code.replace("#", "//"))
    return " ".join(tokens)


def _normalise_c(code: str) -> str:
    # Strings survive (a CUDA source string holds the kernel); comments and whitespace runs do not.
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    code = re.sub(r"//[^\n]*", " ", code)
    return re.sub(r"\s+", " ", code).strip()


def normalise_code(code: str, language: str = "python") -> str:
    return normalise_python(code) if language == "python" else _normalise_c(code)


def code_hash(code: str, language: str = "python") -> str:
    return hashlib.sha256(normalise_code(code, language).encode()).hexdigest()[:20]


def kernel_language(backend: str, kernel_code: str) -> str:
    """Fence language: Triton kernels are Python; CUDA kernels are C++ unless written as a Python module
    around load_inline (the KernelBench candidate format), which is Python again."""
    if backend != "cuda":
        return "python"
    try:
        tree = ast.parse(kernel_code)
    except (SyntaxError, ValueError):
        return "cpp"
    return "python" if any(isinstance(node, (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef))
                           for node in tree.body) else "cpp"


# ---------------------------------------------------------------- names, tags, embedding text

def normalise_name(name: str) -> str:
    """'19_ReLU', 'relu', 'ReLU.py' and 'Re-LU' all become 'relu' (for decontamination by name)."""
    stem = re.sub(r"\.(py|cu|cpp)$", "", name.strip().split("/")[-1])
    stem = re.sub(r"^\d+_", "", stem)
    return re.sub(r"[^a-z0-9]", "", stem.lower())


def name_from_problem_id(problem_id: str) -> str:
    return re.sub(r"^\d+_", "", problem_id.rstrip("/").split("/")[-1]) if problem_id else ""


def infer_tags(name: str, pytorch_code: str = "") -> list[str]:
    text = f"{name}\n{pytorch_code}".lower()
    return [tag for tag, pattern in _TAG_PATTERNS.items() if re.search(pattern, text)]


_NOT_OPS = {"nn", "functional", "Module", "Tensor", "randn", "rand", "randint", "zeros", "ones", "empty",
            "manual_seed", "float32", "float16", "bfloat16", "device", "cuda", "no_grad", "Parameter"}
_CALL = re.compile(r"\b(?:torch\.nn\.functional|torch|nn|F)\.([A-Za-z_][A-Za-z0-9_]*)")


def embedding_text(pytorch_code: str, name: str = "") -> str:
    """What gets embedded, for records and problems alike: the name, the torch ops called, then the
    normalised code. MiniLM reads 256 tokens, so the op list comes first where truncation cannot reach it."""
    normalised = normalise_python(pytorch_code)
    ops = []
    for op in _CALL.findall(normalised):
        if op not in ops and op not in _NOT_OPS:
            ops.append(op)
    forward = _forward_source(normalised)
    parts = [name_words(name), "ops: " + " ".join(ops), forward or normalised]
    return "\n".join(part for part in parts if part.strip())


def name_words(name: str) -> str:
    """'LayerNorm_fused' -> 'layer norm fused' (word pieces embed better than one camel-case token)."""
    # Split camel case at word starts only, so acronyms stay whole: ReLU -> relu, SoftmaxCUDA -> softmax cuda.
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[a-z])(?=[A-Z]{3,}\b)|[_\-./]+", " ",
                    re.sub(r"^\d+_", "", name or ""))
    return spaced.lower().strip()


def _forward_source(normalised: str) -> str:
    try:
        tree = ast.parse(normalised)
    except SyntaxError:
        return ""
    functions = [node for node in ast.walk(tree)
                 if isinstance(node, ast.FunctionDef) and node.name in ("forward", "__init__")]
    functions.sort(key=lambda node: node.name != "forward")  # forward first: it says what is computed
    return "\n".join(ast.unparse(node) for node in functions)
