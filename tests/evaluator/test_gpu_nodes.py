"""Which GPU a slot's sandbox may see, from driver /proc entries laid out as the NVIDIA driver writes them: by index
in bus order, by UUID, and never a guess (several devices, MIG, mixed models without PCI order)."""

from __future__ import annotations

from evaluator.isolation.gpu_nodes import NODES_ENV, host_gpus, own_gpu, sandbox_gpu

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
