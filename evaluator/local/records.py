"""The pool's records: its configuration, a queued task, a worker process, and the enumerations of a worker's role,
state and kill reason and a task's stage. Plain dataclasses, owned and mutated by the pool's dispatcher thread only."""

from __future__ import annotations

import enum
import subprocess
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Optional

from evaluator.build.records import CompileRecord
from evaluator.contract.types import EvalRequest
from evaluator.isolation.limits import Limits


class Role(enum.StrEnum):
    """What a pool worker process does."""

    EVAL = "eval"
    """A slot's trusted judge host; candidate code runs only in the sandboxed runners it starts."""
    COMPILE = "compile"
    """Builds CUDA candidates into the content-addressed cache; never touches a GPU."""


class WorkerState(enum.StrEnum):
    """Where a worker process is in its life."""

    STARTING = "starting"
    """Spawned, not yet said ready."""
    IDLE = "idle"
    """Ready for a task (or a warm spare)."""
    BUSY = "busy"
    """Running a task."""
    RETIRING = "retiring"
    """Told to exit; takes no more tasks."""
    DEAD = "dead"
    """Exited and reaped."""


class KillReason(enum.StrEnum):
    """Why the pool killed (or is ending) a worker. NONE: it was not killed by the pool."""

    NONE = ""
    TIMEOUT = "timeout"
    """The task ran past its limit."""
    MEMORY = "memory"
    """Its process tree held more resident memory than one evaluation may."""
    IPC = "ipc"
    """It broke the message protocol (an oversized or unreadable message, or a dead task pipe)."""
    CHANNEL = "channel"
    """The candidate closed the worker's result channel."""
    RETIRE = "retire"
    """Retired by the pool (leftover processes, spare balancing) and did not exit in time."""
    CLOSE = "close"
    """The pool is closing."""
    START_TIMEOUT = "start_timeout"
    """It did not say ready within the start timeout."""


class Stage(enum.StrEnum):
    """Where a task is: compiled first (CUDA candidates with compile workers), then evaluated."""

    COMPILE = "compile"
    EVAL = "eval"


@dataclass
class PoolConfig:
    devices: list[str]  # "cpu" or "cuda:N" (N = index among the GPUs the parent sees)
    workers_per_device: int = 1
    cpu_workers: int = 2
    compile_workers: int = 0
    cache_dir: str = ""
    worker_module: str = "evaluator.slot.worker"
    spare_per_device: int = 1
    limits: Limits = field(default_factory=Limits)
    cuda_arch_list: Optional[str] = None  # "9.0"; None: torch decides
    start_timeout_s: float = 300.0
    max_start_failures: int = 3

    def active_target(self, device: str) -> int:
        return self.cpu_workers if device == "cpu" else self.workers_per_device


@dataclass(eq=False)
class Task:
    request: EvalRequest
    future: Future
    submitted_at: float
    stage: Stage = Stage.EVAL
    attempts: int = 1
    prebuilt: Optional[dict] = None  # the published record as the slot's worker reads it (JSON)
    build: Optional[CompileRecord] = None  # the published record of its compile
    done: bool = False
    compile_only: bool = False  # Pool.submit(compile_only=True): the future gets the published build record
    alone: bool = False  # retried after the GPU was full of other evaluations' memory: runs with its device to itself


@dataclass(eq=False)
class Worker:
    worker_id: str
    role: Role
    device: str
    popen: subprocess.Popen
    task_fd: int  # parent writes tasks here
    result_fd: int  # parent reads messages here
    pidfd: Optional[int]
    workdir: str
    out_path: str
    err_path: str
    spawned_at: float
    state: WorkerState = WorkerState.STARTING
    spare: bool = False
    device_name: str = ""
    buffer: bytearray = field(default_factory=bytearray)
    task: Optional[Task] = None
    task_started: bool = False
    deadline: Optional[float] = None
    dispatched_at: float = 0.0
    kill_reason: KillReason = KillReason.NONE
    channel_closed: bool = False
    timeout_limit_s: float = 0.0
    memory_used: int = 0  # resident bytes of its tree when the memory limit killed it
