"""Samples of the machine a run uses — GPU utilisation and memory through NVML (nvidia-ml-py), CPU and RAM from
/proc — as `system/*` metrics: a training job writes their means over each step with the step's metrics; the TUI
reads the same samples live for the host panel."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

# How often a job samples between steps; a step's metrics carry the mean (and the peak) of its samples.
DEFAULT_EVERY_S = float(os.environ.get("KRL_SYSTEM_EVERY_S", "5"))
GIB = 1024 ** 3


@dataclass
class GpuSample:
    index: int
    name: str
    util_percent: float
    mem_used_gb: float
    mem_total_gb: float


@dataclass
class HostSample:
    cpu_percent: float
    ram_used_gb: float
    ram_total_gb: float
    process_rss_gb: Optional[float] = None  # the sampling process and its children (evaluator workers)
    gpus: list[GpuSample] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """This sample as flat `system/*` metric values."""
        out = {"system/cpu_percent": self.cpu_percent, "system/ram_used_gb": self.ram_used_gb,
               "system/ram_percent": 100.0 * self.ram_used_gb / self.ram_total_gb if self.ram_total_gb else 0.0}
        if self.process_rss_gb is not None:
            out["system/process_rss_gb"] = self.process_rss_gb
        for gpu in self.gpus:
            out[f"system/gpu{gpu.index}/util_percent"] = gpu.util_percent
            out[f"system/gpu{gpu.index}/mem_used_gb"] = gpu.mem_used_gb
            out[f"system/gpu{gpu.index}/mem_percent"] = \
                100.0 * gpu.mem_used_gb / gpu.mem_total_gb if gpu.mem_total_gb else 0.0
        return out


# ---------------------------------------------------------------- CPU and RAM from /proc


def _cpu_times(stat_text: str) -> tuple[int, int]:
    """(busy, total) jiffies from the first line of /proc/stat."""
    fields = [int(v) for v in stat_text.split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user/nice
    return total - idle, total


def read_meminfo(text: Optional[str] = None) -> tuple[float, float]:
    """(used, total) GiB from /proc/meminfo; used = total - available, as `free` reports it."""
    if text is None:
        with open("/proc/meminfo") as handle:
            text = handle.read()
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[name] = int(parts[0]) * 1024
    total = values.get("MemTotal", 0)
    available = values.get("MemAvailable", values.get("MemFree", 0))
    return (total - available) / GIB, total / GIB


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                out.extend(int(p) for p in handle.read().split())
    except OSError:
        pass
    return out


def tree_rss_gb(pid: int) -> float:
    """Resident memory of a process and its descendants (the job and its evaluator workers), GiB."""
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/statm") as handle:
                total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
        todo.extend(_children(current))
    return total / GIB


class CpuMeter:
    """Host CPU use between two calls (percent of all cores), from /proc/stat."""

    def __init__(self, read: Callable[[], str] = lambda: open("/proc/stat").read()) -> None:
        self._read = read
        self._last = self._safe()

    def _safe(self) -> Optional[tuple[int, int]]:
        try:
            return _cpu_times(self._read())
        except (OSError, ValueError, IndexError):
            return None

    def percent(self) -> float:
        now = self._safe()
        last, self._last = self._last, now
        if now is None or last is None or now[1] <= last[1]:
            return 0.0
        return 100.0 * (now[0] - last[0]) / (now[1] - last[1])


# ---------------------------------------------------------------- GPUs through NVML


class Nvml:
    """NVML handles for some GPUs (physical indices); `available` is False without the library or a driver."""

    def __init__(self, indices: Optional[Sequence[int]] = None) -> None:
        self.available = False
        self._handles: list[tuple[int, Any, str]] = []
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
        except Exception:  # no package, no driver, no device: CPU and RAM only
            return
        self._nvml = pynvml
        count = pynvml.nvmlDeviceGetCount()
        for index in (range(count) if indices is None else [i for i in indices if 0 <= i < count]):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            self._handles.append((index, handle, name.decode() if isinstance(name, bytes) else str(name)))
        self.available = True

    def sample(self) -> list[GpuSample]:
        out = []
        for index, handle, name in self._handles:
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception:  # a GPU that fell off the bus must not stop training
                continue
            out.append(GpuSample(index, name, float(util), memory.used / GIB, memory.total / GIB))
        return out

    def close(self) -> None:
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self.available = False


def visible_gpu_indices(environ: Optional[dict[str, str]] = None) -> Optional[list[int]]:
    """The GPUs a job was given ($CUDA_VISIBLE_DEVICES as integers): [] when set empty, None when unset."""
    value = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    indices = []
    for part in value.split(","):
        part = part.strip()
        if part.isdigit():
            indices.append(int(part))
    return indices


class HostSampler:
    """One sample of the host now: CPU since the last sample, RAM, this process tree's RSS, the chosen GPUs."""

    def __init__(self, gpu_indices: Optional[Sequence[int]] = None, pid: Optional[int] = None) -> None:
        self.cpu = CpuMeter()
        self.nvml = Nvml(gpu_indices) if gpu_indices is None or len(gpu_indices) else None
        self.pid = pid

    def sample(self) -> HostSample:
        try:
            used, total = read_meminfo()
        except (OSError, ValueError):
            used, total = 0.0, 0.0
        gpus = self.nvml.sample() if self.nvml is not None and self.nvml.available else []
        rss = tree_rss_gb(self.pid) if self.pid is not None else None
        return HostSample(self.cpu.percent(), used, total, rss, gpus)

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()


class StepSampler:
    """Samples in a background thread every `every_s`; `take()` returns the means since the last take (and
    `.../max` of GPU utilisation), so a step's `system/*` metrics describe the whole step, not its last instant."""

    def __init__(self, every_s: float = DEFAULT_EVERY_S, gpu_indices: Optional[Sequence[int]] = None,
                 pid: Optional[int] = None) -> None:
        self.every_s = max(0.05, every_s)
        self.host = HostSampler(gpu_indices, pid=os.getpid() if pid is None else pid)
        self._samples: list[dict[str, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="krl-system-metrics", daemon=True)

    def start(self) -> "StepSampler":
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._add()

    def _add(self) -> None:
        try:
            values = self.host.sample().metrics()
        except Exception:  # sampling is advisory: never let it break a run
            return
        with self._lock:
            self._samples.append(values)

    def take(self) -> dict[str, float]:
        """Mean of each metric over the samples since the last take (one fresh sample if there were none)."""
        with self._lock:
            samples, self._samples = self._samples, []
        if not samples:
            self._add()
            with self._lock:
                samples, self._samples = self._samples, []
        out: dict[str, float] = {}
        for key in {k for s in samples for k in s}:
            values = [s[key] for s in samples if key in s]
            out[key] = sum(values) / len(values)
            if key.endswith("/util_percent") or key == "system/cpu_percent":
                out[key.rsplit("_percent", 1)[0] + "_max_percent"] = max(values)
        return out

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.every_s + 1)
        self.host.close()
