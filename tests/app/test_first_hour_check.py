"""`krl check` says what is wrong with the file itself at once (issue 26 item 18): not text, empty, raw CUDA, no
ModelNew, CUDA without a GPU; none of these starts the evaluator. `krl` runs in this process."""

from __future__ import annotations


import pytest


@pytest.fixture
def krl(workspace, monkeypatch, capsys):
    from tests.app.fixtures import run_krl

    monkeypatch.setenv("KRL_GPUS", "0")  # a CPU machine

    def run(*args):
        code, out, err = run_krl(capsys, monkeypatch, args)
        return code, out + err

    return run


def test_item18_unfit_kernel_files_are_refused_before_the_evaluator_starts(krl, tmp_path):
    cases = {
        "binary.py": (b"\x7fELF\x00\x01\x02", "not a text file"),
        "empty.py": (b"\n\n", "is empty"),
        "kernel.cu": (b"__global__ void relu(float* x) {}\n", "raw .cu source"),
        "nomodel.py": (b"import torch\nx = 1\n", "never mentions ModelNew"),
        "cuda.py": (b"from torch.utils.cpp_extension import load_inline\nclass ModelNew: pass\n", "need a GPU"),
    }
    for name, (content, wanted) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        code, text = krl("check", "builtin/relu", str(path))
        assert code == 2 and wanted in text, (name, code, text)
