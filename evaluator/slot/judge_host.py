"""The trusted process of one evaluation slot: it never runs candidate code. It keeps a sandboxed zygote and one
pre-warmed runner, makes every input itself, keeps the reference outputs, and has the last word on correctness."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Optional

from evaluator.contract.types import EvalRequest
from evaluator.build.triton_launchers import LauncherBuilder
from evaluator.isolation import device_access
from evaluator.judging.reference_cache import ReferenceCache
from evaluator.slot.allocation_sites import AllocationSites
from evaluator.slot import gap_probe
from evaluator.slot.device_memory import allocator_counts, allocator_phases, release_device_cache
from evaluator.slot.groups_ahead import GroupsAhead
from evaluator.slot.judge_profile import keep_runner_profile
from evaluator.slot.runner_slot import START_TIMEOUT_S, InfrastructureFailure, RunnerHandle, Slot
from evaluator.slot.task_driver import TaskDriver
from evaluator.slot.task_judge import TaskJudge, input_seed  # noqa: F401 - input_seed: public here too
from evaluator.slot.task_judge import shared_steps_from
from evaluator.slot.task_run import drive_task
from evaluator.slot.upkeep_hold import SPARES_ENV, SparesShare, spares_beside, upkeep_shared, wait_exited

# Candidate outputs travel to the judge as files: the runner's hand-over lifts its soft file-size cap (the output-flood
# cap) to this hard one while it writes an output.
RUNNER_MIN_FILE_SIZE_BYTES = 8 * 2**30

TASK_START_TIMEOUT_S = 60.0  # a ready runner handed a task says "started" after wiping its scratch: milliseconds
# Runners kept pre-warmed per slot. A GPU runner takes ~6 s to get ready (CUDA, the launch hold, CUPTI: H100), longer
# than a typical evaluation, so one spare left each next task waiting for it; CPU runners are ready in well under 1 s.
SPARE_RUNNERS_ENV = "KRL_WORKER_SPARE_RUNNERS"  # a fixed count; unset: GPU slots raise theirs as waits show a need
# GPU: a task that waited this long for a ready runner raises the slot's spares by one, up to MAX_GPU_SPARES, while the
# device has at least MIN_FREE_SHARE_TO_RAISE of its memory free (each warm runner holds a CUDA context, ~0.5 GiB).
# With two spares, one slot on an H100 still waited 1.1 s of its 3.1 s a task: a runner's warm-up (CUDA, CUPTI's first
# session) takes 4-7 s, longer than two evaluations.
SPARE_WAIT_TO_RAISE_S = 0.1
MAX_GPU_SPARES = 3
MIN_FREE_SHARE_TO_RAISE = 0.25
# Which GPU steps outside timing hold the device lock shared (slot/task_judge.shared_steps_from): unset or "1" all of
# them (the default, docs/slot.md says why), "0" none (only timings exclude each other), or a comma-separated list of
# task_judge.SHARED_STEPS names.
DEVICE_SHARED_ENV = "KRL_WORKER_DEVICE_SHARED_STEPS"


def next_spare_target(target: int, waited_s: float, free_share: float) -> int:
    """A GPU slot's spare runners after a task that waited `waited_s` for a ready one: one more when it waited, while
    below MAX_GPU_SPARES and the device has MIN_FREE_SHARE_TO_RAISE of its memory free; never fewer."""
    if waited_s >= SPARE_WAIT_TO_RAISE_S and target < MAX_GPU_SPARES and free_share >= MIN_FREE_SHARE_TO_RAISE:
        return target + 1
    return target


def device_free_share() -> float:
    """The share of this process's GPU memory free now (0 where it cannot be read: no raise)."""
    import torch

    try:
        free, total = torch.cuda.mem_get_info()
    except Exception:  # noqa: BLE001 - no readable device: keep the spares as they are
        return 0.0
    return free / total if total else 0.0


class CpuSpent:
    """CPU seconds a task cost the host, for the benchmarks (the slot's rate is bound by the host's CPUs): the judge's
    own (every thread of it, while the task ran), the runner's before the task (its start and CUDA set-up, paid while
    it waited as a spare) and during it (its task cgroup, else its living tree)."""

    def __init__(self, runner_pid: int):
        from evaluator.slot.cpu_charge import CpuCharge

        self.judge_started = time.process_time()
        self.runner_warm_ns = CpuCharge(runner_pid).now() if runner_pid > 0 else None  # every thread of its tree
        self.runner_task_ns: Optional[int] = None

    def phases(self) -> dict[str, float]:
        spent = {"cpu_judge": round(time.process_time() - self.judge_started, 4)}
        if self.runner_warm_ns is not None:
            spent["cpu_runner_warm"] = round(self.runner_warm_ns / 1e9, 4)
        if self.runner_task_ns is not None:
            spent["cpu_runner"] = round(self.runner_task_ns / 1e9, 4)
        return spent


def warm_flop_counter(device: str) -> None:
    """The speed-of-light floor's first flop count (judging/sol.py) imports torch's higher-order-op machinery (dynamo,
    FSDP): 6 s of judge CPU on an H100 host, on the first correct task's path. Paid here, before the slot is ready."""
    import torch

    from evaluator.judging.sol import count_flops

    try:
        a = torch.ones(8, 8, device=device)
        count_flops(lambda: a @ a)
    except Exception:  # noqa: BLE001 - a warm-up only: the task's own count reports any real failure
        pass


def judge_failure_reply(task_id: Any, exc: BaseException) -> dict[str, Any]:
    """The pool's reply when the judge's own code raised: infrastructure, retried once. Out of GPU memory (its reference
    or kept copies beside other slots' work) it asks for the retry to have the device to itself."""
    import traceback

    from evaluator.slot.device_memory import is_out_of_memory

    text = "".join(traceback.format_exception(exc))[-4000:]
    if is_out_of_memory(f"{type(exc).__name__}: {exc}"):
        release_device_cache()
        return {"type": "infra", "task": task_id, "device_full": True,
                "why": "the judge ran out of GPU memory beside other evaluations:\n" + text[-1000:]}
    return {"type": "error", "task": task_id, "traceback": text}


# ---------------------------------------------------------------- the judge host's loop (speaks the pool's protocol)

class JudgeHost:
    def __init__(self, device: str, workdir: str, worker_module: str, limits: dict, task_fd: int, result_fd: int):
        self.device, self.task_fd, self.result_fd = device, task_fd, result_fd
        logs = os.path.join(workdir, "logs")
        os.makedirs(logs, exist_ok=True)
        self.err_path, self.out_path = os.path.join(logs, "runner.err"), os.path.join(logs, "runner.out")
        self.resident_limit = limits.get("resident_bytes")
        runner_limits = dict(limits)
        runner_limits["file_size_hard_bytes"] = max(runner_limits.get("file_size_bytes") or 0,
                                                    RUNNER_MIN_FILE_SIZE_BYTES)
        self.slot = Slot(device, os.path.join(workdir, "slot"), worker_module, runner_limits, self.out_path,
                         self.err_path)
        self.spares: list[RunnerHandle] = []  # oldest first: the one that has warmed longest gets the next task
        fixed = os.environ.get(SPARE_RUNNERS_ENV)
        self.spare_target = max(1, int(fixed or (2 if device.startswith("cuda") else 1)))
        self.spares_adapt = not fixed and device.startswith("cuda")
        self.finished_runner: Optional[RunnerHandle] = None
        self.task_isolation: Any = None  # the running task's cgroup and runner view (evaluator/slot/task_isolation.py)
        self.groups_ahead = GroupsAhead()  # the next task's cgroup, made while this one runs
        # GPU: the GPUs' device nodes each task's group refuses the candidate's processes (isolation/device_access.py)
        self.device_refusal = device_access.refusal_for(device)
        self.reference_cache = ReferenceCache()
        self.device_name = ""
        self.device_lock: Any = None  # this GPU's lock (evaluator/isolation/device_lock.py), once started
        self.allocation_sites: Optional[AllocationSites] = None
        self.launchers: Optional[LauncherBuilder] = None  # Triton's launchers for the trusted level, on a GPU
        self.reported_launchers: list = []  # the last task's, built once its reply is out
        self.spares_share = SparesShare(None)  # the device held shared while spares warm beside a task (a knob)

    def start(self) -> str:
        import torch

        judge_device = "cuda:0" if self.device.startswith("cuda") else "cpu"
        if judge_device != "cpu":
            torch.cuda.init()
            torch.cuda.set_device(0)
            self.allocation_sites = AllocationSites.from_env()  # opt-in: where its device allocations are made
        self._prepare_triton_cache(warm=judge_device != "cpu")
        self.device = judge_device
        self.slot.start_zygote()
        self.spares = [self.slot.fork_runner()]
        if judge_device != "cpu":
            warm_flop_counter(judge_device)  # while the zygote and the first runner start
            gap_probe.probe_for_device()  # compiled and loaded before any task (its first window would hold it)
        self.slot.wait_ready(self.spares[0], START_TIMEOUT_S)
        self.device_name = torch.cuda.get_device_name(0) if judge_device != "cpu" else "cpu"
        if judge_device != "cpu":
            from evaluator.isolation.device_lock import DeviceLock, device_uuid

            self.device_lock = DeviceLock(device_uuid(0))
            self.spares_share = SparesShare(self.device_lock)
        return self.device_name

    def _prepare_triton_cache(self, warm: bool) -> None:
        """Triton's trusted cache level (evaluator/build/triton_cache.py), warmed here (GPU) before any runner exists. In
        CPU mode (TRITON_INTERPRET=1) Triton compiles nothing; the level is still offered, so the policy is the same."""
        if os.environ.get("KRL_WORKER_TRITON_TRUSTED_CACHE", "1") == "0":  # off: runners compile everything (bench)
            return
        import importlib.util

        if importlib.util.find_spec("triton") is None:  # no triton: no Triton cache
            return
        cache_dir = os.environ.get("KRL_WORKER_CACHE_DIR", "")
        shared = os.path.join(cache_dir or self.slot.root, "triton-trusted")
        os.makedirs(shared, mode=0o755, exist_ok=True)
        why = ""
        if warm:
            from evaluator.build.triton_cache import warm_shared_cache
            from evaluator.slot.output_digest import warm_digest_kernel

            why = warm_shared_cache(shared) or warm_digest_kernel(shared)
        if why:
            print(f"Triton's shared cache was not warmed (runners compile what they need): {why}", file=sys.stderr,
                  flush=True)
        self.slot.triton_shared_dir = shared
        if warm:
            self.launchers = LauncherBuilder(shared)

    def _ready_runner(self) -> RunnerHandle:
        """The longest-warmed live spare, or a fresh runner (after restarting the zygote if it died)."""
        self.slot.resume_sandbox()
        self.slot.drain_control()
        while self.spares:
            spare = self.spares.pop(0)
            if not spare.reader.eof and spare.runner_id not in self.slot.exit_reports:
                if spare.ready:
                    return spare
                try:
                    self.slot.wait_ready(spare, START_TIMEOUT_S)
                    return spare
                except InfrastructureFailure:
                    pass
            self.slot.counters.add("spare_runners_lost")
            self.groups_ahead.drop()
            self.slot.discard(spare)
        if not self.slot.zygote_alive():
            self.slot.counters.add("zygote_restarts")
            self.slot.start_zygote()
        runner = self.slot.fork_runner()
        self.slot.wait_ready(runner, START_TIMEOUT_S)
        return runner

    def run_task(self, message: dict[str, Any]) -> dict[str, Any]:
        from evaluator.contract.framing import write_message

        self.finish_task()
        task_id = message.get("task")
        request = EvalRequest.from_dict(message["request"])
        limit_s = float(message.get("limit_s") or request.run_timeout_s)
        started_at = time.monotonic()
        deadline = started_at + limit_s  # the task's limit bounds its whole life, the wait for a runner included
        try:
            runner = self._ready_runner()
        except InfrastructureFailure as exc:
            return {"type": "infra", "task": task_id, "why": str(exc)}
        ready_s = time.monotonic() - started_at
        if self.spares_adapt:
            self.spare_target = next_spare_target(self.spare_target, ready_s, device_free_share())
        # The runner in a cgroup of its own before it gets the task; its outputs seen through its mount namespace.
        from evaluator.slot import task_isolation

        runner_pid = self.slot.locate(runner)
        cpu_spent = CpuSpent(runner_pid)
        self.task_isolation = self.groups_ahead.take(runner.runner_id, runner_pid) or task_isolation.begin_task(
            runner.runner_id, runner_pid, self.resident_limit, self.slot.runner_namespaces, self.device_refusal)
        if self.slot.runner_namespaces and self.task_isolation.host_pid <= 0:
            self.slot.discard(runner)
            return {"type": "infra", "task": task_id, "why": "the runner's host pid was not found"}
        runner_cpu = self._runner_cpu(runner, runner_pid)  # read by the pings, the timing and cpu_runner alike
        for path in (self.err_path, self.out_path):
            with open(path, "ab") as handle:
                handle.truncate(0)
        self.slot.wipe_exchange()
        spares_warm_s = self._replenish_spares()
        self._group_ahead()
        self.finished_runner = runner  # killed and wiped after the reply is sent (finish_task): off the verdict's path
        task = TaskJudge(request, self.device, self.slot.inputs_dir,
                         self.task_isolation.runner_folder(self.slot.outputs_dir), self.reference_cache)
        driver = TaskDriver(self.slot, runner, deadline, self.resident_limit or None,
                            spares=[spare for spare in self.spares if not spare.ready], on_spare=self._on_spare,
                            group_memory=self.task_isolation.memory_bytes,
                            group_oom_kills=group.oom_kills if (group := self.task_isolation.cgroup) else None,
                            runner_cpu_ns=None if self.device.startswith("cuda") else runner_cpu.now)

        def on_started() -> None:
            write_message(self.result_fd, {"type": "started", "task": task_id})

        hits = self.reference_cache.hits
        allocator_before = allocator_counts()
        try:
            outcome = drive_task(self.slot, runner, driver, task, message.get("prebuilt"), on_started,
                                 self._timing_for(runner_cpu), min(deadline, started_at + TASK_START_TIMEOUT_S),
                                 self.device_name, self.err_path,
                                 self.device_lock, shared_steps_from(os.environ.get(DEVICE_SHARED_ENV, "")),
                                 alone=bool(message.get("alone")))
        finally:
            self.spares_share.let_go()
            cpu_spent.runner_task_ns = runner_cpu.now()
            driver.close()
            self.reported_launchers = task.triton_launchers
            del task  # its inputs and outputs, then the cached blocks back to the device: eight judges that kept
            with upkeep_shared(self.device_lock):  # theirs left honest candidates out of memory on an H100 (48 kernels)
                release_device_cache()
            allocator = allocator_phases(allocator_before, allocator_counts())
            if self.allocation_sites is not None:
                self.allocation_sites.note(task_id)
            keep_runner_profile(self.task_isolation.runner_folder(self.slot.outputs_dir), task_id)
        # What the candidate left running dies before the reply (the runner's pid filter stops it signalling them).
        self.slot.counters.add("leftover_processes_killed", self.task_isolation.kill_leftovers())
        self.slot.counters.add("judge_cache_hits", self.reference_cache.hits - hits)
        if outcome.get("type") == "result":
            outcome["task"] = task_id
            outcome["result"]["phase_times_s"]["judge_ready"] = round(ready_s, 6)
            outcome["result"]["phase_times_s"]["task_setup"] = round(self.task_isolation.setup_s, 6)  # its cgroup
            if spares_warm_s:
                outcome["result"]["phase_times_s"]["spares_warm"] = round(spares_warm_s, 6)
            outcome["result"]["phase_times_s"].update(allocator)
            outcome["result"]["phase_times_s"]["total"] = round(time.monotonic() - started_at, 6)
            outcome["result"]["phase_times_s"].update(cpu_spent.phases())
        else:
            outcome["task"] = task_id
        outcome["counters"] = self.slot.counters.take()
        return outcome

    def _replenish_spares(self) -> float:
        """Spares forked up to the target. They warm up (CUDA's context, a few kernels) while this task runs, beside
        every slot's timings; with upkeep_hold.SPARES_ENV, before it, with the device held shared so no timing runs
        beside them. Returns the seconds the latter took (0 by default)."""
        started = time.monotonic()
        if spares_beside() and (len(self.spares) < self.spare_target or not all(spare.ready for spare in self.spares)):
            self.spares_share.take()  # let go once they are ready (_on_spare) or the timing waited (_spares_ready)
        with upkeep_shared(self.device_lock, SPARES_ENV) as held:
            try:
                while len(self.spares) < self.spare_target:
                    self.spares.append(self.slot.fork_runner())
            except InfrastructureFailure:
                pass
            if held:
                self._await_spares(time.monotonic() + START_TIMEOUT_S)
        return time.monotonic() - started if held else 0.0

    def _spares_ready(self, deadline: float, phases: dict) -> None:
        """Before a timing, where spares warm beside the task under a shared hold (upkeep_hold.SPARES_BESIDE): what is
        left of their warm-up waited for, the hold kept, then let go (the timing's windows are exclusive)."""
        if not self.spares_share.held:
            return
        started = time.monotonic()
        self._await_spares(deadline)
        self.spares_share.let_go()
        phases["spares_warm"] = round(time.monotonic() - started, 6)

    def _await_spares(self, deadline: float) -> None:
        """Every spare still warming waited for, each at most START_TIMEOUT_S and none past `deadline`; one that does
        not get ready is discarded (Slot.wait_ready) and dropped from the spares."""
        for spare in [spare for spare in self.spares if not spare.ready]:
            try:
                self.slot.wait_ready(spare, max(0.0, min(START_TIMEOUT_S, deadline - time.monotonic())))
            except InfrastructureFailure:
                self.spares.remove(spare)

    def _on_spare(self, spare: RunnerHandle) -> bool:
        """A spare runner said something while a task ran: file its readiness. True once it needs no more watching."""
        try:
            for message in spare.reader.read():
                self.slot.on_ready(spare, message)
        except ValueError:
            self.slot.discard(spare)
            return True
        if spare.ready:
            self._group_ahead()
        if all(other.ready for other in self.spares):  # nothing warming beside the task: the device's share let go
            self.spares_share.let_go()
        return spare.reader.eof or spare.ready

    def _group_ahead(self) -> None:
        """The next task's group made now, in a thread, for the spare that gets it, once that spare is ready and its
        host pid known (GroupsAhead)."""
        if self.spares and self.spares[0].ready and self.spares[0].host_pid > 0:
            self.groups_ahead.prepare(self.spares[0].runner_id, self.spares[0].host_pid, self.resident_limit,
                                      self.slot.runner_namespaces, self.device_refusal)

    def _runner_cpu(self, runner: RunnerHandle, runner_pid: int) -> Any:
        """The task's CPU accounting (slot/cpu_charge.py): its cgroup where it has one, else the runner's tree."""
        from evaluator.slot.cpu_charge import CpuCharge

        group = self.task_isolation.cgroup if self.task_isolation is not None else None
        return CpuCharge(runner_pid, self.slot.task_cgroup(runner),
                         group.cpu_time_ns if group is not None else None)

    def _timing_for(self, runner_cpu: Any):
        """How the task's timing phase charges the candidate: the task's CPU accounting (`runner_cpu`) in CPU mode,
        the judge's clock around a batch (holding this GPU's lock exclusive) on a GPU; either way the same accounting
        watches the runner while the judge times the reference."""
        from evaluator.slot.timing_phase import TimingPhase

        def make(task: TaskJudge, driver: TaskDriver, schedule: Any) -> TimingPhase:
            group = self.task_isolation.cgroup if self.task_isolation is not None else None
            if self.device.startswith("cuda"):  # charged by the judge's clock; the runner's CPU only watched
                self._spares_ready(driver.deadline, schedule.phases)
                return TimingPhase(task, driver, schedule, lock=self.device_lock, watch=runner_cpu, group=group)
            return TimingPhase(task, driver, schedule, charge=runner_cpu, group=group)
        return make

    def finish_task(self) -> None:
        """The last task's runner killed (it has answered, or is dead) and the exchange folders emptied."""
        runner, self.finished_runner = self.finished_runner, None
        if runner is not None:
            with upkeep_shared(self.device_lock) as held:
                host_pid = self.slot.locate(runner) if held else 0
                self.slot.discard(runner)
                if host_pid:
                    wait_exited(host_pid)
            self.slot.wipe_exchange()
        # The task's whole cgroup killed (escaped processes too) and removed.
        from evaluator.slot import task_isolation

        task, self.task_isolation = self.task_isolation, None
        task_isolation.end_task(task)
        reported, self.reported_launchers = self.reported_launchers, []
        if self.launchers is not None and reported:  # after the reply, so off every verdict's path
            self.launchers.build(reported)

    def serve(self) -> int:
        from evaluator.contract.framing import read_message, write_message
        from evaluator.slot.judge_profile import JudgeProfile

        profile = JudgeProfile()  # only with KRL_EVAL_PROFILE (the benchmarks)
        while True:
            message = read_message(self.task_fd)
            if message is None or message.get("type") == "exit":
                self.groups_ahead.drop()
                self.slot.stop_zygote()
                return 0
            try:
                with profile.task():
                    reply = self.run_task(message)
            except Exception as exc:  # noqa: BLE001 - a bug of the judge itself: infrastructure, retried once
                reply = judge_failure_reply(message.get("task"), exc)
            write_message(self.result_fd, reply)
            try:
                self.finish_task()
            except Exception as exc:  # noqa: BLE001 - after the reply: said, and the judge host serves on (a
                # runner's evidence reached here once and ended the judge host between tasks, red team, session 28)
                print(f"krl judge: tidying up after a task failed ({type(exc).__name__}: {exc})", file=sys.stderr,
                      flush=True)
