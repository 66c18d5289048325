"""The content-addressed cache of built CUDA extensions: entry keys, publishing a builder's artefacts (hashed,
re-checked names and paths, written by the trusted side only), lookup, and the small file helpers builds share."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import uuid
from typing import Any, Iterator, Optional

from evaluator.build.records import CompileRecord, ExtensionBuild

RECIPE_VERSION = "krl-build-4"  # bump when the way we build changes, so old cache entries are not reused
LOG_KEEP_CHARS = 60_000  # of a build's log and error text kept in its record


def extension_key(spec: dict[str, Any]) -> str:
    """Hash of what determines the built binary: sources, functions, flags, GPU arch, toolchain and torch versions."""
    payload = json.dumps({"spec": spec, "toolchain": toolchain_signature(), "recipe": RECIPE_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def entry_key(source_sha256: str, key: str) -> str:
    """The cache entry of extension `key` built for one candidate source. The builder ran that candidate's code, so
    what it hands over is trusted for that candidate only: another candidate, even with the same extension sources,
    never loads it."""
    return hashlib.sha256(f"{source_sha256}:{key}".encode()).hexdigest()[:32]



# ---------------------------------------------------------------- the content-addressed cache (trusted side writes)

MANIFEST = "manifest.json"
MAX_ARTEFACT_BYTES = 2 * 2**30
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def safe_file_name(name: str) -> str:
    """A file name from a record, made harmless: no folders, no leading dots, only [A-Za-z0-9._-]."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", str(name)).lstrip(".")
    return cleaned[:128] or "_"


def artefact_path(cache_dir: str, entry: str, sha256: str) -> str:
    return os.path.join(cache_dir, "cuda", entry, f"{sha256}.so")


def lookup(cache_dir: str, entry: str) -> Optional[ExtensionBuild]:
    """A published entry whose artefact still hashes to what its manifest says; None for a miss, or for an entry
    that fails verification (never loaded; the next build replaces it)."""
    manifest = read_json(os.path.join(cache_dir, "cuda", entry, MANIFEST))
    try:
        build = ExtensionBuild.from_dict((manifest or {})["build"])
    except (KeyError, TypeError, ValueError):
        return None
    if manifest.get("entry") != entry:
        return None
    if build.ok and not build.objects_only:
        if not _HEX64.fullmatch(build.artefact_sha256):
            return None
        path = artefact_path(cache_dir, entry, build.artefact_sha256)
        if sha256_file(path) != build.artefact_sha256:
            return None
        build.so_path = path
    build.cache_hit, build.build_dir = True, ""
    return build


def publish_compile(record: "CompileRecord | dict", private_dir: str, cache_dir: str,
                    candidate_source: str) -> CompileRecord:
    """The trusted side of a build. Takes each artefact a compile worker built in its private folder, hashes it into
    the cache (cuda/<entry>/<sha256>.so + manifest.json written here) and points the record at the cache. Believes
    no path, name or key of the record beyond its own checks: what it cannot verify becomes a failed build."""
    if not isinstance(record, CompileRecord):
        try:
            record = CompileRecord.from_dict(record)
        except (ValueError, TypeError) as exc:
            return CompileRecord(ok=False, error_message=f"the compile worker sent an unreadable record ({exc})",
                                 cache_dir=cache_dir)
    source_sha256 = sha256_text(candidate_source)
    record.source_sha256, record.cache_dir = source_sha256, cache_dir
    cuda = os.path.join(cache_dir, "cuda")
    os.makedirs(cuda, exist_ok=True)
    # Entries may be passed through (a runner opens its own by the exact name the judge gives it) but not listed: an
    # entry's name hashes the candidate's source, so no candidate can name another's, and with the folder listable any
    # could read every earlier candidate's built kernels and manifests (red team, session 27).
    os.chmod(cuda, 0o711)
    remove_stale_builds(cuda)
    record.builds = [_publish_one(b, private_dir, cache_dir, source_sha256) for b in record.builds]
    refused = next((b for b in record.builds if not b.ok and not b.cacheable), None)
    if record.ok and refused is not None:
        record.ok, record.error_message = False, refused.error_message
    record.cache_hit = bool(record.builds) and all(b.cache_hit for b in record.builds)
    return record


def _publish_one(build: ExtensionBuild, private_dir: str, cache_dir: str, source_sha256: str) -> ExtensionBuild:
    if not _HEX32.fullmatch(build.key):
        return _refused(build, "its extension key is not a key")
    entry = entry_key(source_sha256, build.key)
    folder = os.path.join(cache_dir, "cuda", entry)
    if build.cache_hit or (build.artefact_sha256 and not build.build_dir):  # a hit, or published already
        found = lookup(cache_dir, entry)
        if found is None:
            return _refused(build, "the cached build it names is missing or failed verification")
        touch(os.path.join(folder, MANIFEST))  # last use, for the pruner's least-recently-used order
        found.cache_hit, found.seconds = build.cache_hit, build.seconds
        return found
    if not build.cacheable:  # a failure that may not repeat (killed, import error): passed on, not kept
        return dataclasses.replace(build, so_path="", so_name="", build_dir="", artefact_sha256="")
    clean = ExtensionBuild(key=build.key, ok=build.ok, module_name=build.module_name,
                           is_python_module=build.is_python_module, objects_only=build.objects_only,
                           build_seconds=build.build_seconds, seconds=build.seconds,
                           error_message=build.error_message[:LOG_KEEP_CHARS], log_tail=build.log_tail[-LOG_KEEP_CHARS:],
                           light_header=build.light_header, light_fallback=build.light_fallback, pch=build.pch)
    staging = os.path.join(cache_dir, "cuda", f".build-publish-{uuid.uuid4().hex[:12]}")
    os.makedirs(staging)
    try:
        if build.ok and not build.objects_only:
            if not _MODULE_NAME.fullmatch(build.module_name):
                return _refused(build, "its module name is not a Python identifier")
            clean.so_name = safe_file_name(build.so_name)
            source = os.path.join(build.build_dir, clean.so_name)
            if not _inside(source, private_dir):
                return _refused(build, "its artefact is outside the worker's private folder")
            try:
                clean.artefact_sha256 = _copy_hashed(source, staging)
            except OSError as exc:
                return _refused(build, f"its artefact cannot be read ({exc.strerror or exc})")
        write_json(os.path.join(staging, MANIFEST), {"entry": entry, "key": build.key,
                                                       "source_sha256": source_sha256, "build": clean.to_dict()})
        os.chmod(staging, 0o755)
        with file_lock(folder + ".lock"):
            existing = lookup(cache_dir, entry)
            if existing is None:
                if os.path.lexists(folder):  # a corrupt entry: moved away whole, then deleted
                    doomed = f"{folder}.build-corrupt-{uuid.uuid4().hex[:8]}"
                    os.rename(folder, doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
                os.rename(staging, folder)
                existing = lookup(cache_dir, entry)
        if existing is None:
            return _refused(build, "its artefact changed while it was published")
        existing.cache_hit, existing.seconds = False, build.seconds
        return existing
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _refused(build: ExtensionBuild, why: str) -> ExtensionBuild:
    return ExtensionBuild(key=build.key if isinstance(build.key, str) else "", ok=False, cacheable=False,
                          error_message=f"The build of this extension could not be used: {why}.")


def _inside(path: str, folder: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(folder)
    return bool(folder) and os.path.commonpath([real, base]) == base and real != base


def _copy_hashed(source: str, folder: str) -> str:
    """Copy a regular file (never through a symlink, never a FIFO) into folder as <sha256>.so; returns the hash."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ARTEFACT_BYTES:
            raise OSError(0, "not a regular file of a sensible size")
        digest = hashlib.sha256()
        partial = os.path.join(folder, "artefact.partial")
        with open(partial, "wb") as out:
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
                out.write(chunk)
    finally:
        os.close(fd)
    sha256 = digest.hexdigest()
    os.chmod(partial, 0o644)
    os.rename(partial, os.path.join(folder, f"{sha256}.so"))
    return sha256


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return ""
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256((text or "").encode("utf-8", "surrogatepass")).hexdigest()


def may_write(folder: str) -> bool:
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def default_build_root() -> str:
    return os.path.join(os.getcwd(), "krl-builds")


def touch(path: str) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


# ---------------------------------------------------------------- small utilities

FALLBACK_ARCH = "9.0"
_TOOLCHAIN: Optional[dict] = None


def toolchain_signature() -> dict:
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
    return dict(_TOOLCHAIN, arch=arch_list())


def arch_list() -> str:
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
def file_lock(path: str, wait: bool = True, shared: bool = False) -> Iterator[bool]:
    """An flock: released by the kernel if the holder is killed, so a timed-out build never wedges the cache.
    Yields whether the lock is held (always True when wait=True). A shared lock in a read-only cache (a sandboxed
    loader) takes the lock file if the trusted side made one, else goes without: only the pruner needs it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        if not shared:
            raise
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            yield True
            return
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


def remove_stale_builds(folder: str, max_age_s: float = 2 * 3600) -> None:
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


def read_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_json(path: str, data: dict) -> None:
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(partial, path)


def read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
