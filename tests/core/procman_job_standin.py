"""A stand-in training job for the process-manager tests: follows the job side of the procman contract
(running, heartbeats, one write_step per step, checkpoints, SIGTERM → checkpoint + stopped) and can misbehave on request."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

from core.registry import Registry


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_id", type=int)
    parser.add_argument("--workspace", required=True)
    args = parser.parse_args()
    reg = Registry.for_workspace(args.workspace)
    run = reg.get_run(args.run_id)
    # Knobs come from the config (procman tests) or $KRL_STANDIN (CLI tests, whose configs are validated presets).
    knobs = dict(run["config"].get("standin", {}), **json.loads(os.environ.get("KRL_STANDIN") or "{}"))
    print(f"standin: run {run['name']} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}", flush=True)
    stop = threading.Event()
    if knobs.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if knobs.get("exit_code") is not None:
        print("standin: failing on purpose", flush=True)
        print("boom: the last line of the log", flush=True)
        return int(knobs["exit_code"])
    time.sleep(knobs.get("startup_sleep_s", 0))  # a slow start: no heartbeat yet
    reg.compare_and_set_status(run["id"], ("queued", "running"), "running")
    if knobs.get("child"):  # like an evaluator worker: same process group, outlives a kill -9 of the job
        child = subprocess.Popen(["sleep", "60"])
        print(f"standin: child pid {child.pid}", flush=True)

    def beat() -> None:
        while not stop.wait(0.5):
            reg.heartbeat(run["id"])

    threading.Thread(target=beat, daemon=True).start()
    checkpoint = reg.last_checkpoint(run["id"])
    step = checkpoint["step"] + 1 if checkpoint else (run["parent_step"] + 1 if run["parent_step"] is not None else 0)
    max_steps = knobs.get("max_steps", run["config"].get("max_steps", 1000))
    if "extra_steps" in knobs:
        max_steps = step + knobs["extra_steps"]
    print(f"standin: starting at step {step}", flush=True)
    while step < max_steps and not stop.is_set():
        if step == knobs.get("hang_at_step"):
            # Hung between writes: holding the registry's thread lock keeps the heartbeat thread out of a transaction.
            with reg._lock:
                os.kill(os.getpid(), signal.SIGSTOP)
        if step == knobs.get("hang_in_transaction_at_step"):  # hung holding the registry's write lock
            with reg.transaction():
                os.kill(os.getpid(), signal.SIGSTOP)
        reg.write_step(run["id"], step, {"reward/mean": step * 0.1, "correct_rate": 0.5})
        step += 1
        stop.wait(knobs.get("step_s", 0.1))
    reg.add_checkpoint(run["id"], step - 1, f"step{step - 1:06d}", None)
    if stop.is_set():
        reg.set_status(run["id"], "stopped", "SIGTERM", ended_at=time.time())
    else:
        reg.set_status(run["id"], "finished", "", ended_at=time.time())
    time.sleep(knobs.get("linger_s", 0))  # like closing evaluator workers after the final status
    return 0


if __name__ == "__main__":
    sys.exit(main())
