"""Shared pieces of the pool tests: a small reference problem, candidate sources, and an Evaluator factory.
The stand-in worker (tests/evaluator/standin_worker.py) is importable by workers through PYTHONPATH."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from evaluator.api import EvalRequest, Evaluator

ROOT = str(Path(__file__).resolve().parents[2])

# The pool tests' ReLU problem, sized by N; the slot benchmarks size it too (tests/bench/slot_bench.py).
RELU_REFERENCE = '''
import torch
import torch.nn as nn

N = {n}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''
REFERENCE = RELU_REFERENCE.format(n=256)


def candidate(forward_body: str, prelude: str = "") -> str:
    """A ModelNew whose forward runs `forward_body` (indented for you)."""
    body = "\n".join("        " + line for line in forward_body.strip().splitlines())
    return f'''
import torch
import torch.nn as nn
{prelude}

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
{body}
'''


GOOD = candidate("return x.clamp_min(0)")
WRONG = candidate("return x.abs()")


def request(source: str, **kwargs) -> EvalRequest:
    kwargs.setdefault("problem_id", "test/relu")
    kwargs.setdefault("correctness_trials", 2)
    kwargs.setdefault("timing_trials", 3)
    kwargs.setdefault("warmup_trials", 1)
    kwargs.setdefault("run_timeout_s", 20.0)
    return EvalRequest(reference_source=REFERENCE, candidate_source=source, **kwargs)


@contextlib.contextmanager
def worker_pythonpath():
    """Workers import the stand-in from the repository root; PYTHONPATH is one of the variables they keep."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = ROOT + (os.pathsep + old if old else "")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def make_evaluator(cache_dir: str, **kwargs) -> Evaluator:
    kwargs.setdefault("devices", "cpu")
    kwargs.setdefault("cpu_workers", 1)
    kwargs.setdefault("compile_workers", 0)
    with worker_pythonpath():
        return Evaluator(cache_dir=cache_dir, **kwargs)


def module_evaluator(**kwargs):
    """A module-scoped `evaluator` fixture over make_evaluator(**kwargs): one pool for every test of the module."""
    import pytest

    @pytest.fixture(scope="module")
    def evaluator(tmp_path_factory):
        ev = make_evaluator(str(tmp_path_factory.mktemp("cache")), **kwargs)
        yield ev
        ev.close()

    return evaluator


def alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def two_node_ray_cluster(head_cpus: int = 1, head_gpus: int = 0):
    """A real Ray cluster on this machine: a head and a second node of 1 CPU and no GPU, as separate raylet processes,
    with this process connected as its driver; yields (cluster, second node)."""
    import ray
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "num_gpus": head_gpus,
                                                          "include_dashboard": False})
    second = nodes.add_node(num_cpus=1)
    # Ray's workers import what the driver pickled by reference (a test's own actor class) through the folder the
    # driver was in at ray.init: the repository, whatever folder an earlier test left this process in.
    with contextlib.chdir(ROOT):
        ray.init(address=nodes.address, log_to_driver=False)
    nodes.wait_for_nodes()
    try:
        yield nodes, second
    finally:
        ray.shutdown()
        nodes.shutdown()
