"""Builds CUDA (load_inline) candidates ahead of the GPU workers, in a private folder; the trusted side publishes the
artefacts into a content-addressed cache (verified at load). PCH for torch headers, local arch only, lighter headers."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types
import uuid
from typing import Any, Callable, Iterator, Optional

from evaluator.build.artefacts import (LOG_KEEP_CHARS, arch_list, default_build_root, entry_key, extension_key,
                                       file_lock, lookup, may_write, publish_compile, read_text, sha256_text,
                                       toolchain_signature, write_text)
from evaluator.build.records import CompileRecord, ExtensionBuild
from evaluator.contract.types import EvalRequest

# Errors after which a build that used the lighter torch header is retried with the candidate's own includes.
_NEEDS_FULL_HEADERS = re.compile(r"torch|at::|c10|py::|pybind|namespace|incomplete type|not declared", re.IGNORECASE)
_HEAVY_HEADER = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<torch/extension\.h>", re.MULTILINE)
_NEEDS_PYTHON = re.compile(r"pybind11|PYBIND11|py::|torch/python\.h|torch::nn::|torch::optim|torch::jit|torch::autograd")


class CudaBuildError(RuntimeError):
    """A candidate's extension did not build; the message is the cleaned compiler output."""


def default_cache_dir() -> str:
    return os.environ.get("KRL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kernelrl", "evaluator")


# ---------------------------------------------------------------- entry points

def compile_candidate(request: EvalRequest, cache_dir: str, build_root: str = "") -> CompileRecord:
    """Run the candidate module with load_inline intercepted: each extension it asks for is looked up in the cache
    (read-only here) or built into build_root, a private folder (default ./krl-builds). Runs in a sandboxed CPU
    compile worker (no GPU visible). Never raises for candidate faults; never writes the cache."""
    started = time.perf_counter()
    cache_dir = cache_dir or default_cache_dir()
    builds: list[ExtensionBuild] = []
    source_sha256 = sha256_text(request.candidate_source)
    builder = _Builder(cache_dir, mode="compile", build_root=build_root, source_sha256=source_sha256,
                       on_record=builds.append)
    builder.candidate_source = request.candidate_source
    record = CompileRecord(ok=True, builds=builds, cache_dir=cache_dir, source_sha256=source_sha256)
    path = os.path.abspath("krl_candidate_build.py")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(request.candidate_source)
    try:
        with builder.installed():
            spec = importlib.util.spec_from_file_location("krl_candidate_build", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except CudaBuildError as exc:
        record.ok, record.error_message = False, str(exc)
    except BaseException as exc:  # noqa: BLE001 - not a build failure: the GPU worker meets it again and reports it
        if isinstance(exc, KeyboardInterrupt):
            raise
        record.note = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        sys.modules.pop("krl_candidate_build", None)
    record.cache_hit = bool(builds) and all(b.cache_hit for b in builds)
    if not record.ok:
        record.cache_hit = bool(builds and builds[-1].cache_hit)
    record.seconds = time.perf_counter() - started
    return record


def build_cuda_candidate(request: EvalRequest, cache_dir: str, build_root: str = "") -> dict:
    """compile_candidate as the compile worker's reply (a dict). Where this process may write the cache (no
    sandbox: then nothing is protected anyway) it publishes its own builds; a sandboxed worker cannot, and the
    trusted side calls publish_compile with the reply."""
    cache_dir = cache_dir or default_cache_dir()
    build_root = build_root or default_build_root()
    record = compile_candidate(request, cache_dir, build_root)
    if may_write(os.path.join(cache_dir, "cuda")):
        record = publish_compile(record, build_root, cache_dir, request.candidate_source)
    return record.to_dict()


def install_load_inline_hook(cache_dir: str, prebuilt: Optional[dict]) -> None:
    """Make torch.utils.cpp_extension.load_inline (in this process) load verified cached builds; a miss builds
    here, in the private folder."""
    import torch.utils.cpp_extension as cpp

    prebuilt = prebuilt if isinstance(prebuilt, dict) else {}
    cache_dir = str(prebuilt.get("cache_dir") or cache_dir or default_cache_dir())
    current = getattr(cpp, "load_inline")
    original = getattr(current, "__krl_original__", current)
    builder = _Builder(cache_dir, mode="load", original=original, source_sha256=str(prebuilt.get("source_sha256") or ""))
    cpp.load_inline = builder.make_hook()


# ---------------------------------------------------------------- the builder

_SPEC_FIELDS = ("cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
                "extra_include_paths", "with_cuda", "is_python_module", "with_pytorch_error_handling",
                "no_implicit_headers")


class _Builder:
    def __init__(self, cache_dir: str, mode: str, build_root: str = "", source_sha256: str = "",
                 on_record: Optional[Callable[[ExtensionBuild], None]] = None, original: Optional[Callable] = None,
                 pch_writable: bool = False):
        self.cache_dir = cache_dir
        self.mode = mode  # "compile": build and return a placeholder; "load": build if needed and load
        self.build_root = build_root or default_build_root()  # private: the cache is read-only to builders
        self.source_sha256 = source_sha256
        self.on_record = on_record
        self.original = original
        self.pch_writable = pch_writable  # only warm_precompiled_header, which runs no candidate code
        self.candidate_source: Optional[str] = None  # for mapping compiler line numbers; else the caller's file

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        import torch.utils.cpp_extension as cpp

        previous = cpp.load_inline
        self.original = getattr(previous, "__krl_original__", previous)
        cpp.load_inline = self.make_hook()
        try:
            yield
        finally:
            cpp.load_inline = previous

    def make_hook(self) -> Callable:
        original = self.original
        signature = inspect.signature(original)

        def load_inline(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if self.candidate_source is None:
                self.candidate_source = read_text(sys._getframe(1).f_code.co_filename) or ""
            return self.load(dict(bound.arguments))

        load_inline.__krl_original__ = original  # type: ignore[attr-defined]
        load_inline.__wrapped__ = original  # type: ignore[attr-defined]
        load_inline.__doc__ = original.__doc__
        return load_inline

    def load(self, arguments: dict[str, Any]) -> Any:
        spec = _normalise(arguments)
        key = extension_key(spec)
        build = self.ensure_built(key, spec, arguments)
        if self.on_record:
            self.on_record(build)
        if not build.ok:
            raise CudaBuildError(build.error_message)
        if self.mode == "compile":
            return _Placeholder(build.module_name)
        if not build.cache_hit:
            return _load_built(build, spec)
        # A shared hold on the entry's lock while loading: the cache pruner (evaluator/build/cache.py) skips it.
        entry = entry_key(self.source_sha256, key)
        with file_lock(os.path.join(self.cache_dir, "cuda", entry + ".lock"), shared=True):
            return _load_built(build, spec)

    def ensure_built(self, key: str, spec: dict[str, Any], arguments: dict[str, Any]) -> ExtensionBuild:
        started = time.perf_counter()
        if not self.source_sha256:
            self.source_sha256 = sha256_text(self.candidate_source or _candidate_text(spec))
        build = lookup(self.cache_dir, entry_key(self.source_sha256, key)) or self._build(key, spec, arguments)
        build.seconds = time.perf_counter() - started
        return build

    def _build(self, key: str, spec: dict[str, Any], arguments: dict[str, Any]) -> ExtensionBuild:
        import torch.utils.cpp_extension as cpp

        arch_list()  # makes sure TORCH_CUDA_ARCH_LIST is set: one arch, the local one
        module_name = _module_name(key, spec)
        build_dir = os.path.join(self.build_root, f"{key}-{uuid.uuid4().hex[:8]}")
        os.makedirs(build_dir)
        call = dict(arguments)
        call.update(name=module_name, build_directory=build_dir, verbose=False)
        call["extra_cuda_cflags"] = [f for f in (spec["extra_cuda_cflags"] or []) if f not in ("-G", "--device-debug")]
        # torch renames a module built again in another folder (name_v1.so); each private build is a fresh one.
        versioner = getattr(cpp, "JIT_EXTENSION_VERSIONER", None)
        getattr(versioner, "entries", {}).pop(module_name, None)
        events: dict[str, Any] = {}
        objects_only = bool(spec["cuda_sources"] or spec["with_cuda"]) and _torch_without_cuda(cpp)
        original_run = cpp._run_ninja_build
        cpp._run_ninja_build = _tuned_ninja_runner(original_run, self.cache_dir, events, objects_only,
                                                   self.pch_writable)
        started = time.perf_counter()
        ok, raw_log, completed = True, "", True
        try:
            self.original(**call)
        except _ObjectsCompiled:
            events["objects_only"] = True  # CPU-only torch: compiled (so checked), but nothing to link against
        except Exception as exc:  # noqa: BLE001 - compiler, linker, import (undefined symbol) failures
            ok, raw_log = False, str(exc)
            completed = "Error building extension" in raw_log or isinstance(exc, ImportError)
        finally:
            cpp._run_ninja_build = original_run
        objects = bool(events.get("objects_only"))
        build = ExtensionBuild(key=key, ok=ok, module_name=module_name, build_dir=build_dir, cacheable=completed,
                               so_name=f"{module_name}.so" if ok and not objects else "", objects_only=objects,
                               build_seconds=time.perf_counter() - started, light_header=events.get("light"),
                               light_fallback=bool(events.get("fallback", False)), pch=bool(events.get("pch", False)),
                               is_python_module=bool(spec["is_python_module"]))
        if not ok:
            from evaluator.judging.errclean import clean_compile_log

            generated = {}
            for name in ("cuda.cu", "main.cpp"):
                text = read_text(os.path.join(build_dir, name))
                if text is not None:
                    generated[name] = text
            build.error_message = clean_compile_log(raw_log, self.candidate_source or _candidate_text(spec),
                                                    generated_files=generated)
            build.log_tail = raw_log[-LOG_KEEP_CHARS:]
        build.so_path = os.path.join(build_dir, build.so_name) if build.so_name else ""
        return build


def _normalise(arguments: dict[str, Any]) -> dict[str, Any]:
    def as_list(value: Any) -> list:
        if value is None:
            return []
        return [value] if isinstance(value, str) else list(value)

    functions = arguments.get("functions")
    if isinstance(functions, str):
        functions = [functions]
    spec = {
        "cpp_sources": as_list(arguments.get("cpp_sources")),
        "cuda_sources": as_list(arguments.get("cuda_sources")),
        "functions": functions if isinstance(functions, (list, dict)) or functions is None else list(functions),
        "extra_cflags": as_list(arguments.get("extra_cflags")),
        "extra_cuda_cflags": as_list(arguments.get("extra_cuda_cflags")),
        "extra_ldflags": as_list(arguments.get("extra_ldflags")),
        "extra_include_paths": as_list(arguments.get("extra_include_paths")),
        "with_cuda": arguments.get("with_cuda"),
        "is_python_module": arguments.get("is_python_module", True),
        "with_pytorch_error_handling": arguments.get("with_pytorch_error_handling", True),
        "no_implicit_headers": arguments.get("no_implicit_headers", False),
    }
    # A module name written into the source (PYBIND11_MODULE(my_ext, m)) must be kept, so it joins the key.
    literal = re.search(r"PYBIND11_MODULE\(\s*([A-Za-z_]\w*)\s*,", "\n".join(spec["cpp_sources"] + spec["cuda_sources"]))
    spec["fixed_name"] = literal.group(1) if literal and literal.group(1) != "TORCH_EXTENSION_NAME" else None
    return spec


def _module_name(key: str, spec: dict[str, Any]) -> str:
    return spec.get("fixed_name") or f"krl_ext_{key[:20]}"


def _candidate_text(spec: dict[str, Any]) -> str:
    return "\n".join(spec["cpp_sources"] + spec["cuda_sources"])


class _Placeholder(types.ModuleType):
    """What load_inline returns in a compile worker: the extension exists on disk but is not loaded here."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"extension function {name} is only callable in a GPU worker")

        return unavailable


def _load_built(build: ExtensionBuild, spec: dict[str, Any]) -> Any:
    path = build.so_path
    if not spec["is_python_module"]:
        import torch

        torch.ops.load_library(path)
        return path
    name = build.module_name
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == path:
        return sys.modules[name]
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    module_spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


# ---------------------------------------------------------------- making the build itself faster

class _ObjectsCompiled(Exception):
    """Raised past load_inline once the objects are built on a torch without CUDA libraries to link against."""


def _torch_without_cuda(cpp: Any) -> bool:
    """CPU-only torch can still compile-check CUDA sources with a local nvcc, but cannot link or load them."""
    import torch

    if torch.version.cuda:
        return False
    if cpp.CUDA_HOME is None:
        nvcc = shutil.which("nvcc")
        home = os.environ.get("CUDA_HOME") or ("/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None)
        if home is None and nvcc:
            home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        cpp.CUDA_HOME = home
    return True


def _compile_objects_only(build_directory: str, error_prefix: str) -> None:
    text = read_text(os.path.join(build_directory, "build.ninja")) or ""
    objects = re.findall(r"^build (\S+\.o): ", text, re.MULTILINE)
    done = subprocess.run(["ninja", "-v", *objects], cwd=build_directory, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{error_prefix}: {done.stdout}{done.stderr}")
    raise _ObjectsCompiled()


def _tuned_ninja_runner(original_run: Callable, cache_dir: str, events: dict, objects_only: bool = False,
                        pch_writable: bool = False) -> Callable:
    """Wraps torch's ninja step: precompiled torch header for the binding file, no device debug, lighter .cu header
    (undone if the build then fails for a reason the full header might fix)."""

    if objects_only:
        original_run = lambda build_directory, verbose, error_prefix: _compile_objects_only(build_directory, error_prefix)  # noqa: E731

    def run(build_directory: str, verbose: bool, error_prefix: str) -> None:
        ninja_path = os.path.join(build_directory, "build.ninja")
        cu_path = os.path.join(build_directory, "cuda.cu")
        original_cu = read_text(cu_path)
        try:
            _use_precompiled_header(ninja_path, cache_dir, events, pch_writable)
        except Exception:  # a PCH is an optimisation only
            events["pch"] = False
        light = False
        if original_cu is not None and os.environ.get("KRL_WORKER_LIGHT_HEADER", "1") == "1":
            if _HEAVY_HEADER.search(original_cu) and not _NEEDS_PYTHON.search(original_cu):
                write_text(cu_path, _HEAVY_HEADER.sub("#include <torch/types.h>", original_cu))
                light = True
        events["light"] = light
        try:
            original_run(build_directory, verbose, error_prefix)
        except RuntimeError as exc:
            if not light or not _NEEDS_FULL_HEADERS.search(_error_lines(str(exc))):
                raise
            events["fallback"] = True
            write_text(cu_path, original_cu)
            original_run(build_directory, verbose, error_prefix)

    return run


def _error_lines(log: str) -> str:
    return "\n".join(line for line in log.splitlines() if "error" in line.lower())


def _use_precompiled_header(ninja_path: str, cache_dir: str, events: dict, writable: bool = False) -> None:
    """Use the cache's PCH for these flags if there is one. Only warm_precompiled_header (no candidate code) makes one:
    a PCH made where a candidate ran could be planted for every later build with the same flags."""
    main_cpp = read_text(os.path.join(os.path.dirname(ninja_path), "main.cpp")) or ""
    if os.environ.get("KRL_WORKER_PCH", "1") != "1" or "torch/extension.h" not in main_cpp:
        events["pch"] = False
        return
    text = read_text(ninja_path)
    if text is None:
        return
    values = dict(re.findall(r"^(\w+) = (.*)$", text, re.MULTILINE))
    cxx, cflags = values.get("cxx"), values.get("cflags")
    if not cxx or cflags is None:
        return
    post = values.get("post_cflags", "")
    base_flags = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", cflags)
    digest = hashlib.sha256(f"{cxx}|{base_flags}|{post}|{toolchain_signature()}".encode()).hexdigest()[:20]
    pch_dir = os.path.join(cache_dir, "pch", digest)
    header = os.path.join(pch_dir, "krl_torch_extension.h")
    gch = header + ".gch"
    if not os.path.exists(gch) and not writable:
        events["pch"] = False
        return
    if not os.path.exists(gch):
        os.makedirs(pch_dir, exist_ok=True)
        # If another build is making this PCH right now, do not queue behind it: build this one without.
        with file_lock(pch_dir + ".lock", wait=False) as got_lock:
            if not got_lock:
                events["pch"] = False
                return
            if not os.path.exists(gch):
                write_text(header, "#pragma once\n#include <torch/extension.h>\n")
                partial = f"{gch}.{os.getpid()}.tmp"
                command = f"{cxx} {base_flags} {post} -x c++-header {header} -o {partial}"
                done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True)
                if done.returncode != 0 or not os.path.exists(partial):
                    events["pch"] = False
                    return
                os.replace(partial, gch)
    text = re.sub(r"^cflags = ", lambda _: f"cflags = -include {header} ", text, count=1, flags=re.MULTILINE)
    write_text(ninja_path, text)
    events["pch"] = True


# The binding-file flag sets most candidates build with (CUDA-only flags do not enter the PCH): warmed ahead.
PCH_VARIANTS: tuple[tuple[bool, tuple[str, ...]], ...] = ((True, ()), (True, ("-O3",)), (False, ()), (False, ("-O3",)))


def warm_precompiled_header(cache_dir: str, extra_cflags: Optional[list[str]] = None, with_cuda: bool = False) -> float:
    """Build the PCH for one flag set ahead of time. Only here are PCHs made (pch_writable): a PCH made where a
    candidate ran could be planted for every later build with the same flags. Run it where no candidate code runs:
    `python -m evaluator.build.compile warm-pch CACHE_DIR` in a fresh sandbox whose only writable cache folder is pch/.
    Returns seconds spent."""
    import tempfile

    import torch.utils.cpp_extension as cpp

    started = time.perf_counter()
    definition = "torch::Tensor krl_warm(torch::Tensor x) { return x; }"
    call: dict[str, Any] = {"name": "krl_warm", "functions": ["krl_warm"], "extra_cflags": list(extra_cflags or [])}
    if with_cuda:  # as most candidates: the kernel and its wrapper in the .cu file, the declaration in main.cpp
        call["cpp_sources"] = ["torch::Tensor krl_warm(torch::Tensor x);"]
        call["cuda_sources"] = ["#include <torch/types.h>\n__global__ void krl_warm_kernel(float* x) { x[0] = 0.f; }\n"
                                + definition]
    else:
        call["cpp_sources"] = [definition]
    with tempfile.TemporaryDirectory(prefix="krl-warm-") as build_root:
        builder = _Builder(cache_dir, mode="compile", build_root=build_root, pch_writable=True)
        builder.original = getattr(cpp.load_inline, "__krl_original__", cpp.load_inline)
        try:
            builder.load(call)
        except CudaBuildError:
            pass
    return time.perf_counter() - started


def warm_precompiled_headers(cache_dir: str, variants=PCH_VARIANTS) -> dict[str, float]:
    """Every common flag set's PCH (seconds per variant); a variant whose PCH exists costs one small build."""
    return {f"{'cuda' if with_cuda else 'cpp'} {' '.join(flags)}".strip(): warm_precompiled_header(
        cache_dir, list(flags), with_cuda) for with_cuda, flags in variants}


if __name__ == "__main__":  # python -m evaluator.build.compile warm-pch CACHE_DIR [cpp|cuda]
    if len(sys.argv) >= 3 and sys.argv[1] == "warm-pch":
        from evaluator.judging import timing

        timing.apply_placement()  # off the cores reserved for timing, like the compile workers ($KRL_WORKER_CPUS)
        os.nice(10)
        wanted = sys.argv[3:] or ["cpp", "cuda"]
        chosen = tuple(v for v in PCH_VARIANTS if ("cuda" if v[0] else "cpp") in wanted)
        print(json.dumps(warm_precompiled_headers(sys.argv[2], chosen)))
    else:
        sys.exit("usage: python -m evaluator.build.compile warm-pch CACHE_DIR [cpp|cuda]")
