"""The sandboxed zygote and the runners it forks, as the trusted judge host sees and handles them: starting them,
the untrusted pipes' bounded reader, each runner's host pid, its exit, and what it leaves behind."""

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

from evaluator.contract.framing import loads_untrusted
from evaluator.isolation import exchange_tmpfs
from evaluator.isolation.proctree import kill_tree, process_table, tree_resident_bytes
from evaluator.isolation.teardown import empty_folder

if TYPE_CHECKING:
    from evaluator.isolation.sandbox import SandboxSpec

START_TIMEOUT_S = 120.0  # the zygote's start, and a runner's until it says ready (CUDA, CUPTI: seconds on a GPU)
FORK_ANSWER_WAIT_S = 5.0  # the zygote's answer naming a forked runner's pid
MAX_RUNNER_MESSAGE_BYTES = 8 * 2**20  # one message from an untrusted pipe; a longer one is refused
LOGS_TMPFS_BYTES = 160 * 2**20  # the runners' stdout and stderr together: each file's soft cap is 64 MiB


class InfrastructureFailure(Exception):
    """The slot's own machinery (zygote, pre-warmed runner, judge) failed: not the candidate's fault, retried once."""


class MessageReader:
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
            message = loads_untrusted(body)
            if not isinstance(message, dict):
                raise ValueError("a message that is not an object")
            messages.append(message)
        return messages


@dataclass(eq=False)
class RunnerHandle:
    runner_id: str
    task_w: int
    result_r: int
    reader: MessageReader
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
        # Before any thread or child exists: the zygote and every runner inherit the mounts (bwrap binds them). The
        # runners' stdout and stderr files too, on a small tmpfs of their own: a candidate may lift its soft file-size
        # cap to the hard one (8 GiB, for its outputs), and a flood of prints filled the host's disk (red team, session
        # 27); in memory, its pages are charged to the writing task's cgroup as well.
        logs_dir = os.path.dirname(err_path)
        why_not = exchange_tmpfs.mount_private_tmpfs([self.inputs_dir, self.outputs_dir, logs_dir],
                                                     sizes={logs_dir: LOGS_TMPFS_BYTES})
        self.logs_private = not why_not and exchange_tmpfs.is_tmpfs(logs_dir)
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
        self.runners: dict[str, RunnerHandle] = {}
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
        if self.logs_private:  # each runner reopens them (runner._own_log_descriptions) as the sandbox's user, through
            for path in (self.out_path, self.err_path):  # its own descriptors: the pool's folder above is ours (0700)
                os.chmod(path, 0o622)
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
                message = loads_untrusted(data)
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
    def fork_runner(self) -> RunnerHandle:
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
        runner = RunnerHandle(runner_id, task_w, result_r, MessageReader(result_r), time.monotonic())
        self.runners[runner_id] = runner
        self.counters.add("runners_forked")
        return runner

    def _on_forked(self, message: dict[str, Any]) -> None:
        runner = self.runners.get(str(message.get("runner")))
        if runner is not None and not runner.ns_pid and type(message.get("pid")) is int:
            runner.ns_pid = message["pid"]
            runner.host_pid = self._host_pid(runner.ns_pid, self.zygote_host_pid or self.zygote.pid)

    def locate(self, runner: RunnerHandle, wait_s: float = FORK_ANSWER_WAIT_S) -> int:
        """The runner's host pid, waiting for the zygote's answer to its fork if it has not come yet (0: unknown)."""
        deadline = time.monotonic() + wait_s
        while not runner.ns_pid and self.control is not None and runner.runner_id in self.runners:
            if self._control_message(deadline, want="forked") is None:
                break
        return runner.host_pid

    def wait_ready(self, runner: RunnerHandle, timeout_s: float) -> None:
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

    def on_ready(self, runner: RunnerHandle, message: dict[str, Any]) -> None:
        if message.get("type") == "ready":
            runner.ready = True
            runner.workdir = str(message.get("workdir", ""))[:500]

    def discard(self, runner: RunnerHandle) -> None:
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

    def kill_leftovers(self, runner: RunnerHandle) -> int:
        """Kill what the candidate left running under its runner (the runner is their subreaper and waits, after its
        last answer, to be killed itself): the judge's own count, never the runner's."""
        from evaluator.isolation.proctree import children

        if not self.locate(runner) or not children(runner.host_pid):
            return 0
        killed = len(kill_tree(runner.host_pid, include_root=False))
        self.counters.add("leftover_processes_killed", killed)
        return killed

    def returncode_of(self, runner: RunnerHandle, wait_s: float) -> Optional[int]:
        deadline = time.monotonic() + wait_s
        while runner.runner_id not in self.exit_reports and self.control is not None:
            if self._control_message(deadline, want="exited") is None:
                break
        return self.exit_reports.pop(runner.runner_id, None)

    def wipe_exchange(self) -> None:
        for folder in (self.inputs_dir, self.outputs_dir):
            empty_folder(folder)

    def task_cgroup(self, runner: RunnerHandle) -> str:
        """The runner's own cgroup folder, where the sandbox made one (its CPU accounting charges the candidate's
        timing in CPU mode); '' where there is none: the judge then sums the runner tree's schedstat."""
        hook = getattr(self.sandbox, "task_cgroup", None)
        return str(hook(runner.host_pid) or "") if hook is not None and runner.host_pid else ""

    def resident_bytes(self, runner: RunnerHandle) -> int:
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
