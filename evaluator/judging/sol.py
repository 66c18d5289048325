"""Speed of light: the least time a GPU can take for a problem, from its FLOPs and bytes against datasheet peaks.
Pure functions over a table of devices; counting FLOPs and bytes of a reference call is the only part that runs torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

# A measurement below (1 - SOL_MARGIN) of the physical floor is judged impossible. Datasheet peaks are at the highest
# boost clock, which no kernel exceeds, and FLOPs are counted exactly for the reference's matmuls and convolutions;
# the margin absorbs event-timing granularity (~1 µs) and the few percent by which a clock may sit above the
# table's rounded figures.
SOL_MARGIN = 0.2
# Below this the event clock cannot resolve a kernel, so no verdict is drawn from the floor.
MIN_JUDGED_FLOOR_MS = 0.005


@dataclass(frozen=True)
class DeviceSpec:
    """Dense (no sparsity) datasheet peaks. fp32: CUDA cores, no tensor cores; tf32/bf16/fp16: tensor cores."""

    name: str
    fp32_tflops: float
    tf32_tflops: float
    bf16_tflops: float
    fp16_tflops: float
    memory_gbs: float  # DRAM bandwidth, GB/s (1e9 bytes)


# Matched against torch.cuda.get_device_name() by the keys, first match wins (so "H100 PCIe" precedes "H100").
DEVICES: tuple[tuple[tuple[str, ...], DeviceSpec], ...] = (
    (("H200",), DeviceSpec("H200 SXM", 67.0, 494.7, 989.4, 989.4, 4800.0)),
    (("H100", "PCIE"), DeviceSpec("H100 PCIe", 51.2, 378.0, 756.0, 756.0, 2000.0)),
    (("H100", "NVL"), DeviceSpec("H100 NVL", 60.0, 417.5, 835.5, 835.5, 3900.0)),
    (("H100",), DeviceSpec("H100 SXM", 67.0, 494.7, 989.4, 989.4, 3350.0)),
    (("A100", "40GB"), DeviceSpec("A100 40GB", 19.5, 156.0, 312.0, 312.0, 1555.0)),
    (("A100",), DeviceSpec("A100 80GB", 19.5, 156.0, 312.0, 312.0, 2039.0)),
    (("L40S",), DeviceSpec("L40S", 91.6, 183.0, 362.05, 362.05, 864.0)),
    (("L4",), DeviceSpec("L4", 30.3, 60.0, 121.0, 121.0, 300.0)),
    (("4090",), DeviceSpec("RTX 4090", 82.6, 82.6, 165.2, 165.2, 1008.0)),
    (("A10G",), DeviceSpec("A10G", 31.2, 62.5, 125.0, 125.0, 600.0)),
    (("V100",), DeviceSpec("V100 SXM2", 15.7, 15.7, 125.0, 125.0, 900.0)),
)


def device_spec(device_name: str) -> Optional[DeviceSpec]:
    """The table row for a CUDA device name; None for the CPU and unknown devices (then nothing is judged)."""
    upper = device_name.upper()
    for keys, spec in DEVICES:
        if all(key in upper for key in keys):
            return spec
    return None


def peak_tflops(spec: DeviceSpec, precision: str, tf32_allowed: bool = False) -> float:
    """fp32 problems get the CUDA-core FP32 peak, so a TF32 shortcut that beats 'physics' is caught, except for ops
    whose fp32 semantics in PyTorch allow TF32 (convolutions: torch.backends.cudnn.allow_tf32 is on by default)."""
    if precision == "fp32":
        return spec.tf32_tflops if tf32_allowed else spec.fp32_tflops
    return {"bf16": spec.bf16_tflops, "fp16": spec.fp16_tflops}[precision]


def sol_time_ms(flops: float, bytes_moved: float, spec: DeviceSpec, precision: str, tf32_flops: float = 0.0) -> float:
    """max(compute time at peak, memory time at full bandwidth), in milliseconds. `tf32_flops` are the FLOPs of ops
    PyTorch itself may run in TF32 for an fp32 problem (counted at the TF32 peak, and not also in `flops`)."""
    compute_ms = (flops / peak_tflops(spec, precision) + tf32_flops / peak_tflops(spec, precision, True)) / 1e9
    memory_ms = bytes_moved / (spec.memory_gbs * 1e9) * 1e3
    return max(compute_ms, memory_ms)


def sol_fraction(sol_ms: Optional[float], measured_ms: Optional[float]) -> Optional[float]:
    """sol / measured: 1.0 at the speed of light, 0.1 at ten times slower."""
    if sol_ms is None or not measured_ms or measured_ms <= 0:
        return None
    return sol_ms / measured_ms


def hack_floor_ms(flops: float, input_bytes: float, spec: DeviceSpec, precision: str,
                  tf32_flops: float = 0.0) -> Optional[float]:
    """The time no honest candidate can beat: the reference's FLOPs at peak, or reading every input from DRAM (the
    L2 is flushed before each timed call). Parameters (a candidate may fold them) and outputs (they may still sit in
    L2 when the timed call ends) are left out. None when the floor is too small for the clock to resolve."""
    floor = (1.0 - SOL_MARGIN) * sol_time_ms(flops, input_bytes, spec, precision, tf32_flops)
    return floor if floor >= MIN_JUDGED_FLOOR_MS else None


def tensor_bytes(values: Any) -> int:
    """Bytes of every tensor in a (nested) list/tuple/dict of values."""
    import torch

    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    if isinstance(values, dict):
        return sum(tensor_bytes(v) for v in values.values())
    return 0


def count_flops(call: Callable[[], Any], tf32_ops: tuple[str, ...] = ()) -> tuple[int, int, Any]:
    """(FLOPs, FLOPs of ops whose name contains one of `tf32_ops`, the call's output) by torch's flop counter, which
    counts matmuls, convolutions and attention; elementwise ops count zero and are bounded by bytes instead."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        output = call()
    per_op = counter.get_flop_counts().get("Global", {})
    tf32 = sum(int(n) for op, n in per_op.items() if any(key in str(op) for key in tf32_ops))
    return int(counter.get_total_flops()) - tf32, tf32, output


@dataclass(frozen=True)
class ProblemCost:
    """What one call of a problem must do: FLOPs (those PyTorch may run in TF32 apart) and bytes."""

    flops: int
    tf32_flops: int
    input_bytes: int
    output_bytes: int
    parameter_bytes: int

    @property
    def bytes_moved(self) -> int:
        return self.input_bytes + self.output_bytes + self.parameter_bytes


def tf32_ops_allowed() -> tuple[str, ...]:
    """Op name fragments PyTorch runs in TF32 for fp32 tensors under its current switches (the evaluator's defaults)."""
    import torch

    ops = []
    if torch.backends.cudnn.allow_tf32:
        ops.append("convolution")
    if torch.backends.cuda.matmul.allow_tf32:
        ops += ["mm", "matmul", "baddbmm", "addmm", "bmm", "attention"]
    return tuple(ops)


def problem_cost(reference_model: Any, inputs: list) -> ProblemCost:
    """Measure one reference call under the flop counter (the reference is trusted code)."""
    flops, tf32_flops, output = count_flops(lambda: reference_model(*inputs), tf32_ops_allowed())
    params = sum(tensor_bytes(t) for t in list(reference_model.parameters()) + list(reference_model.buffers()))
    return ProblemCost(flops, tf32_flops, tensor_bytes(inputs), tensor_bytes(output), params)
