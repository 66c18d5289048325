"""The trusted process of one evaluation slot: it never runs candidate code. It keeps a sandboxed zygote and one
pre-warmed runner, makes every input itself, keeps the reference outputs, and has the last word on correctness."""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from evaluator.contract.types import EvalRequest
from evaluator.isolation import exchange_tmpfs
from evaluator.isolation.cgroups import cpu_group_weight
from evaluator.isolation.proctree import kill_tree, process_table, tree_resident_bytes
from evaluator.isolation.teardown import empty_folder
from evaluator.judging.reference_cache import ReferenceCache
from evaluator.slot.allocation_sites import AllocationSites
from evaluator.slot.device_memory import allocator_counts, allocator_phases, release_device_cache
from evaluator.slot.groups_ahead import GroupsAhead
from evaluator.slot.task_driver import TaskDriver
from evaluator.slot.task_judge import TaskJudge, input_seed  # noqa: F401 - input_seed: public here too
from evaluator.slot.task_judge import shared_steps_from
from evaluator.slot.task_run import drive_task

if TYPE_CHECKING:
    from evaluator.isolation.sandbox import SandboxSpec

# Candidate outputs travel to the judge as files: the runner's hand-over lifts its soft file-size cap (the output-flood
# cap) to this hard one while it writes an output.
RUNNER_MIN_FILE_SIZE_BYTES = 8 * 2**30

START_TIMEOUT_S = 120.0
TASK_START_TIMEOUT_S = 60.0  # a ready runner handed a task says "started" after wiping its scratch: milliseconds
EXIT_STATUS_WAIT_S = 2.0
FORK_ANSWER_WAIT_S = 5.0
MEMORY_CHECK_S = 0.25
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
MAX_RUNNER_MESSAGE_BYTES = 8 * 2**20
# Which GPU steps outside timing hold the device lock shared (slot/task_judge.shared_steps_from): unset or "0" none
# (only timings exclude each other: the default, docs/slot.md says why), "1" all of them, or a comma-separated list of
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


class InfrastructureFailure(Exception):
    """The slot's own machinery (zygote, pre-warmed runner, judge) failed: not the candidate's fault, retried once."""


# ---------------------------------------------------------------- the slot's processes

class _Reader:
    """Length-prefixed JSON messages from an untrusted pipe: sizes bounded, garbage is an error, never a crash."""

    def __init__(self, fd: int, max_bytes: int = MAX_RUNNER_MESSAGE_BYTES):
        self.fd, self.max_bytes, self.buffer, self.eof = fd, max_bytes, bytearray(), False

    def read(self) -> list[dict[str, Any]]:
        from evaluator.contract.framing import HEADER as _HEADER

        try:
            data = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return []
        self.buffer += data
        messages = []
        while len(self.buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self.buffer)
            if length > self.max_bytes:
                raise ValueError(f"a message of {length} bytes")
            if len(self.buffer) < _HEADER.size + length:
                break
            body = bytes(self.buffer[_HEADER.size:_HEADER.size + length])
            del self.buffer[:_HEADER.size + length]
            message = json.loads(body)
            if not isinstance(message, dict):
                raise ValueError("a message that is not an object")
            messages.append(message)
        return messages


@dataclass(eq=False)
class _Runner:
    runner_id: str
    task_w: int
    result_r: int
    reader: _Reader
    forked_at: float
    ns_pid: int = 0
    host_pid: int = 0
    ready: bool = False
    workdir: str = ""
    returncode: Optional[int] = None
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for fd in (self.task_w, self.result_r):
                try:
                    os.close(fd)
                except OSError:
                    pass


def _nspids(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("NSpid:"):
                    return [int(v) for v in line.split()[1:]]
    except OSError:
        pass
    return []


@dataclass
class SlotCounters:
    values: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, n: int = 1) -> None:
        self.values[name] = self.values.get(name, 0) + n

    def take(self) -> dict[str, int]:
        taken, self.values = self.values, {}
        return taken


class Slot:
    """The zygote (in its sandbox) and the runners it forks, seen from the trusted side."""

    def __init__(self, device: str, root: str, worker_module: str, limits: dict, out_path: str, err_path: str):
        from evaluator.isolation import sandbox as sandboxes

        self.device, self.root, self.worker_module, self.limits = device, root, worker_module, limits
        self.out_path, self.err_path = out_path, err_path
        self.private_dir = os.path.join(root, "private")
        self.inputs_dir, self.outputs_dir = os.path.join(root, "xfer-in"), os.path.join(root, "xfer-out")
        for folder in (self.private_dir, self.inputs_dir, self.outputs_dir):
            os.makedirs(folder, exist_ok=True)
        # Before any thread or child exists: the zygote and every runner inherit the mounts (bwrap binds them).
        why_not = exchange_tmpfs.mount_private_tmpfs([self.inputs_dir, self.outputs_dir])
        if why_not and why_not != "turned off":
            print(f"the slot's exchange folders stay on the pool's filesystem ({why_not})", file=sys.stderr, flush=True)
        os.chmod(self.outputs_dir, 0o777)  # the runner may be uid 65534; only the sandbox's bind reaches it
        os.chmod(self.inputs_dir, 0o755)
        os.chmod(self.private_dir, 0o777)
        self.sandbox = sandboxes.get_sandbox(os.environ.get("KRL_WORKER_SANDBOX") or None)
        self.counters = SlotCounters()
        self.zygote: Optional[subprocess.Popen] = None
        self.control: Optional[socket.socket] = None
        self.zygote_host_pid = 0
        self.zygote_depth = 0
        self.runners: dict[str, _Runner] = {}
        self.next_runner = 0
        self.exit_reports: dict[str, int] = {}
        self.triton_shared_dir = ""  # Triton's trusted cache level, once the judge host has warmed it
        self.runner_namespaces = False  # each runner makes its own namespaces (evaluator/slot/task_isolation.py)

    # ---- zygote
    def start_zygote(self) -> None:
        from evaluator.isolation import sandbox as sandboxes

        self.stop_zygote()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        extra = {name: value for name, value in os.environ.items()
                 if name in ("CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "OMP_NUM_THREADS", "TORCH_CUDA_ARCH_LIST")}
        extra.update(KRL_WORKER_LIMITS=json.dumps(self.limits), KRL_WORKER_XFER_IN=self.inputs_dir,
                     KRL_WORKER_XFER_OUT=self.outputs_dir,
                     KRL_WORKER_OWN_TMP="1" if self.sandbox.kind == "bwrap" else "0",
                     PYTHONSAFEPATH="1")
        # Per-task sandboxes: each runner's own namespaces, tmpfs and pid-keyed filter (the zygote loads no filter
        # itself, since the filter forbids the namespace calls each runner makes once).
        from evaluator.slot import task_isolation

        runner_sandbox = task_isolation.zygote_environment(self.sandbox.kind, self.limits, self.private_dir,
                                                           self.outputs_dir)
        extra.update(runner_sandbox)
        self.runner_namespaces = bool(runner_sandbox)
        read_only = [self.inputs_dir] + _module_roots(self.worker_module)
        if self.triton_shared_dir and self.sandbox.kind == "bwrap":
            # Only where the sandbox makes it read-only: elsewhere a candidate could write the shared level.
            from evaluator.build.triton_cache import runner_environment

            extra.update(runner_environment(self.triton_shared_dir))
            read_only.append(self.triton_shared_dir)
        # The build cache read-only: runners load the CUDA extensions the trusted side published there (without it
        # every CUDA candidate rebuilt privately inside its run time limit; H100).
        spec = sandboxes.worker_spec(self.private_dir, os.environ, extra_env=extra,
                                     cache_dir=os.environ.get("KRL_WORKER_CACHE_DIR", ""),
                                     gpu=self.device.startswith("cuda"), read_only=read_only,
                                     writable=[self.outputs_dir])
        spec = dataclasses.replace(spec, filters_in_runner=self.runner_namespaces)
        if spec.gpu:
            spec = _own_gpu_only(spec)
        if self.sandbox.kind == "none":
            # No mount view: the project must still be importable from where it is.
            spec = sandboxes.SandboxSpec(**{**spec.__dict__, "env": {**spec.env, "PYTHONPATH": _pythonpath()}})
        out_file, err_file = open(self.out_path, "ab"), open(self.err_path, "ab")
        try:
            self.zygote = self.sandbox.popen(
                spec, [sys.executable, "-P", "-m", "evaluator.slot.runner", str(child.fileno()), self.device,
                       self.worker_module],
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=out_file, stderr=err_file,
                start_new_session=True)
        finally:
            child.close()
            out_file.close()
            err_file.close()
        self.control = parent
        message = self._control_message(time.monotonic() + START_TIMEOUT_S, want="ready")
        if not message:
            raise InfrastructureFailure(f"the sandboxed zygote did not start: {_tail(self.err_path)}")
        self.zygote_host_pid = self._host_pid(int(message.get("pid", 0)), self.zygote.pid, any_depth=True)
        self.zygote_depth = len(_nspids(self.zygote_host_pid)) if self.zygote_host_pid else 0
        self.counters.add("zygote_starts")

    def stop_zygote(self) -> None:
        for runner in list(self.runners.values()):
            self.discard(runner)
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.zygote is not None:
            kill_tree(self.zygote.pid)
            try:
                self.zygote.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
            self.zygote = None

    def resume_sandbox(self) -> None:
        """SIGCONT to the zygote and its runners. The last task's candidate ran as the same sandbox user, so it could
        stop them (its own processes are dead by now); the next request must not wait out its limit."""
        from evaluator.isolation.proctree import children

        if self.zygote_host_pid:
            for pid in (self.zygote_host_pid, *children(self.zygote_host_pid)):
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass

    def zygote_alive(self) -> bool:
        return self.zygote is not None and self.zygote.poll() is None and self.control is not None

    def _host_pid(self, ns_pid: int, below: int, any_depth: bool = False) -> int:
        """The host pid of a process that knows itself as ns_pid inside the sandbox (a runner: a direct child of the
        zygote, found without a pass over every process; the zygote: somewhere below the sandbox launcher)."""
        from evaluator.isolation.proctree import children, descendants

        for pid in (descendants(below) if any_depth else children(below)):
            nspids = _nspids(pid)
            if nspids and nspids[-1] == ns_pid and (any_depth or len(nspids) == self.zygote_depth):
                return pid
        return 0

    def _control_message(self, deadline: float, want: str = "") -> Optional[dict[str, Any]]:
        """The next message of the zygote (of type `want`, if given; exit reports are filed on the way); None when
        the zygote is gone or silent until the deadline."""
        while self.control is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.control.settimeout(remaining)
            try:
                data = self.control.recv(65536)
            except (socket.timeout, BlockingIOError):
                return None
            except OSError:
                data = b""
            if not data:
                self.control.close()
                self.control = None
                return None
            try:
                message = json.loads(data)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            if message.get("type") == "exited":
                self.exit_reports[str(message.get("runner"))] = int(message.get("returncode", 0))
            elif message.get("type") == "forked":
                self._on_forked(message)
            if not want or message.get("type") == want:
                return message
        return None

    def drain_control(self) -> None:
        """Non-blocking: file whatever exit reports the zygote has sent."""
        while self.control is not None and self._control_message(time.monotonic() + 0.0001) is not None:
            pass

    # ---- runners
    def fork_runner(self) -> _Runner:
        if not self.zygote_alive():
            raise InfrastructureFailure("the sandboxed zygote is not running")
        self.next_runner += 1
        runner_id = f"r{self.next_runner}"
        task_r, task_w = os.pipe()
        result_r, result_w = os.pipe()
        try:
            socket.send_fds(self.control, [json.dumps({"type": "fork", "runner": runner_id}).encode()],
                            [task_r, result_w])
        except OSError as exc:
            for fd in (task_r, task_w, result_r, result_w):
                os.close(fd)
            raise InfrastructureFailure(f"the zygote's control channel failed: {exc}") from None
        os.close(task_r)
        os.close(result_w)
        os.set_blocking(result_r, False)
        # Not waiting for the zygote's "forked" answer (a fork of a torch process takes tens of ms): its pid is filed
        # when the answer comes (_on_forked), and looked for only where it is needed (locate).
        runner = _Runner(runner_id, task_w, result_r, _Reader(result_r), time.monotonic())
        self.runners[runner_id] = runner
        self.counters.add("runners_forked")
        return runner

    def _on_forked(self, message: dict[str, Any]) -> None:
        runner = self.runners.get(str(message.get("runner")))
        if runner is not None and not runner.ns_pid and type(message.get("pid")) is int:
            runner.ns_pid = message["pid"]
            runner.host_pid = self._host_pid(runner.ns_pid, self.zygote_host_pid or self.zygote.pid)

    def locate(self, runner: _Runner, wait_s: float = FORK_ANSWER_WAIT_S) -> int:
        """The runner's host pid, waiting for the zygote's answer to its fork if it has not come yet (0: unknown)."""
        deadline = time.monotonic() + wait_s
        while not runner.ns_pid and self.control is not None and runner.runner_id in self.runners:
            if self._control_message(deadline, want="forked") is None:
                break
        return runner.host_pid

    def wait_ready(self, runner: _Runner, timeout_s: float) -> None:
        """Block until the runner says ready (CUDA initialised); InfrastructureFailure if it dies or stays silent."""
        deadline = time.monotonic() + timeout_s
        selector = selectors.DefaultSelector()
        selector.register(runner.result_r, selectors.EVENT_READ)
        try:
            while not runner.ready:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or runner.reader.eof:
                    break
                if selector.select(min(remaining, 0.5)):
                    for message in runner.reader.read():
                        self.on_ready(runner, message)
        except ValueError:
            pass
        finally:
            selector.close()
        if not runner.ready:
            self.discard(runner)
            raise InfrastructureFailure(f"a runner did not become ready: {_tail(self.err_path)}")

    def on_ready(self, runner: _Runner, message: dict[str, Any]) -> None:
        if message.get("type") == "ready":
            runner.ready = True
            runner.workdir = str(message.get("workdir", ""))[:500]

    def discard(self, runner: _Runner) -> None:
        """Kill a runner's whole tree and forget it (one signal when it has no children: the usual case, since a
        runner kills what its candidate left before it answers)."""
        from evaluator.isolation.proctree import children

        if self.locate(runner):
            if children(runner.host_pid):
                kill_tree(runner.host_pid)
            else:
                try:
                    os.kill(runner.host_pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        runner.close()
        self.runners.pop(runner.runner_id, None)

    def kill_leftovers(self, runner: _Runner) -> int:
        """Kill what the candidate left running under its runner (the runner is their subreaper and waits, after its
        last answer, to be killed itself): the judge's own count, never the runner's."""
        from evaluator.isolation.proctree import children

        if not self.locate(runner) or not children(runner.host_pid):
            return 0
        killed = len(kill_tree(runner.host_pid, include_root=False))
        self.counters.add("leftover_processes_killed", killed)
        return killed

    def returncode_of(self, runner: _Runner, wait_s: float) -> Optional[int]:
        deadline = time.monotonic() + wait_s
        while runner.runner_id not in self.exit_reports and self.control is not None:
            if self._control_message(deadline, want="exited") is None:
                break
        return self.exit_reports.pop(runner.runner_id, None)

    def wipe_exchange(self) -> None:
        for folder in (self.inputs_dir, self.outputs_dir):
            empty_folder(folder)

    def task_cgroup(self, runner: _Runner) -> str:
        """The runner's own cgroup folder, where the sandbox made one (its CPU accounting charges the candidate's
        timing in CPU mode); '' where there is none: the judge then sums the runner tree's schedstat."""
        hook = getattr(self.sandbox, "task_cgroup", None)
        return str(hook(runner.host_pid) or "") if hook is not None and runner.host_pid else ""

    def resident_bytes(self, runner: _Runner) -> int:
        return tree_resident_bytes(runner.host_pid, process_table()) if self.locate(runner) else 0


def _own_gpu_only(spec: SandboxSpec) -> SandboxSpec:
    """The runners see this slot's GPU and no other: a candidate could otherwise start work on a GPU where another
    slot is timing. CUDA_VISIBLE_DEVICES names it by UUID, which holds however CUDA numbers the one GPU left."""
    from evaluator.isolation import gpu_nodes

    own = gpu_nodes.sandbox_gpu(os.environ)
    if own is None:
        return spec
    return dataclasses.replace(spec, gpu_minor=own.minor, env={**spec.env, "CUDA_VISIBLE_DEVICES": own.uuid})


def _module_roots(module: str) -> list[str]:
    """Folders to show read-only inside the sandbox so `module` imports there (a worker module outside evaluator/)."""
    import importlib.util

    top = module.split(".")[0]
    if top == "evaluator":
        return []
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return [spec.origin] if spec and spec.origin else []
    return list(spec.submodule_search_locations)


def _pythonpath() -> str:
    from evaluator.isolation.environment import project_root

    extra = os.environ.get("PYTHONPATH", "")
    return project_root() + (os.pathsep + extra if extra else "")


def _tail(path: str) -> str:
    from evaluator.isolation.exits import tail as tail

    return tail(path, max_lines=5)


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
        self.spares: list[_Runner] = []  # oldest first: the one that has warmed longest gets the next task
        fixed = os.environ.get(SPARE_RUNNERS_ENV)
        self.spare_target = max(1, int(fixed or (2 if device.startswith("cuda") else 1)))
        self.spares_adapt = not fixed and device.startswith("cuda")
        self.finished_runner: Optional[_Runner] = None
        self.task_isolation: Any = None  # the running task's cgroup and runner view (evaluator/slot/task_isolation.py)
        self.groups_ahead = GroupsAhead()  # the next task's cgroup, made while this one runs
        self.reference_cache = ReferenceCache()
        self.device_name = ""
        self.device_lock: Any = None  # this GPU's lock (evaluator/isolation/device_lock.py), once started
        self.allocation_sites: Optional[AllocationSites] = None

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
        self.slot.wait_ready(self.spares[0], START_TIMEOUT_S)
        self.device_name = torch.cuda.get_device_name(0) if judge_device != "cpu" else "cpu"
        if judge_device != "cpu":
            from evaluator.isolation.device_lock import DeviceLock, device_uuid

            self.device_lock = DeviceLock(device_uuid(0))
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

            why = warm_shared_cache(shared)
        if why:
            print(f"Triton's shared cache was not warmed (runners compile what they need): {why}", file=sys.stderr,
                  flush=True)
        self.slot.triton_shared_dir = shared

    def _ready_runner(self) -> _Runner:
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
            runner.runner_id, runner_pid, self.resident_limit, self.slot.runner_namespaces)
        if self.slot.runner_namespaces and self.task_isolation.host_pid <= 0:
            self.slot.discard(runner)
            return {"type": "infra", "task": task_id, "why": "the runner's host pid was not found"}
        runner_cpu = self._runner_cpu(runner, runner_pid)  # read by the pings, the timing and cpu_runner alike
        for path in (self.err_path, self.out_path):
            with open(path, "ab") as handle:
                handle.truncate(0)
        self.slot.wipe_exchange()
        try:
            while len(self.spares) < self.spare_target:
                self.spares.append(self.slot.fork_runner())  # warm up (CUDA init) while this task runs
        except InfrastructureFailure:
            pass
        self._group_ahead()
        self.finished_runner = runner  # killed and wiped after the reply is sent (finish_task): off the verdict's path
        task = TaskJudge(request, self.device, self.slot.inputs_dir,
                         self.task_isolation.runner_view(self.slot.outputs_dir), self.reference_cache)
        driver = TaskDriver(self.slot, runner, deadline, self.resident_limit or None,
                            spares=[spare for spare in self.spares if not spare.ready], on_spare=self._on_spare,
                            group_memory=self.task_isolation.memory_bytes,
                            group_oom_kills=group.oom_kills if (group := self.task_isolation.cgroup) else None,
                            runner_cpu_ns=None if self.device.startswith("cuda") else runner_cpu.now)

        def on_started() -> None:
            write_message(self.result_fd, {"type": "started", "task": task_id})

        hits = self.reference_cache.hits
        allocator_before = allocator_counts()
        # A CPU group over the runner caps the timing's raised nice for it (isolation/timing_priority.py); 0: none does
        runner_weight = cpu_group_weight(runner_pid) if runner_pid > 0 else 0.0
        try:
            outcome = drive_task(self.slot, runner, driver, task, message.get("prebuilt"), on_started,
                                 self._timing_for(runner_cpu), min(deadline, started_at + TASK_START_TIMEOUT_S),
                                 self.device_name, self.err_path,
                                 self.device_lock, shared_steps_from(os.environ.get(DEVICE_SHARED_ENV, "")),
                                 alone=bool(message.get("alone")))
        finally:
            cpu_spent.runner_task_ns = runner_cpu.now()
            driver.close()
            del task  # its inputs and outputs, then the cached blocks back to the device: eight judges that kept
            release_device_cache()  # theirs left honest candidates out of memory on an H100 (48-kernel batch)
            allocator = allocator_phases(allocator_before, allocator_counts())
            if self.allocation_sites is not None:
                self.allocation_sites.note(task_id)
        # What the candidate left running dies before the reply (the runner's pid filter stops it signalling them).
        self.slot.counters.add("leftover_processes_killed", self.task_isolation.kill_leftovers())
        self.slot.counters.add("judge_cache_hits", self.reference_cache.hits - hits)
        if outcome.get("type") == "result":
            outcome["task"] = task_id
            outcome["result"]["phase_times_s"]["judge_ready"] = round(ready_s, 6)
            outcome["result"]["phase_times_s"]["task_setup"] = round(self.task_isolation.setup_s, 6)  # its cgroup
            outcome["result"]["phase_times_s"]["runner_cpu_weight"] = runner_weight
            outcome["result"]["phase_times_s"].update(allocator)
            outcome["result"]["phase_times_s"]["total"] = round(time.monotonic() - started_at, 6)
            outcome["result"]["phase_times_s"].update(cpu_spent.phases())
        else:
            outcome["task"] = task_id
        outcome["counters"] = self.slot.counters.take()
        return outcome

    def _on_spare(self, spare: "_Runner") -> bool:
        """A spare runner said something while a task ran: file its readiness. True once it needs no more watching."""
        try:
            for message in spare.reader.read():
                self.slot.on_ready(spare, message)
        except ValueError:
            self.slot.discard(spare)
            return True
        if spare.ready:
            self._group_ahead()
        return spare.reader.eof or spare.ready

    def _group_ahead(self) -> None:
        """The next task's group made now, in a thread, for the spare that gets it, once that spare is ready and its
        host pid known (GroupsAhead)."""
        if self.spares and self.spares[0].ready and self.spares[0].host_pid > 0:
            self.groups_ahead.prepare(self.spares[0].runner_id, self.spares[0].host_pid, self.resident_limit,
                                      self.slot.runner_namespaces)

    def _runner_cpu(self, runner: "_Runner", runner_pid: int) -> Any:
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
            if self.device.startswith("cuda"):  # charged by the judge's clock; the runner's CPU only watched
                return TimingPhase(task, driver, schedule, lock=self.device_lock, watch=runner_cpu)
            return TimingPhase(task, driver, schedule, charge=runner_cpu)
        return make

    def finish_task(self) -> None:
        """The last task's runner killed (it has answered, or is dead) and the exchange folders emptied."""
        runner, self.finished_runner = self.finished_runner, None
        if runner is not None:
            self.slot.discard(runner)
            self.slot.wipe_exchange()
        # The task's whole cgroup killed (escaped processes too) and removed.
        from evaluator.slot import task_isolation

        task, self.task_isolation = self.task_isolation, None
        task_isolation.end_task(task)

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
            self.finish_task()
