"""CUDA builds on the Ray cluster's CPU cores: one CompileActor per node owns a compile-only sandboxed pool; a build
comes back as a manifest plus its bytes (object store) and the evaluating node's trusted side verifies and publishes it."""

from __future__ import annotations

import asyncio
import collections
import enum
import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from evaluator.contract.types import EvalRequest, EvalResult, EvaluatorError, Verdict

TRANSFERS = ("object_store", "shared_folder")
THROUGHPUT_WINDOW_S = 60.0
MAX_START_FAILURES = 3


class BuildRefused(EvaluatorError):
    """A build another node sent failed this node's checks: it is never published here, never loaded."""


def infrastructure_result(request: EvalRequest, why: str, attempts: int, submitted_at: float) -> EvalResult:
    """`crashed`, saying it is our fault: what a request gets once its second attempt failed on our side too."""
    return EvalResult(request_id=request.request_id, problem_id=request.problem_id, verdict=Verdict.CRASHED,
                      error_message=("Evaluator infrastructure failure (not the candidate's fault), twice: " + why)[:2000],
                      attempts=attempts, phase_times_s={"total": time.monotonic() - submitted_at})


# ---------------------------------------------------------------- artefacts across nodes (both sides trusted code)

def pack_build(record: dict[str, Any], cache_dir: str, transfer: str) -> tuple[str, bytes]:
    """On the compile node: the published record as a JSON manifest and, for the object store, every artefact's bytes
    one after another in one blob (offset, length and sha256 of each in the manifest). The bytes are read from the
    verified cache entry and hashed as read."""
    from evaluator.build.artefacts import entry_key, lookup

    artefacts, chunks, offset = [], [], 0
    if transfer == "object_store":
        for index, build in enumerate(record["artifacts"]["builds"]):
            if not (build.get("ok") and build.get("artefact_sha256")):
                continue
            found = lookup(cache_dir, entry_key(record["source_sha256"], build["key"]))
            if found is None:
                raise EvaluatorError(f"the build {build['key']} left the compile node's cache before it was sent")
            with open(found.so_path, "rb") as handle:
                data = handle.read()
            sha256 = hashlib.sha256(data).hexdigest()
            if sha256 != build["artefact_sha256"]:
                raise EvaluatorError(f"the build {build['key']} changed in the compile node's cache before it was sent")
            artefacts.append({"build": index, "offset": offset, "length": len(data), "sha256": sha256})
            chunks.append(data)
            offset += len(data)
    manifest = {"transfer": transfer, "record": record, "artefacts": artefacts}
    return json.dumps(manifest), b"".join(chunks)


def install_build(manifest_json: str, blob: Optional[bytes], cache_dir: str, candidate_source: str) -> dict[str, Any]:
    """On the evaluating node: check a build another node sent for this candidate, publish it into this node's
    content-addressed cache (evaluator.build.artefacts.publish_compile, which also re-checks names, keys and paths) and
    return the published record its pool evaluates with. Every artefact must hash to what the manifest says, be
    built for this very candidate source, and come out of publishing unchanged; else BuildRefused."""
    from evaluator.build.artefacts import MAX_ARTEFACT_BYTES, publish_compile, safe_file_name, sha256_text
    from evaluator.build.records import CompileRecord

    try:
        manifest = json.loads(manifest_json)
        record = CompileRecord.from_dict(manifest["record"])
        artefacts, transfer = manifest["artefacts"], manifest["transfer"]
    except (ValueError, TypeError, KeyError) as exc:
        raise BuildRefused(f"its manifest is unreadable ({type(exc).__name__}: {exc})") from None
    if transfer not in TRANSFERS or not isinstance(artefacts, list):
        raise BuildRefused("its manifest names no known way of transfer")
    if record.source_sha256 != sha256_text(candidate_source):
        raise BuildRefused("it was built for another candidate source")
    blob = memoryview(blob or b"")
    received: dict[int, tuple[memoryview, str]] = {}  # build index -> (its bytes, their sha256)
    for item in artefacts:
        fields = (item.get("build"), item.get("offset"), item.get("length")) if isinstance(item, dict) else ()
        if len(fields) != 3 or not all(type(v) is int and v >= 0 for v in fields) or fields[0] in received \
                or fields[0] >= len(record.builds) or fields[2] > MAX_ARTEFACT_BYTES \
                or fields[1] + fields[2] > len(blob):
            raise BuildRefused("its manifest places an artefact outside the bytes sent")
        data = blob[fields[1]:fields[1] + fields[2]]
        sha256 = hashlib.sha256(data).hexdigest()
        if sha256 != item.get("sha256"):
            raise BuildRefused("an artefact's bytes do not hash to what its manifest says")
        received[fields[0]] = (data, sha256)
    if transfer == "shared_folder" and (received or len(blob)):
        raise BuildRefused("a shared-folder build came with bytes")
    claimed: dict[int, str] = {}
    staging = os.path.join(cache_dir, "cuda", f".build-receive-{uuid.uuid4().hex[:12]}")
    os.makedirs(staging)
    try:
        for index, build in enumerate(record.builds):
            loadable = build.ok and not build.objects_only
            if not loadable:
                if index in received:
                    raise BuildRefused("it sent bytes for an extension that has none")
                build.build_dir, build.cache_hit, build.artefact_sha256 = "", False, ""
                continue
            claimed[index] = build.artefact_sha256
            if transfer == "shared_folder" or _holds(cache_dir, record.source_sha256, build):
                build.build_dir = ""  # publish_compile looks the entry up in this cache and verifies it
                continue
            if index not in received or build.artefact_sha256 != received[index][1]:
                raise BuildRefused("a built extension came without its artefact, or with another one")
            folder = os.path.join(staging, str(index))
            os.makedirs(folder)
            build.so_name = safe_file_name(build.so_name)
            with open(os.path.join(folder, build.so_name), "wb") as handle:
                handle.write(received[index][0])
            build.build_dir, build.cache_hit, build.artefact_sha256 = folder, False, ""
        compiled_from_cache = record.cache_hit
        published = publish_compile(record, staging, cache_dir, candidate_source)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for index, sha256 in claimed.items():
        build = published.builds[index]
        if not build.ok or build.artefact_sha256 != sha256:
            raise BuildRefused(build.error_message or "its artefact changed while it was published")
    published.cache_hit = compiled_from_cache  # the compile node's own cache answered: a cache hit for the result
    return published.to_dict()


def _holds(cache_dir: str, source_sha256: str, build: Any) -> bool:
    """This cache already has the entry with these very bytes (verified): an evaluation of the same candidate again,
    or a compile actor on this node sharing the cache. Its bytes need not be written again."""
    from evaluator.build.artefacts import entry_key, lookup

    found = lookup(cache_dir, entry_key(source_sha256, build.key)) if isinstance(build.key, str) else None
    return found is not None and found.artefact_sha256 == build.artefact_sha256


# ---------------------------------------------------------------- the actor (runs on a node)

class CompileActor:
    """Lives in one Ray worker process on one node and owns a compile-only Pool there: `workers` sandboxed compile
    workers (evaluator/local/pool.py + sandbox.py, exactly as a local pool's), publishing into the node's cache. One pool
    per GPU arch asked for. Requests cross Ray as JSON; a build leaves as a manifest and one bytes blob."""

    def __init__(self, options_json: str, env: dict[str, str]):
        import ray

        os.environ.update(env)
        # No GPU here to put the pool in GPU mode, where it makes the torch PCH builds use: ask for it (KRL_WARM_PCH=0
        # in the driver's environment turns it off).
        os.environ.setdefault("KRL_WARM_PCH", "1")
        options = json.loads(options_json)
        from evaluator.build.compile import default_cache_dir

        self.workers = int(options["workers"])
        self.cache_dir = options.get("cache_dir") or default_cache_dir()
        self.transfer = options.get("transfer", "object_store")
        self.node = ray.util.get_node_ip_address()
        self._pools: dict[str, Any] = {}

    def describe(self) -> dict[str, Any]:
        os.makedirs(self.cache_dir, exist_ok=True)
        return {"node": self.node, "pid": os.getpid(), "workers": self.workers, "cache_dir": self.cache_dir}

    def _pool(self, arch: str) -> Any:
        if arch not in self._pools:
            from evaluator.isolation.limits import Limits
            from evaluator.local.pool import Pool, PoolConfig

            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            resident = int(min(32 * 2**30, max(4 * 2**30, 0.7 * total / self.workers)))
            self._pools[arch] = Pool(PoolConfig(devices=[], compile_workers=self.workers, cache_dir=self.cache_dir,
                                                spare_per_device=0, cuda_arch_list=arch or None,
                                                limits=Limits(resident_bytes=resident)))
        return self._pools[arch]

    async def compile(self, request_json: str, arch: str) -> tuple[str, bytes]:
        """(reply JSON, artefact bytes). The reply holds a manifest (built: evaluate it), a result (a verdict
        already: compile error, timeout, crash of the build) or an error (this node cannot build it now)."""
        from evaluator.build.records import CompileRecord
        from evaluator.local.outcomes import build_verdict

        request = EvalRequest.from_dict(json.loads(request_json))
        where = {"node": self.node, "pid": os.getpid()}
        try:
            outcome = await asyncio.wrap_future(self._pool(arch).submit(request, compile_only=True))
        except EvaluatorError as exc:
            return json.dumps({"error": str(exc), **where}), b""
        if isinstance(outcome, dict):
            verdict = build_verdict(request, CompileRecord.from_dict(outcome), cpu_mode=False)
            if verdict is None:
                try:
                    manifest, blob = await asyncio.to_thread(pack_build, outcome, self.cache_dir, self.transfer)
                except (EvaluatorError, OSError) as exc:
                    return json.dumps({"error": str(exc), **where}), b""
                return json.dumps({"manifest": manifest, "bytes": len(blob), **where}), blob
            outcome = verdict
        data = outcome.to_dict()
        data["node"] = data.get("node") or self.node
        data["worker_id"] = f"{self.node}:{os.getpid()}/{data.get('worker_id') or 'compile'}"
        return json.dumps({"result": data, **where}), b""

    def stats(self) -> str:
        return json.dumps({arch or "default": pool.snapshot() for arch, pool in self._pools.items()})

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()


# ---------------------------------------------------------------- the driver side

class ActorState(enum.StrEnum):
    """Where a Ray actor slot (an evaluating actor per GPU, or a node's compile actor) is in its life."""

    STARTING = "starting"
    """Its actor was created and has not answered its first call yet."""
    READY = "ready"
    """Its actor answered and takes work."""
    DEAD = "dead"
    """Its actor died or was given up; the slot may get a new one."""


@dataclass(eq=False)
class CompileSlot:
    """One node's compile actor place; its actor may be replaced."""

    key: str  # "<node id>/compile"
    node_id: str
    workers: int
    gpu_node: bool  # its cores are shared with GPU timing: it gets builds only when the others are as busy
    handle: Any = None
    state: ActorState = ActorState.STARTING
    started_at: float = 0.0
    info: dict = field(default_factory=dict)
    in_flight: dict = field(default_factory=dict)  # reply ObjectRef -> job
    done: int = 0
    failures: int = 0
    finished_at: collections.deque = field(default_factory=collections.deque)
    pool: dict = field(default_factory=dict)
    why: str = ""


# What the fleet tells the driver to do with a job: (job, None) -> evaluate it (with job.build_* if it was built);
# (job, EvalResult) -> that is its result.
Outcomes = list[tuple[Any, Optional[EvalResult]]]


class CompileFleet:
    """The driver's side of cluster builds, driven by ClusterEvaluator under its lock from its thread: one compile
    actor per node with free CPUs, the compile queue, least-loaded placement (nodes without GPUs first on ties), a
    dead or stuck compile actor's builds retried once elsewhere, then `crashed` as our fault. Jobs need the fields
    request, payload, submitted_at, compile_attempts, compile_tried, build_manifest, build_blob, compile_dispatched_at,
    compile_slot. `refs` is the driver's dict of pending Ray calls (ref -> (kind, slot, job))."""

    def __init__(self, actor_class: Any, refs: dict, counters: collections.Counter, env: dict[str, str], *,
                 workers_per_node: Optional[int], cache_dir: str, transfer: str, start_timeout_s: float,
                 stall_grace_s: Callable[[], float], affinity: Callable[[str], Any]):
        if transfer not in TRANSFERS:
            raise EvaluatorError(f"unknown compile_transfer {transfer!r}: use one of {', '.join(TRANSFERS)}.")
        if workers_per_node is not None and workers_per_node < 0:
            raise EvaluatorError("compile_workers_per_node must be 0 (off), a positive count, or None (auto).")
        self._actor_class = actor_class
        self._refs = refs
        self._counters = counters
        self._env = env
        self.workers_per_node = workers_per_node
        self.cache_dir = cache_dir
        self.transfer = transfer
        self._start_timeout_s = start_timeout_s
        self._stall_grace_s = stall_grace_s
        self._affinity = affinity
        self.arch = ""
        self.queue: collections.deque = collections.deque()
        self.retry: collections.deque = collections.deque()
        self.slots: dict[str, CompileSlot] = {}
        self.graveyard: collections.deque[dict] = collections.deque(maxlen=20)
        self._wanted: dict[str, tuple[str, int, bool]] = {}
        self._broken: dict[str, str] = {}
        self._start_failures: collections.Counter = collections.Counter()
        self._respawn_at: dict[str, float] = {}
        self._finished_at: collections.deque = collections.deque()
        self._started_at = time.monotonic()

    # ---- intake

    def accepting(self) -> bool:
        """True while some node has (or may get) a compile actor: CUDA requests then build here."""
        return self.workers_per_node != 0 and any(key not in self._broken for key in self._wanted)

    def submit(self, job: Any) -> None:
        self.queue.append(job)

    def depth(self) -> int:
        return len(self.queue) + len(self.retry)

    # ---- placing builds

    def dispatch(self) -> Outcomes:
        outcomes: Outcomes = []
        ready = [s for s in self.slots.values() if s.state == ActorState.READY]
        while self.queue or self.retry:
            free = sorted((s for s in ready if len(s.in_flight) < s.workers),
                          key=lambda s: (len(s.in_flight) / s.workers, s.gpu_node, s.done))
            # The least loaded slot with a job it may take (a retry goes to a slot it has not failed on).
            slot, job = next(((s, j) for s in free if (j := self._next_job_for(s, ready)) is not None), (None, None))
            if job is None:
                break
            job.compile_attempts += 1
            job.compile_dispatched_at, job.compile_slot = time.monotonic(), slot.key
            try:
                reply, blob = slot.handle.compile.options(num_returns=2).remote(job.payload, self.arch)
            except Exception as exc:  # noqa: BLE001 - the handle is unusable: the actor is gone
                job.compile_attempts -= 1
                self.retry.appendleft(job)
                outcomes += self._died(slot, exc)
                ready.remove(slot)
                continue
            job.build_blob = blob
            slot.in_flight[reply] = job
            self._refs[reply] = ("compile", slot, job)
        return outcomes

    def _next_job_for(self, slot: CompileSlot, ready: list[CompileSlot]) -> Any:
        for job in list(self.retry):
            if slot.key not in job.compile_tried or all(s.key in job.compile_tried for s in ready):
                self.retry.remove(job)
                return job
        return self.queue.popleft() if self.queue else None

    # ---- answers

    def on_ready(self, kind: str, slot: CompileSlot, ref: Any, job: Any, value: Any,
                 error: Optional[BaseException]) -> Outcomes:
        import ray

        if kind == "compile_describe":
            if error is not None:
                self._start_failures[slot.key] += 1
                outcomes = self._died(slot, error)
                if self._start_failures[slot.key] >= MAX_START_FAILURES:
                    self._broken[slot.key] = slot.why
                    self.graveyard[-1]["state"] = "broken"
                return outcomes + self._fallback_if_none_can_build()
            self._start_failures[slot.key] = 0
            slot.info, slot.state = value, ActorState.READY
            return []
        if kind == "compile_stats":
            if error is None:
                slot.pool = json.loads(value)
            elif isinstance(error, ray.exceptions.RayActorError):
                return self._died(slot, error)
            return []
        if slot.in_flight.pop(ref, None) is None and error is not None:
            return []  # the actor's death was handled meanwhile, and with it this build
        if isinstance(error, ray.exceptions.RayActorError):
            slot.in_flight[ref] = job
            return self._died(slot, error)
        if error is not None:
            slot.failures += 1
            return self._retry_or_give_up(job, slot.key, f"the Ray call to the compile actor on {self._where(slot)} "
                                                         f"failed ({type(error).__name__}: {str(error)[:300]})")
        data = json.loads(value)
        if "error" in data:
            slot.failures += 1
            return self._retry_or_give_up(job, slot.key, f"the compile actor on {self._where(slot)} could not build it "
                                                         f"({data['error'][:500]})")
        slot.done += 1
        now = time.monotonic()
        slot.finished_at.append(now)
        self._finished_at.append(now)
        self._counters["compiles"] += 1
        if "result" in data:
            job.build_blob = None
            return [(job, EvalResult.from_dict(data["result"]))]
        job.build_manifest = data["manifest"]
        self._counters["compile_bytes_sent"] += int(data.get("bytes", 0))
        return [(job, None)]

    def build_refused(self, job: Any, why: str) -> Outcomes:
        """The evaluating node refused the build a compile node sent: built again elsewhere once, then our fault."""
        self._counters["builds_refused"] += 1
        node = self.slots[job.compile_slot].info.get("node", "?") if job.compile_slot in self.slots else "?"
        return self._retry_or_give_up(job, job.compile_slot, f"the build from the compile node {node} was refused "
                                                             f"by the evaluating node: {why}")

    def build_lost(self, job: Any, why: str) -> Outcomes:
        """Its artefact left the object store (the compile node died before it was fetched): build it again."""
        self._counters["builds_lost"] += 1
        return self._retry_or_give_up(job, job.compile_slot, f"its build was lost before it was evaluated ({why})")

    def _retry_or_give_up(self, job: Any, slot_key: str, why: str) -> Outcomes:
        job.compile_tried.add(slot_key)
        job.build_blob = job.build_manifest = None
        if job.compile_attempts < 2:
            self._counters["compile_retries"] += 1
            self.retry.append(job)
            return []
        self._counters["compile_crashed_after_retry"] += 1
        return [(job, infrastructure_result(job.request, why, job.compile_attempts, job.submitted_at))]

    def _died(self, slot: CompileSlot, error: BaseException) -> Outcomes:
        if slot.state == ActorState.DEAD:
            return []
        started = slot.state == ActorState.READY
        slot.state, slot.why = ActorState.DEAD, first_line(error)
        self._counters["compile_actor_deaths" if started else "compile_actor_start_failures"] += 1
        jobs = release_dead_actor(slot, self._refs)
        outcomes: Outcomes = []
        for job in jobs:
            outcomes += self._retry_or_give_up(job, slot.key, f"the compile actor on {self._where(slot)} died "
                                                              f"({slot.why})")
        self.graveyard.append(self._row(slot, time.monotonic()))
        del self.slots[slot.key]
        self._respawn_at[slot.key] = time.monotonic() + min(60.0, 2.0 * 2 ** self._start_failures[slot.key])
        return outcomes

    # ---- actors

    def maintain(self, nodes: list[dict], eval_cpus_by_node: dict[str, float]) -> Outcomes:
        now = time.monotonic()
        self._wanted = self._wanted_slots(nodes, eval_cpus_by_node)
        for key, (node_id, workers, gpu_node) in self._wanted.items():
            if key in self.slots or key in self._broken or self._respawn_at.get(key, 0.0) > now:
                continue
            self._start(CompileSlot(key=key, node_id=node_id, workers=workers, gpu_node=gpu_node))
        outcomes: Outcomes = []
        for slot in list(self.slots.values()):
            late = [job for job in slot.in_flight.values()
                    if now - job.compile_dispatched_at > 2 * job.request.compile_timeout_s + self._stall_grace_s()]
            if late:
                self._counters["stalled_compile_actors"] += 1
                outcomes += self._died(slot, TimeoutError(f"no answer to the build of {late[0].request.request_id} "
                                                          f"for {now - late[0].compile_dispatched_at:.0f} s"))
            elif slot.state == ActorState.STARTING and now - slot.started_at > self._start_timeout_s:
                self._start_failures[slot.key] += 1
                outcomes += self._died(slot, TimeoutError(f"not ready after {self._start_timeout_s:.0f} s"))
            elif slot.state == ActorState.READY and not any(k == "compile_stats" and s is slot for k, s, _ in self._refs.values()):
                self._refs[slot.handle.stats.remote()] = ("compile_stats", slot, None)
        return outcomes + self._fallback_if_none_can_build()

    def _fallback_if_none_can_build(self) -> Outcomes:
        """No node can host a compile actor (any more): queued builds go to the evaluating actors, whose own pools
        build them as a single machine does."""
        if self.accepting():
            return []
        jobs = list(self.retry) + list(self.queue)
        self.retry.clear()
        self.queue.clear()
        self._counters["compiles_left_to_eval_nodes"] += len(jobs)
        return [(job, None) for job in jobs]

    def _wanted_slots(self, nodes: list[dict], eval_cpus_by_node: dict[str, float]) -> dict[str, tuple[str, int, bool]]:
        """One compile actor per alive node with a CPU left beyond its evaluation actors': as many workers as CPUs
        left (auto), or workers_per_node where that many are left."""
        wanted: dict[str, tuple[str, int, bool]] = {}
        if self.workers_per_node == 0:
            return wanted
        for node in nodes:
            if not node.get("Alive"):
                continue
            resources = node.get("Resources", {})
            free = int(resources.get("CPU", 0) - eval_cpus_by_node.get(node["NodeID"], 0.0) + 1e-9)
            workers = free if self.workers_per_node is None else self.workers_per_node
            if 1 <= workers <= free:
                wanted[f"{node['NodeID']}/compile"] = (node["NodeID"], workers, resources.get("GPU", 0) > 0)
        return wanted

    def _start(self, slot: CompileSlot) -> None:
        options = json.dumps({"workers": slot.workers, "cache_dir": self.cache_dir, "transfer": self.transfer})
        slot.handle = self._actor_class.options(
            num_cpus=slot.workers, max_restarts=0, max_concurrency=1000,
            scheduling_strategy=self._affinity(slot.node_id)).remote(options, self._env)
        slot.started_at = time.monotonic()
        self.slots[slot.key] = slot
        self._refs[slot.handle.describe.remote()] = ("compile_describe", slot, None)
        self._counters["compile_actors_started"] += 1

    # ---- closing and figures

    def close(self) -> tuple[list[Any], list[Any]]:
        """(every job still held, every live actor handle); the driver fails the jobs and closes the actors."""
        jobs = list(self.queue) + list(self.retry)
        self.queue.clear()
        self.retry.clear()
        for slot in self.slots.values():
            jobs += list(slot.in_flight.values())
            slot.in_flight.clear()
        return jobs, [s.handle for s in self.slots.values() if s.handle is not None and s.state != ActorState.DEAD]

    def summary(self) -> dict[str, Any]:
        now = time.monotonic()
        while self._finished_at and now - self._finished_at[0] > THROUGHPUT_WINDOW_S:
            self._finished_at.popleft()
        window = min(THROUGHPUT_WINDOW_S, max(1e-9, now - self._started_at))
        return {"compile_queue_depth": self.depth(),
                "compiles_in_flight": sum(len(s.in_flight) for s in self.slots.values()),
                "compiles_per_min": round(len(self._finished_at) * 60.0 / window, 2),
                "compile_transfer": self.transfer,
                "compile_nodes": [self._row(s, now) for s in self.slots.values()] + list(self.graveyard),
                "compile_broken": dict(self._broken)}

    def _row(self, slot: CompileSlot, now: float) -> dict[str, Any]:
        while slot.finished_at and now - slot.finished_at[0] > THROUGHPUT_WINDOW_S:
            slot.finished_at.popleft()
        window = min(THROUGHPUT_WINDOW_S, max(1e-9, now - slot.started_at))
        return {"node": slot.info.get("node", slot.node_id[:12]), "slot": slot.key, "pid": slot.info.get("pid"),
                "workers": slot.workers, "gpu_node": slot.gpu_node,
                "state": "broken" if slot.key in self._broken else slot.state,
                "in_flight": len(slot.in_flight), "done": slot.done, "failures": slot.failures,
                "compiles_per_min": round(len(slot.finished_at) * 60.0 / window, 2), "why": slot.why,
                "pool": slot.pool}

    @staticmethod
    def _where(slot: CompileSlot) -> str:
        return slot.info.get("node", slot.node_id[:8])


def release_dead_actor(slot: Any, refs: dict) -> list:
    """Kill a dead (or stuck) actor for good, forget the calls it was answering, and hand back its in-flight jobs:
    what the evaluation and the compile slots do alike when their actor dies."""
    import ray

    try:
        ray.kill(slot.handle, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        pass
    for ref in [r for r, (_, owner, _) in refs.items() if owner is slot]:
        refs.pop(ref, None)
    jobs = list(slot.in_flight.values())
    slot.in_flight.clear()
    return jobs


def first_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[:3])[:500]
