"""Which GPU device nodes a sandbox on one GPU gets: the shared control nodes and that GPU's own /dev/nvidiaN, found
from the driver's /proc entries. Without the others a candidate cannot start work on a GPU where another slot times."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

PROC_GPUS = "/proc/driver/nvidia/gpus"  # one folder per GPU, named by its PCI bus location
NODES_ENV = "KRL_WORKER_GPU_NODES"      # "own" (default): the slot's GPU only; "all": every /dev/nvidia* (as before)


@dataclass(frozen=True)
class HostGpu:
    bus: str      # "0000:18:00.0"
    uuid: str     # "GPU-5c1e...": what CUDA_VISIBLE_DEVICES accepts whatever the numbering inside
    minor: int    # N of /dev/nvidiaN
    model: str


def host_gpus(proc_root: str = PROC_GPUS) -> list[HostGpu]:
    """Every GPU the driver lists, in PCI bus order (nvidia-smi's numbering); [] where the driver's /proc is absent."""
    found = []
    for folder in sorted(glob.glob(os.path.join(proc_root, "*"))):
        try:
            with open(os.path.join(folder, "information")) as f:
                fields = dict(_field(line) for line in f if ":" in line)
            found.append(HostGpu(bus=os.path.basename(folder), uuid=fields["GPU UUID"],
                                 minor=int(fields["Device Minor"]), model=fields.get("Model", "")))
        except (OSError, KeyError, ValueError):
            return []  # a format we do not know: better every node than a wrong one
    return found


def _field(line: str) -> tuple[str, str]:
    name, _, value = line.partition(":")
    return name.strip(), value.strip()


def own_gpu(visible: str, gpus: Sequence[HostGpu], environ: Mapping[str, str]) -> Optional[HostGpu]:
    """The one GPU a process with CUDA_VISIBLE_DEVICES=`visible` uses, or None where that is not certain: several or
    no devices, a MIG instance, an index on a host of mixed models without CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA's default
    order is fastest first, which equals bus order only among identical GPUs)."""
    entry = visible.strip()
    if not entry or "," in entry or not gpus:
        return None
    if entry.startswith("GPU-"):
        matches = [g for g in gpus if g.uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    if not entry.isdigit() or int(entry) >= len(gpus):
        return None
    if environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and len({g.model for g in gpus}) > 1:
        return None
    return gpus[int(entry)]


def sandbox_gpu(environ: Mapping[str, str], proc_root: str = PROC_GPUS) -> Optional[HostGpu]:
    """The GPU whose node alone a sandbox started from this environment should see, or None for every node (asked
    for with KRL_WORKER_GPU_NODES=all, or the GPU not certain)."""
    if environ.get(NODES_ENV, "own") == "all":
        return None
    return own_gpu(environ.get("CUDA_VISIBLE_DEVICES", ""), host_gpus(proc_root), environ)
