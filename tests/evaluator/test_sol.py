"""Speed of light: device lookup, peaks per precision, SOL time and the hack floor, from tables of known values;
FLOPs and bytes counted on real reference calls."""

from __future__ import annotations

import pytest
import torch

from evaluator.judging import sol

H100 = sol.device_spec("NVIDIA H100 80GB HBM3")


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("cpu", None),
    ("Some Future GPU", None),
])
def test_device_spec(name, expected):
    spec = sol.device_spec(name)
    assert (spec.name if spec else None) == expected


@pytest.mark.parametrize("precision, tf32, tflops", [("fp32", False, 67.0), ("fp32", True, 494.7),
                                                     ("bf16", False, 989.4), ("fp16", False, 989.4)])
def test_peak_by_precision(precision, tf32, tflops):
    assert sol.peak_tflops(H100, precision, tf32) == tflops


@pytest.mark.parametrize("flops, bytes_moved, precision, expected_ms", [
    (2 * 4096**3, 3 * 4096**2 * 4, "fp32", 2 * 4096**3 / 67e12 * 1e3),  # fp32 matmul: compute-bound, 2.05 ms
    (0, 2 * 4096 * 16384 * 4, "fp32", 2 * 4096 * 16384 * 4 / 3350e9 * 1e3),  # ReLU: memory-bound, 0.16 ms
    (2 * 4096**3, 3 * 4096**2 * 2, "bf16", 2 * 4096**3 / 989.4e12 * 1e3),
])
def test_sol_time(flops, bytes_moved, precision, expected_ms):
    assert sol.sol_time_ms(flops, bytes_moved, H100, precision) == pytest.approx(expected_ms)


def test_tf32_flops_count_at_the_tf32_peak():
    assert sol.sol_time_ms(0, 0, H100, "fp32", tf32_flops=494.7e9) == pytest.approx(1.0)


@pytest.mark.parametrize("sol_ms, measured_ms, fraction", [(1.0, 2.0, 0.5), (1.0, 1.0, 1.0), (None, 1.0, None),
                                                           (1.0, 0.0, None)])
def test_sol_fraction(sol_ms, measured_ms, fraction):
    assert sol.sol_fraction(sol_ms, measured_ms) == fraction


def test_hack_floor_leaves_a_margin_and_ignores_unresolvable_floors():
    flops = 2 * 4096**3
    floor = sol.hack_floor_ms(flops, 0, H100, "fp32")
    assert floor == pytest.approx((1 - sol.SOL_MARGIN) * flops / 67e12 * 1e3)
    assert sol.hack_floor_ms(1e6, 1e3, H100, "fp32") is None  # nanoseconds: below the event clock


def test_problem_cost_of_a_real_linear_layer():
    model = torch.nn.Linear(64, 32)
    cost = sol.problem_cost(model, [torch.randn(8, 64)])
    assert cost.flops + cost.tf32_flops == 2 * 8 * 64 * 32
    assert (cost.input_bytes, cost.output_bytes) == (8 * 64 * 4, 8 * 32 * 4)
    assert cost.parameter_bytes == (64 * 32 + 32) * 4
    assert cost.bytes_moved == cost.input_bytes + cost.output_bytes + cost.parameter_bytes


def test_convolution_flops_count_as_tf32_under_torch_defaults():
    conv = torch.nn.Conv2d(3, 8, 3)
    cost = sol.problem_cost(conv, [torch.randn(1, 3, 16, 16)])
    assert torch.backends.cudnn.allow_tf32 and cost.tf32_flops > 0 and cost.flops == 0


@pytest.mark.parametrize("values, expected", [([torch.zeros(4)], 16), ([torch.zeros(2, dtype=torch.float16), 3], 4),
                                              ((torch.zeros(1), [torch.zeros(2)]), 12), ({"a": torch.zeros(3)}, 12)])
def test_tensor_bytes(values, expected):
    assert sol.tensor_bytes(values) == expected
