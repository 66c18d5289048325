"""The 48-kernel batch benchmark's plumbing, on a CPU machine (tests/bench/bench_batch.py runs only on GPUs): its batch
is what it says, it refuses CUDA work without a GPU in one clear line, and its scaling arithmetic is right."""

from __future__ import annotations

from tests.bench import batch_kernels, bench_batch


def test_the_cuda_batch_has_only_distinct_candidates_and_says_what_it_lacks(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELBENCH_ROOT", str(tmp_path))  # no checkout here: the KernelBench pairs are left out
    items, notes = batch_kernels.cuda_batch("48")
    figures = batch_kernels.describe(items)
    assert figures["by_origin"] == {"builtin": 29, "builtin-broken": 5}
    assert figures["distinct_sources"] == len(items)
    assert notes and "KernelBench" in notes[0]
    every, _ = batch_kernels.cuda_batch("all")
    assert batch_kernels.describe(every)["distinct_sources"] == len(every) == 46
    assert all(item.sizes for item in items), "built-in problems run at their GPU sizes"


def test_cuda_work_without_a_gpu_is_refused_in_one_line(capsys):
    assert bench_batch.main(["--kinds", "cuda,triton", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "Traceback" not in err


def test_scaling_is_the_rate_on_n_over_n_times_the_rate_on_one():
    rows = [{"mode": "ray", "kind": "cuda", "pass": "cold", "gpus": 1, "evals_per_min": 10.0},
            {"mode": "ray", "kind": "cuda", "pass": "warm", "gpus": 1, "evals_per_min": 100.0},
            {"mode": "ray", "kind": "cuda", "pass": "warm", "gpus": 4, "evals_per_min": 360.0},
            {"mode": "local", "kind": "cuda", "pass": "warm", "gpus": 2, "evals_per_min": 1.0}]
    assert bench_batch.scaling(rows) == [{"scaling": "cuda", "gpus": 4, "evals_per_min": 360.0,
                                          "one_gpu_evals_per_min": 100.0, "efficiency": 0.9}]


def test_a_pass_cut_short_by_the_budget_gives_no_scaling_figure():
    rows = [{"mode": "ray", "kind": "cuda", "pass": "warm", "gpus": 1, "evals_per_min": 14.1, "n_done": 24,
             "items": 24, "copies": 1},
            {"mode": "ray", "kind": "cuda", "pass": "warm", "gpus": 4, "evals_per_min": 29.0, "n_done": 23,
             "items": 24, "copies": 4}]
    assert bench_batch.scaling(rows) == []
