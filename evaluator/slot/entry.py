"""The entry of every pool worker process (`python -m evaluator.slot.entry ROLE DEVICE ...`): it limits itself, then
either hosts a slot's trusted judge (eval) or runs compile requests (compile). The pool side is local/pool.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback

from evaluator.contract.framing import read_message, write_message
from evaluator.contract.types import EvalRequest
from evaluator.isolation.limits import TRUSTED_LIMIT_KEYS, apply_limits, die_with_parent
from evaluator.isolation.proctree import become_subreaper, has_children, kill_tree, reap_children
from evaluator.isolation.teardown import empty_folder
from evaluator.judging import timing


def child_main(argv: list[str]) -> int:
    """A pool worker's life: ROLE DEVICE WORKER_ID RESULT_FD PARENT_PID. An eval slot hands over to its JudgeHost;
    a compile worker answers build requests until told to exit."""
    role, device, worker_id, result_fd_text, parent_pid_text = argv[:5]
    result_fd, parent_pid = int(result_fd_text), int(parent_pid_text)
    limits = json.loads(os.environ.pop("KRL_WORKER_LIMITS", "{}"))
    # The judge host is trusted and moves whole tensors through files: the candidates' caps are for the runners it
    # starts (runner.py applies them), not for itself.
    apply_limits(limits if role != "eval" else {k: v for k, v in limits.items() if k in TRUSTED_LIMIT_KEYS})
    timing.apply_placement()  # GPU slots on reserved cores, compiles off them (timing under load); children inherit
    die_with_parent()
    become_subreaper()  # a candidate's setsid'd or double-forked processes stay in this tree
    if os.getppid() != parent_pid and not os.environ.get("KRL_WORKER_SANDBOXED"):
        return 0  # (inside a sandbox's PID namespace the parent is the sandbox's init: it dies with us instead)
    import faulthandler

    faulthandler.enable()  # a segfault prints the Python stack, which names the candidate line
    # `kill -USR1 PID` prints every thread's stack into the log: where a judge that stopped answering waits.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # Tasks come on stdin; move it away so a candidate reading stdin cannot steal the next task or block on it.
    task_fd = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    workdir = os.getcwd()
    clean_env = dict(os.environ)
    cache_dir = os.environ.get("KRL_WORKER_CACHE_DIR", "")
    worker_module = os.environ.get("KRL_WORKER_MODULE", "evaluator.slot.worker")

    if role == "compile":
        # Builds must not starve a GPU worker's host thread: timing (and its wall-clock cross-check) runs there.
        try:
            os.nice(10)
        except OSError:
            pass
    if role == "eval":
        # The trusted judge of this slot: candidate code runs only in the sandboxed runners it starts.
        from evaluator.slot.judge_host import JudgeHost
        from evaluator.slot.runner_slot import InfrastructureFailure

        host = JudgeHost(device, workdir, worker_module, limits, task_fd, result_fd)
        try:
            device_name = host.start()
        except InfrastructureFailure as exc:
            print("evaluation slot could not start: " + str(exc).replace("\n", " | "), file=sys.stderr, flush=True)
            host.slot.stop_zygote()
            return 1
        write_message(result_fd, {"type": "ready", "worker_id": worker_id, "pid": os.getpid(),
                                  "device_name": device_name})
        return host.serve()
    write_message(result_fd, {"type": "ready", "worker_id": worker_id, "pid": os.getpid()})
    while True:
        message = read_message(task_fd)
        if message is None or message.get("type") == "exit":
            return 0
        task_id = message["task"]
        reset_between_tasks(workdir, clean_env)
        write_message(result_fd, {"type": "started", "task": task_id})
        try:
            from evaluator.build.compile import build_cuda_candidate

            request = EvalRequest.from_dict(message["request"])
            reply = {"type": "result", "task": task_id, "build": build_cuda_candidate(request, cache_dir)}
        except BaseException:  # a bug of the evaluator itself, not of the candidate
            reply = {"type": "error", "task": task_id, "traceback": traceback.format_exc()[-4000:]}
        leftovers = kill_tree(os.getpid(), include_root=False) if has_children() else []
        if leftovers:
            reap_children()
            reply["leftovers"], reply["retire"] = len(leftovers), True
        sys.stdout.flush()
        sys.stderr.flush()
        write_message(result_fd, reply)


def reset_between_tasks(workdir: str, clean_env: dict[str, str]) -> None:
    """Each task starts with empty output files, an empty private directory and the worker's original environment."""
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        try:
            stream.flush()
            os.ftruncate(fd, 0)
        except (OSError, ValueError):
            pass
    try:
        os.chdir(workdir)
        empty_folder(workdir, keep=(os.path.join(workdir, "tmp"),))
    except OSError:
        pass
    os.environ.clear()
    os.environ.update(clean_env)


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
