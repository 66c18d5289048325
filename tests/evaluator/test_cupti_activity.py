"""The direct CUPTI recorder: its record layout read from buffers laid out as CUDA 13's cupti_activity.h lays them out,
names demangled as torch.profiler shows them; on a GPU, a real session beside torch.profiler's."""

from __future__ import annotations

import ctypes
import struct

import pytest

from evaluator.judging import cupti_activity
from evaluator.judging.rules import runtime as runtime_rules


def _record(kind: int, start_ns: int, end_ns: int, name: bytes = b"", copy_kind: int = 0) -> tuple:
    """A 216-byte record (CUpti_ActivityKernel10's size) with the fields the recorder reads; (buffer, name keep-alive)."""
    buffer = ctypes.create_string_buffer(216)
    label = ctypes.create_string_buffer(name)
    struct.pack_into("<I", buffer, 0, kind)
    struct.pack_into("<B", buffer, cupti_activity.COPY_KIND_AT, copy_kind)
    struct.pack_into("<QQ", buffer, cupti_activity.START_AT, start_ns, end_ns)
    if kind == cupti_activity.KIND_CONCURRENT_KERNEL:
        struct.pack_into("<Q", buffer, cupti_activity.KERNEL_NAME_AT, ctypes.addressof(label))
    return buffer, label


def test_kernel_record_reads_as_a_profiler_event_with_its_readable_name():
    buffer, _keep = _record(cupti_activity.KIND_CONCURRENT_KERNEL, 5_000, 7_500, b"_Z11relu_kernelPKfPfi")
    activity = cupti_activity.parse_record(ctypes.addressof(buffer))
    assert activity.name == "relu_kernel(float const*, float*, int)"
    assert activity.time_range.start == 5.0 and activity.time_range.elapsed_us() == 2.5
    # What rules.runtime reads of it: a CUDA event, found under the candidate's kernel name.
    fraction, own, total = runtime_rules.own_kernel_fraction([activity], {"relu_kernel"})
    assert (fraction, own, total) == (1.0, 1, 1)


def test_copies_and_sets_are_device_work_and_other_kinds_are_skipped():
    copy, _ = _record(cupti_activity.KIND_MEMCPY, 0, 1_000, copy_kind=1)
    memset, _ = _record(cupti_activity.KIND_MEMSET, 0, 500)
    other, _ = _record(5, 0, 1)  # CUPTI_ACTIVITY_KIND_RUNTIME: host API calls, not device work
    assert cupti_activity.parse_record(ctypes.addressof(copy)).name == "Memcpy HtoD"
    assert cupti_activity.parse_record(ctypes.addressof(memset)).name == "Memset"
    assert cupti_activity.parse_record(ctypes.addressof(other)) is None


def test_triton_names_are_kept_as_they_are():
    assert cupti_activity.demangle("add_kernel") == "add_kernel"
    assert cupti_activity.demangle("_Znot a symbol") == "_Znot a symbol"


@pytest.mark.gpu
def test_direct_session_sees_what_torch_profiler_sees(monkeypatch):
    import torch

    monkeypatch.setenv(cupti_activity.ENV, "direct")
    monkeypatch.setattr(cupti_activity, "_RECORDER", [])

    from evaluator.judging import timing

    assert cupti_activity.recorder() is not None, "the direct recorder did not open or failed its self-test"
    x = torch.randn(1 << 20, device="cuda")
    events = timing.profiler_events(lambda: (torch.relu(x), torch.cuda._sleep(1000)))
    names = [event.name for event in events]
    assert any("spin_kernel" in n for n in names) and len(names) >= 2, names
    assert runtime_rules.check_early_start(events) is None
