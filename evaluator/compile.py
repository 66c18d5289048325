"""Builds CUDA (load_inline) candidates ahead of the GPU workers and caches the extensions on disk.
Key = sources + flags + GPU arch + torch/CUDA versions; torch headers parsed once (PCH), local arch only, lighter .cu headers."""

from __future__ import annotations

import contextlib
import fcntl
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

from evaluator.api import EvalRequest

RECIPE_VERSION = "krl-build-3"  # bump when the way we build changes, so old cache entries are not reused
_LOG_KEEP_CHARS = 60_000
FALLBACK_ARCH = "9.0"
# Errors after which a build that used the lighter torch header is retried with the candidate's own includes.
_NEEDS_FULL_HEADERS = re.compile(r"torch|at::|c10|py::|pybind|namespace|incomplete type|not declared", re.IGNORECASE)
_HEAVY_HEADER = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<torch/extension\.h>", re.MULTILINE)
_NEEDS_PYTHON = re.compile(r"pybind11|PYBIND11|py::|torch/python\.h|torch::nn::|torch::optim|torch::jit|torch::autograd")


class CudaBuildError(RuntimeError):
    """A candidate's extension did not build; the message is the cleaned compiler output."""


def default_cache_dir() -> str:
    return os.environ.get("KRL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kernelrl", "evaluator")


# ---------------------------------------------------------------- entry points

def build_cuda_candidate(request: EvalRequest, cache_dir: str) -> dict:
    """Run the candidate module with load_inline intercepted so that every extension it asks for is built into
    the cache. Runs in a CPU compile worker (no GPU visible). Never raises for candidate faults."""
    started = time.perf_counter()
    cache_dir = cache_dir or default_cache_dir()
    builds: list[dict] = []
    builder = _Builder(cache_dir, mode="compile", on_record=builds.append)
    builder.candidate_source = request.candidate_source
    note = ""
    path = os.path.abspath("krl_candidate_build.py")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(request.candidate_source)
    try:
        with builder.installed():
            spec = importlib.util.spec_from_file_location("krl_candidate_build", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except CudaBuildError as exc:
        return {"ok": False, "error_message": str(exc), "cache_hit": bool(builds and builds[-1].get("cache_hit")),
                "seconds": time.perf_counter() - started, "artifacts": {"builds": builds}, "cache_dir": cache_dir}
    except BaseException as exc:  # noqa: BLE001 - not a build failure: the GPU worker meets it again and reports it
        if isinstance(exc, KeyboardInterrupt):
            raise
        note = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        sys.modules.pop("krl_candidate_build", None)
    return {
        "ok": True,
        "error_message": "",
        "cache_hit": bool(builds) and all(b.get("cache_hit") for b in builds),
        "seconds": time.perf_counter() - started,
        "artifacts": {"builds": builds},
        "cache_dir": cache_dir,
        "note": note,
    }


def install_load_inline_hook(cache_dir: str, prebuilt: Optional[dict]) -> None:
    """Make torch.utils.cpp_extension.load_inline (in this process) load cached builds; a miss builds here."""
    import torch.utils.cpp_extension as cpp

    cache_dir = (prebuilt or {}).get("cache_dir") or cache_dir or default_cache_dir()
    current = getattr(cpp, "load_inline")
    original = getattr(current, "__krl_original__", current)
    builder = _Builder(cache_dir, mode="load", original=original)
    cpp.load_inline = builder.make_hook()


def extension_key(spec: dict[str, Any]) -> str:
    """Hash of what determines the built binary: sources, functions, flags, GPU arch, toolchain and torch versions."""
    payload = json.dumps({"spec": spec, "toolchain": _toolchain_signature(), "recipe": RECIPE_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


# ---------------------------------------------------------------- the builder

_SPEC_FIELDS = ("cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
                "extra_include_paths", "with_cuda", "is_python_module", "with_pytorch_error_handling",
                "no_implicit_headers")


class _Builder:
    def __init__(self, cache_dir: str, mode: str, on_record: Optional[Callable[[dict], None]] = None,
                 original: Optional[Callable] = None):
        self.cache_dir = cache_dir
        self.mode = mode  # "compile": build and return a placeholder; "load": build if needed and load
        self.on_record = on_record
        self.original = original
        self.candidate_source: Optional[str] = None  # for mapping compiler line numbers; else the caller's file
        os.makedirs(os.path.join(cache_dir, "cuda"), exist_ok=True)
        if mode == "compile":
            _remove_stale_builds(os.path.join(cache_dir, "cuda"))

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
                self.candidate_source = _read_text(sys._getframe(1).f_code.co_filename) or ""
            return self.load(dict(bound.arguments))

        load_inline.__krl_original__ = original  # type: ignore[attr-defined]
        load_inline.__wrapped__ = original  # type: ignore[attr-defined]
        load_inline.__doc__ = original.__doc__
        return load_inline

    def load(self, arguments: dict[str, Any]) -> Any:
        spec = _normalise(arguments)
        key = extension_key(spec)
        record = self.ensure_built(key, spec, arguments)
        if self.on_record:
            self.on_record(record)
        if not record["ok"]:
            raise CudaBuildError(record["error_message"])
        if self.mode == "compile":
            return _Placeholder(record["module_name"])
        # A shared hold on the entry's lock while loading: the cache pruner (evaluator/cache.py) skips it.
        with _file_lock(os.path.join(self.cache_dir, "cuda", key + ".lock"), shared=True):
            return _load_built(record, spec)

    def ensure_built(self, key: str, spec: dict[str, Any], arguments: dict[str, Any]) -> dict:
        final_dir = os.path.join(self.cache_dir, "cuda", key)
        meta_path = os.path.join(final_dir, "result.json")
        started = time.perf_counter()
        record = _read_json(meta_path)
        if record is None:
            with _file_lock(os.path.join(self.cache_dir, "cuda", key + ".lock")):
                record = _read_json(meta_path)  # someone else may have built it while we waited
                if record is None:
                    record = self._build(key, spec, arguments, final_dir)
                    record["cache_hit"] = False
                    record["seconds"] = time.perf_counter() - started
                    return record
        try:
            os.utime(meta_path)  # last use, for the cache pruner's least-recently-used order
        except OSError:
            pass
        record = dict(record)
        record["cache_hit"] = True
        record["seconds"] = time.perf_counter() - started
        record["so_path"] = os.path.join(final_dir, record["so_name"]) if record.get("so_name") else ""
        return record

    def _build(self, key: str, spec: dict[str, Any], arguments: dict[str, Any], final_dir: str) -> dict:
        import torch.utils.cpp_extension as cpp

        _arch_list()  # makes sure TORCH_CUDA_ARCH_LIST is set: one arch, the local one
        module_name = _module_name(key, spec)
        build_dir = os.path.join(self.cache_dir, "cuda", f".build-{key}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        os.makedirs(build_dir)
        call = dict(arguments)
        call.update(name=module_name, build_directory=build_dir, verbose=False)
        call["extra_cuda_cflags"] = [f for f in (spec["extra_cuda_cflags"] or []) if f not in ("-G", "--device-debug")]
        events: dict[str, Any] = {}
        objects_only = bool(spec["cuda_sources"] or spec["with_cuda"]) and _torch_without_cuda(cpp)
        original_run = cpp._run_ninja_build
        cpp._run_ninja_build = _tuned_ninja_runner(original_run, self.cache_dir, events, objects_only)
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
        seconds = time.perf_counter() - started
        record: dict[str, Any] = {"key": key, "ok": ok, "module_name": module_name, "build_seconds": seconds,
                                  "so_name": f"{module_name}.so" if ok and not events.get("objects_only") else "",
                                  "objects_only": bool(events.get("objects_only")), "light_header": events.get("light"),
                                  "light_fallback": events.get("fallback", False), "pch": events.get("pch", False),
                                  "is_python_module": spec["is_python_module"]}
        if not ok:
            from evaluator.errclean import clean_compile_log

            generated = {}
            for name in ("cuda.cu", "main.cpp"):
                text = _read_text(os.path.join(build_dir, name))
                if text is not None:
                    generated[name] = text
            record["error_message"] = clean_compile_log(raw_log, self.candidate_source or _candidate_text(spec),
                                                        generated_files=generated)
            record["log_tail"] = raw_log[-_LOG_KEEP_CHARS:]
        else:
            record["error_message"] = ""
        if completed:  # a deterministic outcome: cache it (failures too: the same source fails the same way)
            _write_json(os.path.join(build_dir, "result.json"), record)
            try:
                os.rename(build_dir, final_dir)
            except OSError:  # another builder won the race; keep theirs
                shutil.rmtree(build_dir, ignore_errors=True)
            build_dir = final_dir if os.path.isdir(final_dir) else build_dir
        record["so_path"] = os.path.join(build_dir, record["so_name"]) if record["so_name"] else ""
        return record


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


def _load_built(record: dict, spec: dict[str, Any]) -> Any:
    path = record["so_path"]
    if not spec["is_python_module"]:
        import torch

        torch.ops.load_library(path)
        return path
    name = record["module_name"]
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
    text = _read_text(os.path.join(build_directory, "build.ninja")) or ""
    objects = re.findall(r"^build (\S+\.o): ", text, re.MULTILINE)
    done = subprocess.run(["ninja", "-v", *objects], cwd=build_directory, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{error_prefix}: {done.stdout}{done.stderr}")
    raise _ObjectsCompiled()


def _tuned_ninja_runner(original_run: Callable, cache_dir: str, events: dict, objects_only: bool = False) -> Callable:
    """Wraps torch's ninja step: precompiled torch header for the binding file, no device debug, lighter .cu header
    (undone if the build then fails for a reason the full header might fix)."""

    if objects_only:
        original_run = lambda build_directory, verbose, error_prefix: _compile_objects_only(build_directory, error_prefix)  # noqa: E731

    def run(build_directory: str, verbose: bool, error_prefix: str) -> None:
        ninja_path = os.path.join(build_directory, "build.ninja")
        cu_path = os.path.join(build_directory, "cuda.cu")
        original_cu = _read_text(cu_path)
        try:
            _use_precompiled_header(ninja_path, cache_dir, events)
        except Exception:  # a PCH is an optimisation only
            events["pch"] = False
        light = False
        if original_cu is not None and os.environ.get("KRL_WORKER_LIGHT_HEADER", "1") == "1":
            if _HEAVY_HEADER.search(original_cu) and not _NEEDS_PYTHON.search(original_cu):
                _write_text(cu_path, _HEAVY_HEADER.sub("#include <torch/types.h>", original_cu))
                light = True
        events["light"] = light
        try:
            original_run(build_directory, verbose, error_prefix)
        except RuntimeError as exc:
            if not light or not _NEEDS_FULL_HEADERS.search(_error_lines(str(exc))):
                raise
            events["fallback"] = True
            _write_text(cu_path, original_cu)
            original_run(build_directory, verbose, error_prefix)

    return run


def _error_lines(log: str) -> str:
    return "\n".join(line for line in log.splitlines() if "error" in line.lower())


def _use_precompiled_header(ninja_path: str, cache_dir: str, events: dict) -> None:
    main_cpp = _read_text(os.path.join(os.path.dirname(ninja_path), "main.cpp")) or ""
    if os.environ.get("KRL_WORKER_PCH", "1") != "1" or "torch/extension.h" not in main_cpp:
        events["pch"] = False
        return
    text = _read_text(ninja_path)
    if text is None:
        return
    values = dict(re.findall(r"^(\w+) = (.*)$", text, re.MULTILINE))
    cxx, cflags = values.get("cxx"), values.get("cflags")
    if not cxx or cflags is None:
        return
    post = values.get("post_cflags", "")
    base_flags = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", cflags)
    digest = hashlib.sha256(f"{cxx}|{base_flags}|{post}|{_toolchain_signature()}".encode()).hexdigest()[:20]
    pch_dir = os.path.join(cache_dir, "pch", digest)
    header = os.path.join(pch_dir, "krl_torch_extension.h")
    gch = header + ".gch"
    if not os.path.exists(gch):
        os.makedirs(pch_dir, exist_ok=True)
        # If another build is making this PCH right now, do not queue behind it: build this one without.
        with _file_lock(pch_dir + ".lock", wait=False) as got_lock:
            if not got_lock:
                events["pch"] = False
                return
            if not os.path.exists(gch):
                _write_text(header, "#pragma once\n#include <torch/extension.h>\n")
                partial = f"{gch}.{os.getpid()}.tmp"
                command = f"{cxx} {base_flags} {post} -x c++-header {header} -o {partial}"
                done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True)
                if done.returncode != 0 or not os.path.exists(partial):
                    events["pch"] = False
                    return
                os.replace(partial, gch)
    text = re.sub(r"^cflags = ", lambda _: f"cflags = -include {header} ", text, count=1, flags=re.MULTILINE)
    _write_text(ninja_path, text)
    events["pch"] = True


def warm_precompiled_header(cache_dir: str, extra_cflags: Optional[list[str]] = None) -> float:
    """Build the PCH for a flag set ahead of time (e.g. while GPU workers start); returns seconds spent."""
    started = time.perf_counter()
    source = "torch::Tensor krl_warm(torch::Tensor x) { return x; }"
    builder = _Builder(cache_dir, mode="compile")
    import torch.utils.cpp_extension as cpp

    builder.original = getattr(cpp.load_inline, "__krl_original__", cpp.load_inline)
    try:
        builder.load({"name": "krl_warm", "cpp_sources": [source], "functions": ["krl_warm"],
                      "extra_cflags": extra_cflags or []})
    except CudaBuildError:
        pass
    return time.perf_counter() - started


# ---------------------------------------------------------------- small utilities

_TOOLCHAIN: Optional[dict] = None


def _toolchain_signature() -> dict:
    global _TOOLCHAIN
    if _TOOLCHAIN is None:
        import torch

        nvcc = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
        try:
            nvcc_version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[-1:]
        except (OSError, subprocess.SubprocessError):
            nvcc_version = []
        _TOOLCHAIN = {"torch": torch.__version__, "cuda": torch.version.cuda, "nvcc": nvcc_version,
                      "python": sys.version_info[:2], "cxx": os.environ.get("CXX", "c++")}
    return dict(_TOOLCHAIN, arch=_arch_list())


def _arch_list() -> str:
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if arch:
        return arch
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            arch = f"{major}.{minor}"
            os.environ["TORCH_CUDA_ARCH_LIST"] = arch  # so the build also targets only this arch
            return arch
    except Exception:
        pass
    # No GPU to ask and nobody told us: torch would find no arch at all. Hopper is what our GPUs are.
    os.environ["TORCH_CUDA_ARCH_LIST"] = FALLBACK_ARCH
    return FALLBACK_ARCH


@contextlib.contextmanager
def _file_lock(path: str, wait: bool = True, shared: bool = False) -> Iterator[bool]:
    """An flock: released by the kernel if the holder is killed, so a timed-out build never wedges the cache.
    Yields whether the lock is held (always True when wait=True)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _remove_stale_builds(folder: str, max_age_s: float = 2 * 3600) -> None:
    """Build folders left by builds that were killed (timeouts) are never renamed into place: drop old ones."""
    now = time.time()
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(".build-")]
    except OSError:
        return
    for entry in entries:
        try:
            if now - entry.stat().st_mtime > max_age_s:
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            pass


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _write_json(path: str, data: dict) -> None:
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(partial, path)


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
