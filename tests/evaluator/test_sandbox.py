"""The sandbox as data (argv built from specs, the environment allow-list) and as processes: one test per attack,
run inside every sandbox that works here, and once with no sandbox to prove the attack is real."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid

import pytest

from evaluator.isolation import sandbox as sb
from evaluator.isolation.sandbox import (Bubblewrap, NoSandbox, SandboxSpec, SandboxUnavailable, Unshare, allowed_environment,
                               get_sandbox, isolation_report, worker_spec)

SECRET = "sk-krl-" + uuid.uuid4().hex  # lives only in the "parent" process's environment


# ---------------------------------------------------------------- as data

def spec_for(tmp_path, **overrides) -> SandboxSpec:
    (tmp_path / "cache").mkdir(exist_ok=True)
    fields = dict(env={"PATH": "/usr/bin", "HOME": str(tmp_path)}, cwd=str(tmp_path), writable=(str(tmp_path),),
                  read_only=(str(tmp_path / "cache"), "/no/such/path"), system=False)
    fields.update(overrides)
    return SandboxSpec(**fields)


def pairs(argv: list[str], flag: str) -> list[tuple[str, ...]]:
    """The operands following each occurrence of flag (two for binds and setenv)."""
    width = 2 if flag in ("--ro-bind", "--bind", "--dev-bind", "--setenv", "--symlink") else 1
    return [tuple(argv[i + 1:i + 1 + width]) for i, a in enumerate(argv) if a == flag]


def test_bwrap_command_unshares_everything_and_binds_only_what_the_spec_names(tmp_path):
    argv = Bubblewrap("bwrap", as_root=True).command(spec_for(tmp_path), ["python", "-c", "pass"])
    assert argv[0] == "bwrap" and argv[-3:] == ["python", "-c", "pass"]
    for flag in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
                 "--new-session", "--clearenv"):
        assert flag in argv
    assert "--share-net" not in argv
    # As root: no user namespace (its uid 65534 would be host root); setpriv becomes the real uid 65534 last.
    assert "--unshare-user" not in argv and "--uid" not in argv
    setpriv = argv.index("setpriv")
    assert argv[setpriv - 1] == "--" and argv[setpriv:argv.index("python")] == [
        "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
        "--no-new-privs", "--"]
    # The host's cumulative memory counters masked (sb.MASKED_PROC_FILES), then what the spec names (a path that does
    # not exist is left out)
    masks = [("/dev/null", path) for path in sb.MASKED_PROC_FILES if os.path.exists(path)]
    assert pairs(argv, "--ro-bind") == masks + [(str(tmp_path / "cache"),) * 2]
    assert pairs(argv, "--bind") == [(str(tmp_path), str(tmp_path))]
    assert pairs(argv, "--setenv") == [("HOME", str(tmp_path)), ("KRL_IN_SANDBOX", "bwrap"), ("PATH", "/usr/bin")]
    assert pairs(argv, "--chdir") == [(str(tmp_path),)]
    # The size applies to the tmpfs that follows it; the private folder is bound after /tmp's tmpfs, so a folder
    # under the host's /tmp still shows through; the folders on the way there are made 0755 first.
    tmpfs_at = argv.index("/tmp") - 1
    assert argv[tmpfs_at] == "--tmpfs" and argv[tmpfs_at - 2:tmpfs_at] == ["--size", str(sb.DEFAULT_TMP_MIB * 2**20)]
    spec_bound = argv.index(str(tmp_path / "cache")) - 1  # the spec's first read-only bind, after the masks
    assert argv.index("--bind") > spec_bound > argv.index("--dir") > tmpfs_at
    assert [p for p, in pairs(argv, "--dir")] == sb._ancestors([str(tmp_path / "cache"), str(tmp_path)])
    assert str(tmp_path.parent) in [p for p, in pairs(argv, "--dir")] and "/tmp" not in [p for p, in pairs(argv, "--dir")]


def test_bwrap_command_for_an_unprivileged_caller_uses_a_user_namespace(tmp_path):
    argv = Bubblewrap("bwrap", as_root=False).command(spec_for(tmp_path), ["python"])
    assert {"--unshare-user", "--disable-userns"} <= set(argv) and "setpriv" not in argv
    assert pairs(argv, "--uid") == [("65534",)] and pairs(argv, "--gid") == [("65534",)]
    assert pairs(argv, "--cap-drop") == [("ALL",)]


def test_bwrap_passes_its_syscall_filter_through_a_fresh_descriptor_per_start(tmp_path):
    from evaluator.isolation.syscall_filter import filter_bpf

    bubblewrap = Bubblewrap("bwrap", as_root=True)
    if filter_bpf() is None:
        assert "syscall filter" in bubblewrap.missing()
        pytest.skip("libseccomp is missing here")
    starts = [bubblewrap.start_command(spec_for(tmp_path), ["x"]) for _ in range(2)]
    try:
        for command, fds in starts:
            assert len(fds) == 1 and pairs(command, "--seccomp") == [(str(fds[0]),)]
            assert command.index("--seccomp") < command.index("--chdir")
            assert os.read(fds[0], 1 << 16) == filter_bpf()  # each start reads its own copy from the start
    finally:
        for _command, fds in starts:
            for fd in fds:
                os.close(fd)


def test_bwrap_command_binds_gpu_nodes_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(sb, "gpu_device_paths", lambda: ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-caps"])
    bubblewrap = Bubblewrap("bwrap", as_root=True)
    assert pairs(bubblewrap.command(spec_for(tmp_path), ["x"]), "--dev-bind") == []
    with_gpu = bubblewrap.command(spec_for(tmp_path, gpu=True), ["x"])
    assert pairs(with_gpu, "--dev-bind") == [(p, p) for p in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-caps")]


def test_bwrap_command_binds_only_its_own_gpus_node_when_given_one(tmp_path, monkeypatch):
    nodes = ["/dev/nvidia-caps", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia12", "/dev/nvidiactl"]
    monkeypatch.setattr(sb, "gpu_device_paths", lambda: nodes)
    spec = dataclasses.replace(spec_for(tmp_path, gpu=True), gpu_minor=1)
    bound = [src for src, _dst in pairs(Bubblewrap("bwrap", as_root=True).command(spec, ["x"]), "--dev-bind")]
    assert bound == ["/dev/nvidia-caps", "/dev/nvidia-uvm", "/dev/nvidia1", "/dev/nvidiactl"]


def test_bwrap_system_paths_keep_merged_usr_symlinks_and_hide_the_rest_of_etc(tmp_path):
    argv = Bubblewrap("bwrap").command(spec_for(tmp_path, system=True), ["x"])
    bound = {src for src, _dst in pairs(argv, "--ro-bind")}
    assert "/usr" in bound and "/etc/ld.so.cache" in bound
    assert not {"/etc", "/etc/shadow", "/root", "/home", os.path.expanduser("~")} & bound
    if os.path.islink("/lib"):
        assert ("usr/lib", "/lib") in pairs(argv, "--symlink") or (os.readlink("/lib"), "/lib") in pairs(argv, "--symlink")
    assert os.path.realpath(sys.base_prefix) in bound or any(os.path.realpath(sys.base_prefix).startswith(b + "/")
                                                            for b in bound)


def test_unshare_command_drops_to_nobody_and_clears_the_environment(tmp_path):
    argv = Unshare(drop_user=True).command(spec_for(tmp_path), ["python", "-c", "pass"])
    assert argv[:3] == ["setpriv", "--pdeathsig", "KILL"]
    assert {"--net", "--pid", "--fork", "--mount-proc", "--kill-child"} <= set(argv)
    assert "--reuid=65534" in argv and "--bounding-set=-all" in argv
    env_at = argv.index("env")
    assert argv[env_at:env_at + 4] == ["env", "-i", "-C", str(tmp_path)]
    assert argv[-3:] == ["python", "-c", "pass"]
    assert Unshare(drop_user=True).launch_env(spec_for(tmp_path)) == {"PATH": "/usr/bin"}


def test_environment_allow_list_drops_secrets_and_points_caches_into_the_private_folder(tmp_path):
    parent = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0",
              "TINKER_API_KEY": "x", "OPENAI_API_KEY": "x", "HF_TOKEN": "x", "GITHUB_TOKEN": "x", "MY_SERVICE_TOKEN": "x",
              "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "DB_PASSWORD": "x", "KRL_WORKER_MODULE": "m",
              "KRL_WORKER_AUTH_KEY": "x", "KRL_TINKER_KEY": "x", "KRL_WORKSPACE": "/ws", "HOME": "/root",
              "PYTHONPATH": "/elsewhere", "SSH_AUTH_SOCK": "/run/ssh", "TRITON_CACHE_DIR": "/shared/triton"}
    env = allowed_environment(parent, str(tmp_path), {"KRL_WORKER_LIMITS": "{}"})
    assert not {k for k in env if sb.looks_secret(k)}
    for gone in ("TINKER_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "AWS_ACCESS_KEY_ID", "DB_PASSWORD", "KRL_WORKSPACE",
                 "KRL_WORKER_AUTH_KEY", "SSH_AUTH_SOCK", "PYTHONPATH"):
        assert gone not in env
    assert env["HOME"] == str(tmp_path) and env["TMPDIR"] == str(tmp_path / "tmp")
    assert env["TRITON_CACHE_DIR"].startswith(str(tmp_path))  # never the shared, read-only cache
    assert env["LC_ALL"] == "C" and env["CUDA_VISIBLE_DEVICES"] == "0" and env["KRL_WORKER_MODULE"] == "m"
    with pytest.raises(ValueError, match="secret"):
        allowed_environment(parent, str(tmp_path), {"KRL_WORKER_TOKEN": "x"})


def test_pool_processes_get_one_device_queue_unless_the_user_chose(tmp_path):
    from evaluator.isolation.environment import worker_environment

    # The judge hosts' value reaches their runners through the CUDA_ prefix of the allow-list.
    judge_host = worker_environment({"PATH": "/usr/bin"}, str(tmp_path), {})
    assert judge_host["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert allowed_environment(judge_host, str(tmp_path / "runner"))["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    chosen = worker_environment({"CUDA_DEVICE_MAX_CONNECTIONS": "8"}, str(tmp_path), {})
    assert chosen["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"


def test_an_explicit_kind_that_cannot_start_raises_one_error_type(monkeypatch, tmp_path):
    monkeypatch.setattr(sb, "_probed", {})
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap, no unshare on this PATH
    with pytest.raises(SandboxUnavailable, match="apt-get install -y bubblewrap"):
        get_sandbox("bwrap")
    with pytest.raises(SandboxUnavailable, match="unshare is not installed"):
        get_sandbox("unshare")
    with pytest.raises(SandboxUnavailable, match="unknown sandbox kind"):
        get_sandbox("chroot")
    assert isinstance(get_sandbox("auto"), NoSandbox)
    report = isolation_report()
    assert report.kind == "none" and not report.isolated and "no OS isolation" in "\n".join(report.lines())
    assert any("bwrap is not installed" in note for note in report.notes)


def test_krl_bwrap_names_a_bwrap_outside_the_path(monkeypatch, tmp_path):
    import shutil

    real = shutil.which("bwrap")
    if not real:
        pytest.skip("bwrap is not installed here")
    unpacked = tmp_path / "opt" / "usr" / "bin"
    unpacked.mkdir(parents=True)
    shutil.copy(real, unpacked / "bwrap")
    monkeypatch.setattr(sb, "_probed", {})
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on the PATH
    monkeypatch.setenv("KRL_BWRAP", str(unpacked / "bwrap"))
    chosen = get_sandbox("bwrap")
    assert isinstance(chosen, Bubblewrap) and chosen.executable == str(unpacked / "bwrap")


# ---------------------------------------------------------------- as processes: one test per attack

def working_sandboxes() -> list[sb.Sandbox]:
    found = []
    for kind in ("bwrap", "unshare"):
        try:
            found.append(get_sandbox(kind))
        except SandboxUnavailable:
            pass
    return found


# The process that starts the sandbox plays the evaluator: it holds SECRET in its environment and notes a SIGUSR1.
LAUNCHER = textwrap.dedent(f'''
    import json, os, signal, subprocess, sys
    sys.path.insert(0, {sb.project_root()!r})
    from evaluator.isolation.sandbox import SandboxSpec, get_sandbox
    kind, fields, argv = json.loads(sys.argv[1])
    signalled = []
    signal.signal(signal.SIGUSR1, lambda *a: signalled.append(1))
    argv = [part.replace("@PARENT@", str(os.getpid())) for part in argv]
    process = get_sandbox(kind).popen(SandboxSpec(**fields), argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
    out, err = process.communicate(timeout=60)
    print(json.dumps({{"rc": process.returncode, "out": out, "err": err, "signalled": bool(signalled)}}))
''')


@pytest.fixture
def world(tmp_path):
    """A worker's private folder, a sibling's, a workspace with its registry, and a build cache."""
    for name in ("w1", "w2", "workspace", "cache/cuda"):
        (tmp_path / name).mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    for name in ("w1", "w2"):
        os.chmod(tmp_path / name, 0o777)
    (tmp_path / "w2" / "candidate.py").write_text("the sibling's source")
    (tmp_path / "workspace" / "registry.db").write_bytes(b"SQLite format 3\0")
    return tmp_path


def attack(sandbox: sb.Sandbox, world, code: str) -> dict:
    parent_env = dict(os.environ, TINKER_API_KEY=SECRET)
    spec = worker_spec(str(world / "w1"), parent_env, cache_dir=str(world / "cache"), tmp_mib=64)
    payload = json.dumps([sandbox.kind, dataclasses.asdict(spec), [sys.executable, "-c", code]])
    done = subprocess.run([sys.executable, "-c", LAUNCHER, payload], env=parent_env, capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def attacks(world) -> dict[str, tuple[str, str]]:
    """name -> (the protection that must stop it, code that prints PWNED when it works)."""
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    probe = f"krl-probe-{uuid.uuid4().hex[:8]}"
    return {
        "read_parent_environ": ("own process view", f'''
for path in ("/proc/@PARENT@/environ", "/proc/1/environ", "/proc/self/environ"):
    try:
        if {SECRET!r}.encode() in open(path, "rb").read(): print("PWNED", path)
    except OSError as exc: print(exc)
import os
if {SECRET!r} in str(os.environ): print("PWNED environ")'''),
        "read_parent_memory": ("own process view", '''
maps = open("/proc/@PARENT@/maps").read().splitlines()
start = int(next(l for l in maps if " r" in l).split("-")[0], 16)
with open("/proc/@PARENT@/mem", "rb") as mem:
    mem.seek(start); data = mem.read(64)
print("PWNED" if data else "empty")'''),
        "list_processes": ("own process view", '''
import os
pids = [p for p in os.listdir("/proc") if p.isdigit()]
print("PWNED" if "@PARENT@" in pids or len(pids) > 3 else "only", pids)'''),
        "kill_parent": ("own process view", '''
import os, signal
os.kill(@PARENT@, signal.SIGUSR1); print("PWNED")'''),
        "connect_loopback": ("no network", '''
import socket
socket.create_connection(("127.0.0.1", @PORT@), timeout=3); print("PWNED")'''),
        "write_host_home": ("host files absent", f'''
path = {os.path.join(os.path.expanduser("~"), "." + probe)!r}
open(path, "w").write("x"); print("PWNED")'''),
        "write_registry": ("host files absent", f'''
open({str(world / "workspace" / "registry.db")!r}, "ab").write(b"rewards rewritten"); print("PWNED")'''),
        "read_sibling_folder": ("host files absent", f'''
print("PWNED", open({str(world / "w2" / "candidate.py")!r}).read())'''),
        "ptrace_a_sibling": ("syscall filter", '''
import ctypes, os, signal, time
child = os.fork()
if child == 0:
    time.sleep(30); os._exit(0)
libc = ctypes.CDLL(None, use_errno=True)
attached = libc.ptrace(16, child, None, None) == 0  # PTRACE_ATTACH: what a runner would do to its zygote
os.kill(child, signal.SIGKILL)
print("PWNED" if attached else "refused", ctypes.get_errno())'''),
        "nested_user_namespace": ("syscall filter", '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
ok = libc.unshare(0x10000000) == 0  # CLONE_NEWUSER: the usual first step towards a kernel exploit
print("PWNED" if ok else "refused", ctypes.get_errno())'''),
        "write_kernel_settings": ("unprivileged user", '''
import os
os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY)); print("PWNED")'''),
        "import_the_rest_of_the_project": ("host files absent", '''
import core.registry  # the registry code, and with it the way to the workspace
print("PWNED", core.registry.__file__)'''),
        "write_site_packages": ("read-only system", f'''
open({os.path.join(site_packages, probe + ".pth")!r}, "w").write("# harmless probe"); print("PWNED")'''),
        "write_build_cache": ("read-only system", f'''
import os
os.makedirs({str(world / "cache" / "cuda" / "planted")!r}, exist_ok=True)
open({str(world / "cache" / "cuda" / "planted" / "result.json")!r}, "w").write("{{}}"); print("PWNED")'''),
    }


ATTACK_NAMES = ["read_parent_environ", "read_parent_memory", "list_processes", "kill_parent", "connect_loopback",
                "write_host_home", "write_registry", "read_sibling_folder", "write_site_packages", "write_build_cache",
                "write_kernel_settings", "ptrace_a_sibling", "nested_user_namespace", "import_the_rest_of_the_project"]


def cleanup(world) -> None:
    """Undo what a successful attack left on the host (only the unsandboxed control run succeeds)."""
    import shutil

    (world / "workspace" / "registry.db").write_bytes(b"SQLite format 3\0")
    shutil.rmtree(world / "cache" / "cuda" / "planted", ignore_errors=True)
    home = os.path.expanduser("~")
    for folder in (home, next(p for p in sys.path if p.endswith("site-packages"))):
        for name in os.listdir(folder):
            if "krl-probe-" in name:
                os.unlink(os.path.join(folder, name))


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_attack_is_stopped_by_every_working_sandbox(name, world):
    sandboxes = working_sandboxes()
    if not sandboxes:
        pytest.skip("neither bwrap nor unshare can start a sandbox on this machine")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        protection, code = attacks(world)[name]
        code = code.replace("@PORT@", str(listener.getsockname()[1]))
        try:
            # Without a sandbox the attack works: the test would fail if the sandbox were removed.
            control = attack(NoSandbox(), world, code)
            assert "PWNED" in control["out"] or control["signalled"], control
        finally:
            cleanup(world)
        for sandbox in sandboxes:
            if protection not in sandbox.protections:
                continue  # a weaker sandbox does not claim this one (isolation_report lists it as missing)
            try:
                outcome = attack(sandbox, world, code)
                assert "PWNED" not in outcome["out"] and not outcome["signalled"], (sandbox.kind, outcome)
                stopped = outcome["rc"] != 0 or any(word in outcome["out"] for word in ("only", "Errno", "refused"))
                assert stopped, (sandbox.kind, outcome)
                assert (world / "workspace" / "registry.db").read_bytes() == b"SQLite format 3\0"
                assert not (world / "cache" / "cuda" / "planted").exists()
            finally:
                cleanup(world)
    finally:
        listener.close()


def test_external_network_is_unreachable_not_just_slow(world):
    sandboxes = [s for s in working_sandboxes() if "no network" in s.protections]
    if not sandboxes:
        pytest.skip("no working sandbox with its own network namespace here")
    code = '''
import socket
try:
    socket.create_connection(("1.1.1.1", 443), timeout=5); print("PWNED")
except OSError as exc:
    print("errno", exc.errno)'''
    for sandbox in sandboxes:
        outcome = attack(sandbox, world, code)
        assert outcome["out"].split() == ["errno", "101"], outcome  # ENETUNREACH: no route at all, at once


def test_inside_the_environment_is_the_sandboxs_own_and_the_private_folder_is_writable(world):
    sandboxes = working_sandboxes()
    if not sandboxes:
        pytest.skip("neither bwrap nor unshare can start a sandbox on this machine")
    code = '''
import json, os
open("out.txt", "w").write("ok")
open(os.path.join(os.environ["TMPDIR"], "t"), "w").write("ok")
try:
    pid1 = open("/proc/1/environ", "rb").read().decode()
except PermissionError:  # bwrap's reaper runs as root: not even readable
    pid1 = ""
print(json.dumps({"uid": os.getuid(), "env": dict(os.environ), "pid1": pid1}))'''
    for sandbox in sandboxes:
        outcome = attack(sandbox, world, code)
        assert outcome["rc"] == 0, outcome
        seen = json.loads(outcome["out"])
        assert seen["env"]["HOME"] == str(world / "w1") and "TINKER_API_KEY" not in seen["env"]
        assert set(seen["pid1"].strip("\0").split("\0")) - {""} <= {f"{k}={v}" for k, v in seen["env"].items()}
        assert (world / "w1" / "out.txt").read_text() == "ok"
        if "unprivileged user" in sandbox.protections:
            assert seen["uid"] == 65534


def test_the_report_of_the_sandbox_in_force_names_what_it_lacks():
    report = isolation_report()
    assert report.kind in ("bwrap", "unshare", "none")
    assert set(report.protections) | set(report.missing) == set(sb.PROTECTIONS)
    assert report.strong == (report.kind == "bwrap")
    text = "\n".join(report.lines())
    assert report.kind in text and (report.strong or "WARNING" in text)
    assert json.loads(json.dumps(report.to_dict()))["kind"] == report.kind


def test_a_sandboxed_process_dies_with_its_launcher(world):
    sandboxes = working_sandboxes()
    if not sandboxes:
        pytest.skip("neither bwrap nor unshare can start a sandbox on this machine")
    for sandbox in sandboxes:
        spec = worker_spec(str(world / "w1"), os.environ, tmp_mib=16)
        marker = world / "w1" / f"alive-{sandbox.kind}"
        code = f"import time\nwhile True:\n    open({str(marker)!r}, 'w').write(str(time.time())); time.sleep(0.1)"
        launcher = subprocess.Popen([sys.executable, "-c",
                                     f"import sys, json, time; sys.path.insert(0, {sb.project_root()!r}); "
                                     "from evaluator.isolation.sandbox import SandboxSpec, get_sandbox; "
                                     "kind, fields, argv = json.loads(sys.argv[1]); "
                                     "get_sandbox(kind).popen(SandboxSpec(**fields), argv); time.sleep(60)",
                                     json.dumps([sandbox.kind, dataclasses.asdict(spec),
                                                 [sys.executable, "-c", code]])])
        try:
            _wait_for(lambda: marker.exists(), 20)
        finally:
            launcher.send_signal(signal.SIGKILL)
            launcher.wait()
        _wait_for(lambda: _stopped_writing(marker), 10)


def _stopped_writing(path) -> bool:
    import time

    before = path.read_text()
    time.sleep(0.5)
    return path.read_text() == before


def _wait_for(condition, timeout_s: float) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_clearing_between_tasks_leaves_nothing_for_the_next_candidate(world):
    sandboxes = [s for s in working_sandboxes() if s.kind == "bwrap"]
    if not sandboxes:
        pytest.skip("bwrap cannot start here (only its /tmp and /dev/shm are the sandbox's own)")
    private = world / "w1"
    code = f'''
import os, sys
sys.path.insert(0, {sb.project_root()!r})
from evaluator.isolation.sandbox import clear_between_tasks
for path in ("/tmp/planted.py", "/dev/shm/planted", "tmp/planted", "planted.py"):
    open(path, "w").write("import os")
os.makedirs("deep/er", exist_ok=True)
open("deep/er/x", "w").write("x")
print("failed", clear_between_tasks(os.getcwd()))
print("left", sorted(os.listdir("/tmp") + os.listdir("/dev/shm") + os.listdir(".") + os.listdir("tmp")))'''
    outcome = attack(sandboxes[0], world, code)
    assert outcome["rc"] == 0, outcome
    # What stays: the private folder's tmp/, and in /tmp the folders leading to the binds (the private folder is there).
    assert "failed []" in outcome["out"] and "planted" not in outcome["out"] and "deep" not in outcome["out"], outcome
    assert sorted(os.listdir(private)) == ["tmp"] and os.listdir(private / "tmp") == []


def test_clearing_outside_a_sandbox_never_touches_the_hosts_tmp(tmp_path, monkeypatch):
    monkeypatch.delenv(sb.IN_SANDBOX_VARIABLE, raising=False)
    scratch, private = tmp_path / "scratch", tmp_path / "private"
    (scratch).mkdir()
    (scratch / "keep").write_text("x")
    (private / "tmp").mkdir(parents=True)
    (private / "gone").write_text("x")
    assert sb.clear_between_tasks(str(private), (str(scratch),)) == []
    assert os.listdir(private) == ["tmp"] and os.listdir(scratch) == ["keep"]


def test_gpu_nodes_the_sandbox_user_cannot_open_are_reported(monkeypatch):
    sandbox = next((s for s in working_sandboxes() if "unprivileged user" in s.protections), None)
    if sandbox is None or not os.path.exists("/dev/kmsg"):
        pytest.skip("needs a sandbox with uid 65534 and /dev/kmsg (a root-only character device) here")
    # /dev/kmsg stands in for a GPU node with the wrong permissions: bound like one, it must be reported.
    monkeypatch.setattr(sb, "gpu_device_paths", lambda: ["/dev/kmsg"])
    report = isolation_report(sandbox.kind)
    assert any("GPU device nodes do not open" in note and "/dev/kmsg" in note for note in report.notes), report
    monkeypatch.setattr(sb, "gpu_device_paths", lambda: ["/dev/null"])  # 0666: fine
    assert not any("GPU" in note for note in isolation_report(sandbox.kind).notes)


def test_compilers_outside_usr_are_visible_read_only(tmp_path, monkeypatch):
    """Triton builds its launcher with the C compiler on PATH; on our GPU machine that is /opt/gcc/bin/gcc, which a
    sandbox binding only /usr could not run (Triton failed with FileNotFoundError inside bubblewrap)."""
    prefix = tmp_path / "opt" / "gcc"
    (prefix / "bin").mkdir(parents=True)
    compiler = prefix / "bin" / "gcc"
    compiler.write_text("#!/bin/sh\necho compiled\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("PATH", f"{prefix / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert str(prefix) in sb.toolchain_paths()
    assert str(prefix) in sb.system_read_only_paths()
    # Named only by CC (our GPU machine sets CC=/opt/gcc/bin/gcc), and a symlink into another prefix.
    other = tmp_path / "opt" / "cc-wrapper" / "bin"
    other.mkdir(parents=True)
    (other / "mycc").symlink_to(compiler)
    monkeypatch.setenv("PATH", os.defpath)
    monkeypatch.setenv("CC", str(other / "mycc"))
    assert {str(prefix), str(other.parent)} <= set(sb.toolchain_paths())
