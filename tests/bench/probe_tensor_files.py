"""Where a large tensor file's time goes between judge and runner (issue 23's batch, 256 MiB elementwise problems): the
exchange's tmpfs mount, writing a device tensor built in a buffer or straight into the file, reading it back.
Usage: python tests/bench/probe_tensor_files.py [--mib 256] [--repeats 4] (as root: it mounts a private tmpfs)."""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _timed(step, repeats: int) -> str:
    """Mean seconds, minor faults and system CPU seconds of `step()` over `repeats` runs."""
    seconds, faults, system = 0.0, 0, 0.0
    for index in range(repeats):
        before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        step(index)
        ended, after = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        seconds += ended - began
        faults += after.ru_minflt - before.ru_minflt
        system += after.ru_stime - before.ru_stime
    return f"{seconds / repeats:.4f} s, {faults // repeats} faults, {system / repeats:.4f} s system"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    from evaluator.isolation import exchange_tmpfs

    folder = tempfile.mkdtemp(prefix="probe-files-")
    why = exchange_tmpfs.mount_private_tmpfs([folder])  # before torch starts any thread
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        mounts = [line.split(" - ")[-1].strip() for line in handle if " krl-exchange " in line]
    print(f"tmpfs: {why or 'mounted'}; {mounts}; shmem THP: "
          f"{open('/sys/kernel/mm/transparent_hugepage/shmem_enabled').read().strip()}", flush=True)
    import torch

    from evaluator.judging import tensorwire

    device = "cuda" if torch.cuda.is_available() else "cpu"
    value = torch.randn(args.mib << 18, device=device)
    built, pinned = tensorwire.ReusedBuffer(), tensorwire.ReusedBuffer(pinned=True)
    path = lambda index: os.path.join(folder, f"set-{index}.krlt")  # noqa: E731

    def built_then_written(index: int) -> None:
        data = tensorwire.encode_values([value], built)
        with open(path(index), "wb") as handle:
            handle.write(data)

    def straight(index: int) -> None:
        tensorwire.write_values(path(index), [value])

    def read_to_device(scratch):
        def step(index: int) -> None:
            tensorwire.read_values(path(index % args.repeats), 1 << 36, scratch)[0].to(device)
        return step

    def unlink(index: int) -> None:
        os.unlink(path(index))

    print(f"{args.mib} MiB from {device}:", flush=True)
    for name, step in (("built in a reused buffer, then written", built_then_written), ("unlinked", unlink),
                       ("straight into the file", straight), ("read, to the device (pageable)", read_to_device(built)),
                       ("read, to the device (pinned)", read_to_device(pinned)), ("unlinked", unlink),
                       ("straight into the file", straight), ("map_values, to the device", lambda index:
                       tensorwire.map_values(path(index), 1 << 36)[0].to(device)), ("unlinked", unlink)):
        print(f"  {name}: {_timed(step, args.repeats)}", flush=True)


if __name__ == "__main__":
    main()
