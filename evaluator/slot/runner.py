"""The candidate side of an evaluation slot, started inside the sandbox: a zygote that imports torch once (never
CUDA) and forks one single-use runner per task; a runner evaluates one request, hands its outputs to the judge, exits."""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import signal
import socket
import sys
from typing import Any

from evaluator.isolation.proctree import become_subreaper, has_children, kill_tree
from evaluator.isolation.teardown import empty_folder
from evaluator.slot.reference_first import ORDERS as REFERENCE_FIRST_ORDERS, ReferenceFirst

PR_SET_DUMPABLE = 4
MAX_CONTROL_BYTES = 1 << 16


def set_dumpable(on: bool) -> None:
    """Not dumpable: no core files, /proc/<pid>/mem, fd and environ closed to the same user, no ptrace attach."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1 if on else 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - not Linux
        pass


def die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001
        pass


def send_control(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


# ---------------------------------------------------------------- the runner (a forked child of the zygote)

def _close_other_fds(keep: set[int]) -> None:
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _own_log_descriptions() -> None:
    """Stdout and stderr reopened as this runner's own open file descriptions of the same log files. Inherited from the
    zygote, they were one description shared with it, the spares and every later runner: a candidate that cleared its
    O_APPEND and moved its offset past the file-size cap failed every later print with EFBIG (red team, session 27).
    Its own description's flags and offset reach no one else; the judge truncates the files before each task."""
    for fd in (1, 2):
        try:
            fresh = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_APPEND)
        except OSError:  # not a file this runner may open (a pipe, /dev/null, another owner): kept as it is
            continue
        os.dup2(fresh, fd)
        os.close(fresh)


def _fresh_folder(path: str) -> None:
    """`path` as an empty folder of ours. The last candidate ran as the same user while this runner waited: it may have
    removed the folder, put a file or a link in its place (a wipe of its own removes it too), or filled it."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    empty_folder(path)


def wipe_scratch(keep: tuple[str, ...]) -> None:
    """Before any candidate code runs: whatever an earlier runner of this sandbox left in the writable places (its
    home, its tmp, the sandbox's private /tmp and /dev/shm) is removed, so nothing planted reaches this candidate."""
    # TMPDIR itself is kept everywhere (emptied as a folder of its own): it lies in HOME, or below /tmp (a pool's
    # folders do), and removed there nvcc in the runner had nowhere for its temporaries ("Could not open output file",
    # every CUDA build without a compile worker).
    tmpdir = os.environ.get("TMPDIR", "")
    keep = keep + (tmpdir,)
    for folder in (os.environ.get("HOME", ""), tmpdir):
        if folder:
            empty_folder(folder, keep)
    if os.environ.get("KRL_WORKER_OWN_TMP") == "1":  # the sandbox's own tmpfs, never the host's /tmp
        for folder in ("/tmp", "/dev/shm"):
            empty_folder(folder, keep)


def runner_main(task_fd: int, result_fd: int, device: str, worker: Any) -> int:
    """Wait (pre-warmed) for a task, then answer the judge's orders for it (evaluator/slot/order_loop.py), and exit."""
    from evaluator.contract.types import EvalRequest
    from evaluator.contract.framing import read_message, write_message
    from evaluator.slot.order_loop import Exchange, serve_orders

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _close_other_fds({task_fd, result_fd})
    _own_log_descriptions()
    die_with_parent()
    become_subreaper()  # the candidate's detached processes stay in this tree, where the judge's kill finds them
    # This runner's own namespaces, tmpfs and syscall filters, before anything else runs here
    from evaluator.slot.task_isolation import enter_runner_sandbox
    enter_runner_sandbox()
    set_dumpable(False)
    ctx = worker.prepare_runner(device)
    write_message(result_fd, {"type": "ready", "pid": os.getpid(), "workdir": getattr(ctx, "work_dir", "")})
    message = read_message(task_fd)
    first = None  # the reference timed here before any candidate code runs (slot/reference_first.py)
    while message and message.get("type") in ("ping",) + REFERENCE_FIRST_ORDERS:
        if message["type"] == "ping":  # the judge times a round trip before any candidate code runs
            if hasattr(worker, "synchronize"):
                worker.synchronize(ctx)  # as every timed order ends
            write_message(result_fd, {"type": "pong"})
        else:
            first = first or ReferenceFirst(ctx)
            write_message(result_fd, first.answer(message))
        message = read_message(task_fd)
    if first is not None:
        first.release()
    if not message or message.get("type") != "task":
        return 0
    work_dir = getattr(ctx, "work_dir", "") or ""
    wipe_scratch((work_dir,) if work_dir else ())
    if work_dir:
        _fresh_folder(work_dir)
        os.chdir(work_dir)
    write_message(result_fd, {"type": "started"})
    session = worker.open_session(EvalRequest.from_dict(message["request"]), ctx, message.get("prebuilt"))
    profile = RunnerProfile(os.environ.get("KRL_WORKER_XFER_OUT", "")) if message.get("profile") else None
    try:
        try:
            session.load()
        except BaseException as exc:  # noqa: BLE001 - the candidate's load failed: the judge decides what it means
            if isinstance(exc, KeyboardInterrupt):
                raise
            write_message(result_fd, session.failure(exc))
            return 0
        write_message(result_fd, {"type": "loaded"})
        serve_orders(lambda: read_message(task_fd), lambda answer: write_message(result_fd, answer), session,
                     Exchange(os.environ.get("KRL_WORKER_XFER_IN", ""), os.environ.get("KRL_WORKER_XFER_OUT", ""),
                              on_gpu=str(device).startswith("cuda")),
                     on_finish=profile.dump if profile is not None else None)
    finally:
        close = getattr(session, "cleanup", None)
        if close is not None:
            close()
        if has_children():
            kill_tree(os.getpid(), include_root=False)
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


class RunnerProfile:
    """The benchmarks' profile of one runner's task (the judge asks for it with "profile" in the task order): cProfile
    from the candidate's load to the finish order, written into the outputs folder, where the judge picks it up."""

    def __init__(self, outputs_dir: str):
        import cProfile

        from evaluator.slot.judge_profile import RUNNER_PROFILE_FILE

        self.path = os.path.join(outputs_dir, RUNNER_PROFILE_FILE)
        self.profiler = cProfile.Profile()
        self.profiler.enable()

    def dump(self) -> None:
        self.profiler.disable()
        self.profiler.dump_stats(self.path)


# ---------------------------------------------------------------- the zygote

# Modules a runner would otherwise import lazily, each time, after its fork. The evaluator's own never touch CUDA.
RUNNER_MODULES = ("evaluator.judging.judge", "evaluator.slot.worker_session", "evaluator.slot.order_loop",
                  "evaluator.judging.kernelbench_timing",
                  "evaluator.judging.tensorwire", "evaluator.judging.timing", "evaluator.judging.errclean",
                  "evaluator.judging.rules.runtime", "evaluator.judging.rules.static", "evaluator.build.triton_cache", "torch.utils._device")
# CPU mode only (TRITON_INTERPRET=1): ~25 ms per runner for triton's interpreter alone, measured. Not on a GPU: one of
# these initialised CUDA in the zygote there (H100, triton 3.6: every runner then failed "Cannot re-initialize CUDA in
# forked subprocess"), and a zygote must never initialise CUDA.
INTERPRETER_MODULES = ("triton.runtime.interpreter", "triton.language.semantic", "triton.tools.tensor_descriptor",
                       "triton.compiler.code_generator", "triton.language.extra.libdevice", "triton.experimental.gluon")


# GPU only: what torch.profiler's first session imports (torch._inductor.standalone_compile pulls in dynamo, sympy,
# numpy.random: ~900 modules). Each fresh runner paid it in its warm-up, 4-6 s of CPU on an H100 host, the larger
# part of a task's CPU at 8 slots, where the host's CPUs bound the slot's rate. Pure Python, imported before any fork;
# KRL_WORKER_PROFILER_IMPORTS=0 leaves it to each runner.
PROFILER_MODULES = ("torch.profiler", "torch._inductor.standalone_compile")
PROFILER_IMPORTS_ENV = "KRL_WORKER_PROFILER_IMPORTS"


def import_runner_modules(device: str) -> None:
    import gc

    names = RUNNER_MODULES + (INTERPRETER_MODULES if device == "cpu" else ())
    if device != "cpu" and os.environ.get(PROFILER_IMPORTS_ENV, "1") != "0":
        # torch.cuda.is_available() through NVML, which does not initialise the driver: a zygote must never
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # initialise CUDA, or no runner could use it
        names += PROFILER_MODULES
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional module (no triton, another triton version)
            pass
    if device != "cpu":
        hash_triton_once()
        ask_triton_about_host_once()
    import torch

    if device != "cpu" and torch.cuda.is_initialized():
        raise SystemExit(f"krl zygote: importing the runner's modules initialised CUDA, so no runner could use it; "
                         f"set {PROFILER_IMPORTS_ENV}=0")
    gc.collect()
    gc.freeze()  # the zygote's objects out of the collector's sight: a runner's collections do not copy their pages


def hash_triton_once() -> None:
    """Triton's own version key (a hash of its compiler's sources and its 100+ MiB native library), computed here once
    and inherited by every runner: each runner computed it afresh at its first Triton launch, 0.45 s of a 0.67 s launch
    on a full cache hit (H100, triton 3.6, session 15). Hashing files imports nothing and touches no device."""
    try:
        from triton.runtime.cache import triton_key

        triton_key()  # functools.lru_cache: the value stays in this process, and so in each fork of it
    except Exception:  # noqa: BLE001 - no triton, or a version that keeps it elsewhere: each runner hashes as before
        pass


def ask_triton_about_host_once() -> None:
    """Triton's questions about this host, each a subprocess in every runner otherwise (`file` on the Python binary,
    ldconfig, ptxas --version: ~30 ms of each Triton task, H200, session 23), asked here once and cached (functools.
    lru_cache) for every fork. None touches a device: the GPUs' architectures come from NVML."""
    for ask in (_triton_platform_key, _triton_library_dirs, _triton_ptxas_versions):
        try:
            ask()
        except Exception:  # noqa: BLE001 - another Triton keeps these elsewhere: each runner asks, as before
            pass


def _triton_platform_key() -> None:
    from triton.runtime.build import platform_key

    platform_key()


def _triton_library_dirs() -> None:
    from triton.backends.nvidia import driver

    driver.library_dirs()


def _triton_ptxas_versions() -> None:
    import pynvml

    from triton.backends.nvidia.compiler import get_ptxas_version

    pynvml.nvmlInit()
    try:
        archs = set()
        for index in range(pynvml.nvmlDeviceGetCount()):
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(index))
            archs.add(major * 10 + minor)
    finally:
        pynvml.nvmlShutdown()
    for arch in sorted(archs):
        get_ptxas_version(arch)


def _kill_strays(runners: dict[int, str]) -> None:
    """Children that are not runners are a dead runner's orphans (we are their subreaper): kill them."""
    try:
        children = {int(p) for tid in os.listdir("/proc/self/task")
                    for p in open(f"/proc/self/task/{tid}/children").read().split()}
    except OSError:
        return
    for pid in children - set(runners):
        kill_tree(pid)


def zygote_main(control_fd: int, device: str, worker_module: str) -> int:
    die_with_parent()
    become_subreaper()
    set_dumpable(False)
    from evaluator.isolation.limits import apply_limits

    apply_limits(json.loads(os.environ.pop("KRL_WORKER_LIMITS", "{}")))
    faulthandler.enable()  # a runner's segfault prints the Python stack, which names the candidate line
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: where a stuck runner waits, into its log
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    wipe_scratch(())
    import torch  # noqa: F401 - paid once here, shared by every runner through fork; CUDA stays uninitialised

    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001
        pass
    worker = importlib.import_module(worker_module)
    import_runner_modules(device)
    from evaluator.slot.task_isolation import prepare_zygote  # filters compiled once, not per fork
    prepare_zygote()
    sock = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    runners: dict[int, str] = {}
    send_control(sock, {"type": "ready", "pid": os.getpid()})
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, "control")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    while True:
        for key, _ in selector.select(1.0):
            if key.data == "child":
                try:
                    while os.read(wake_r, 4096):
                        pass
                except OSError:
                    pass
                _reap(sock, runners)
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MAX_CONTROL_BYTES, 4)
            except OSError:
                data, fds = b"", []
            if not data:
                for pid in list(runners):
                    kill_tree(pid)
                return 0
            command = json.loads(data)
            if command.get("type") != "fork" or len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                continue
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    sock.close()
                    code = runner_main(fds[0], fds[1], device, worker)
                except BaseException:  # noqa: BLE001 - a runner never returns into the zygote's loop
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(code)
            for fd in fds:
                os.close(fd)
            runners[pid] = str(command.get("runner", ""))
            send_control(sock, {"type": "forked", "runner": runners[pid], "pid": pid})
        _reap(sock, runners)


def _reap(sock: socket.socket, runners: dict[int, str]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            break
        runner = runners.pop(pid, None)
        if runner is not None:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            send_control(sock, {"type": "exited", "runner": runner, "pid": pid, "returncode": code})
    _kill_strays(runners)


if __name__ == "__main__":
    sys.exit(zygote_main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
