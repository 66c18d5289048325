"""Which GPU a slot's sandbox may see, from the NVIDIA driver's /proc entries (as it writes them, and as a 4 x H200
host recorded them): by index in bus order, by UUID, and never a guess (several devices, MIG, mixed models)."""

from __future__ import annotations

import re
from pathlib import Path

from evaluator.isolation.gpu_nodes import NODES_ENV, host_gpus, own_gpu, sandbox_gpu

# A 4 x H200 host's own lines (session 20, call A): nvidia-smi -L, and the driver's /proc entries (UUID, bus, minor).
RECORDED = Path(__file__).resolve().parents[1] / "bench/results/h200x4/session20/callA/raw/device.txt"

INFORMATION = """Model: \t\t {model}
IRQ:   \t\t 0
GPU UUID: \t GPU-{uuid}
Video BIOS: \t 96.00.99.00.01
Bus Type: \t PCIe
DMA Size: \t 52 bits
DMA Mask: \t 0xfffffffffffff
Bus Location: \t {bus}
Device Minor: \t {minor}
GPU Excluded:\t No
"""


def _driver_proc(tmp_path, gpus):
    """gpus: (bus, minor, model) as the driver lists them; minors need not follow bus order (containers)."""
    for i, (bus, minor, model) in enumerate(gpus):
        folder = tmp_path / bus
        folder.mkdir()
        (folder / "information").write_text(INFORMATION.format(model=model, uuid=f"{i:08d}-aaaa", bus=bus, minor=minor))
    return str(tmp_path)


H200 = "NVIDIA H200"
FOUR = [("0000:18:00.0", 4, H200), ("0000:2a:00.0", 5, H200), ("0000:3a:00.0", 6, H200), ("0000:5d:00.0", 7, H200)]


def test_host_gpus_come_in_bus_order_with_their_minor_and_uuid(tmp_path):
    proc = _driver_proc(tmp_path, list(reversed(FOUR)))
    gpus = host_gpus(proc)
    assert [g.bus for g in gpus] == [b for b, _m, _model in FOUR]
    assert [g.minor for g in gpus] == [4, 5, 6, 7]
    assert gpus[0].uuid == "GPU-00000003-aaaa" and gpus[0].model == H200


def test_an_index_or_a_uuid_names_one_gpu(tmp_path):
    gpus = host_gpus(_driver_proc(tmp_path, FOUR))
    assert own_gpu("2", gpus, {}).minor == 6
    assert own_gpu("GPU-00000001", gpus, {}).minor == 5  # a UUID prefix, as CUDA accepts
    assert sandbox_gpu({"CUDA_VISIBLE_DEVICES": "3"}, str(tmp_path)).minor == 7  # "own" is the default


def test_no_guess_where_the_gpu_is_not_certain(tmp_path):
    gpus = host_gpus(_driver_proc(tmp_path, FOUR))
    for visible in ("", "0,1", "MIG-1234", "9", "GPU-0000", "-1"):
        assert own_gpu(visible, gpus, {}) is None, visible
    mixed = [g if i else type(g)(g.bus, g.uuid, g.minor, "NVIDIA H100") for i, g in enumerate(gpus)]
    assert own_gpu("1", mixed, {}) is None  # CUDA's default order is fastest first
    assert own_gpu("1", mixed, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).minor == 5


def test_every_node_when_asked_or_without_the_drivers_proc(tmp_path):
    proc = _driver_proc(tmp_path, FOUR)
    assert sandbox_gpu({"CUDA_VISIBLE_DEVICES": "0", NODES_ENV: "all"}, proc) is None
    assert sandbox_gpu({"CUDA_VISIBLE_DEVICES": "0"}, str(tmp_path / "absent")) is None
    (tmp_path / "0000:99:00.0").mkdir()
    (tmp_path / "0000:99:00.0" / "information").write_text("Model: something else\n")
    assert host_gpus(proc) == []  # a format we do not know


def test_the_recorded_hosts_own_entries_give_each_index_nvidia_smis_gpu(tmp_path):
    text = RECORDED.read_text()
    for line in text.splitlines():
        found = re.match(r"/proc/driver/nvidia/gpus/([^/]+)/information:(.*)$", line)
        if found:
            folder = tmp_path / found.group(1)
            folder.mkdir(exist_ok=True)
            with open(folder / "information", "a") as handle:
                handle.write(found.group(2) + "\n")
    smi = dict(re.findall(r"^GPU (\d+): .*\(UUID: (GPU-[0-9a-f-]+)\)$", text, re.M))
    gpus = host_gpus(str(tmp_path))
    assert len(gpus) == len(smi) == 4
    for index, uuid in smi.items():
        own = own_gpu(index, gpus, {})
        assert own.uuid == uuid and own.minor == int(index)  # nvidia-smi's numbering is the driver's bus order here
        assert own_gpu(uuid, gpus, {}) == own
