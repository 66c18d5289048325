"""The next task's cgroup made, and its spare runner moved in, while the current task runs: a move between cgroups
waits for an RCU grace period (5-8 ms on a 2-core VM), which was most of a task's setup (`task_setup`, ~14 ms)."""

from __future__ import annotations

import threading
import time
from typing import Any, Optional


class GroupsAhead:
    """At most one group made ahead, for the spare runner that gets the next task. `prepare` starts it in a thread (the
    judge goes on with its task meanwhile; the move sleeps in the kernel, not on the GIL), `take` hands it over to the
    task of that runner, `drop` tears it down with its runner's loss. A spare's group counts from its warm-up on: the
    task's CPU is charged by differences, and its memory was counted from the task's start before too."""

    def __init__(self) -> None:
        self.pending: Optional[tuple[str, int, threading.Thread, dict[str, Any]]] = None

    def prepare(self, runner_id: str, host_pid: int, memory_limit: Optional[int], runner_namespaces: bool,
                device_refusal: Optional[Any] = None) -> None:
        from evaluator.slot.task_isolation import begin_task

        if host_pid <= 0 or (self.pending is not None and self.pending[0] == runner_id):
            return
        self.drop()
        made: dict[str, Any] = {}

        def make() -> None:
            made["task"] = begin_task(runner_id, host_pid, memory_limit, runner_namespaces, device_refusal)

        thread = threading.Thread(target=make, name=f"krl-group-{runner_id}", daemon=True)
        thread.start()
        self.pending = (runner_id, host_pid, thread, made)

    def take(self, runner_id: str, host_pid: int) -> Optional[Any]:
        """The group made ahead for this runner (its `setup_s`: what the task waited for it), or None: none was, or
        it was for another runner (then torn down)."""
        if self.pending is None or self.pending[:2] != (runner_id, host_pid):
            self.drop()
            return None
        _, _, thread, made = self.pending
        self.pending = None
        began = time.monotonic()
        thread.join()
        task = made.get("task")
        if task is not None:
            task.setup_s = time.monotonic() - began
        return task

    def drop(self) -> None:
        """The group made ahead, if any, torn down (its runner lost or not the next to run)."""
        from evaluator.slot.task_isolation import end_task

        if self.pending is None:
            return
        _, _, thread, made = self.pending
        self.pending = None
        thread.join()
        end_task(made.get("task"))
