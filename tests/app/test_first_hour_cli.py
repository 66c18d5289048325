"""The first hour at the command line (issue 26): output that stays whole when piped or narrow, exit codes that say
a user's mistake before anything is created, empty results that say why. `krl` runs in this process."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_item7_problems_show_piped_is_the_whole_plain_source(krl):
    from core.problems import resolve_problem

    for problem in ("builtin/relu", "builtin/conv2d_bias_tanh_scale"):
        source = resolve_problem(problem).source
        done = krl("problems", "show", problem, env={"COLUMNS": "60"})
        assert done.code == 0 and done.stdout == source.rstrip("\n") + "\n", done.stdout[:400]
        assert "\x1b[" not in done.stdout


def test_item8_names_stay_whole_at_80_columns(recorded_demo, krl):
    reg, run = recorded_demo
    long_name = "baseline-qwen3-8b-kernelbench-level1-lr3e-6"
    reg.rename_run(run["id"], long_name)
    reg.add_tags(run["id"], ["baseline", "sweep-lr"])
    for columns in ("80", "60"):
        listing = krl("runs", "ls", env={"COLUMNS": columns}).stderr
        assert long_name in listing, listing
        assert all(len(line) <= int(columns) for line in listing.splitlines()), listing
        line = next(line for line in listing.splitlines() if long_name in line)
        assert "finished" in line and "/" in line  # status and step stay beside the name
    problems = krl("problems", "ls", env={"COLUMNS": "80"}).stderr
    for problem_id in ("builtin/leaky_relu", "builtin/conv2d_bias_tanh_scale", "builtin/gemm_bias_relu_scale"):
        assert problem_id in problems, problems
    assert all(len(line) <= 80 for line in problems.splitlines()), problems


def test_item11_user_mistakes_exit_2_before_anything_starts(krl, workspace, tmp_path):
    import json
    import socket

    missing = tmp_path / "nosuch.jsonl"
    done = krl("eval", "--backend", "replay", "--replay", str(missing), "--problems", "builtin/relu")
    assert done.code == 2 and "do not exist" in done.stderr, (done.code, done.stderr)
    assert json.loads(krl("runs", "ls", "--json").stdout) == []  # no failed run left behind

    token = tmp_path / "token"
    token.write_text("a-token-long-enough-for-the-service-0123456789\n")
    token.chmod(0o600)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = krl("serve", "--port", str(port), "--token-file", str(token), "--devices", "cpu")
    assert done.code == 2 and f"cannot listen on 127.0.0.1:{port}" in done.stderr, (done.code, done.stderr)
    assert "krl serve: http" not in done.stderr + done.stdout


def test_item17_empty_listings_say_why(recorded_demo, krl, workspace, tmp_path):
    reg, run = recorded_demo
    reg.add_tags(run["id"], ["baseline"])
    done = krl("runs", "ls", "--tag", "nosuch")
    assert done.code == 0 and "no run has tag 'nosuch'" in done.stderr and "baseline" in done.stderr, done.stderr
    assert "Start one" not in done.stderr
    missing = tmp_path / "missing"
    done = krl("-w", str(missing), "runs", "ls")
    assert done.code == 2 and "does not exist" in done.stderr, (done.code, done.stderr)
    assert not missing.exists()  # reading never creates a workspace
    empty = tmp_path / "empty"
    empty.mkdir()
    done = krl("-w", str(empty), "runs", "ls")
    assert done.code == 0 and "no runs yet" in done.stderr and "krl train demo" in done.stderr


def test_item17_no_evaluations_yet_says_how_to_make_one(recorded_demo, krl):
    from tests.app.recorded import RECORDED_RUN

    done = krl("evals", "ls", env={"COLUMNS": "80"})
    assert done.code == 0 and f"krl eval --run {RECORDED_RUN}" in " ".join(done.stderr.split()), done.stderr
    assert "┃" not in done.stderr  # not a bare table header
    assert krl("evals", "ls", "--json").stdout.strip() == "[]"


def test_runs_show_leads_with_the_headline_metrics_and_wraps_whole_pairs_at_80(recorded_demo, krl):
    reg, run = recorded_demo
    shown = krl("runs", "show", run["name"], env={"COLUMNS": "80"}).stderr.splitlines()
    start = next(i for i, line in enumerate(shown) if line.strip().startswith("metrics"))
    block = [shown[start]] + [line for line in shown[start + 1:] if line.startswith(" " * 13)]
    assert all(len(line) <= 80 for line in block), block
    pairs = " ".join(line.replace("metrics", "", 1) for line in block).split()
    assert pairs[0].startswith("env/all/reward/total=") and pairs[1].startswith("env/all/correct_rate="), pairs
    assert f"more: krl runs export {run['name']})" in " ".join(block), block  # the rest: where to find it
