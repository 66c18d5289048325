"""CUDA compile path on a machine without a GPU: build once into the cache, hit it afterwards, load through the
hook, build safely from two processes at once, and report nvcc errors at the candidate's own line."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from evaluator.api import EvalRequest, Verdict
from tests.evaluator.pool_support import ROOT, make_evaluator, request

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

# A C++-only extension without torch headers: builds and links in seconds, even with CPU-only torch.
CPP_CANDIDATE = textwrap.dedent('''
    import torch
    from torch.utils.cpp_extension import load_inline

    lib_path = load_inline(
        name="answer_ext",
        cpp_sources='extern "C" int krl_answer() { return 42; }',
        is_python_module=False,
        no_implicit_headers=True,
    )
''')


def cuda_candidate(body: str) -> str:
    return textwrap.dedent('''
        import torch
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        cuda_source = """
        __global__ void scale_kernel(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = %s;
        }
        """

        ext = load_inline(name="scale_ext", cpp_sources="", cuda_sources=cuda_source,
                          no_implicit_headers=True, is_python_module=False)


        class ModelNew(nn.Module):
            def forward(self, x):
                return x
    ''') % body


def _supports_no_implicit_headers() -> bool:
    import inspect

    import torch.utils.cpp_extension as cpp

    return "no_implicit_headers" in inspect.signature(cpp.load_inline).parameters


pytestmark = pytest.mark.skipif(not _supports_no_implicit_headers(), reason="needs torch >= 2.8 load_inline")


@pytest.mark.slow
def test_build_then_cache_hit_then_load_through_the_hook(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as cpp

    from evaluator.build.compile import build_cuda_candidate, install_load_inline_hook

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cpp, "load_inline", cpp.load_inline)  # restored after the hook replaces it
    cache = str(tmp_path / "cache")
    req = EvalRequest("p", "", CPP_CANDIDATE, backend="cuda")
    first = build_cuda_candidate(req, cache)
    assert first["ok"] and not first["cache_hit"], first
    second = build_cuda_candidate(req, cache)
    assert second["ok"] and second["cache_hit"]
    assert second["seconds"] < first["seconds"] / 5
    install_load_inline_hook(cache, second)
    namespace: dict = {}
    exec(compile(CPP_CANDIDATE, "candidate.py", "exec"), namespace)
    assert namespace["lib_path"] == second["artifacts"]["builds"][0]["so_path"]
    assert ctypes.CDLL(namespace["lib_path"]).krl_answer() == 42


def test_cache_key_covers_flags_arch_and_sources(monkeypatch):
    from evaluator.build.compile import _normalise, extension_key

    base = {"name": "a", "cpp_sources": "int f();", "cuda_sources": "__global__ void k(){}"}
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    key = extension_key(_normalise(base))
    assert key == extension_key(_normalise(dict(base, name="another_name")))  # the name is ours to choose
    assert key != extension_key(_normalise(dict(base, extra_cuda_cflags=["-O3"])))
    assert key != extension_key(_normalise(dict(base, cuda_sources="__global__ void k2(){}")))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert key != extension_key(_normalise(base))


@pytest.mark.slow
def test_two_processes_building_the_same_kernel_publish_one_entry(tmp_path):
    # Each builds in its own private folder (no shared lock in a cache builders cannot write); publishing the
    # second finds the first's verified entry and keeps it, so both point at one artefact.
    script = textwrap.dedent(f'''
        import json, os, sys
        sys.path.insert(0, {ROOT!r})
        os.chdir(sys.argv[2])
        from evaluator.api import EvalRequest
        from evaluator.build.compile import build_cuda_candidate
        out = build_cuda_candidate(EvalRequest("p", "", {CPP_CANDIDATE!r}, backend="cuda"), sys.argv[1])
        print(json.dumps({{"ok": out["ok"], "hit": out["cache_hit"], "so": out["artifacts"]["builds"][0]["so_path"]}}))
    ''')
    cache = str(tmp_path / "cache")
    procs = []
    for k in range(2):
        (tmp_path / f"w{k}").mkdir()
        procs.append(subprocess.Popen([sys.executable, "-c", script, cache, str(tmp_path / f"w{k}")],
                                      stdout=subprocess.PIPE, text=True))
    outputs = [json.loads(p.communicate(timeout=240)[0].strip().splitlines()[-1]) for p in procs]
    assert all(o["ok"] for o in outputs)
    assert outputs[0]["so"] == outputs[1]["so"] and outputs[0]["so"].startswith(cache)
    assert len([e for e in os.listdir(os.path.join(cache, "cuda")) if not e.startswith(".") and "." not in e]) == 1
    assert ctypes.CDLL(outputs[0]["so"]).krl_answer() == 42


@needs_nvcc
@pytest.mark.slow
def test_cuda_candidates_through_the_pool_in_cpu_mode(tmp_path):
    bad = cuda_candidate("x[i] * undefined_factor")
    good = cuda_candidate("x[i] * 2.0f")
    with make_evaluator(str(tmp_path / "cache"), compile_workers=1, spare_per_device=0) as ev:
        results = [ev.evaluate(request(source, backend="cuda")) for source in (bad, good, good)]
    broken, built, again = results
    assert broken.verdict == Verdict.COMPILE_ERROR
    assert "line 9: error: identifier \"undefined_factor\" is undefined" in broken.error_message
    assert "^" in broken.error_message and "ninja" not in broken.error_message
    assert len(broken.error_message) < 2000
    # It compiles; without a GPU it cannot run, and the evaluator says exactly that.
    assert built.verdict == Verdict.RUNTIME_ERROR and built.compiled and "CPU mode" in built.error_message
    assert "compile" not in built.cache_hits and "compile" in again.cache_hits


# ---------------------------------------------------------------- on a GPU

RELU_CUDA = textwrap.dedent('''
    import torch
    import torch.nn as nn
    from torch.utils.cpp_extension import load_inline

    relu_source = """
    #include <torch/extension.h>
    #include <cuda_runtime.h>

    __global__ void relu_kernel(const float* x, float* out, int size) {
        int idx = blockIdx.x * blockDim.x + threadIdx.x;
        if (idx < size) out[idx] = x[idx] > 0.f ? x[idx] : 0.f;
    }

    torch::Tensor relu_cuda(torch::Tensor x) {
        auto out = torch::empty_like(x);
        int size = x.numel();
        const int block_size = 256;
        relu_kernel<<<(size + block_size - 1) / block_size, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(), size);
        return out;
    }
    """

    relu_ext = load_inline(name="relu_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                           cuda_sources=relu_source, functions=["relu_cuda"], verbose=True)


    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            return relu_ext.relu_cuda(x)
''')


@pytest.mark.gpu
def test_cuda_candidate_compiles_in_a_compile_worker_and_runs_from_the_cache(tmp_path):
    with make_evaluator(str(tmp_path / "cache"), devices="auto", compile_workers=2) as ev:
        first = ev.evaluate(request(RELU_CUDA, backend="cuda", compile_timeout_s=600))
        second = ev.evaluate(request(RELU_CUDA, backend="cuda"))
        broken_source = RELU_CUDA.replace("out[idx] = x[idx]", "out[idx] = xx[idx]")
        broken = ev.evaluate(request(broken_source, backend="cuda", compile_timeout_s=600))
    assert first.verdict == Verdict.CORRECT, first.error_message
    assert first.compiled and first.speedup and first.speedup > 0
    assert "compile" not in first.cache_hits and "compile" in second.cache_hits
    assert second.verdict == Verdict.CORRECT
    assert broken.verdict == Verdict.COMPILE_ERROR
    line = next(k for k, l in enumerate(broken_source.splitlines(), 1) if "xx[idx]" in l)
    assert f"line {line}:" in broken.error_message and "xx" in broken.error_message


# ---------------------------------------------------------------- a cache candidates cannot poison

EVIL_SOURCE = 'extern "C" int krl_answer() { return 666; }'


@pytest.fixture
def evil_so(tmp_path) -> str:
    """A real shared library that answers 666 where the honest one answers 42."""
    source, path = tmp_path / "evil.cpp", str(tmp_path / "evil.so")
    source.write_text(EVIL_SOURCE)
    subprocess.run(["c++", "-shared", "-fPIC", "-o", path, str(source)], check=True)
    return path


def honest_load(cache: str, private, record) -> str:
    """What a GPU worker does with a published record: load the candidate's extension through the hook."""
    from evaluator.build.compile import install_load_inline_hook

    private.mkdir(exist_ok=True)
    # Back to where it was after: a test process left in a temporary folder misleads later tests (Ray's workers).
    with contextlib.chdir(private):
        install_load_inline_hook(cache, record)
        namespace: dict = {}
        exec(compile(CPP_CANDIDATE, "candidate.py", "exec"), namespace)
    return namespace["lib_path"]


def swapped_in(library: str, path: str) -> None:
    """`library` put at `path` as a new file, never written into the old one: this test process has loaded the old one
    (the builds run in process here), and writing into a loaded library changes its mapped pages, so the process
    crashed in exit's library finalisers (a segfault after every test had passed). The attackers' swaps below do the
    same; in the evaluator a compile worker is a sandboxed process used once."""
    shutil.copy(library, path + ".swap")
    os.replace(path + ".swap", path)


def compile_in(private, cache: str, source: str):
    """A compile worker's build in its private folder (as in the sandbox: nothing is written to the cache)."""
    from evaluator.build.compile import compile_candidate

    private.mkdir(exist_ok=True)
    before = sorted(os.listdir(os.path.join(cache, "cuda"))) if os.path.isdir(os.path.join(cache, "cuda")) else []
    with contextlib.chdir(private):
        record = compile_candidate(EvalRequest("p", "", source, backend="cuda"), cache, str(private / "krl-builds"))
    after = sorted(os.listdir(os.path.join(cache, "cuda"))) if os.path.isdir(os.path.join(cache, "cuda")) else []
    assert before == after  # the builder never writes the cache
    return record


@pytest.mark.slow
def test_an_artefact_a_candidate_swaps_in_is_never_loaded_by_a_later_honest_candidate(tmp_path, monkeypatch,
                                                                                      evil_so):
    import torch.utils.cpp_extension as cpp

    from evaluator.build.artefacts import entry_key, publish_compile

    monkeypatch.setattr(cpp, "load_inline", cpp.load_inline)
    monkeypatch.chdir(tmp_path)
    cache = str(tmp_path / "cache")
    # The attacker asks for exactly the honest extension, then swaps the built library for its own, and also plants
    # an entry in the old cache layout (cuda/<key>/result.json + .so) that earlier versions loaded.
    attacker = CPP_CANDIDATE + textwrap.dedent(f'''
        import glob, json, os, shutil
        for built in glob.glob("krl-builds/*/*.so"):
            shutil.copy({evil_so!r}, built + ".swap")
            os.replace(built + ".swap", built)
        for folder in glob.glob({cache!r} + "/cuda/*/"):
            try:
                shutil.copy({evil_so!r}, folder + "answer.so")
                json.dump({{"ok": True, "so_name": "answer.so", "module_name": "answer_ext"}},
                          open(folder + "result.json", "w"))
            except OSError:
                pass
    ''')
    planted = compile_in(tmp_path / "w1", cache, attacker)
    published_attack = publish_compile(planted, str(tmp_path / "w1"), cache, attacker)
    evil_path = published_attack.builds[0].so_path
    assert ctypes.CDLL(evil_path).krl_answer() == 666  # the swap was real, and is kept for the attacker alone
    key = published_attack.builds[0].key
    os.makedirs(os.path.join(cache, "cuda", key), exist_ok=True)  # the old layout's folder for this key
    shutil.copy(evil_so, os.path.join(cache, "cuda", key, "answer.so"))
    (tmp_path / "cache" / "cuda" / key / "result.json").write_text(json.dumps({"ok": True, "so_name": "answer.so"}))

    honest = compile_in(tmp_path / "w2", cache, CPP_CANDIDATE)
    assert honest.ok and not honest.cache_hit  # the attacker's entry is scoped to the attacker's source
    assert honest.builds[0].key == key
    published = publish_compile(honest.to_dict(), str(tmp_path / "w2"), cache, CPP_CANDIDATE)
    lib_path = honest_load(cache, tmp_path / "w2", published.to_dict())
    assert lib_path != evil_path and lib_path.startswith(cache)
    assert ctypes.CDLL(lib_path).krl_answer() == 42
    assert entry_key(published.source_sha256, key) != entry_key(published_attack.source_sha256, key)


@pytest.mark.slow
def test_a_tampered_artefact_fails_verification_and_is_rebuilt_never_loaded(tmp_path, monkeypatch, evil_so):
    import torch.utils.cpp_extension as cpp

    from evaluator.build.artefacts import entry_key, lookup, publish_compile

    monkeypatch.setattr(cpp, "load_inline", cpp.load_inline)
    monkeypatch.chdir(tmp_path)
    cache = str(tmp_path / "cache")
    first = publish_compile(compile_in(tmp_path / "w1", cache, CPP_CANDIDATE), str(tmp_path / "w1"), cache,
                            CPP_CANDIDATE)
    build = first.builds[0]
    entry = entry_key(first.source_sha256, build.key)
    assert build.so_path.endswith(f"/{entry}/{build.artefact_sha256}.so") and lookup(cache, entry) is not None
    swapped_in(evil_so, build.so_path)  # the bytes change, the name (its old hash) does not
    assert lookup(cache, entry) is None
    # A GPU worker holding the old record does not load it: the hook verifies, misses and builds privately.
    lib_path = honest_load(cache, tmp_path / "w3", first.to_dict())
    assert lib_path != build.so_path and ctypes.CDLL(lib_path).krl_answer() == 42
    # The next compile rebuilds, and publishing replaces the corrupt entry.
    again = compile_in(tmp_path / "w2", cache, CPP_CANDIDATE)
    assert not again.cache_hit
    replaced = publish_compile(again, str(tmp_path / "w2"), cache, CPP_CANDIDATE)
    assert replaced.ok and lookup(cache, entry).artefact_sha256 == replaced.builds[0].artefact_sha256
    assert ctypes.CDLL(replaced.builds[0].so_path).krl_answer() == 42


@pytest.mark.slow
def test_publishing_believes_no_path_or_name_from_the_record(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as cpp

    from evaluator.build.artefacts import publish_compile, safe_file_name

    monkeypatch.setattr(cpp, "load_inline", cpp.load_inline)
    monkeypatch.chdir(tmp_path)
    cache = str(tmp_path / "cache")
    record = compile_in(tmp_path / "w1", cache, CPP_CANDIDATE).to_dict()
    (tmp_path / "w2").mkdir()
    sibling = tmp_path / "w2" / "x.so"
    sibling.write_bytes(b"not yours")
    (tmp_path / "w1" / "link.so").symlink_to(sibling)
    os.mkfifo(tmp_path / "w1" / "fifo.so")  # opening it for reading would block a careless publisher
    build = record["artifacts"]["builds"][0]

    def published_with(**changes):
        forged = json.loads(json.dumps(record))
        forged["artifacts"]["builds"][0].update(changes)
        return publish_compile(forged, str(tmp_path / "w1"), cache, CPP_CANDIDATE)

    assert safe_file_name("../../w2/x.so") == "_.._w2_x.so" and safe_file_name(".hidden") == "hidden"
    for changes, why in (({"so_name": "../../w2/x.so"}, "cannot be read"),
                         ({"build_dir": str(tmp_path / "w2"), "so_name": "x.so"}, "outside the worker's private"),
                         ({"build_dir": str(tmp_path / "w1"), "so_name": "link.so"}, "outside the worker's private"),
                         ({"build_dir": str(tmp_path / "w1"), "so_name": "fifo.so"}, "cannot be read"),
                         ({"module_name": "os; import sys"}, "not a Python identifier"),
                         ({"key": "../" * 10 + "x" * 2}, "not a key"),
                         ({"cache_hit": True}, "missing or failed verification")):
        out = published_with(**changes)
        assert not out.ok and why in out.error_message, (changes, out)
        assert not out.builds[0].so_path
    assert published_with(ok="yes").ok is False  # a field of the wrong type: the record is refused
    assert build["so_name"] and published_with().ok  # the record as the builder made it is fine
    assert not any(name.startswith(".build-publish") for name in os.listdir(os.path.join(cache, "cuda")))


@pytest.mark.slow
def test_a_sandboxed_compile_worker_builds_privately_and_the_trusted_side_publishes(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as cpp

    from evaluator.build.artefacts import publish_compile
    from evaluator.build.records import CompileRecord
    from evaluator.isolation.sandbox import get_sandbox, worker_spec

    sandbox = get_sandbox()
    if sandbox.kind == "none":
        pytest.skip("no sandbox can start on this machine")
    monkeypatch.setattr(cpp, "load_inline", cpp.load_inline)
    cache, private = tmp_path / "cache", tmp_path / "w1"
    (cache / "cuda").mkdir(parents=True)
    private.mkdir()
    os.chmod(tmp_path, 0o755)
    (private / "candidate.py").write_text(CPP_CANDIDATE)
    script = ("import json\nfrom evaluator.api import EvalRequest\nfrom evaluator.build.compile import build_cuda_candidate\n"
              "source = open('candidate.py').read()\n"
              f"print('RECORD', json.dumps(build_cuda_candidate(EvalRequest('p', '', source, backend='cuda'), {str(cache)!r})))")
    spec = worker_spec(str(private), os.environ, cache_dir=str(cache), extra_env={"CUDA_VISIBLE_DEVICES": ""})
    done = sandbox.popen(spec, [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, err[-3000:]
    raw = json.loads(next(line for line in out.splitlines() if line.startswith("RECORD "))[len("RECORD "):])
    built = CompileRecord.from_dict(raw)
    assert built.ok and not built.cache_hit and built.builds[0].build_dir.startswith(str(private))
    if "read-only system" in sandbox.protections:
        assert os.listdir(cache / "cuda") == []  # it could not publish itself: the cache is read-only inside
    published = publish_compile(raw, str(private), str(cache), CPP_CANDIDATE)
    assert published.ok and published.builds[0].so_path.startswith(str(cache))
    assert publish_compile(published, str(private), str(cache), CPP_CANDIDATE).builds[0] == published.builds[0]
    assert ctypes.CDLL(honest_load(str(cache), tmp_path / "w2", published.to_dict())).krl_answer() == 42


@needs_nvcc
@pytest.mark.slow
def test_the_pools_compile_workers_run_candidate_code_in_the_sandbox(tmp_path):
    from evaluator.isolation.sandbox import get_sandbox

    if "host files absent" not in get_sandbox().protections:
        pytest.skip("no sandbox with its own mount view here")
    escaped, cache = tmp_path / "escaped", tmp_path / "cache"
    # Module-level code runs in the compile worker: it tries to leave a file on the host and to plant a cache entry.
    attacker = cuda_candidate("x[i] * 2.0f").replace("import torch\n", textwrap.dedent(f'''
        import os, torch
        for path in ({str(escaped)!r}, {str(cache / "cuda" / "planted.json")!r}):
            try:
                open(path, "w").write("x")
            except OSError:
                pass
    '''), 1)
    with make_evaluator(str(cache), compile_workers=1, spare_per_device=0) as ev:
        result = ev.evaluate(request(attacker, backend="cuda"))
    assert result.compiled and result.verdict == Verdict.RUNTIME_ERROR  # built; CPU mode cannot run it
    assert not escaped.exists() and not (cache / "cuda" / "planted.json").exists()
    entries = [e for e in os.listdir(cache / "cuda") if not e.startswith(".") and "." not in e]
    assert len(entries) == 1 and os.path.exists(cache / "cuda" / entries[0] / "manifest.json")  # published by the pool
