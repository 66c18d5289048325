"""The trusted process of one evaluation slot: it never runs candidate code. It keeps a sandboxed zygote and one
pre-warmed runner, makes every input itself, keeps the reference outputs, and has the last word on correctness."""

from __future__ import annotations

import json
import os
import re
import selectors
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from evaluator.api import EvalRequest, EvalResult, RuntimeStats, Verdict
from evaluator.proctree import kill_tree, process_table, tree_resident_bytes
from evaluator.reference_cache import ReferenceCache, nbytes, problem_key

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
SPARE_RUNNERS_ENV = "KRL_WORKER_SPARE_RUNNERS"
MAX_RUNNER_MESSAGE_BYTES = 8 * 2**20
MAX_TIMING_SETS = 64
_SET_NAME = re.compile(r"^(trial-\d{1,4}|timing-\d{1,2}|recheck|poison)$")  # and nudged timing sets (judge.py)
_SECRET_SEED_OFFSET = secrets.randbelow(2**40) + 2**32  # per judge process; never sent to a runner


class InfrastructureFailure(Exception):
    """The slot's own machinery (zygote, pre-warmed runner, judge) failed: not the candidate's fault, retried once."""


def input_seed(request: EvalRequest, name: str) -> Optional[int]:
    """The seed of a named input set the judge serves (judge.input_seed decides, for the runner's in-process path
    too), None for a name it does not serve: trial-k beyond the request's trials, timing-j beyond MAX_TIMING_SETS."""
    from evaluator import judge

    nudged = judge.parse_nudged_set(name)
    if nudged is not None:  # its base set's seed; judge.nudged_values(base, nudged[1]) makes it from there
        name = f"timing-{nudged[0]}"
    if not _SET_NAME.match(name):
        return None
    kind, _, index = name.partition("-")
    if (kind == "trial" and int(index) >= request.correctness_trials) or (kind == "timing" and int(index) >= MAX_TIMING_SETS):
        return None
    if kind == "trial":  # KernelBench's reproducible seeding
        return judge.input_seed(request.seed, name)
    # Timing, recheck and poison sets are seeded with this judge's secret: a candidate that regenerates the inputs at
    # import and replays precomputed answers (tests/evaluator/attacks/precomputed_replay.py) misses on every timed call.
    return judge.input_seed(request.seed + _SECRET_SEED_OFFSET, name)


# ---------------------------------------------------------------- judging one request

@dataclass
class _Received:
    comparison: Any  # judge.Comparison
    count: int = 1
    look: Any = None  # judging.second_look.Look of a timed set: how a near miss was decided


class TaskJudge:
    """One request's judging: the reference built here, inputs written for the runner, outputs compared here."""

    def __init__(self, request: EvalRequest, device: str, inputs_dir: str, outputs_dir: str,
                 cache: Optional[ReferenceCache] = None):
        self.request, self.device = request, device
        self.inputs_dir, self.outputs_dir = inputs_dir, outputs_dir
        self.cache = cache if cache is not None else ReferenceCache(0)
        self.problem_key = problem_key(request.reference_source, request.size_overrides, request.precision,
                                       request.seed, device)
        self.model: Any = None
        self.problem_error = ""
        self.reference_outputs: dict[str, Any] = {}
        self.received: dict[str, _Received] = {}
        self.base_values: dict[int, list] = {}  # timing base sets, decoded once per task for the nudged sets

    def _build(self) -> None:
        import torch

        from evaluator import judge, worker

        if self.model is not None or self.problem_error:
            return
        built = self.cache.get(("model", self.problem_key))
        if built is not None:
            self.reference, self.model = built
            return
        request = self.request
        try:
            load = getattr(judge, "load_problem", None)
            self.reference = load(request.reference_source, request.size_overrides) if load else \
                worker._load_reference(request)
            dtype = judge.DTYPES[request.precision]
            with torch.device(self.device):
                judge.set_seed(request.seed)
                init_inputs = judge.to_device(list(self.reference.get_init_inputs()), self.device)
                judge.set_seed(request.seed)
                model = self.reference.Model(*init_inputs)
            model = model.to(self.device)
            self.model = model.to(dtype) if dtype != torch.float32 else model
            self.cache.put(("model", self.problem_key), (self.reference, self.model), nbytes(self.model))
        except Exception as exc:  # noqa: BLE001 - the runner reports the same failure as the evaluator's input error
            self.problem_error = f"the reference problem failed in the judge: {type(exc).__name__}: {exc}"[:1000]

    def write_inputs(self, name: str, write: bool = True) -> str:
        """Make the inputs of set `name`, write them for the runner (unless not `write`), keep the reference output.
        '' or why not."""
        from evaluator import judge, tensorwire

        self._build()
        if self.problem_error:
            return self.problem_error
        seed = input_seed(self.request, name)
        if seed is None:
            return f"no input set named {name!r}"
        path = os.path.join(self.inputs_dir, name + ".krlt")
        # Same problem, sizes, precision and seed: the same inputs and reference output as last time.
        key = ("set", self.problem_key, seed)
        made = self.cache.get(key)
        if made is None:
            inputs = judge.make_inputs(self.reference, seed, self.device, self.request.precision)
            encoded = tensorwire.encode_values(inputs)  # before the reference runs: it may work in place
            made = (encoded, self._reference_output(inputs))
            self.cache.put(key, made, len(encoded) + nbytes(made[1]))
        nudged = judge.parse_nudged_set(name)
        if nudged is not None:
            base = self.base_values.get(seed)
            if base is None:  # nudged_values makes new tensors and the reference gets copies: the base stays as made
                base = judge.to_device(list(tensorwire.decode(bytearray(made[0]))), self.device)
                self.base_values[seed] = base
            inputs = judge.nudged_values(base, nudged[1])
            output = self._reference_output(judge.clone_inputs(inputs))
            made = (tensorwire.encode_values(inputs) if write else b"", output)
        self.reference_outputs[name] = made[1]
        if not write:
            return ""
        with open(path + ".part", "wb") as handle:
            handle.write(made[0])
        os.replace(path + ".part", path)
        return ""

    def _reference_output(self, inputs: list) -> Any:
        import torch

        with torch.no_grad():
            output = self.model(*inputs)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        return output

    def receive(self, name: str) -> None:
        """Read the runner's output of set `name` and compare it with the kept reference output."""
        import torch

        from evaluator import judge, tensorwire
        from evaluator.judging import second_look

        if name not in self.reference_outputs and judge.parse_nudged_set(name) is not None:
            # A timed call's nudged values: the runner made them itself (on the device, between timed calls); the
            # judge makes the same set from its own base set and seed, and the reference output with it.
            if self.write_inputs(name, write=False):
                return
        if name not in self.reference_outputs:
            return  # an output for inputs never served: ignored, and a missing set fails the verdict
        reference = self.reference_outputs[name]
        expected = sum(t.numel() * t.element_size() for t in judge.flatten_output(reference)
                       if isinstance(t, torch.Tensor))
        path = os.path.join(self.outputs_dir, name + ".krlt")
        look = None
        try:
            output = tensorwire.read_values(path, max_bytes=8 * expected + 2**20)
        except tensorwire.WireError as exc:
            comparison = judge.Comparison(Verdict.WRONG_OUTPUT, f"The output handed to the judge was unusable: {exc}.")
        else:
            output = self._placed(output, reference)
            atol, rtol = self.request.tolerances()
            with torch.no_grad():
                if name.startswith(("timing-", "nudged-", "recheck")):  # a near miss gets a second look
                    look = second_look.look_twice(self.model, lambda: self._inputs_of(name), reference, output,
                                                  atol, rtol)
                    comparison = look.comparison
                else:
                    comparison = judge.compare(reference, output, atol, rtol)
        # The file stays until the post-reply wipe (an unlink on the verdict's path cost ms on a discard-mounted disk):
        # a runner that announces a set again without rewriting it only gets its own earlier output compared again.
        earlier = self.received.get(name)
        if earlier is None or earlier.comparison.ok:  # once wrong, a set stays wrong
            self.received[name] = _Received(comparison, (earlier.count + 1) if earlier else 1, look)

    def _inputs_of(self, name: str) -> list:
        """The inputs of set `name` made again from its seed (only for a near miss's second look)."""
        from evaluator import judge

        seed = input_seed(self.request, name)
        inputs = judge.make_inputs(self.reference, seed, self.device, self.request.precision)
        nudged = judge.parse_nudged_set(name)
        return judge.nudged_values(inputs, nudged[1]) if nudged is not None else inputs

    def _placed(self, output: Any, reference: Any) -> Any:
        """Tensors go to the judge's device when the runner had them on that kind of device, else stay on the CPU
        (so judge.compare reports the wrong device as today); opaque values keep their type name."""
        from evaluator import tensorwire

        def place(value: Any) -> Any:
            if isinstance(value, tensorwire.Opaque):
                return type(value.type_name, (), {})()  # so judge.compare can name the type it got
            if hasattr(value, "krl_device_type") and value.krl_device_type == self.device.split(":")[0]:
                return value.to(self.device)
            return value

        if isinstance(output, (tuple, list)):
            return type(output)(place(v) for v in output)
        return place(output)

    def decide(self, runner_result: EvalResult) -> EvalResult:
        """The runner's verdict can only lower the reward: anything but correct passes through; correct stands only
        on the judge's own comparisons of every required output."""
        if runner_result.verdict != Verdict.CORRECT:
            runner_result.speedup = None  # no speed is reported, or rewarded, without a correct result
            runner_result.speedup_kernelbench = runner_result.sol_score = None
            return runner_result
        request = self.request
        result = runner_result
        if self.problem_error:
            return _override(result, Verdict.RUNTIME_ERROR, self.problem_error)
        required = [f"trial-{k}" for k in range(request.correctness_trials)] + ["recheck"]
        timing_sets = [n for n in self.received if n.startswith(("timing-", "nudged-"))]
        if request.measure_timing and not timing_sets:
            required.append("timing-0")
        missing = [n for n in required if n not in self.received]
        if missing:
            return _override(result, Verdict.WRONG_OUTPUT, f"The judge never received the candidate's output for "
                             f"{', '.join(missing[:4])}: the evaluation was interfered with.")
        trials = [self.received[f"trial-{k}"].comparison for k in range(request.correctness_trials)]
        passed = sum(c.ok for c in trials)
        result.correctness_trials_passed = passed
        failing = next((c for c in trials if not c.ok), None)
        if failing is not None:
            return _override(result, failing.verdict, f"{failing.message} Passed {passed}/{len(trials)} trials.",
                             failing)
        result.max_abs_diff = max(c.max_abs_diff or 0.0 for c in trials)
        result.mean_abs_diff = max(c.mean_abs_diff or 0.0 for c in trials)
        from evaluator.judging import second_look

        for name in sorted(timing_sets) + ["recheck"]:
            comparison = self.received[name].comparison
            look = self.received[name].look
            if look is not None and look.second_look and comparison.ok:
                result.near_miss = "float64"
            elif look is not None and second_look.within_accepted_error(look, result.max_abs_diff):
                result.near_miss = "trial_error"  # the trials' own rounding, met on other values: not a flip
                continue
            if not comparison.ok:
                where = "after repeated calls, on fresh inputs" if name == "recheck" else "while being timed"
                return _override(result, comparison.verdict, f"Wrong {where}: {comparison.message}", comparison)
        return result


def _override(result: EvalResult, verdict: Verdict, message: str, comparison: Any = None) -> EvalResult:
    result.verdict, result.error_message, result.hack_rule = verdict, message[:2000], None
    result.speedup = result.speedup_kernelbench = result.sol_score = None
    if comparison is not None:
        result.max_abs_diff, result.mean_abs_diff = comparison.max_abs_diff, comparison.mean_abs_diff
    return result


def sanitize_result(data: Any, request: EvalRequest) -> EvalResult:
    """A runner's EvalResult dict, validated field by field (it is written by a process the candidate controls)."""
    if not isinstance(data, dict):
        raise ValueError("not a dict")
    verdict = Verdict(data.get("verdict"))

    def number(value: Any) -> Optional[float]:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        value = float(value)
        return value if value == value and abs(value) != float("inf") else None

    def text(value: Any, limit: int = 2000) -> str:
        return value[:limit] if isinstance(value, str) else ""

    def stats(value: Any) -> Optional[RuntimeStats]:
        if not isinstance(value, dict):
            return None
        numbers = {name: number(value.get(name)) for name in ("median_ms", "mean_ms", "std_ms", "min_ms", "max_ms",
                                                               "iqr_ms")}
        if any(v is None or v < 0 for v in numbers.values()) or not isinstance(value.get("n"), int):
            return None
        return RuntimeStats(**numbers, n=max(0, min(int(value["n"]), 10**9)))

    result = EvalResult(request_id=request.request_id, problem_id=request.problem_id, verdict=verdict)
    result.compiled = bool(data.get("compiled"))
    result.correctness_trials_total = request.correctness_trials
    passed = data.get("correctness_trials_passed")
    result.correctness_trials_passed = max(0, min(passed, request.correctness_trials)) if type(passed) is int else 0
    for name in ("max_abs_diff", "mean_abs_diff", "speedup", "own_kernel_time_fraction", "sol_time_ms", "sol_fraction",
                 "speedup_kernelbench", "kernel_runtime_kernelbench_ms", "reference_runtime_kernelbench_ms", "sol_score"):
        if hasattr(result, name):
            setattr(result, name, number(data.get(name)))
    result.kernel_runtime, result.reference_runtime = stats(data.get("kernel_runtime")), stats(data.get("reference_runtime"))
    result.hack_rule = text(data.get("hack_rule"), 100) or None
    result.error_message = text(data.get("error_message"))
    for name in ("device_name", "timing_clock", "node", "gpu_name", "speedup_convention", "near_miss"):
        if hasattr(result, name):
            setattr(result, name, text(data.get(name), 200))
    phases = data.get("phase_times_s")
    if isinstance(phases, dict):
        result.phase_times_s = {text(k, 40): v for k, v in list(phases.items())[:32]
                                if isinstance(k, str) and number(v) is not None}
    hits = data.get("cache_hits")
    if isinstance(hits, list):
        result.cache_hits = [text(h, 40) for h in hits[:8] if isinstance(h, str)]
    return result


# ---------------------------------------------------------------- the slot's processes

class _Reader:
    """Length-prefixed JSON messages from an untrusted pipe: sizes bounded, garbage is an error, never a crash."""

    def __init__(self, fd: int, max_bytes: int = MAX_RUNNER_MESSAGE_BYTES):
        self.fd, self.max_bytes, self.buffer, self.eof = fd, max_bytes, bytearray(), False

    def read(self) -> list[dict[str, Any]]:
        from evaluator.pool import _HEADER

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
        from evaluator import sandbox as sandboxes

        self.device, self.root, self.worker_module, self.limits = device, root, worker_module, limits
        self.out_path, self.err_path = out_path, err_path
        self.private_dir = os.path.join(root, "private")
        self.inputs_dir, self.outputs_dir = os.path.join(root, "xfer-in"), os.path.join(root, "xfer-out")
        for folder in (self.private_dir, self.inputs_dir, self.outputs_dir):
            os.makedirs(folder, exist_ok=True)
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

    # ---- zygote
    def start_zygote(self) -> None:
        from evaluator import sandbox as sandboxes

        self.stop_zygote()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        extra = {name: value for name, value in os.environ.items()
                 if name in ("CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "OMP_NUM_THREADS", "TORCH_CUDA_ARCH_LIST")}
        extra.update(KRL_WORKER_LIMITS=json.dumps(self.limits), KRL_WORKER_XFER_IN=self.inputs_dir,
                     KRL_WORKER_XFER_OUT=self.outputs_dir,
                     KRL_WORKER_OWN_TMP="1" if self.sandbox.kind == "bwrap" else "0",
                     PYTHONSAFEPATH="1")
        read_only = [self.inputs_dir] + _module_roots(self.worker_module)
        if self.triton_shared_dir and self.sandbox.kind == "bwrap":
            # Only where the sandbox makes it read-only: elsewhere a candidate could write the shared level.
            from evaluator.triton_cache import runner_environment

            extra.update(runner_environment(self.triton_shared_dir))
            read_only.append(self.triton_shared_dir)
        # The build cache read-only: runners load the CUDA extensions the trusted side published there (without it
        # every CUDA candidate rebuilt privately inside its run time limit; H100).
        spec = sandboxes.worker_spec(self.private_dir, os.environ, extra_env=extra,
                                     cache_dir=os.environ.get("KRL_WORKER_CACHE_DIR", ""),
                                     gpu=self.device.startswith("cuda"), read_only=read_only,
                                     writable=[self.outputs_dir])
        if self.sandbox.kind == "none":
            # No mount view: the project must still be importable from where it is.
            spec = sandboxes.SandboxSpec(**{**spec.__dict__, "env": {**spec.env, "PYTHONPATH": _pythonpath()}})
        out_file, err_file = open(self.out_path, "ab"), open(self.err_path, "ab")
        try:
            self.zygote = self.sandbox.popen(
                spec, [sys.executable, "-P", "-m", "evaluator.runner", str(child.fileno()), self.device,
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
        from evaluator.proctree import children

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
        from evaluator.proctree import children, descendants

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
        from evaluator.proctree import children

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

    def returncode_of(self, runner: _Runner, wait_s: float) -> Optional[int]:
        deadline = time.monotonic() + wait_s
        while runner.runner_id not in self.exit_reports and self.control is not None:
            if self._control_message(deadline, want="exited") is None:
                break
        return self.exit_reports.pop(runner.runner_id, None)

    def wipe_exchange(self) -> None:
        for folder in (self.inputs_dir, self.outputs_dir):
            for entry in os.listdir(folder):
                path = os.path.join(folder, entry)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass

    def resident_bytes(self, runner: _Runner) -> int:
        return tree_resident_bytes(runner.host_pid, process_table()) if self.locate(runner) else 0


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
    from evaluator.sandbox import project_root

    extra = os.environ.get("PYTHONPATH", "")
    return project_root() + (os.pathsep + extra if extra else "")


def _tail(path: str) -> str:
    from evaluator.pool import _tail as tail

    return tail(path, max_lines=5)


# ---------------------------------------------------------------- the judge host's loop (speaks the pool's protocol)

class _PhaseClock:
    """Where a task's time goes on the trusted side: lap(name) adds the time since the last lap to `name`
    (judge_* phase times in the result; judge_wait is the runner's own work as the judge sees it)."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.totals: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.totals[name] = self.totals.get(name, 0.0) + now - self.last
        self.last = now

    def phases_s(self) -> dict[str, float]:
        return {name: round(value, 6) for name, value in self.totals.items()}


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
        self.spare_target = max(1, int(os.environ.get(SPARE_RUNNERS_ENV) or (2 if device.startswith("cuda") else 1)))
        self.finished_runner: Optional[_Runner] = None
        self.reference_cache = ReferenceCache()

    def start(self) -> str:
        import torch

        judge_device = "cuda:0" if self.device.startswith("cuda") else "cpu"
        if judge_device != "cpu":
            torch.cuda.init()
            torch.cuda.set_device(0)
        self._prepare_triton_cache(warm=judge_device != "cpu")
        self.device = judge_device
        self.slot.start_zygote()
        self.spares = [self.slot.fork_runner()]
        self.slot.wait_ready(self.spares[0], START_TIMEOUT_S)
        return torch.cuda.get_device_name(0) if judge_device != "cpu" else "cpu"

    def _prepare_triton_cache(self, warm: bool) -> None:
        """Triton's trusted cache level (evaluator/triton_cache.py), warmed here (GPU) before any runner exists. In
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
            from evaluator.triton_cache import warm_shared_cache

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
            self.slot.discard(spare)
        if not self.slot.zygote_alive():
            self.slot.counters.add("zygote_restarts")
            self.slot.start_zygote()
        runner = self.slot.fork_runner()
        self.slot.wait_ready(runner, START_TIMEOUT_S)
        return runner

    def run_task(self, message: dict[str, Any]) -> dict[str, Any]:
        from evaluator.pool import write_message

        self.finish_task()
        task_id = message.get("task")
        request = EvalRequest.from_dict(message["request"])
        limit_s = float(message.get("limit_s") or request.run_timeout_s)
        clock = _PhaseClock()
        try:
            runner = self._ready_runner()
        except InfrastructureFailure as exc:
            return {"type": "infra", "task": task_id, "why": str(exc)}
        clock.lap("judge_ready")
        for path in (self.err_path, self.out_path):
            with open(path, "ab") as handle:
                handle.truncate(0)
        self.slot.wipe_exchange()
        judge = TaskJudge(request, self.device, self.slot.inputs_dir, self.slot.outputs_dir, self.reference_cache)
        try:
            write_message(runner.task_w, {"type": "task", "request": request.to_dict(),
                                          "prebuilt": message.get("prebuilt")})
        except OSError:
            self.slot.discard(runner)
            return {"type": "infra", "task": task_id, "why": "the pre-warmed runner was gone"}
        clock.lap("judge_send")
        try:
            while len(self.spares) < self.spare_target:
                self.spares.append(self.slot.fork_runner())  # warm up (CUDA init) while this task runs
        except InfrastructureFailure:
            pass
        clock.lap("judge_fork")
        started_at = time.monotonic()
        self.finished_runner = runner  # killed and wiped after the reply is sent (finish_task): off the verdict's path
        cache, hits = self.reference_cache, self.reference_cache.hits
        reply = self._drive(runner, judge, request, task_id, started_at + limit_s, limit_s, clock)
        self.slot.counters.add("judge_cache_hits", cache.hits - hits)
        reply["counters"] = self.slot.counters.take()
        return reply

    def finish_task(self) -> None:
        """The last task's runner killed (it has answered, or is dead) and the exchange folders emptied."""
        runner, self.finished_runner = self.finished_runner, None
        if runner is not None:
            self.slot.discard(runner)
            self.slot.wipe_exchange()

    def _drive(self, runner: _Runner, judge: TaskJudge, request: EvalRequest, task_id: Any, deadline: float,
               limit_s: float, clock: Optional["_PhaseClock"] = None) -> dict[str, Any]:
        from evaluator.pool import write_message

        started = False
        selector = selectors.DefaultSelector()
        selector.register(runner.result_r, selectors.EVENT_READ, "runner")
        if self.slot.control is not None:
            selector.register(self.slot.control, selectors.EVENT_READ, "zygote")
        for spare in self.spares:
            selector.register(spare.result_r, selectors.EVENT_READ, spare)
        memory_at = time.monotonic()
        t0 = time.monotonic()
        start_deadline = min(deadline, t0 + TASK_START_TIMEOUT_S)

        clock = clock or _PhaseClock()

        def finish(result: EvalResult) -> dict[str, Any]:
            result.phase_times_s["total"] = round(time.monotonic() - t0, 6)
            result.phase_times_s.update(clock.phases_s())
            return {"type": "result", "task": task_id, "result": result.to_dict()}

        def verdict(kind: Verdict, text: str) -> EvalResult:
            return EvalResult(request_id=request.request_id, problem_id=request.problem_id, verdict=kind,
                              error_message=text[-2000:], correctness_trials_total=request.correctness_trials)

        try:
            while True:
                now = time.monotonic()
                if not started and now >= start_deadline:
                    # The candidate never ran, so no verdict on it: ours, retried once on a fresh runner.
                    self.slot.discard(runner)
                    return {"type": "infra", "task": task_id,
                            "why": f"the runner did not start the task within {now - t0:.0f} s"}
                if now >= deadline:
                    self.slot.discard(runner)
                    self.slot.counters.add("timeouts")
                    return finish(verdict(Verdict.TIMEOUT, f"The evaluation did not finish within {limit_s:.0f} s and "
                                                           "was stopped."))
                if self.resident_limit and started and now >= memory_at:
                    memory_at = now + MEMORY_CHECK_S
                    used = self.slot.resident_bytes(runner)
                    if used > self.resident_limit:
                        self.slot.discard(runner)
                        self.slot.counters.add("memory_kills")
                        return finish(verdict(Verdict.RUNTIME_ERROR, (
                            f"The candidate used {used / 2**30:.1f} GiB of host memory, over the "
                            f"{self.resident_limit / 2**30:.1f} GiB limit per evaluation, and was stopped. Keep "
                            "host-side buffers small; work on the GPU tensors you are given.")))
                timeout = (deadline if started else start_deadline) - now
                if self.resident_limit and started:
                    timeout = min(timeout, max(0.0, memory_at - now))
                for key, _ in selector.select(timeout):
                    if isinstance(key.data, _Runner):  # a spare saying it is ready
                        spare = key.data
                        try:
                            for message in spare.reader.read():
                                self.slot.on_ready(spare, message)
                        except ValueError:
                            pass
                        if spare.reader.eof or spare.ready:
                            selector.unregister(key.fileobj)
                        continue
                    if key.data == "zygote":
                        self.slot.drain_control()
                        if self.slot.control is None:
                            selector.unregister(key.fileobj)
                            # The zygote died under this task (a candidate can signal it): restart, retry once.
                            self.slot.discard(runner)
                            self.slot.counters.add("zygote_deaths")
                            return {"type": "infra", "task": task_id,
                                    "why": "the sandbox's zygote died during the evaluation"}
                        continue
                    try:
                        messages = runner.reader.read()
                    except ValueError as exc:
                        self.slot.discard(runner)
                        return finish(verdict(Verdict.CRASHED, f"The runner sent garbage to the judge ({exc}) and was "
                                                              "stopped."))
                    for message in messages:
                        kind = message.get("type")
                        if kind == "started" and not started:
                            started = True
                            write_message(self.result_fd, {"type": "started", "task": task_id})
                        elif kind == "inputs":
                            name = message.get("name")
                            clock.lap("judge_wait")
                            why = judge.write_inputs(name) if isinstance(name, str) else "no name"
                            clock.lap("judge_inputs")
                            self._answer(runner, {"type": "inputs", "name": name} if not why else
                                         {"type": "refused", "why": why})
                        elif kind == "output":
                            name = message.get("name")
                            clock.lap("judge_wait")
                            if isinstance(name, str) and input_seed(request, name) is not None:
                                judge.receive(name)
                            clock.lap("judge_compare")
                            self._answer(runner, {"type": "ack"})
                        elif kind == "error" and started:
                            # The worker code raised (an evaluator bug, or a candidate posing as one): retried once.
                            return {"type": "error", "task": task_id,
                                    "traceback": str(message.get("traceback", ""))[-4000:]}
                        elif kind == "result":
                            clock.lap("judge_wait")
                            try:
                                claimed = sanitize_result(message.get("result"), request)
                            except (ValueError, TypeError, KeyError) as exc:
                                self.slot.discard(runner)
                                return finish(verdict(Verdict.CRASHED, f"The runner's result was unreadable ({exc})."))
                            leftovers = message.get("leftovers")
                            if type(leftovers) is int and 0 < leftovers < 10**6:
                                self.slot.counters.add("leftover_processes_killed", leftovers)
                            if not started:
                                return {"type": "infra", "task": task_id, "why": "a result before the task started"}
                            return finish(judge.decide(claimed))
                    if runner.reader.eof:
                        return self._runner_died(runner, request, task_id, started, finish, verdict)
        finally:
            selector.close()

    def _answer(self, runner: _Runner, message: dict[str, Any]) -> None:
        from evaluator.pool import write_message

        try:
            write_message(runner.task_w, message)
        except OSError:
            pass  # it is dying; its end of file comes next

    def _runner_died(self, runner, request, task_id, started, finish, verdict) -> dict[str, Any]:
        from evaluator.pool import _crash_report, _describe_exit

        returncode = self.slot.returncode_of(runner, EXIT_STATUS_WAIT_S)
        self.slot.discard(runner)
        if not started:
            return {"type": "infra", "task": task_id, "why": "the runner died before the candidate ran"}
        self.slot.counters.add("crashes")
        cause = _describe_exit(returncode) if returncode is not None else "it died (exit status unknown: the " \
                                                                         "sandbox's zygote was gone)"
        from evaluator.pool import _tail as tail

        report = _crash_report(tail(self.err_path, max_lines=40, max_chars=8000), runner.workdir or "/nonexistent")
        text = f"The worker process died while running the candidate: {cause}."
        if report:
            text += "\nLast lines of its stderr:\n" + report
        return finish(verdict(Verdict.CRASHED, text))

    def serve(self) -> int:
        from evaluator.pool import read_message, write_message

        while True:
            message = read_message(self.task_fd)
            if message is None or message.get("type") == "exit":
                self.slot.stop_zygote()
                return 0
            try:
                reply = self.run_task(message)
            except Exception:  # noqa: BLE001 - a bug of the judge itself: infrastructure, retried once
                import traceback

                reply = {"type": "error", "task": message.get("task"), "traceback": traceback.format_exc()[-4000:]}
            write_message(self.result_fd, reply)
            self.finish_task()
