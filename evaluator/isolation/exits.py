"""How the trusted side describes a process that ended: its exit in words, the tail of its log, and a crash
dump reduced to the candidate's own frames. Shared by the pool and the judge host."""

from __future__ import annotations

import os
import re
import signal


def describe_exit(returncode: int) -> str:
    """A process's end in words: "killed by SIGSEGV (segmentation fault)", "exited with code 3"."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        meaning = {"SIGSEGV": "segmentation fault", "SIGABRT": "abort", "SIGKILL": "killed", "SIGBUS": "bus error",
                   "SIGFPE": "arithmetic error", "SIGILL": "illegal instruction"}.get(name, "")
        return f"killed by {name}" + (f" ({meaning})" if meaning else "")
    return f"exited with code {returncode}"


def tail(path: str, max_lines: int = 15, max_chars: int = 1500) -> str:
    """The last non-blank lines of a log file (at most max_chars); "" when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16384))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()][-max_lines:]
    return "\n".join(lines)[-max_chars:]


FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<name>.*)$')


def crash_report(tail: str, workdir: str) -> str:
    """faulthandler's dump reduced to the fatal error and the candidate's own frames ("line N in forward")."""
    kept = []
    for line in tail.splitlines():
        frame = FRAME.match(line)
        if frame:
            if frame.group("path").startswith(workdir):
                kept.append(f"  line {frame.group('line')} in {frame.group('name')}")
            continue
        if line.startswith(("Extension modules:", "Current thread", "Thread 0x", "Stack (most recent")):
            continue
        kept.append(line)
    return "\n".join(kept[-15:])[-1500:]


def memory_kill_message(used_bytes: int, limit_bytes: int) -> str:
    """What the model reads when its candidate was stopped for holding too much host memory."""
    return (f"The candidate used {used_bytes / 2**30:.1f} GiB of host memory, over the {limit_bytes / 2**30:.1f} GiB "
            "limit per evaluation, and was stopped. Keep host-side buffers small; work on the GPU tensors you are given.")


def crash_message(doing: str, cause: str, report: str) -> str:
    """What the model reads when the process running its candidate died: `doing` is "running" or "compiling",
    `report` a crash_report (may be empty)."""
    message = f"The worker process died while {doing} the candidate: {cause}."
    if report:
        message += "\nLast lines of its stderr:\n" + report
    return message
