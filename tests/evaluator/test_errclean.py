"""Compiler logs and tracebacks become the few lines that matter, with line numbers in the candidate's source."""

from __future__ import annotations

import ast
import textwrap

from evaluator.judging.errclean import clean_compile_log, clean_traceback

CANDIDATE = textwrap.dedent('''
    import torch
    from torch.utils.cpp_extension import load_inline

    cuda_source = """
    #include <torch/extension.h>

    __global__ void add_kernel(const float* a, const float* b, float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = a[i] + b[i] * scale;
    }

    torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
        auto out = torch::empty_like(a);
        add_kernel<<<1, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), a.numel())
        return out;
    }
    """
''')

# The generated cuda.cu: torch prepends three header lines, so generated line N is candidate line N + 2.
GENERATED_CU = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + CANDIDATE.split('cuda_source = """\n', 1)[1].split('"""')[0]

NOISE = "\n".join(f"/usr/include/c++/12/bits/stl_vector.h:{k}: note: candidate template ignored" for k in range(300))

NVCC_LOG = f"""Error building extension 'add_ext': [1/3] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=add_ext -isystem /x/torch/include -fPIC -std=c++17 -c /tmp/b/main.cpp -o main.o
[2/3] /usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=add_ext --expt-relaxed-constexpr -gencode=arch=compute_90,code=sm_90 -c /tmp/b/cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=add_ext -c /tmp/b/cuda.cu -o cuda.cuda.o
/tmp/b/cuda.cu(8): error: identifier "scale" is undefined
      if (i < n) out[i] = a[i] + b[i] * scale;
                                        ^

/tmp/b/cuda.cu(14): error: expected a ";"
      return out;
      ^

{NOISE}
2 errors detected in the compilation of "/tmp/b/cuda.cu".
ninja: build stopped: subcommand failed.
"""


def test_nvcc_errors_map_to_candidate_lines_and_drop_the_noise():
    cleaned = clean_compile_log(NVCC_LOG, CANDIDATE, generated_files={"cuda.cu": GENERATED_CU})
    lines = CANDIDATE.splitlines()
    scale_line = next(k for k, l in enumerate(lines, 1) if "* scale;" in l)
    return_line = next(k for k, l in enumerate(lines, 1) if l.strip() == "return out;")
    assert f'line {scale_line}: error: identifier "scale" is undefined' in cleaned
    assert f"line {return_line}: error: expected a \";\"" in cleaned
    assert "^" in cleaned
    assert "stl_vector" not in cleaned and "ninja" not in cleaned and "-gencode" not in cleaned
    assert cleaned.startswith("Compilation failed with 2 errors")


def test_without_generated_files_the_printed_source_line_locates_the_error():
    cleaned = clean_compile_log(NVCC_LOG, CANDIDATE)
    scale_line = next(k for k, l in enumerate(CANDIDATE.splitlines(), 1) if "* scale;" in l)
    assert f"line {scale_line}: error" in cleaned


def test_gcc_errors_in_the_generated_binding_point_at_functions():
    log = ("FAILED: main.o\n/tmp/b/main.cpp:7:42: error: 'add_cudaa' was not declared in this scope; did you mean 'add_cuda'?\n"
           '    7 | m.def("add_cudaa", torch::wrap_pybind_function(add_cudaa), "add_cudaa");\n'
           "      |                                          ^~~~~~~~~\n")
    cleaned = clean_compile_log(log, CANDIDATE)
    assert "generated Python binding" in cleaned and "add_cudaa" in cleaned and "did you mean 'add_cuda'" in cleaned


def test_linker_errors_are_kept():
    log = "FAILED: add_ext.so\n/usr/bin/ld: cuda.cuda.o: in function `foo':\nundefined reference to `bar(int)'\ncollect2: error: ld returned 1 exit status\n"
    cleaned = clean_compile_log(log, CANDIDATE)
    assert "undefined reference to `bar(int)'" in cleaned


def test_size_cap_keeps_the_first_errors():
    log = "\n".join(f"/tmp/b/cuda.cu({k}): error: identifier \"v{k}\" is undefined" for k in range(1, 400))
    cleaned = clean_compile_log(log, CANDIDATE, max_chars=500)
    assert len(cleaned) <= 500
    assert '"v1"' in cleaned and "more error(s)" in cleaned


def test_unknown_format_falls_back_to_error_lines():
    cleaned = clean_compile_log("something odd happened\nfatal: error while loading\nbye\n", CANDIDATE)
    assert "fatal: error while loading" in cleaned and "bye" not in cleaned


def _raise_from_candidate(tmp_path, source: str) -> tuple[BaseException, str]:
    path = tmp_path / "candidate.py"
    path.write_text(source)
    try:
        exec(compile(source, str(path), "exec"), {})
    except Exception as exc:  # noqa: BLE001
        return exc, str(path)
    raise AssertionError("no exception")


def test_traceback_keeps_only_candidate_frames(tmp_path):
    source = "import json\n\ndef helper(x):\n    return json.loads(x)\n\nhelper('{not json')\n"
    exc, path = _raise_from_candidate(tmp_path, source)
    cleaned = clean_traceback(exc, path)
    assert "line 4, in helper" in cleaned and "line 6, in <module>" in cleaned
    assert "json/decoder.py" not in cleaned and "JSONDecodeError" in cleaned


def test_triton_compilation_error_names_the_candidate_line(tmp_path):
    from triton.compiler.errors import CompilationError

    source = textwrap.dedent('''
        import triton
        import triton.language as tl


        @triton.jit
        def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            tl.store(x_ptr + offs, x + undefined_thing)
    ''')
    path = tmp_path / "candidate.py"
    path.write_text(source)
    kernel_src = source[source.index("def add_kernel"):]
    node = ast.parse("x + undefined_thing").body[0]
    node.lineno, node.col_offset = 4, 27  # the 4th line of the function's source
    error = CompilationError(kernel_src, node, "NameError('undefined_thing is not defined')")
    cleaned = clean_traceback(error, str(path))
    store_line = next(k for k, l in enumerate(source.splitlines(), 1) if "undefined_thing" in l)
    assert f"line {store_line}" in cleaned and "undefined_thing is not defined" in cleaned


def test_cuda_runtime_error_is_not_reported_as_a_compile_failure():
    from evaluator.judging.errclean import clean_traceback

    try:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    except RuntimeError as exc:
        text = clean_traceback(exc, "candidate.py")
    assert "illegal memory access" in text
    assert "Compilation failed" not in text
