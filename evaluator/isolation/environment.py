"""The one environment allow-list for every process the evaluator starts (its trusted workers and the sandboxes), the
secret-name test, and the project root that goes on PYTHONPATH. Nothing else of the parent's environment passes."""

from __future__ import annotations

import os
from typing import Mapping, Optional

# Variables a worker may inherit: exact names, then prefixes. Everything else (keys, tokens, the user's settings) stays
# out. PYTHONPATH, VIRTUAL_ENV, CONDA_PREFIX and SHELL never pass: a worker's imports come from the project root,
# which we set, and from the interpreter we start; a user's PYTHONPATH could shadow the evaluator's own modules.
ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
    "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "CC", "CXX", "MAX_JOBS",
    "KRL_BWRAP", "KRL_SANDBOX",  # the evaluator's own settings: where bwrap is, which sandbox kind
})
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "NVSHMEM_", "NVCC_", "TORCH_", "PYTORCH_", "TRITON_", "OMP_",
                    "MKL_", "OPENBLAS_", "KMP_", "KRL_WORKER_", "KRL_EVAL_")
NEVER_PASSED = frozenset({"PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "SHELL"})
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION",
                  "PRIVATE", "CERT")
SECRET_PREFIXES = ("AWS_", "TINKER_", "OPENAI_", "HF_", "HUGGING", "ANTHROPIC_", "GOOGLE_", "AZURE_", "GITHUB_",
                   "WANDB_", "GH_", "GCP_")


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS) or upper.startswith(SECRET_PREFIXES)


def is_allowed(name: str) -> bool:
    """Whether a parent variable may reach a worker: on the allow-list and not named like a secret."""
    if name in NEVER_PASSED or looks_secret(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def project_root() -> str:
    """The folder that holds the evaluator package (what goes on PYTHONPATH in every worker)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # evaluator/isolation/ up


# OpenMP's pool threads sleep as soon as a parallel region ends, in the judges and the runners alike. Spinning (GNU
# OpenMP's default, for a few ms) used CPU in an honest runner while it waited for its next order, which the judge
# counts as the candidate's side work while it times the reference (slot/reference_watch.py).
OMP_WAIT_POLICY = "PASSIVE"

# One hardware work queue per CUDA context in every process the pool starts, unless the user's environment says
# otherwise (CUDA_ names pass). Each task makes and ends a runner's context, and the driver sets up and tears down a
# channel per queue under host-wide locks: on an H100, 8 processes at once made 5.9 contexts a second with CUDA's
# default of 8 queues and 13.9 with one (a context's start 1.22 -> 0.48 s), and 8 slots evaluated 84.7 Triton tasks a
# minute against 159.7 (session 15). The cost: one process's streams share a queue, so a candidate's kernels on
# separate streams no longer overlap (KernelBench's problems run on one stream).
DEVICE_CONNECTIONS = ("CUDA_DEVICE_MAX_CONNECTIONS", "1")


def allowed_environment(parent_env: Mapping[str, str], private_dir: str,
                        extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The environment inside a sandbox: the allow-listed parent variables, HOME/TMPDIR and every tool cache in
    private_dir, then `extra` (ours, trusted). A name that looks secret never passes, from either side."""
    env = {name: value for name, value in parent_env.items() if is_allowed(name)}
    tmp = os.path.join(private_dir, "tmp")
    cache = os.path.join(private_dir, ".cache")
    env.update(HOME=private_dir, TMPDIR=tmp, TMP=tmp, TEMP=tmp, XDG_CACHE_HOME=cache, USER="nobody", LOGNAME="nobody",
               TRITON_CACHE_DIR=os.path.join(cache, "triton"), TORCH_EXTENSIONS_DIR=os.path.join(cache, "torch_extensions"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), CUDA_CACHE_PATH=os.path.join(cache, "nv"),
               PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", MALLOC_ARENA_MAX="2",
               OMP_WAIT_POLICY=OMP_WAIT_POLICY)
    env.setdefault("PATH", os.defpath)
    for name, value in (extra or {}).items():
        if looks_secret(name):
            raise ValueError(f"refusing to put {name!r} into a sandbox: the name looks like a secret")
        env[name] = value
    return env


def worker_environment(parent_env: Mapping[str, str], private_dir: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a pool worker process (trusted judge host or compile worker): the same allow-list, HOME and
    TMPDIR in private_dir, PYTHONPATH the project root, then `extra` (ours). Sandboxes it starts narrow it again."""
    env = {name: value for name, value in parent_env.items() if is_allowed(name)}
    tmp = os.path.join(private_dir, "tmp")
    os.makedirs(tmp, exist_ok=True)
    env.update(HOME=private_dir, TMPDIR=tmp, TMP=tmp, TEMP=tmp, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
               MALLOC_ARENA_MAX="2", OMP_WAIT_POLICY=OMP_WAIT_POLICY, PYTHONPATH=project_root())
    env.setdefault(*DEVICE_CONNECTIONS)
    env.update(extra)
    return env
