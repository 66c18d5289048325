"""The evaluator on a Ray cluster: one long-lived actor per GPU (per CPU slot on CPU-only nodes) owns a local pool;
CUDA builds run on compile actors of every node (cluster_compile.py). Exactly once: a dead actor's requests go
elsewhere once, then `crashed`."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Optional

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from evaluator.contract.types import EvalRequest, EvalResult, EvaluatorBusy, EvaluatorError
from evaluator.local.evaluator import Evaluator
from evaluator.scale.backpressure import QueuedEvaluator
from evaluator.scale.cluster_compile import (ActorState, BuildRefused, CompileActor, CompileFleet, first_line,
                                             infrastructure_result, install_build, release_dead_actor)

MAINTAIN_EVERY_S = 2.0  # how often nodes are re-read, missing actors started and actor stats refreshed
THROUGHPUT_WINDOW_S = 60.0
MAX_START_FAILURES = 3  # an actor slot whose actor failed to start this often in a row is marked broken
# Environment the driver passes on to its actors (where the cache lives, how workers import tests' stand-ins).
FORWARDED_ENV = ("PYTHONPATH", "KRL_CACHE_DIR", "KRL_CACHE_MAX_GB", "TORCH_CUDA_ARCH_LIST", "KRL_WARM_PCH")


# ---------------------------------------------------------------- the actor (runs on a node)

def actor_slots(setting: Any) -> Any:
    """Slots for an actor's one GPU: a number as given; "auto" shares the host's slots among every GPU the driver lists
    there, since the cluster puts an actor on each (local/evaluator.slots_per_gpu: one driver lock per host)."""
    if setting != "auto":
        return setting
    from evaluator.isolation.gpu_nodes import host_gpus
    from evaluator.local.evaluator import slots_per_gpu

    return slots_per_gpu("auto", 1, sharing_gpus=len(host_gpus()))


class EvalActor:
    """Lives in one Ray worker process on one node and owns a local Evaluator there: over the one GPU Ray gave it, or
    over the CPU. Requests and results cross Ray as JSON text, never pickled objects."""

    def __init__(self, options_json: str, env: dict[str, str]):
        os.environ.update(env)
        options = json.loads(options_json)
        gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        self.gpu_ids = gpu_ids
        self.node = ray.util.get_node_ip_address()
        self.gpu_name = _gpu_name(gpu_ids[0]) if gpu_ids else ""
        # Ray has set CUDA_VISIBLE_DEVICES to this actor's GPU, so "auto" finds exactly that one.
        options["devices"] = "auto" if gpu_ids else "cpu"
        if gpu_ids:
            options["workers_per_device"] = actor_slots(options.get("workers_per_device", "auto"))
        self.evaluator = Evaluator(**options)
        self.parallel = options.get("cpu_workers", 2) if self.evaluator.cpu_mode else self.evaluator.workers_per_device

    def describe(self) -> dict[str, Any]:
        # Devices by physical GPU index: inside the actor every GPU is cuda:0.
        devices = [f"gpu{g}" for g in self.gpu_ids] or list(self.evaluator.devices)
        return {"node": self.node, "gpu_name": self.gpu_name, "devices": devices,
                "cpu_mode": self.evaluator.cpu_mode, "parallel": int(self.parallel), "pid": os.getpid(),
                "arch": self.evaluator._pool.config.cuda_arch_list or ""}

    async def evaluate(self, request_json: str, build_manifest: Optional[str] = None,
                       build_bytes: Optional[bytes] = None) -> str:
        """One request; with a build made on a compile node (its manifest and bytes, which Ray fetched to this
        node), which is verified and published into this node's cache first, so the pool does not build it."""
        import asyncio

        try:
            request = EvalRequest.from_dict(json.loads(request_json))
            if build_manifest is None:
                future = self.evaluator.submit(request)
            else:
                started = time.monotonic()
                try:
                    build = await asyncio.to_thread(install_build, build_manifest, build_bytes,
                                                    self.evaluator.cache_dir, request.candidate_source)
                except BuildRefused as exc:
                    return json.dumps({"refused": str(exc)})
                install_s = time.monotonic() - started
                future = self.evaluator._pool.submit(request, build=build)  # checked by the driver already
            result = await asyncio.wrap_future(future)
        except EvaluatorError as exc:  # this node's pool cannot run it: the driver tries elsewhere
            return json.dumps({"error": str(exc)})
        if build_manifest is not None:
            result.phase_times_s["build_install"] = round(install_s, 6)
        data = result.to_dict()
        # The worker names its host and GPU; the Ray node's address stands in where it did not.
        data["node"] = data.get("node") or self.node
        data["gpu_name"] = data.get("gpu_name") or self.gpu_name
        data["worker_id"] = f"{self.node}:{os.getpid()}/{data.get('worker_id', '')}"
        return json.dumps(data)

    def stats(self) -> str:
        data = self.evaluator.stats()
        data["gpu_util_percent"] = _gpu_util_percent(self.gpu_ids)  # for the TUI's cluster view
        return json.dumps(data)

    def close(self) -> None:
        self.evaluator.close()


def _gpu_util_percent(gpu_ids: list[str]) -> Optional[float]:
    """The actor's GPU's utilisation now, through NVML (physical index); None without a GPU, driver or nvidia-ml-py."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return float(pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(int(gpu_ids[0]))).gpu)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no GPU (CPU actor: gpu_ids is empty), no driver, no package
        return None


def _gpu_name(physical_index: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", "-i", physical_index, "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        return out.splitlines()[0] if out else ""
    except (OSError, subprocess.SubprocessError):
        return ""


# ---------------------------------------------------------------- the driver side

@dataclass(eq=False)
class _Job:
    request: EvalRequest
    payload: str  # the request as JSON, sent unchanged on every attempt
    future: Future
    submitted_at: float
    attempts: int = 0
    tried: set = field(default_factory=set)  # slot keys whose actor failed it
    dispatched_at: float = 0.0
    # A CUDA request's build on a compile actor (cluster_compile.CompileFleet): tries, where, and what came back.
    compile_attempts: int = 0
    compile_tried: set = field(default_factory=set)
    compile_dispatched_at: float = 0.0
    compile_slot: str = ""
    build_manifest: Optional[str] = None
    build_blob: Any = None  # the ObjectRef of the artefact bytes: fetched by the evaluating node, not the driver

    def answer_limit_s(self, grace_s: float) -> float:
        """Longest an actor may take to answer: the pool's own deadlines (a compile, a run, a retry) plus grace."""
        return self.request.compile_timeout_s + 2 * self.request.run_timeout_s + grace_s


@dataclass(eq=False)
class _Slot:
    """One actor place: a GPU of a node, or a CPU share of a CPU-only node. Its actor may be replaced."""

    key: str  # "<node id>/gpu0" | "<node id>/cpu0"
    node_id: str
    gpus: int
    handle: Any = None
    state: ActorState = ActorState.STARTING
    started_at: float = 0.0
    info: dict = field(default_factory=dict)
    capacity: int = 2
    in_flight: dict = field(default_factory=dict)  # ObjectRef -> _Job
    done: int = 0
    failures: int = 0
    finished_at: collections.deque = field(default_factory=collections.deque)
    pool: dict = field(default_factory=dict)  # the actor's latest Evaluator.stats()
    stats_asked_at: float = 0.0
    why: str = ""


class ClusterEvaluator(QueuedEvaluator):
    """An evaluator whose workers are Ray actors, one per GPU of every node (`num_gpus=1`, never a fraction: two
    timed evaluations never share a device), or `cpu_actors_per_node` CPU actors on nodes without GPUs. Each actor
    owns a local Evaluator (its pool, sandbox and compile workers run on that node), so an evaluation's reference and
    candidate are timed on the same GPU. `address`: None starts a Ray instance here; else what ray.init takes
    ("auto", "ray://HOST:10001"). `max_queue` bounds the requests not yet sent to an actor; past it submit raises
    EvaluatorBusy. `evaluator_options` go to every node's Evaluator (cpu_workers, workers_per_device, ...).
    Nodes without GPUs get CPU actors only when no node has a GPU.

    CUDA builds: every node with CPUs left beyond its evaluation actors' gets a compile actor with
    `compile_workers_per_node` sandboxed compile workers (None: one per CPU left; 0: off, each actor's pool builds
    as on one machine), caching under `compile_cache_dir` (default: the evaluators' cache_dir). A build travels to
    the evaluating node as bytes through Ray's object store (`compile_transfer="object_store"`), or through the
    cache folder itself when every node mounts it at the same path ("shared_folder")."""

    def __init__(self, address: Optional[str] = None, *, evaluator_options: Optional[dict[str, Any]] = None,
                 cpu_actors_per_node: int = 1, actor_cpus: float = 1.0, max_queue: int = 10_000,
                 in_flight_per_worker: int = 2, start_timeout_s: float = 300.0, actor_env: Optional[dict] = None,
                 num_cpus: Optional[int] = None, stall_grace_s: float = 120.0,
                 compile_workers_per_node: Optional[int] = None, compile_cache_dir: Optional[str] = None,
                 compile_transfer: str = "object_store"):
        if cpu_actors_per_node < 1 or max_queue < 1 or in_flight_per_worker < 1:
            raise EvaluatorError("cpu_actors_per_node, max_queue and in_flight_per_worker must be at least 1.")
        self.address = address or "local"
        self._owns_ray = False
        if not ray.is_initialized():
            try:
                if address is None:
                    # address="local": always a new instance; without it ray.init joins any cluster already
                    # running on this machine (RAY_ADDRESS or the last one started), e.g. another test's.
                    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
                    self._owns_ray = True
                else:
                    ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise EvaluatorError(f"cannot connect to Ray at {address or 'a new local instance'}: {exc}") from None
        self._options_json = json.dumps(evaluator_options or {})
        self._env = dict(actor_env) if actor_env is not None else \
            {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        self._cpu_actors_per_node = cpu_actors_per_node
        self._actor_cpus = actor_cpus
        self.max_queue = max_queue
        # An actor that has not answered a request within its deadlines plus this is stuck: killed, work moved.
        self.stall_grace_s = stall_grace_s
        self._in_flight_per_worker = in_flight_per_worker
        self._start_timeout_s = start_timeout_s
        self._actor_class = ray.remote(EvalActor)
        self._lock = threading.RLock()
        self._pending: collections.deque[_Job] = collections.deque()
        self._retry: collections.deque[_Job] = collections.deque()  # failed once on some actor: go first, elsewhere
        self._slots: dict[str, _Slot] = {}
        self._graveyard: collections.deque[dict] = collections.deque(maxlen=20)  # rows of dead actors, for stats
        self._refs: dict[Any, tuple[str, _Slot, Optional[_Job]]] = {}
        self._start_failures: collections.Counter = collections.Counter()
        self._respawn_at: dict[str, float] = {}
        self._broken: dict[str, str] = {}
        self._counters: collections.Counter = collections.Counter()
        self.closing = False
        self._maintained_at = 0.0
        self._no_actor_since: Optional[float] = None
        self._wanted_count = 0
        eval_cache = (evaluator_options or {}).get("cache_dir") or self._env.get("KRL_CACHE_DIR") or ""
        if compile_transfer == "shared_folder" and compile_cache_dir not in (None, eval_cache):
            raise EvaluatorError("compile_transfer='shared_folder' builds into the evaluators' own cache_dir; "
                                 "leave compile_cache_dir unset (or equal to it).")
        self._fleet = CompileFleet(
            ray.remote(CompileActor), self._refs, self._counters, self._env, workers_per_node=compile_workers_per_node,
            cache_dir=compile_cache_dir or eval_cache, transfer=compile_transfer, start_timeout_s=start_timeout_s,
            stall_grace_s=lambda: self.stall_grace_s, affinity=lambda node_id: NodeAffinitySchedulingStrategy(
                node_id, soft=False))
        with self._lock:
            self._maintain(force=True)
        self._thread = threading.Thread(target=self._run, name="krl-ray-driver", daemon=True)
        self._thread.start()
        self._wait_first_ready(start_timeout_s)

    # ---------------------------------------------------------------- EvaluatorLike

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        future = self.running_future(request)
        with self._lock:
            self.refuse_when_closing()
            depth = self._queue_depth()
            if depth >= self.max_queue:
                self._counters["rejected_busy"] += 1
                raise EvaluatorBusy(f"the cluster's queue is full ({depth} requests waiting); retry later.", depth)
            job = _Job(request, json.dumps(request.to_dict()), future, time.monotonic())
            if request.backend == "cuda" and self._fleet.accepting():
                self._fleet.submit(job)  # built on a compile actor first, then evaluated with that build
            else:
                self._pending.append(job)
            self._counters["submitted"] += 1
            self._dispatch()
        return future

    def stats(self) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            rows = [self._row(slot, now) for slot in self._slots.values()] + list(self._graveyard)
            # queue_depth counts every request not yet with an actor, those waiting for a build included.
            return {"kind": "ray", "address": self.address, "queue_depth": self._queue_depth(),
                    "in_flight": sum(len(s.in_flight) for s in self._slots.values()), "max_queue": self.max_queue,
                    "nodes": rows, "stats": dict(self._counters), "broken": dict(self._broken),
                    **self._fleet.summary()}

    def _queue_depth(self) -> int:
        return len(self._pending) + len(self._retry) + self._fleet.depth()

    @property
    def devices(self) -> list[str]:
        with self._lock:
            return [f"{s.info.get('node', s.node_id[:8])}:{','.join(s.info.get('devices', []))}"
                    for s in self._slots.values() if s.state == ActorState.READY]

    @property
    def cpu_mode(self) -> bool:
        with self._lock:
            ready = [s for s in self._slots.values() if s.state == ActorState.READY]
            return all(s.info.get("cpu_mode", True) for s in ready)

    def actor_handles(self) -> dict[str, Any]:
        """Slot key -> live actor handle (for tests and operators that need to reach one actor)."""
        with self._lock:
            return {s.key: s.handle for s in self._slots.values() if s.state != ActorState.DEAD}

    def compile_actor_handles(self) -> dict[str, Any]:
        """Slot key ("<node id>/compile") -> live compile actor handle (for tests and operators)."""
        with self._lock:
            return {s.key: s.handle for s in self._fleet.slots.values() if s.state != ActorState.DEAD}

    def close(self) -> None:
        with self._lock:
            if self.closing:
                return
            self.closing = True
        self._thread.join(timeout=10.0)
        with self._lock:
            error = EvaluatorError("the evaluator was closed before this request finished.")
            for job in list(self._pending) + list(self._retry):
                _fail(job, error)
            self._pending.clear()
            self._retry.clear()
            for slot in self._slots.values():
                for job in slot.in_flight.values():
                    _fail(job, error)
                slot.in_flight.clear()
            handles = [s.handle for s in self._slots.values() if s.handle is not None and s.state != ActorState.DEAD]
            compiling, compile_handles = self._fleet.close()
            for job in compiling:
                _fail(job, error)
            handles += compile_handles
        closing = []
        for handle in handles:
            try:
                closing.append(handle.close.remote())
            except Exception:  # noqa: BLE001 - a dead actor needs no closing
                pass
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=15.0)
        for handle in handles:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        if self._owns_ray:
            ray.shutdown()

    # ---------------------------------------------------------------- driver thread

    def _run(self) -> None:
        while True:
            with self._lock:
                if self.closing:
                    return
                refs = list(self._refs)
            if not refs:
                time.sleep(0.05)
            else:
                ready, rest = ray.wait(refs, num_returns=1, timeout=0.2)
                if ready and rest:
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    ready += more
                for ref in ready:
                    self._on_ready(ref)
            with self._lock:
                if self.closing:
                    return
                self._maintain()
                self._dispatch()

    def _on_ready(self, ref: Any) -> None:
        with self._lock:
            entry = self._refs.pop(ref, None)
        if entry is None:
            return
        kind, slot, job = entry
        try:
            value = ray.get(ref, timeout=30)
            error: Optional[BaseException] = None
        except Exception as exc:  # noqa: BLE001 - every Ray failure becomes a death or a retry below
            value, error = None, exc
        with self._lock:
            if kind == "describe":
                self._on_described(slot, value, error)
            elif kind == "stats":
                if error is None:
                    slot.pool = json.loads(value)
                elif isinstance(error, ray.exceptions.RayActorError):
                    self._actor_died(slot, error)
            elif kind.startswith("compile"):
                self._apply(self._fleet.on_ready(kind, slot, ref, job, value, error))
            else:
                self._on_evaluated(slot, ref, job, value, error)
            self._dispatch()

    def _on_described(self, slot: _Slot, value: Any, error: Optional[BaseException]) -> None:
        if error is not None:
            self._start_failures[slot.key] += 1
            self._actor_died(slot, error)
            if self._start_failures[slot.key] >= MAX_START_FAILURES:
                self._broken[slot.key] = slot.why
                self._graveyard[-1]["state"] = "broken"
            return
        self._start_failures[slot.key] = 0
        slot.info = value
        slot.capacity = max(1, int(value.get("parallel", 1))) * self._in_flight_per_worker
        slot.state = ActorState.READY
        self._fleet.arch = self._compile_arch()

    def _on_evaluated(self, slot: _Slot, ref: Any, job: _Job, value: Any, error: Optional[BaseException]) -> None:
        if slot.in_flight.pop(ref, None) is None and error is not None:
            return  # the actor's death was handled meanwhile, and with it this request (retried or given up)
        if isinstance(error, ray.exceptions.RayActorError):
            slot.in_flight[ref] = job  # so the death handler retries it with the others
            self._actor_died(slot, error)
            return
        if isinstance(error, ray.exceptions.ObjectLostError) and job.build_manifest is not None:
            job.attempts -= 1  # not evaluated: its build's bytes were lost with the compile node
            self._apply(self._fleet.build_lost(job, first_line(error)))
            return
        if error is not None:
            slot.failures += 1
            self._retry_or_give_up(job, slot, f"the Ray call failed ({type(error).__name__}: {str(error)[:300]})")
            return
        data = json.loads(value)
        if "refused" in data:  # the build a compile node sent did not verify here: built again elsewhere
            job.attempts -= 1
            self._apply(self._fleet.build_refused(job, data["refused"]))
            return
        if "error" in data:
            slot.failures += 1
            self._retry_or_give_up(job, slot, data["error"], crash=False)
            return
        result = EvalResult.from_dict(data)
        result.attempts = max(job.attempts, job.compile_attempts)
        result.phase_times_s["end_to_end"] = round(time.monotonic() - job.submitted_at, 6)
        slot.done += 1
        slot.finished_at.append(time.monotonic())
        self._finish(job, result)

    def _actor_died(self, slot: _Slot, error: BaseException) -> None:
        if slot.state == ActorState.DEAD:
            return
        started = slot.state == ActorState.READY
        slot.state = ActorState.DEAD
        slot.why = first_line(error)
        self._counters["actor_deaths" if started else "actor_start_failures"] += 1
        for job in release_dead_actor(slot, self._refs):
            self._retry_or_give_up(job, slot, f"the Ray actor on {slot.info.get('node', slot.node_id[:8])} died "
                                              f"({slot.why})")
        self._graveyard.append(self._row(slot, time.monotonic()))
        del self._slots[slot.key]
        delay = min(60.0, 2.0 * 2 ** self._start_failures[slot.key])
        self._respawn_at[slot.key] = time.monotonic() + delay

    def _retry_or_give_up(self, job: _Job, slot: _Slot, why: str, crash: bool = True) -> None:
        job.tried.add(slot.key)
        if job.attempts < 2:
            self._counters["retries"] += 1
            self._retry.append(job)
            return
        if not crash:
            _fail(job, EvaluatorError(f"no node could evaluate this request, twice: {why}"))
            self._counters["errors"] += 1
            return
        self._counters["crashed_after_retry"] += 1
        self._finish(job, infrastructure_result(job.request, why, job.attempts, job.submitted_at))

    def _apply(self, outcomes: list) -> None:
        """What the compile fleet decided: a job built (or left to its evaluating node) waits first in line for an
        actor; one with a result (compile error, build timeout, our failure twice) is finished."""
        for job, result in outcomes:
            if result is None:
                self._pending.appendleft(job)
                continue
            result.attempts = max(job.attempts, job.compile_attempts)
            result.phase_times_s["end_to_end"] = round(time.monotonic() - job.submitted_at, 6)
            self._finish(job, result)

    def _finish(self, job: _Job, result: EvalResult) -> None:
        job.build_blob = job.build_manifest = None  # the artefact's bytes may leave the object store
        if job.future.done():
            self._counters["duplicate_results_dropped"] += 1
            return
        self._counters["results"] += 1
        job.future.set_result(result)

    # ---- placing work

    def _dispatch(self) -> None:
        ready = [s for s in self._slots.values() if s.state == ActorState.READY]
        if ready:  # builds wait for a ready evaluating actor: it tells the GPU arch to build for
            self._apply(self._fleet.dispatch())
        for slot in sorted(ready, key=lambda s: len(s.in_flight) / s.capacity):
            while len(slot.in_flight) < slot.capacity:
                job = self._next_job_for(slot, ready)
                if job is None:
                    break
                job.attempts += 1
                job.dispatched_at = time.monotonic()
                try:
                    if job.build_manifest is None:
                        ref = slot.handle.evaluate.remote(job.payload)
                    else:
                        ref = slot.handle.evaluate.remote(job.payload, job.build_manifest, job.build_blob)
                except Exception as exc:  # noqa: BLE001 - the handle is unusable: the actor is gone
                    job.attempts -= 1
                    self._retry.appendleft(job)
                    self._actor_died(slot, exc)
                    break
                slot.in_flight[ref] = job
                self._refs[ref] = ("evaluate", slot, job)
        if not ready and not any(s.state == ActorState.STARTING for s in self._slots.values()):
            self._fail_if_nothing_can_run()
        else:
            self._no_actor_since = None

    def _next_job_for(self, slot: _Slot, ready: list[_Slot]) -> Optional[_Job]:
        """Retries first, each to an actor it has not failed on (unless no other is ready); then the queue."""
        for job in list(self._retry):
            if slot.key not in job.tried or all(s.key in job.tried for s in ready):
                self._retry.remove(job)
                return job
        return self._pending.popleft() if self._pending else None

    def _fail_if_nothing_can_run(self) -> None:
        if not self._pending and not self._retry:
            return
        now = time.monotonic()
        self._no_actor_since = self._no_actor_since or now
        if now - self._no_actor_since < self._start_timeout_s and len(self._broken) < max(1, self._wanted_count):
            return
        why = "; ".join(f"{k}: {v}" for k, v in list(self._broken.items())[:3]) or "no node offers a GPU or a CPU"
        error = EvaluatorError(f"no Ray actor could evaluate requests for {now - self._no_actor_since:.0f} s ({why}).")
        for job in list(self._pending) + list(self._retry):
            _fail(job, error)
        self._pending.clear()
        self._retry.clear()

    # ---- actors

    def _maintain(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._maintained_at < MAINTAIN_EVERY_S:
            return
        self._maintained_at = now
        nodes = ray.nodes()
        wanted = self._wanted_slots(nodes)
        self._wanted_count = len(wanted)
        eval_cpus: collections.Counter = collections.Counter()
        for node_id, _ in wanted.values():
            eval_cpus[node_id] += self._actor_cpus
        self._fleet.arch = self._compile_arch()
        self._apply(self._fleet.maintain(nodes, eval_cpus))
        for key, (node_id, gpus) in wanted.items():
            if key in self._slots or key in self._broken or self._respawn_at.get(key, 0.0) > now:
                continue
            self._start_actor(_Slot(key=key, node_id=node_id, gpus=gpus))
        for slot in list(self._slots.values()):
            late = [job for job in slot.in_flight.values()
                    if now - job.dispatched_at > job.answer_limit_s(self.stall_grace_s)]
            if late:
                self._counters["stalled_actors"] += 1
                self._actor_died(slot, TimeoutError(f"no answer to request {late[0].request.request_id} for "
                                                    f"{now - late[0].dispatched_at:.0f} s: the actor is stuck"))
                continue
            if slot.state == ActorState.STARTING and now - slot.started_at > self._start_timeout_s:
                self._start_failures[slot.key] += 1
                self._actor_died(slot, TimeoutError(f"not ready after {self._start_timeout_s:.0f} s"))
            elif slot.state == ActorState.READY and not any(k == "stats" and s is slot for k, s, _ in self._refs.values()):
                self._refs[slot.handle.stats.remote()] = ("stats", slot, None)

    def _wanted_slots(self, nodes: list[dict]) -> dict[str, tuple[str, int]]:
        wanted: dict[str, tuple[str, int]] = {}
        alive = [node for node in nodes if node.get("Alive")]
        # In a cluster with GPUs a node without one evaluates nothing (CPU mode cannot run CUDA): it only compiles.
        any_gpu = any(node.get("Resources", {}).get("GPU", 0) >= 1 for node in alive)
        for node in alive:
            resources = node.get("Resources", {})
            node_id = node["NodeID"]
            gpus = int(resources.get("GPU", 0))
            if gpus:
                for index in range(gpus):
                    wanted[f"{node_id}/gpu{index}"] = (node_id, 1)
            elif not any_gpu:
                count = min(self._cpu_actors_per_node, int(resources.get("CPU", 0) // max(self._actor_cpus, 1e-9)))
                for index in range(count):
                    wanted[f"{node_id}/cpu{index}"] = (node_id, 0)
        return wanted

    def _compile_arch(self) -> str:
        """The GPU arch builds target: TORCH_CUDA_ARCH_LIST if the driver has it (forwarded to every actor), else the
        evaluating actors' own. Mixed GPU models without TORCH_CUDA_ARCH_LIST get a build for all of them, whose
        cache key the evaluating nodes do not look up: they build again themselves (slower, still correct)."""
        if self._env.get("TORCH_CUDA_ARCH_LIST"):
            return self._env["TORCH_CUDA_ARCH_LIST"]
        archs = sorted({s.info.get("arch", "") for s in self._slots.values() if s.state == ActorState.READY} - {""})
        return ";".join(archs)

    def _start_actor(self, slot: _Slot) -> None:
        options: dict[str, Any] = {
            "num_cpus": self._actor_cpus, "num_gpus": slot.gpus, "max_restarts": 0, "max_concurrency": 1000,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(slot.node_id, soft=False),
        }
        slot.handle = self._actor_class.options(**options).remote(self._options_json, self._env)
        slot.started_at = time.monotonic()
        self._slots[slot.key] = slot
        self._refs[slot.handle.describe.remote()] = ("describe", slot, None)
        self._counters["actors_started"] += 1

    def _wait_first_ready(self, timeout_s: float) -> None:
        """Return once every actor placed at start is ready or failed, or 10 s after the first was ready (a slow or
        unschedulable slot must not hold up the rest); raise if none is ready."""
        end = time.monotonic() + timeout_s
        first_ready_at = None
        while time.monotonic() < end:
            with self._lock:
                states = [s.state for s in self._slots.values()]
                if ActorState.STARTING not in states and (ActorState.READY in states or self._broken):
                    break
            if ActorState.READY in states:
                first_ready_at = first_ready_at or time.monotonic()
                if time.monotonic() - first_ready_at > 10.0:
                    break
            time.sleep(0.05)
        with self._lock:
            if any(s.state == ActorState.READY for s in self._slots.values()):
                return
            whys = list(self._broken.values()) + [row["why"] for row in self._graveyard if row["why"]]
        self.close()
        raise EvaluatorError("no evaluation actor could start on the Ray cluster: "
                             f"{(whys[0] if whys else 'none became ready in time')[:1500]}")

    def _row(self, slot: _Slot, now: float) -> dict[str, Any]:
        while slot.finished_at and now - slot.finished_at[0] > THROUGHPUT_WINDOW_S:
            slot.finished_at.popleft()
        window = min(THROUGHPUT_WINDOW_S, max(1e-9, now - slot.started_at))
        return {"node": slot.info.get("node", slot.node_id[:12]), "slot": slot.key, "pid": slot.info.get("pid"),
                "device": ",".join(slot.info.get("devices", [])), "gpu_name": slot.info.get("gpu_name", ""),
                "state": "broken" if slot.key in self._broken else slot.state.value,
                "in_flight": len(slot.in_flight), "done": slot.done, "failures": slot.failures,
                "evals_per_min": round(len(slot.finished_at) * 60.0 / window, 2), "why": slot.why,
                "gpu_util_percent": slot.pool.get("gpu_util_percent"),
                "pool": slot.pool}


def _fail(job: _Job, error: BaseException) -> None:
    if not job.future.done():
        job.future.set_exception(error)
