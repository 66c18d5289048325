"""System metrics: CPU and RAM read from this machine's real /proc, the step sampler's means, NVML absent or present,
(the training loop writing them with each step is tested over the recorded demo in tests/app/test_tui_views.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from core.system_metrics import (CpuMeter, HostSampler, Nvml, StepSampler, read_meminfo, tree_rss_gb,
                                 visible_gpu_indices)


def test_cpu_meter_sees_a_busy_process():
    meter = CpuMeter()
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass"])
    busy.wait()
    assert 100.0 / os.cpu_count() * 0.3 < meter.percent() <= 100.0


def test_meminfo_and_process_tree_rss():
    used, total = read_meminfo()
    assert 0 < used < total
    assert read_meminfo("MemTotal: 1048576 kB\nMemFree: 1 kB\nMemAvailable: 262144 kB\n") == (0.75, 1.0)
    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(200 * 2**20); print('ready', flush=True);"
                              " time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        alone = tree_rss_gb(child.pid)
        assert alone > 0.18  # the 200 MiB the child touched
        assert tree_rss_gb(os.getpid()) >= alone  # this process's tree includes the child
    finally:
        child.kill()
        child.wait()


def test_visible_gpu_indices():
    assert visible_gpu_indices({}) is None
    assert visible_gpu_indices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpu_indices({"CUDA_VISIBLE_DEVICES": "2,0"}) == [2, 0]


def test_step_sampler_takes_means_since_the_last_take():
    sampler = StepSampler(every_s=0.05).start()
    try:
        time.sleep(0.4)
        first = sampler.take()
        assert {"system/cpu_percent", "system/cpu_max_percent", "system/ram_used_gb", "system/ram_percent",
                "system/process_rss_gb"} <= set(first)
        assert first["system/cpu_max_percent"] >= first["system/cpu_percent"] >= 0
        assert first["system/process_rss_gb"] > 0.01
        assert sampler.take(), "a take right after another samples once rather than return nothing"
    finally:
        sampler.stop()


def test_no_gpu_means_no_gpu_rows():
    host = HostSampler(gpu_indices=[])  # a CPU job: NVML is not even opened
    assert host.nvml is None and not [k for k in host.sample().metrics() if "gpu" in k]
    nvml = Nvml()
    if not nvml.available:  # no driver here: CPU and RAM only, no error
        assert nvml.sample() == []
    else:
        samples = nvml.sample()
        assert samples and all(0 <= s.util_percent <= 100 and s.mem_total_gb > 0 for s in samples)
    nvml.close()
