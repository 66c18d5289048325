"""A process that holds a device lock on command, for tests/evaluator/test_device_lock.py: one JSON command a line
on stdin (["shared", wait_s], ["exclusive", wait_s, drain_s], ["release_shared"], ["release"]), one answer a line."""

from __future__ import annotations

import json
import sys
import time

from evaluator.isolation.device_lock import DeviceLock


def serve(device_uuid: str) -> None:
    lock = DeviceLock(device_uuid)
    for line in sys.stdin:
        command, *args = json.loads(line)
        if command == "shared":
            answer = lock.acquire_shared(time.monotonic() + args[0])
        elif command == "exclusive":
            answer = [lock.acquire(time.monotonic() + args[0], drain_s=args[1]), lock.overran]
        elif command == "release_shared":
            answer = lock.release_shared()
        elif command == "release":
            answer = lock.release()
        else:
            return
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1])
