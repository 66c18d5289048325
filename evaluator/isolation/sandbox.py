"""OS isolation for candidate code: a frozen SandboxSpec in, the bubblewrap (or unshare) command line out.
One module knows the tools; `get_sandbox()` picks the strongest that works here and `isolation_report()` says what holds."""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from evaluator.contract.types import EvaluatorError
from evaluator.isolation.environment import allowed_environment, looks_secret, project_root  # noqa: F401 (re-exported)
from evaluator.isolation.teardown import empty_folder

NOBODY_UID = NOBODY_GID = 65534
DEFAULT_TMP_MIB = 512
PROBE_TIMEOUT_S = 20.0
KINDS = ("auto", "bwrap", "unshare", "none")
# The host's cumulative memory counters, which a fresh /proc still shows: a candidate moved one by an exact amount
# (mlock and munlock until vmstat's unevictable_pgs_mlocked read 0xACE mod 4096), and every later task on the host read
# it back (red team, session 28). Others stay (/proc/stat's forks and interrupts): docs/known-gaps.md.
MASKED_PROC_FILES = ("/proc/vmstat", "/proc/zoneinfo")
INSTALL_HINT = ("install bubblewrap: `apt-get install -y bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap`; "
                "offline, unpack its .deb (`dpkg -x bubblewrap_*.deb DIR`) and set KRL_BWRAP=DIR/usr/bin/bwrap")

# Every protection a sandbox may give, in the order reports list them.
PROTECTIONS = (
    "no network",                 # own network namespace: only its own loopback, no route out
    "own process view",           # own PID namespace: no other process can be seen, signalled or ptraced
    "own ipc and hostname",       # IPC (SysV shm, semaphores) and UTS namespaces
    "read-only system",           # /usr, the Python prefixes, the project source: mounted read-only
    "host files absent",          # home, workspace, registry, other workers' folders, secrets: not in the mount view
    "unprivileged user",          # uid/gid 65534 and no capabilities
    "cleared environment",        # only the allow-listed variables; /proc/1/environ holds nothing else
    "size-limited tmp",           # /tmp and /dev/shm are private tmpfs with a size cap
    "dies with parent",           # the sandbox is killed when the process that started it dies
    "new session",                # no controlling terminal (no TIOCSTI into the parent's tty)
    "syscall filter",             # seccomp: no ptrace, bpf, userfaultfd, io_uring, keys, mounts, new namespaces
)


TASK_ISOLATION_ENV = "KRL_WORKER_TASK_ISOLATION"  # 0 turns per-task sandboxes and cgroups off (debugging only)
IN_SANDBOX_VARIABLE = "KRL_IN_SANDBOX"  # set inside bwrap: /tmp and /dev/shm there are the sandbox's own


class SandboxUnavailable(EvaluatorError):
    """The sandbox asked for cannot start on this machine; the message says what is missing and how to get it."""


# ---------------------------------------------------------------- the spec and the environment policy

@dataclass(frozen=True)
class SandboxSpec:
    """Everything one sandboxed process may see. Paths keep their host names inside; anything not listed is absent."""

    env: Mapping[str, str]                      # the complete environment inside (nothing is inherited)
    cwd: str                                    # working directory inside (usually the private folder)
    read_only: tuple[str, ...] = ()             # host paths visible read-only, beyond the system ones
    writable: tuple[str, ...] = ()              # host paths visible read-write: the private folder, an output folder
    gpu: bool = False                           # bind /dev/nvidia* and /dev/nvidia-caps
    gpu_minor: Optional[int] = None             # with gpu: of the per-GPU nodes only /dev/nvidia<gpu_minor>
    tmp_mib: int = DEFAULT_TMP_MIB              # size cap of the private /tmp and /dev/shm
    network: bool = False
    unprivileged: bool = True                   # uid/gid 65534: the real one when we are root, else a user namespace
    die_with_parent: bool = True
    new_session: bool = True
    system: bool = True                         # add the system and Python paths (read-only); off only in tests
    # Per-task sandboxes (evaluator/slot/task_isolation.py): each runner makes its own namespaces and loads the syscall
    # filter itself after that (the filter refuses unshare and mount), so the zygote starts without it.
    filters_in_runner: bool = False

    def all_read_only(self) -> list[str]:
        paths = (system_read_only_paths() if self.system else []) + list(self.read_only)
        return _dedupe([p for p in paths if os.path.lexists(p)])


def worker_spec(private_dir: str, parent_env: Mapping[str, str], *, extra_env: Optional[Mapping[str, str]] = None,
                cache_dir: str = "", gpu: bool = False, read_only: Sequence[str] = (), writable: Sequence[str] = (),
                tmp_mib: int = DEFAULT_TMP_MIB) -> SandboxSpec:
    """The spec of an evaluation or compile worker: the evaluator package and the build cache read-only, its private
    folder (plus `writable`) read-write, nothing else of the host. Only evaluator/ of the project is visible (not
    core/, app/, runs or workspaces), so PYTHONPATH points at the project root and imports of the rest fail."""
    os.makedirs(os.path.join(private_dir, "tmp"), exist_ok=True)
    env = allowed_environment(parent_env, private_dir, extra_env)
    env["PYTHONPATH"] = project_root()
    ro = [os.path.join(project_root(), "evaluator"), *read_only]
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
        os.chmod(cache_dir, os.stat(cache_dir).st_mode | 0o555)  # readable by uid 65534, still writable only by us
        ro.append(cache_dir)
    return SandboxSpec(env=env, cwd=private_dir, read_only=tuple(ro), writable=(private_dir, *writable), gpu=gpu,
                       tmp_mib=tmp_mib)


# ---------------------------------------------------------------- what the system needs to be visible

def python_paths() -> list[str]:
    """The interpreter's prefixes (a venv and the Python it was made from), and the folder of the real binary."""
    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))]
    return _dedupe([os.path.realpath(p) for p in paths if p])


# What Triton (launcher stubs, driver utils) and CUDA builds run; machines keep them outside /usr too (/opt/gcc).
TOOLCHAIN_PROGRAMS = ("cc", "gcc", "g++", "c++", "clang", "nvcc", "ninja", "ld", "as")


TOOLCHAIN_VARIABLES = ("CC", "CXX", "CUDAHOSTCXX", "NVCC_CCBIN")


def toolchain_paths() -> list[str]:
    """The installation prefix (the folder above bin/) of every compiler tool on PATH or named by CC/CXX, wherever it
    lives: both the path as named (a symlink farm such as /opt/gcc/bin) and the file it resolves to."""
    found = [shutil.which(program) for program in TOOLCHAIN_PROGRAMS]
    found += [shutil.which(os.environ[name]) for name in TOOLCHAIN_VARIABLES if os.environ.get(name)]
    prefixes = []
    for path in filter(None, found):
        for variant in (os.path.abspath(path), os.path.realpath(path)):
            prefixes.append(os.path.dirname(os.path.dirname(variant)))
    return _dedupe([p for p in prefixes if p not in ("/", "")])


def system_read_only_paths() -> list[str]:
    """What a compiler, Python and CUDA need from the host. /etc only in pieces: no shadow, ssh, ssl or apt config."""
    paths = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
             "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/passwd",
             "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/os-release",
             "/sys/devices/system/cpu", "/sys/devices/system/node"]
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        paths.append(os.path.realpath(cuda_home))
    for prefix in [*toolchain_paths(), *python_paths()]:
        if not any(prefix == p or prefix.startswith(p.rstrip("/") + "/") for p in paths):
            paths.append(prefix)
    return paths


# Become uid/gid 65534 for real, with no capabilities (not even inheritable or in the bounding set) and no way back.
_SETPRIV_NOBODY = ["setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_GID}", "--clear-groups", "--inh-caps=-all",
                   "--bounding-set=-all", "--no-new-privs"]


def _give_to(paths: Sequence[str], uid: int, gid: int) -> None:
    """The sandbox's user must be able to write its own folders (and nothing else of ours)."""
    for path in paths:
        for root, dirs, files in os.walk(path):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                if os.lstat(name).st_uid != uid:
                    os.lchown(name, uid, gid)


def gpu_device_paths() -> list[str]:
    return sorted(p for p in glob.glob("/dev/nvidia*"))  # nvidia0.., nvidiactl, nvidia-uvm(-tools), nvidia-caps/


def spec_gpu_paths(spec: SandboxSpec) -> list[str]:
    """The GPU nodes a spec binds: every one, or the shared ones and its own GPU's (evaluator/isolation/gpu_nodes.py)."""
    paths = gpu_device_paths()
    if spec.gpu_minor is None:
        return paths
    own = f"/dev/nvidia{spec.gpu_minor}"
    return [p for p in paths if p == own or not p[len("/dev/nvidia"):].isdigit()]


def _ancestors(paths: Sequence[str]) -> list[str]:
    """The folders above the given paths, parents first, without / and without any path that is itself bound."""
    bound = set(paths)
    found: list[str] = []
    for path in paths:
        parts = os.path.normpath(path).split("/")[1:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/" + "/".join(parts[:depth])
            if folder not in bound and folder != "/tmp":
                found.append(folder)
    return sorted(_dedupe(found), key=lambda f: f.count("/"))


def _dedupe(items: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    return [i for i in items if not (i in seen or seen.add(i))]


# ---------------------------------------------------------------- the implementations

class Sandbox:
    """One way of starting a process in isolation. `command` is pure: it returns the argument list."""

    kind = "base"
    protections: tuple[str, ...] = ()

    def command(self, spec: SandboxSpec, argv: Sequence[str]) -> list[str]:
        raise NotImplementedError

    def launch_env(self, spec: SandboxSpec) -> dict[str, str]:
        """The environment the launcher itself is started with. Never the parent's: with a PID namespace the
        launcher's copy becomes /proc/1/environ inside."""
        return dict(spec.env)

    def launch_cwd(self, spec: SandboxSpec) -> str:
        return "/"

    def prepare(self, spec: SandboxSpec) -> None:
        """Side effects a start needs on the host: the writable folders given to the sandbox's user."""

    def popen(self, spec: SandboxSpec, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Start argv inside the sandbox; popen_kwargs as for subprocess.Popen (stdin/stdout, pass_fds...)."""
        self.prepare(spec)
        command, own_fds = self.start_command(spec, argv)
        popen_kwargs["pass_fds"] = (*popen_kwargs.get("pass_fds", ()), *own_fds)
        try:
            return subprocess.Popen(command, env=self.launch_env(spec), cwd=self.launch_cwd(spec), **popen_kwargs)
        finally:
            for fd in own_fds:
                os.close(fd)

    def start_command(self, spec: SandboxSpec, argv: Sequence[str]) -> tuple[list[str], tuple[int, ...]]:
        """The command for one start and the descriptors it needs passed (closed by the caller after the start)."""
        return self.command(spec, argv), ()

    def missing(self) -> tuple[str, ...]:
        return tuple(p for p in PROTECTIONS if p not in self.protections)

    def describe(self) -> str:
        held = ", ".join(self.protections) or "nothing"
        return f"{self.kind}: {held}" + (f"; missing: {', '.join(self.missing())}" if self.missing() else "")


class Bubblewrap(Sandbox):
    """bubblewrap (bwrap): its own namespaces, a mount view built from nothing, a cleared environment, a seccomp
    filter, and the real uid 65534 (as root) or a user namespace (otherwise)."""

    kind = "bwrap"

    def __init__(self, executable: str = "bwrap", as_root: Optional[bool] = None):
        from evaluator.isolation.syscall_filter import filter_bpf

        self.executable = executable
        self.as_root = os.geteuid() == 0 if as_root is None else as_root
        # KRL_SANDBOX_SECCOMP=0 turns the filter off (reported as missing), should a GPU driver need a refused call.
        self.filtered = os.environ.get("KRL_SANDBOX_SECCOMP", "1") != "0" and filter_bpf() is not None
        self.protections = tuple(p for p in PROTECTIONS if self.filtered or p != "syscall filter")

    def start_command(self, spec: SandboxSpec, argv: Sequence[str]) -> tuple[list[str], tuple[int, ...]]:
        from evaluator.isolation.syscall_filter import filter_fd

        fd = filter_fd() if self.filtered and not spec.filters_in_runner else None
        return self.command(spec, argv, seccomp_fd=fd), (() if fd is None else (fd,))

    def command(self, spec: SandboxSpec, argv: Sequence[str], seccomp_fd: Optional[int] = None) -> list[str]:
        # As root: no user namespace. Its uid 65534 would be host root (bwrap maps it to the caller), and host root
        # may write /proc/sys (core_pattern...) by file permissions alone. Instead the namespaces are made as root
        # and setpriv becomes the real, host-wide uid 65534 without capabilities just before the candidate's exec.
        # Not root: a user namespace is the only way in, and maps 65534 to our own unprivileged uid.
        drop_with_setpriv = self.as_root and spec.unprivileged
        args = [self.executable, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not spec.network:
            args.append("--unshare-net")
        if not self.as_root:
            # A runner's own namespaces start with a user namespace; its filter then refuses any further one.
            args += ["--unshare-user"] + ([] if spec.filters_in_runner else ["--disable-userns"])
            if spec.unprivileged:
                args += ["--uid", str(NOBODY_UID), "--gid", str(NOBODY_GID)]
        if spec.die_with_parent:
            args.append("--die-with-parent")
        if spec.new_session:
            args.append("--new-session")
        if not drop_with_setpriv:
            args += ["--cap-drop", "ALL"]
        # Order matters: later mounts cover earlier ones. The fresh /proc, /dev and tmpfs come first so that a bound
        # folder under the host's /tmp (a cache, a private folder) shows through instead of being hidden.
        size = str(spec.tmp_mib * 2**20)
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
                 "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
        for path in MASKED_PROC_FILES:  # unreadable there (a device node on a nodev mount)
            if os.path.exists(path):
                args += ["--ro-bind", "/dev/null", path]
        if spec.gpu:
            for path in spec_gpu_paths(spec):
                args += ["--dev-bind", path, path]
        read_only = spec.all_read_only()
        # Folders bwrap would create on the way to a bound path: made 0755 here (bwrap makes them 0700 when it runs
        # as root, and uid 65534 could then not reach the Python under /root/.pyenv or the venv).
        for folder in _ancestors([*read_only, *spec.writable]):
            args += ["--perms", "0755", "--dir", folder]
        for path in read_only:
            if os.path.islink(path) and os.path.dirname(path) == "/":
                args += ["--symlink", os.readlink(path), path]  # /lib -> usr/lib on merged-/usr systems
            else:
                args += ["--ro-bind", path, path]
        for path in spec.writable:  # last: a private folder inside a read-only one stays writable
            args += ["--bind", path, path]
        # The root itself is a tmpfs bwrap made; without this the sandbox could write /root, /work... there (its own
        # copies, but a candidate must not find any writable place besides its private folder and /tmp).
        args += ["--remount-ro", "/", "--clearenv"]
        for name, value in sorted({**spec.env, IN_SANDBOX_VARIABLE: self.kind}.items()):
            args += ["--setenv", name, value]
        if seccomp_fd is not None:  # loaded by bwrap right before the exec, after its own setup
            args += ["--seccomp", str(seccomp_fd)]
        args += ["--chdir", spec.cwd, "--"]
        if drop_with_setpriv:
            args += [*_SETPRIV_NOBODY, "--"]
        return args + list(argv)

    def prepare(self, spec: SandboxSpec) -> None:
        if self.as_root and spec.unprivileged:
            _give_to(spec.writable, NOBODY_UID, NOBODY_GID)

    def version(self) -> str:
        try:
            return subprocess.run([self.executable, "--version"], capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT_S).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""


class Unshare(Sandbox):
    """util-linux unshare + setpriv, for machines without bwrap: new network, PID, IPC and UTS namespaces, uid 65534
    without capabilities, a cleared environment. The file system is the host's, guarded only by file permissions."""

    kind = "unshare"

    def __init__(self, drop_user: Optional[bool] = None):
        self.drop_user = os.geteuid() == 0 if drop_user is None else drop_user
        held = ["no network", "own process view", "own ipc and hostname", "cleared environment", "dies with parent",
                "new session"]
        if self.drop_user:
            held.append("unprivileged user")
        self.protections = tuple(p for p in PROTECTIONS if p in held)

    def command(self, spec: SandboxSpec, argv: Sequence[str]) -> list[str]:
        # setpriv --pdeathsig survives the exec into unshare, and unshare --kill-child takes the namespace down with it.
        args = ["setpriv", "--pdeathsig", "KILL"] if spec.die_with_parent else []
        args += ["unshare", "--pid", "--fork", "--mount-proc", "--ipc", "--uts", "--kill-child"]
        if not spec.network:
            args.append("--net")
        if not self.drop_user:
            args += ["--user", "--map-root-user"]  # not root: a user namespace is the only way to get the others
        if spec.new_session:
            args.append("setsid")
        if self.drop_user and spec.unprivileged:
            args += _SETPRIV_NOBODY
        args += ["env", "-i", "-C", spec.cwd, *(f"{k}={v}" for k, v in sorted(spec.env.items())), *argv]
        return args

    def launch_env(self, spec: SandboxSpec) -> dict[str, str]:
        return {"PATH": spec.env.get("PATH", os.defpath)}

    def prepare(self, spec: SandboxSpec) -> None:
        if self.drop_user and spec.unprivileged:
            _give_to(spec.writable, NOBODY_UID, NOBODY_GID)
        else:  # root mapped into a user namespace may write only what the caller itself owns
            _give_to(spec.writable, os.geteuid(), os.getegid())


class NoSandbox(Sandbox):
    """No isolation at all, only a cleared environment: for machines where neither tool works. Reported loudly."""

    kind = "none"
    protections = ("cleared environment",)

    def command(self, spec: SandboxSpec, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def launch_cwd(self, spec: SandboxSpec) -> str:
        return spec.cwd


def clear_between_tasks(private_dir: str, scratch: Sequence[str] = ("/tmp", "/dev/shm")) -> list[str]:
    """Called inside a sandbox before each candidate: empty the private folder (its tmp/ folder stays, emptied) and,
    only where they are the sandbox's own tmpfs (bwrap), /tmp and /dev/shm, so nothing a candidate leaves behind is
    found by the next one. Mount points (binds under /tmp) and the folders leading to them stay. Returns the paths
    that could not be removed."""
    folders = [private_dir] + (list(scratch) if os.environ.get(IN_SANDBOX_VARIABLE) == "bwrap" else [])
    mounts = _mount_points()
    kept_tmp = os.path.join(private_dir, "tmp")
    failed: list[str] = []
    # A bound folder is not ours to empty from here (the private folder is emptied on its own); tmp/ is emptied last.
    for folder in folders:
        failed += empty_folder(folder, keep=(mounts - {folder}) | {kept_tmp})
    return failed + (empty_folder(kept_tmp, keep=mounts) if kept_tmp not in mounts else [])


def _mount_points() -> set[str]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            return {line.split()[4].replace("\\040", " ") for line in handle if len(line.split()) > 4}
    except OSError:
        return set()


def runner_sandbox_why_not(sandbox_kind: str) -> str:
    """'' when runners can make their own namespaces and load their own filters here, else why not."""
    from evaluator.isolation.syscall_filter import filter_bpf

    if os.environ.get(TASK_ISOLATION_ENV, "1") == "0":
        return f"{TASK_ISOLATION_ENV}=0"
    if sandbox_kind != "bwrap":
        return f"the sandbox is {sandbox_kind!r}, not bubblewrap"
    try:
        with open("/proc/sys/user/max_user_namespaces") as handle:
            if int(handle.read()) <= 0:
                return "user namespaces are disabled (user.max_user_namespaces = 0)"
    except (OSError, ValueError):
        pass
    if filter_bpf() is None:
        return "libseccomp is missing, and the runner would start without a syscall filter"
    return ""


def per_task_lines(kind: str) -> tuple[str, ...]:
    """What `krl doctor` says about per-task sandboxes (evaluator/slot/task_isolation.py) and per-task cgroups."""
    from evaluator.isolation import cgroups

    why = runner_sandbox_why_not(kind)
    lines = ["per-task sandbox: " + ("own user, mount and IPC namespaces; fresh tmpfs /tmp, /dev/shm, HOME, outputs"
                                     if not why else f"OFF ({why}): a task's files and shm can reach the next task")]
    group_why = cgroups.available() if os.geteuid() == 0 else "not root"
    lines.append(f"per-task cgroup ({cgroups.detect_version()}): memory incl. shm/memfd/tmpfs, pids, CPU time, group "
                 "kill" if not group_why else
                 f"per-task cgroup: OFF ({group_why}): escaped processes and memfd memory are found only by the tree")
    return tuple(lines)


# ---------------------------------------------------------------- choosing one

_lock = threading.Lock()
_probed: dict[str, tuple[Optional[Sandbox], str]] = {}


def _probe_spec(private_dir: str) -> SandboxSpec:
    return SandboxSpec(env={"PATH": os.defpath}, cwd=private_dir, writable=(private_dir,), tmp_mib=16)


# Inside, with gpu=True: every GPU device node must open read-write for the sandbox's user (no CUDA init: cheap).
_GPU_NODES_CHECK = """
import os, stat, sys
bad = []
for path in sys.argv[1:]:
    if os.path.exists(path) and stat.S_ISCHR(os.stat(path).st_mode):
        try:
            os.close(os.open(path, os.O_RDWR))
        except OSError as exc:
            bad.append(f'{path}: {exc.strerror}')
print('ok' if not bad else '; '.join(bad))
"""


def _works(sandbox: Sandbox, gpu: bool = False) -> str:
    """'' when the sandbox really runs this Python as configured (with gpu: and opens the GPU nodes); else why not."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="krl-sandbox-probe-") as private_dir:
        os.chmod(private_dir, 0o755)
        spec = dataclasses.replace(_probe_spec(private_dir), gpu=gpu)
        argv = [sys.executable, "-I", "-c", _GPU_NODES_CHECK, *gpu_device_paths()] if gpu else \
            [sys.executable, "-I", "-c", "print('ok')"]
        try:
            process = sandbox.popen(spec, argv, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            try:
                out, err = process.communicate(timeout=PROBE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                return f"a sandboxed `python -c` did not finish in {PROBE_TIMEOUT_S:.0f} s"
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{exc}"
    if process.returncode == 0 and out.strip() == "ok":
        return ""
    return (err.strip() or out.strip() or f"exit status {process.returncode}")[-400:]


def _probe(kind: str) -> tuple[Optional[Sandbox], str]:
    """(a working sandbox of this kind, '') or (None, what is missing). Each kind is probed once per process."""
    with _lock:
        if kind not in _probed:
            _probed[kind] = _probe_uncached(kind)
        return _probed[kind]


def _probe_uncached(kind: str) -> tuple[Optional[Sandbox], str]:
    if kind == "bwrap":
        executable = shutil.which(os.environ.get("KRL_BWRAP") or "bwrap")  # KRL_BWRAP: an unpacked .deb's bwrap
        if not executable:
            return None, f"bwrap is not installed; {INSTALL_HINT}"
        sandbox = Bubblewrap(executable)
        why = _works(sandbox)
        return (sandbox, "") if not why else (None, f"bwrap is installed but cannot start a sandbox here: {why}")
    if kind == "unshare":
        for tool in ("unshare", "setpriv", "setsid", "env"):
            if not shutil.which(tool):
                return None, f"{tool} is not installed (util-linux / coreutils)"
        sandbox = Unshare()
        why = _works(sandbox)
        if why and sandbox.drop_user:  # e.g. the Python install is under /root, which uid 65534 cannot enter
            weaker = Unshare(drop_user=False)
            if not _works(weaker):
                return weaker, ""
        return (sandbox, "") if not why else (None, f"unshare cannot start a sandbox here: {why}")
    if kind == "none":
        return NoSandbox(), ""
    raise SandboxUnavailable(f"unknown sandbox kind {kind!r}; use one of {', '.join(KINDS)} (KRL_SANDBOX)")


def get_sandbox(kind: Optional[str] = None) -> Sandbox:
    """The sandbox to use: `kind` or $KRL_SANDBOX (auto|bwrap|unshare|none; default auto). auto takes the strongest
    that really starts here; an explicit kind that cannot start raises SandboxUnavailable."""
    kind = (kind or os.environ.get("KRL_SANDBOX") or "auto").strip().lower()
    if kind == "auto":
        for candidate in ("bwrap", "unshare"):
            sandbox, _why = _probe(candidate)
            if sandbox is not None:
                return sandbox
        return NoSandbox()
    sandbox, why = _probe(kind)
    if sandbox is None:
        raise SandboxUnavailable(f"KRL_SANDBOX={kind}: {why}")
    return sandbox


@dataclass(frozen=True)
class IsolationReport:
    """What `krl doctor` and the evaluator's first start print."""

    kind: str
    version: str
    protections: tuple[str, ...]
    missing: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())  # why stronger kinds were not taken; an exchange left on disk
    per_task: tuple[str, ...] = field(default=())  # per-task sandbox and cgroup (per_task_lines)

    @property
    def isolated(self) -> bool:
        return self.kind != "none"

    @property
    def strong(self) -> bool:
        return not self.missing

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "protections": list(self.protections),
                "missing": list(self.missing), "notes": list(self.notes), "strong": self.strong,
                "per_task": list(self.per_task)}

    def lines(self) -> list[str]:
        head = f"sandbox: {self.kind}" + (f" ({self.version})" if self.version else "")
        out = [head, "  holds: " + (", ".join(self.protections) or "nothing")]
        if self.missing:
            out.append("  MISSING: " + ", ".join(self.missing))
        out += [f"  {line}" for line in self.per_task]
        out += [f"  note: {n}" for n in self.notes]
        if not self.isolated:
            out.append("  WARNING: candidate code runs with no OS isolation: it can read secrets, write files and "
                       f"reach the network. {INSTALL_HINT}.")
        elif not self.strong:
            out.append(f"  WARNING: isolation is weaker than bubblewrap's. {INSTALL_HINT}.")
        return out


def isolation_report(kind: Optional[str] = None) -> IsolationReport:
    sandbox = get_sandbox(kind)
    notes = []
    if sandbox.kind != "bwrap":
        for stronger in ("bwrap", "unshare"):
            if stronger == sandbox.kind:
                break
            _none, why = _probe(stronger)
            notes.append(why)
    version = sandbox.version() if isinstance(sandbox, Bubblewrap) else ""
    if gpu_device_paths() and sandbox.kind != "none":
        why = _works(sandbox, gpu=True)
        if why:
            notes.append(f"GPU device nodes do not open inside the sandbox ({why}): CUDA candidates will fail; "
                         f"check the nodes' permissions (0666 is usual) or use KRL_SANDBOX=none knowingly")
    notes.append(_exchange_note())
    return IsolationReport(sandbox.kind, version, sandbox.protections, sandbox.missing(), tuple(n for n in notes if n),
                           per_task_lines(sandbox.kind))


def _exchange_note() -> str:
    """A line where the slots' exchange folders would stay on the pool's filesystem instead of a tmpfs of their own."""
    import tempfile

    from evaluator.isolation import exchange_tmpfs

    why = exchange_tmpfs.why_not_here(tempfile.gettempdir())
    return (f"the evaluation slots' exchange folders stay in {tempfile.gettempdir()} ({why}): where that is a disk, "
            f"large problems' tensors go through its page cache and are slower (docs/slot.md)") if why else ""
