"""`krl rag build | query | stats` end to end: from a JSONL corpus and from a real registry (harvest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from app.cli import app
from core.errors import KrlError
from core.registry import TrajectoryRecord, TurnRecord

runner = CliRunner()


def krl(*args: str):
    # In-process, so the session's embedding model is loaded once for all commands.
    return runner.invoke(app, list(args), catch_exceptions=True)


def test_build_query_stats_from_jsonl(workspace, data_dir, embedder):
    built = krl("rag", "build", "--source", str(data_dir / "pairs.jsonl"), "--json")
    assert built.exit_code == 0, built.output
    report = json.loads(built.stdout)
    assert report["added"] == 13 and report["duplicates"] == 1
    assert report["filtered_out"] == {"not_verified_correct": 1}
    assert report["index"] == str(workspace / "rag-index")

    problem = str(data_dir / "problems" / "online_softmax.py")
    queried = krl("rag", "query", problem, "-k", "2", "--backend", "triton", "--json")
    assert queried.exit_code == 0, queried.output
    answer = json.loads(queried.stdout)
    assert answer["problem"] == "problems/online_softmax"
    assert [e["name"] for e in answer["examples"]][0] == "RowSoftmax" and len(answer["examples"]) == 2
    assert answer["examples"][0]["language"] == "python"

    prompt = krl("rag", "query", problem, "-k", "1", "--backend", "cuda", "--prompt")
    assert "```cpp\n" in prompt.stdout and "SoftmaxCUDA" in prompt.stdout

    stats = krl("rag", "stats", "--json")
    assert json.loads(stats.stdout)["records"] == 13

    again = krl("rag", "build", "--source", str(data_dir / "pairs.jsonl"))
    assert isinstance(again.exception, KrlError) and "--append" in str(again.exception)


def test_build_with_decontamination_reports_reasons(tmp_path, data_dir, embedder):
    out = tmp_path / "index"
    built = krl("rag", "build", "--source", str(data_dir), "--decontaminate", str(data_dir / "problems"),
                "--out", str(out), "--backend", "triton", "--json")
    assert built.exit_code == 0, built.output
    decon = json.loads(built.stdout)["decontamination"]
    assert decon["problems"] == 3
    assert decon["dropped"]["code_match"] >= 1 and decon["dropped"]["similarity"] >= 1
    names = {e["name"] for e in decon["examples"]}
    assert {"ReLU", "GELU"} <= names


def test_stats_in_a_real_process(built_index):
    # stats loads no model, so a subprocess stays cheap.
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    done = subprocess.run([sys.executable, "-m", "app.cli", "rag", "stats", "--index", str(built_index), "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["by_backend"]["cuda"] == 6


def test_errors_are_user_errors(tmp_path, data_dir):
    missing = krl("rag", "stats", "--index", str(tmp_path / "none"))
    assert isinstance(missing.exception, KrlError) and "krl rag build" in str(missing.exception)
    bad = krl("rag", "build", "--source", str(tmp_path / "nowhere.jsonl"), "--out", str(tmp_path / "i"))
    assert isinstance(bad.exception, KrlError)


def _turn(turn: int, verdict: str, kernel: str, speedup=None) -> TurnRecord:
    return TurnRecord(turn=turn, prompt=f"prompt {turn}", response=f"```python\n{kernel}\n```", kernel=kernel,
                      verdict=verdict, eval_result={"verdict": verdict, "speedup": speedup})


SOFTMAX_KERNEL = ("import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\n"
                  "def harvested_softmax(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    row = tl.program_id(0)\n"
                  "    cols = tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-1e30)\n"
                  "    e = tl.exp(x - tl.max(x, axis=0))\n    tl.store(y_ptr + row * n + cols, e / tl.sum(e, axis=0), "
                  "mask=cols < n)\n")


def test_harvest_correct_kernels_from_the_registry(registry, tmp_path, monkeypatch, embedder):
    monkeypatch.delenv("KERNELBENCH_ROOT", raising=False)
    run = registry.create_run("harvest-me", config={"kernel": {"backend": "triton"}}, status="running")
    trajectories = [
        TrajectoryRecord(group=0, sample=0, problem_id="builtin/softmax", solved=True, solved_at_turn=1,
                         best_speedup=2.5, turns=[_turn(0, "compile_error", "broken"),
                                                  _turn(1, "correct", SOFTMAX_KERNEL, speedup=2.5)]),
        TrajectoryRecord(group=0, sample=1, problem_id="builtin/relu", solved=False,
                         turns=[_turn(0, "wrong_output", "import triton\n# wrong relu\n" * 4)]),
        TrajectoryRecord(group=1, sample=0, problem_id="builtin/relu", solved=True, hack=True,
                         turns=[_turn(0, "correct", "import torch\n# calls torch.relu: a hack\n" * 4, speedup=9.0)]),
        TrajectoryRecord(group=1, sample=1, problem_id="kernelbench/level1/1_Square_matrix_multiplication_",
                         solved=True, solved_at_turn=0,
                         turns=[_turn(0, "correct", "import triton\n# matmul kernel\n" * 4, speedup=1.2)]),
    ]
    registry.write_step(run["id"], 3, {"reward/mean": 0.5}, trajectories)

    out = tmp_path / "harvest-index"
    built = krl("rag", "build", "--source", "runs", "--out", str(out), "--json")
    assert built.exit_code == 0, built.output
    report = json.loads(built.stdout)
    assert report["added"] == 1 and report["by_source"] == {"runs": 1}
    assert report["harvest_skipped"] == {"problem_unavailable": 1}

    stats = json.loads(krl("rag", "stats", "--index", str(out), "--json").stdout)
    assert stats["by_source"] == {"runs": 1} and stats["max_speedup"] == pytest.approx(2.5)

    # The kernel is shown for a related problem, never for the one it solved.
    related = json.loads(krl("rag", "query", "builtin/log_softmax", "--index", str(out), "--json").stdout)
    assert [e["id"] for e in related["examples"]] == ["runs/harvest-me/s3/g0.0/t1"]
    assert related["examples"][0]["speedup"] == pytest.approx(2.5)
    assert "harvested_softmax" in related["examples"][0]["kernel_code"]
    own = json.loads(krl("rag", "query", "builtin/softmax", "--index", str(out), "--json").stdout)
    assert own["examples"] == []

    # Harvesting again into the same index adds nothing new (incremental, deduplicated).
    again = json.loads(krl("rag", "build", "--source", "runs", "--out", str(out), "--append", "--json").stdout)
    assert again["added"] == 0 and again["duplicates"] == 1
