"""Persistent, isolated worker processes that evaluate (and compile) candidates, driven by one dispatcher thread.
Deaths are seen the moment they happen (pidfd / pipe EOF), hangs are killed at their deadline, warm spares step in."""

from __future__ import annotations

import atexit
import collections
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from concurrent.futures import Future
from typing import Any, Optional

from evaluator.build.records import CompileRecord
from evaluator.contract.framing import HEADER, MAX_MESSAGE_BYTES, write_message
from evaluator.contract.types import EvalRequest, EvalResult, EvaluatorError, Verdict
from evaluator.isolation.environment import worker_environment
from evaluator.isolation.exits import describe_exit, tail
from evaluator.isolation.proctree import kill_tree
from evaluator.judging import timing
from evaluator.local.outcomes import build_verdict, crash_result, memory_result, timeout_result
from evaluator.local.records import KillReason, PoolConfig, Role, Stage, Task, Worker, WorkerState

JUDGE_GRACE_S = 15.0  # beyond a task's limit before the pool kills an eval slot whose judge did not answer

_LIVE_POOLS: "weakref.WeakSet[Pool]" = weakref.WeakSet()


@atexit.register
def _close_all_pools() -> None:
    for pool in list(_LIVE_POOLS):
        pool.close()


class Pool:
    """Owns every worker process; all state is touched only by the dispatcher thread."""

    def __init__(self, config: PoolConfig):
        self.config = config
        # Workers started later (spares, replacements) get the environment as it was when the pool was made.
        self._parent_env = dict(os.environ)
        self._root = tempfile.mkdtemp(prefix="krl-pool-")
        self._inbox: collections.deque = collections.deque()
        self._inbox_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._workers: list[Worker] = []
        self._eval_queue: collections.deque[Task] = collections.deque()
        self._compile_queue: collections.deque[Task] = collections.deque()
        self._start_failures: dict[str, int] = collections.defaultdict(int)
        self._broken: dict[str, str] = {}  # device (or "compile") -> why its workers cannot start
        self._respawn_at: dict[str, float] = {}
        self._compile_wanted = False
        self._next_id = 0
        self._closing = False
        self._accepting = True  # guarded by _inbox_lock; False once the dispatcher stopped taking requests
        self._closed = threading.Event()
        self.stats: dict[str, int] = collections.Counter()
        # The latest infrastructure failures' reasons, retried or not (a retried one leaves no trace in its result)
        self.recent_infrastructure: collections.deque[str] = collections.deque(maxlen=8)
        self.sandbox_kind = _choose_sandbox()
        self._thread = threading.Thread(target=self._run, name="krl-evaluator-pool", daemon=True)
        _LIVE_POOLS.add(self)
        self._thread.start()

    # ---------------------------------------------------------------- caller side (any thread)

    def submit(self, request: EvalRequest, build: Optional[dict] = None, compile_only: bool = False) -> Future:
        """A Future of the request's EvalResult. `build`: a CUDA candidate's record already published into this
        pool's cache by a trusted caller (built elsewhere, evaluator/scale/cluster_compile.py): no compile here.
        `compile_only`: build it only; the Future gets the published record (a dict), or an EvalResult when the
        build ended without one (timeout, crash, infrastructure failure)."""
        future: Future = Future()
        future.set_running_or_notify_cancel()
        with self._inbox_lock:
            if not self._accepting:
                future.set_exception(EvaluatorError("the evaluator is closed; create a new Evaluator."))
                return future
            try:
                record = CompileRecord.from_dict(build) if build is not None else None
            except (ValueError, TypeError) as exc:
                future.set_exception(EvaluatorError(f"the build record handed to the pool is unreadable ({exc})."))
                return future
            self._inbox.append(Task(request=request, future=future, submitted_at=time.monotonic(), build=record,
                                     compile_only=compile_only))
            self._wake()
        return future

    def snapshot(self) -> dict[str, Any]:
        """Worker pids and states (for tests and the benchmark); read without locks, so approximate."""
        return {
            "workers": [
                {"id": w.worker_id, "role": w.role, "device": w.device, "pid": w.popen.pid, "state": w.state,
                 "spare": w.spare}
                for w in list(self._workers)
            ],
            "stats": dict(self.stats),
            "recent_infrastructure_failures": list(self.recent_infrastructure),
            "broken": dict(self._broken),
        }

    def close(self, timeout_s: float = 10.0) -> None:
        if self._closed.is_set():
            return
        with self._inbox_lock:
            self._closing = True
            if self._accepting:
                self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        if self._thread.is_alive():  # the dispatcher is stuck: kill what we know of from here
            for worker in list(self._workers):
                kill_tree(worker.popen.pid)
        self._closed.set()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full, so a wake-up is already pending (or we are shut down)

    # ---------------------------------------------------------------- dispatcher thread

    def _run(self) -> None:
        try:
            while True:
                self._drain_inbox()
                if self._closing:
                    break
                self._maintain_workers()
                self._dispatch()
                timeout = self._next_timer()
                for key, _ in self._selector.select(timeout):
                    kind, worker = key.data
                    if kind == "wake":
                        _drain_fd(self._wake_r)
                    elif kind == "result":
                        self._on_readable(worker)
                    elif kind == "exit":
                        self._on_exit(worker)
                self._check_deadlines()
        except BaseException:  # a bug here must not leave callers waiting forever
            self._fail_everything("the evaluator's dispatcher failed:\n" + traceback.format_exc()[-2000:])
            raise
        finally:
            self._shutdown()

    def _next_timer(self) -> Optional[float]:
        now = time.monotonic()
        times = [w.deadline for w in self._workers if w.deadline is not None]
        times += list(self._respawn_at.values())
        if not times:
            return None
        return max(0.0, min(times) - now)

    def _drain_inbox(self) -> None:
        with self._inbox_lock:
            tasks = list(self._inbox)
            self._inbox.clear()
        for task in tasks:
            if self._closing:
                self._fail(task, EvaluatorError("the evaluator was closed before this request ran."))
                continue
            if task.build is not None:
                self._after_build(task, task.build)
            elif task.compile_only and (self.config.compile_workers < 1 or "compile" in self._broken):
                self._fail(task, EvaluatorError("this pool has no compile workers: " + self._broken.get("compile", "")))
            elif task.request.backend == "cuda" and self.config.compile_workers > 0 and "compile" not in self._broken:
                task.stage = Stage.COMPILE
                self._compile_wanted = True
                self._compile_queue.append(task)
            else:
                self._eval_queue.append(task)

    # ---- worker lifecycle

    def _maintain_workers(self) -> None:
        now = time.monotonic()
        for device in self.config.devices:
            if device in self._broken or self._respawn_at.get(device, 0) > now:
                continue
            self._respawn_at.pop(device, None)
            alive = [w for w in self._workers if w.role == Role.EVAL and w.device == device
                     and w.state not in (WorkerState.DEAD, WorkerState.RETIRING)]
            want = self.config.active_target(device) + self.config.spare_per_device
            for _ in range(want - len(alive)):
                self._spawn(Role.EVAL, device)
            self._balance_spares(device)
        if self._compile_wanted and "compile" not in self._broken and self._respawn_at.get("compile", 0) <= now:
            self._respawn_at.pop("compile", None)
            alive = [w for w in self._workers
                     if w.role == Role.COMPILE and w.state not in (WorkerState.DEAD, WorkerState.RETIRING)]
            for _ in range(self.config.compile_workers - len(alive)):
                self._spawn(Role.COMPILE, "cpu")

    def _balance_spares(self, device: str) -> None:
        """Ready workers beyond the active target wait as spares; a spare is promoted as soon as a slot frees."""
        ready = [w for w in self._workers
                 if w.role == Role.EVAL and w.device == device and w.state in (WorkerState.IDLE, WorkerState.BUSY)]
        active = [w for w in ready if not w.spare]
        target = self.config.active_target(device)
        for worker in ready:
            if worker.spare and len(active) < target:
                worker.spare = False
                active.append(worker)
                self.stats["spare_promotions"] += 1
        for worker in active[target:]:
            if worker.state == WorkerState.IDLE:
                worker.spare = True

    def _spawn(self, role: Role, device: str) -> None:
        self._next_id += 1
        worker_id = f"{role[0]}{self._next_id}-{device}"
        workdir = os.path.join(self._root, worker_id)
        os.makedirs(workdir)
        logs = os.path.join(self._root, "logs")
        os.makedirs(logs, exist_ok=True)
        out_path, err_path = os.path.join(logs, worker_id + ".out"), os.path.join(logs, worker_id + ".err")
        extra = {
            "KRL_WORKER_MODULE": self.config.worker_module,
            "KRL_WORKER_CACHE_DIR": self.config.cache_dir,
            "KRL_EVAL_CACHE_DIR": self.config.cache_dir,
            "KRL_WORKER_LIMITS": json.dumps(self._limits_for(role, device)),
            "KRL_WORKER_SANDBOX": self.sandbox_kind,
        }
        if self.config.cache_dir:
            extra["TRITON_CACHE_DIR"] = os.path.join(self.config.cache_dir, "triton")
            extra["TORCH_EXTENSIONS_DIR"] = os.path.join(self.config.cache_dir, "torch_extensions")
        if self.config.cuda_arch_list:
            extra["TORCH_CUDA_ARCH_LIST"] = self.config.cuda_arch_list
        extra.update(timing.placement_env(role, device, self.config.devices))
        if role == Role.COMPILE:
            extra["CUDA_VISIBLE_DEVICES"] = ""  # compile workers never touch a GPU
            extra["MAX_JOBS"] = "2"
        elif device == "cpu":
            extra["TRITON_INTERPRET"] = "1"
            extra["CUDA_VISIBLE_DEVICES"] = ""
            threads = max(1, (os.cpu_count() or 1) // max(1, self.config.cpu_workers))
            extra["OMP_NUM_THREADS"] = str(threads)
        else:
            extra["CUDA_VISIBLE_DEVICES"] = _physical_gpu(int(device.split(":")[1]))
            # The judges that may time on this GPU at once (slot/timing_phase.staging_budget shares it among them).
            extra[timing.DEVICE_SLOTS_ENV] = str(self.config.active_target(device) + self.config.spare_per_device)
        env = worker_environment(self._parent_env, workdir, extra)
        result_r, result_w = os.pipe()
        out_file, err_file = open(out_path, "ab"), open(err_path, "ab")
        child_device = device if role == Role.COMPILE or device == "cpu" else "cuda:0"
        argv = [sys.executable, "-m", "evaluator.slot.entry", str(role), child_device, worker_id, str(result_w),
                str(os.getpid())]
        try:
            if role == Role.COMPILE and self.sandbox_kind != "none":
                popen = self._start_sandboxed_compile_worker(workdir, extra, argv, out_file, err_file, result_w)
            else:
                popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out_file, stderr=err_file, cwd=workdir,
                                         env=env, pass_fds=(result_w,), start_new_session=True, close_fds=True)
        finally:
            os.close(result_w)
            out_file.close()
            err_file.close()
        os.set_blocking(result_r, False)
        pidfd = None
        try:
            pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):
            pass  # old kernel: the result pipe's end of file still tells us
        worker = Worker(worker_id=worker_id, role=role, device=device, popen=popen, task_fd=popen.stdin.fileno(),
                         result_fd=result_r, pidfd=pidfd, workdir=workdir, out_path=out_path, err_path=err_path,
                         spawned_at=time.monotonic(), deadline=time.monotonic() + self.config.start_timeout_s)
        self._selector.register(result_r, selectors.EVENT_READ, ("result", worker))
        if pidfd is not None:
            self._selector.register(pidfd, selectors.EVENT_READ, ("exit", worker))
        self._workers.append(worker)
        self.stats["spawned"] += 1

    def _start_sandboxed_compile_worker(self, workdir: str, extra: dict[str, str], argv: list[str], out_file: Any,
                                        err_file: Any, result_w: int) -> subprocess.Popen:
        """A compile worker runs the candidate's Python (its load_inline calls): in the sandbox, with the build cache
        read-only; it builds in its private folder and _on_build publishes what it built (evaluator.build.compile)."""
        from evaluator.isolation.sandbox import get_sandbox, worker_spec

        extra = {k: v for k, v in extra.items() if k not in ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR")}
        extra["KRL_WORKER_SANDBOXED"] = "1"
        spec = worker_spec(workdir, self._parent_env, extra_env=extra, cache_dir=self.config.cache_dir)
        self._warm_precompiled_headers_once(extra)
        return get_sandbox(self.sandbox_kind).popen(spec, argv, stdin=subprocess.PIPE, stdout=out_file,
                                                    stderr=err_file, pass_fds=(result_w,), start_new_session=True,
                                                    close_fds=True)

    def _warm_precompiled_headers_once(self, extra: dict[str, str]) -> None:
        """Sandboxed builders only read the torch PCH (one made where a candidate ran could be planted for later
        builds): a fresh sandboxed process that runs no candidate code makes it, in the background, once per pool,
        with only the cache's pch/ folder writable. GPU mode only (KRL_WARM_PCH=0: never, =1: also in CPU mode)."""
        wanted = os.environ.get("KRL_WARM_PCH", "")
        if getattr(self, "_pch_warmer", None) is not None or wanted == "0" or (
                wanted != "1" and all(d == "cpu" for d in self.config.devices)):
            return
        from evaluator.build.compile import default_cache_dir
        from evaluator.isolation.sandbox import get_sandbox, worker_spec

        cache = self.config.cache_dir or default_cache_dir()
        pch, private = os.path.join(cache, "pch"), os.path.join(self._root, "pch-warmer")
        os.makedirs(pch, exist_ok=True)
        os.makedirs(private, exist_ok=True)
        spec = worker_spec(private, self._parent_env, extra_env=extra, cache_dir=cache, writable=(pch,))
        with open(os.path.join(self._root, "logs", "pch-warmer.err"), "ab") as err_file:
            self._pch_warmer = get_sandbox(self.sandbox_kind).popen(
                spec, [sys.executable, "-m", "evaluator.build.compile", "warm-pch", cache], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=err_file, start_new_session=True, close_fds=True)

    def _limits_for(self, role: Role, device: str) -> dict[str, Any]:
        limits = dict(vars(self.config.limits))
        if role == Role.COMPILE:
            # Precompiled headers and objects are large; a flood is still bounded per task.
            limits["file_size_bytes"] = max(limits["file_size_bytes"], 2 * 2**30)
            limits["address_space_bytes"] = None
        elif device != "cpu":
            limits["address_space_bytes"] = None
        return limits

    # ---- messages

    def _on_readable(self, worker: Worker) -> None:
        try:
            data = os.read(worker.result_fd, 1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            # End of file: the worker is dying, or its candidate closed the channel. The exit handler reports
            # which; a worker still alive a moment later is killed (it can no longer answer).
            self._selector.unregister(worker.result_fd)
            os.close(worker.result_fd)
            worker.result_fd = -1
            if worker.state != WorkerState.DEAD and not worker.kill_reason:
                worker.channel_closed = True
                worker.deadline = time.monotonic() + 1.0
                if worker.pidfd is None:
                    try:
                        worker.popen.wait(1.0)
                    except subprocess.TimeoutExpired:
                        worker.kill_reason = KillReason.CHANNEL
                        kill_tree(worker.popen.pid)
                    self._on_exit(worker)
            return
        worker.buffer += data
        while len(worker.buffer) >= HEADER.size:
            (length,) = HEADER.unpack_from(worker.buffer)
            if length > MAX_MESSAGE_BYTES:
                self._ipc_failure(worker, f"message of {length} bytes")
                return
            if len(worker.buffer) < HEADER.size + length:
                return
            body = bytes(worker.buffer[HEADER.size:HEADER.size + length])
            del worker.buffer[:HEADER.size + length]
            try:
                message = json.loads(body)
            except ValueError:
                self._ipc_failure(worker, "unreadable message")
                return
            self._on_message(worker, message)

    def _ipc_failure(self, worker: Worker, why: str) -> None:
        self.stats["ipc_failures"] += 1
        worker.kill_reason = KillReason.IPC
        worker.buffer.clear()
        kill_tree(worker.popen.pid)

    def _on_message(self, worker: Worker, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "ready":
            worker.state = WorkerState.IDLE
            worker.deadline = None
            worker.device_name = message.get("device_name", "")
            worker.spare = worker.role == Role.EVAL  # _balance_spares promotes it if a slot is free
            self._start_failures[worker.device if worker.role == Role.EVAL else "compile"] = 0
            if worker.role == Role.EVAL:
                self._balance_spares(worker.device)
            return
        task = worker.task
        if task is None or message.get("task") != id(task):
            if kind in ("started", "result", "error", "infra"):
                self._ipc_failure(worker, "message for a task it does not hold")
            return
        if kind == "started":
            worker.task_started = True
            return
        worker.task, worker.task_started, worker.deadline = None, False, None
        worker.state = WorkerState.IDLE
        counters = message.get("counters")
        if isinstance(counters, dict):  # the judge's own account of its runners (crashes, timeouts, restarts)
            for name, count in counters.items():
                if isinstance(name, str) and type(count) is int:
                    self.stats[name] += count
        if kind == "infra":
            self.stats["slot_infra_failures"] += 1
            alone_now = bool(message.get("device_full")) and not task.alone
            if alone_now:
                # Out of GPU memory beside other evaluations: the retry has the device to itself, so its verdict
                # cannot depend on what the neighbours held (a 48-kernel batch at 8 slots lost 11 of 48 this way).
                # Even after another failure: a task gets this retry once, so at most three attempts.
                task.alone = True
                self.stats["retried_alone"] += 1
            self._infrastructure_failure(task, str(message.get("why", ""))[:1000], retry=alone_now)
        elif kind == "error":
            self.stats["worker_errors"] += 1
            self._infrastructure_failure(task, "the evaluator's worker raised an internal error:\n" + message.get("traceback", ""))
        elif worker.role == Role.COMPILE:
            self._on_build(task, worker, message.get("build") or {})
        else:
            self._on_result(task, worker, message.get("result") or {})
        if message.get("leftovers"):
            self.stats["leftover_processes_killed"] += int(message["leftovers"])
        if message.get("retire"):
            self.stats["retired"] += 1
            self._retire(worker)

    def _on_build(self, task: Task, worker: Worker, build: dict[str, Any]) -> None:
        from evaluator.build.artefacts import publish_compile
        from evaluator.build.compile import default_cache_dir

        # The worker ran candidate code: its record is only a claim. The trusted side moves what it built into the
        # content-addressed cache and hands the eval side the published record, never the worker's.
        record = publish_compile(build, worker.workdir, self.config.cache_dir or default_cache_dir(),
                                 task.request.candidate_source)
        if task.compile_only:
            task.done = True
            self.stats["builds"] += 1
            task.future.set_result(record.to_dict())
            return
        self._after_build(task, record)

    def _after_build(self, task: Task, record: CompileRecord) -> None:
        """A published build: a verdict already (it failed; CPU mode cannot run CUDA), or on to an eval worker."""
        task.build = record
        result = build_verdict(task.request, record, cpu_mode=all(d == "cpu" for d in self.config.devices))
        if result is not None:
            self._finish(task, result)
            return
        task.prebuilt = record.to_dict()  # what the slot's worker reads (JSON on the wire)
        task.stage = Stage.EVAL
        self._eval_queue.appendleft(task)  # it already waited for its compile

    def _on_result(self, task: Task, worker: Worker, data: dict[str, Any]) -> None:
        try:
            result = EvalResult.from_dict(data)
        except Exception as exc:
            self._infrastructure_failure(task, f"the worker sent an unreadable result ({exc!r})")
            return
        result.request_id = task.request.request_id
        result.attempts = task.attempts
        result.worker_id = worker.worker_id
        if task.build is not None:
            result.phase_times_s["compile"] = task.build.seconds
            if task.build.cache_hit and "compile" not in result.cache_hits:
                result.cache_hits.append("compile")
            result.compiled = result.compiled or task.build.ok
        now = time.monotonic()
        # queue: waiting for a free worker (and for a compile); overhead: the pool's own cost around the worker.
        result.phase_times_s["queue"] = round(worker.dispatched_at - task.submitted_at, 6)
        result.phase_times_s["overhead"] = round(max(0.0, now - worker.dispatched_at
                                                     - float(result.phase_times_s.get("total", 0.0))), 6)
        result.phase_times_s["end_to_end"] = round(now - task.submitted_at, 6)
        self._finish(task, result)

    # ---- deaths, timeouts, retries

    def _on_exit(self, worker: Worker) -> None:
        if worker.state == WorkerState.DEAD:
            return
        if worker.result_fd >= 0:  # a message written just before dying still counts
            self._on_readable(worker)
            if worker.result_fd >= 0 and worker.state != WorkerState.DEAD:
                self._selector.unregister(worker.result_fd)
                os.close(worker.result_fd)
                worker.result_fd = -1
        returncode = worker.popen.wait()
        if worker.pidfd is not None:
            self._selector.unregister(worker.pidfd)
            os.close(worker.pidfd)
            worker.pidfd = None
        try:
            worker.popen.stdin.close()
        except OSError:
            pass
        was_starting = worker.state == WorkerState.STARTING
        worker.state = WorkerState.DEAD
        worker.deadline = None
        self._workers.remove(worker)
        cause = describe_exit(returncode)
        key = worker.device if worker.role == Role.EVAL else "compile"
        if was_starting and worker.kill_reason != KillReason.CLOSE:
            self.stats["start_failures"] += 1
            self._start_failures[key] += 1
            if self._start_failures[key] >= self.config.max_start_failures:
                self._mark_broken(key, f"{cause}: {tail(worker.err_path, max_lines=3)}")
            else:
                self._respawn_at[key] = time.monotonic() + 0.5 * self._start_failures[key]
        task = worker.task
        worker.task = None
        if task is not None:
            self._report_death(task, worker, cause)
        if worker.role == Role.EVAL and worker.device not in self._broken:
            self._balance_spares(worker.device)
        shutil.rmtree(worker.workdir, ignore_errors=True)

    def _report_death(self, task: Task, worker: Worker, cause: str) -> None:
        elapsed_s = time.monotonic() - task.submitted_at
        if worker.kill_reason == KillReason.TIMEOUT:
            self.stats["timeouts"] += 1
            self._finish(task, timeout_result(task, worker, elapsed_s))
        elif worker.kill_reason == KillReason.MEMORY:
            self.stats["memory_kills"] += 1
            self._finish(task, memory_result(task, worker, self.config.limits.resident_bytes or 0, elapsed_s))
        elif not worker.task_started or worker.kill_reason == KillReason.IPC or worker.role == Role.EVAL:
            # (An eval slot is the trusted judge: the candidate runs in its runners, so its death is ours.)
            # The candidate never ran (or the channel broke): not the candidate's fault, so try once more.
            self._infrastructure_failure(task, f"the worker process failed before it could run the request ({cause}).")
        else:
            self.stats["crashes"] += 1
            self._finish(task, crash_result(task, worker, cause, elapsed_s))

    def _infrastructure_failure(self, task: Task, why: str, retry: bool = False) -> None:
        self.recent_infrastructure.append(f"{task.request.problem_id} (attempt {task.attempts}): {why[-400:]}")
        if task.attempts < 2 or retry:
            task.attempts += 1
            self.stats["retries"] += 1
            queue = self._compile_queue if task.stage == Stage.COMPILE else self._eval_queue
            queue.appendleft(task)
            return
        self._finish(task, EvalResult(
            request_id=task.request.request_id, problem_id=task.request.problem_id, verdict=Verdict.CRASHED,
            error_message=("Evaluator infrastructure failure (not the candidate's fault), twice: " + why)[:2000],
            attempts=task.attempts, phase_times_s={"total": time.monotonic() - task.submitted_at},
        ))

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.deadline is None or worker.deadline > now or worker.kill_reason:
                continue
            if worker.channel_closed:
                worker.kill_reason = KillReason.CHANNEL
            elif worker.state == WorkerState.STARTING:
                worker.kill_reason = KillReason.START_TIMEOUT
            elif worker.state == WorkerState.RETIRING:
                worker.kill_reason = KillReason.RETIRE
            else:
                worker.kill_reason = KillReason.TIMEOUT
            kill_tree(worker.popen.pid)
            worker.deadline = None
            if worker.pidfd is None:  # no pidfd: reap here rather than wait for the pipe
                self._on_exit(worker)

    def _retire(self, worker: Worker) -> None:
        worker.state = WorkerState.RETIRING
        worker.kill_reason = KillReason.RETIRE
        try:
            write_message(worker.task_fd, {"type": "exit"})
        except OSError:
            pass
        worker.deadline = time.monotonic() + 5.0
        if worker.role == Role.EVAL:
            self._balance_spares(worker.device)

    def _mark_broken(self, key: str, why: str) -> None:
        self._broken[key] = why
        self._respawn_at.pop(key, None)
        if key == "compile":
            # Without compile workers, GPU workers build candidates themselves.
            while self._compile_queue:
                task = self._compile_queue.popleft()
                task.stage = Stage.EVAL
                self._eval_queue.append(task)
            return
        if all(device in self._broken for device in self.config.devices):
            while self._eval_queue:
                self._fail(self._eval_queue.popleft(), EvaluatorError(
                    f"no evaluation worker could start ({len(self.config.devices)} device(s)); last failure: {why[-1500:]}"))

    # ---- dispatch

    def _dispatch(self) -> None:
        if all(device in self._broken for device in self.config.devices):
            while self._eval_queue:
                self._fail(self._eval_queue.popleft(), EvaluatorError(
                    "no evaluation worker could start: " + next(iter(self._broken.values()))[-1500:]))
        for worker in self._workers:
            if worker.state != WorkerState.IDLE or worker.spare:
                continue
            queue = self._compile_queue if worker.role == Role.COMPILE else self._eval_queue
            if not queue:
                continue
            if worker.role == Role.EVAL:
                running = [w.task for w in self._workers
                           if w.role == Role.EVAL and w.device == worker.device and w.task is not None]
                if not may_start(queue[0].alone, [t.alone for t in running]):
                    continue
            task = queue.popleft()
            self._send(worker, task)

    def _send(self, worker: Worker, task: Task) -> None:
        request = task.request
        message: dict[str, Any] = {"type": worker.role, "task": id(task), "request": request.to_dict()}
        if worker.role == Role.COMPILE:
            limit = request.compile_timeout_s
        else:
            message["prebuilt"] = task.prebuilt
            message["alone"] = task.alone
            limit = request.run_timeout_s
            if request.backend == "cuda" and not (task.prebuilt and task.prebuilt.get("ok")):
                limit += request.compile_timeout_s  # the worker builds it itself
            elif request.backend == "triton":
                limit += min(request.compile_timeout_s, 120.0)  # Triton compiles on first launch
        worker.task, worker.task_started, worker.state = task, False, WorkerState.BUSY
        worker.dispatched_at = time.monotonic()
        worker.timeout_limit_s = limit
        # An eval slot's judge enforces the limit on its runner; the pool's deadline only backs it up.
        message["limit_s"] = limit
        worker.deadline = worker.dispatched_at + limit + (JUDGE_GRACE_S if worker.role == Role.EVAL else 0.0)
        try:
            write_message(worker.task_fd, message)
        except OSError:
            # Its death will be reported by the exit handler, which retries the task.
            worker.kill_reason = KillReason.IPC
            kill_tree(worker.popen.pid)

    # ---- results

    def _finish(self, task: Task, result: EvalResult) -> None:
        if task.done:
            self.stats["duplicate_results_dropped"] += 1
            return
        task.done = True
        self.stats["results"] += 1
        result.phase_times_s.setdefault("total", time.monotonic() - task.submitted_at)
        task.future.set_result(result)

    def _fail(self, task: Task, error: BaseException) -> None:
        if task.done:
            return
        task.done = True
        task.future.set_exception(error)

    def _fail_everything(self, why: str) -> None:
        error = EvaluatorError(why)
        for queue in (self._eval_queue, self._compile_queue):
            while queue:
                self._fail(queue.popleft(), error)
        for worker in self._workers:
            if worker.task is not None:
                self._fail(worker.task, error)
        with self._inbox_lock:
            if self._closing:
                self._accepting = False
            pending = list(self._inbox)
            self._inbox.clear()
        for task in pending:
            self._fail(task, error)

    def _shutdown(self) -> None:
        self._closing = True
        warmer = getattr(self, "_pch_warmer", None)
        if warmer is not None and warmer.poll() is None:
            kill_tree(warmer.pid)
        self._fail_everything("the evaluator was closed before this request finished.")
        for worker in self._workers:
            worker.kill_reason = worker.kill_reason or KillReason.CLOSE
            try:
                write_message(worker.task_fd, {"type": "exit"})
            except OSError:
                pass
        end = time.monotonic() + 1.0
        for worker in self._workers:
            try:
                worker.popen.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            kill_tree(worker.popen.pid)
            try:
                worker.popen.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
            for fd in (worker.result_fd, worker.pidfd):
                if fd is not None and fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            try:
                worker.popen.stdin.close()
            except OSError:
                pass
        self._workers.clear()
        self._selector.close()
        with self._inbox_lock:
            self._accepting = False
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._root, ignore_errors=True)
        self._closed.set()


# ---------------------------------------------------------------- helpers

_REPORTED_SANDBOX: list[str] = []


def may_start(alone: bool, running_alone: list[bool]) -> bool:
    """Whether a task may start on a device whose running tasks are `running_alone` (each: whether it has the device
    to itself): a task that must run alone waits until the device is empty, and nothing joins one that runs alone.
    Waiting at the queue's head, an alone task also holds back the tasks behind it, so the device drains for it."""
    if any(running_alone):
        return False
    return not (alone and running_alone)


def _choose_sandbox() -> str:
    """The sandbox kind every slot of this process uses ($KRL_SANDBOX or the strongest that works), said loudly on
    stderr the first time when it is weaker than bubblewrap."""
    from evaluator.isolation.sandbox import isolation_report

    report = isolation_report()
    if not _REPORTED_SANDBOX:
        _REPORTED_SANDBOX.append(report.kind)
        if not report.strong:
            print("kernelrl evaluator: " + "\n".join(report.lines()), file=sys.stderr, flush=True)
    return report.kind

def _drain_fd(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, OSError):
        pass


def _physical_gpu(index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if index < len(entries):
            return entries[index]
    return str(index)


