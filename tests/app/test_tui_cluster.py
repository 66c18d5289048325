"""The Cluster tab over runs the real training loop made: on a local Ray (eval.cluster=ray://local, CPU actors) and
through a real `krl serve` (eval.endpoint, uvicorn on loopback); stale and final snapshots; absent for a local run."""

from __future__ import annotations

import time

import pytest

from app.widgets.cluster_panel import ClusterPanel
from core.cluster_snapshot import SNAPSHOT_FILE, read_snapshot, write_snapshot
from core.config import load_config
from core.train import execute
from tests.app.fixtures import make_app, settle
from tests.app.recorded import RECORDED_RUN

# One problem, two samples, one turn: two evaluations, enough for every figure to move.
SMALL_DEMO = ["max_steps=1", "problems=builtin/relu", "dataset.batch_size=1", "dataset.group_size=2", "max_turns=1",
              "eval.devices=cpu", "eval.cpu_workers=1", "eval.run_timeout_s=600"]


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


def _train(registry, name: str, overrides: list[str]) -> list[dict]:
    """A real one-step replay run; returns the eval results its turns stored."""
    config = load_config("demo", SMALL_DEMO + overrides)
    row = registry.create_run(name, kind="replay", config=config.model_dump(mode="json"), backend="replay")
    assert execute(registry, row["id"], install_signals=False) == 0
    turns = [t for traj in registry.trajectories(row["id"]) for t in registry.trajectory_turns(traj["id"])]
    return [t["eval_result"] for t in turns if t["eval_result"]]


async def _cluster_tab(workspace, name: str, now: float, size=(180, 40)):
    """Open the run's detail on its Cluster tab (key 9); returns the panel's rows and summary text."""
    app = make_app(workspace, open_run=name, clock=lambda: now)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("9")
        await settle(pilot)
        panel = app.screen.query_one(ClusterPanel)
        assert app.screen.query_one("TabbedContent").active == "cluster"
        return panel.shown_rows(), str(panel.query_one("#cluster-summary").render())


async def test_a_run_through_the_service_shows_its_workers(workspace, registry, monkeypatch, tmp_path):
    pytest.importorskip("uvicorn")
    from tests.evaluator.pool_support import make_evaluator
    from tests.evaluator.service_support import TOKEN, serving

    backing = make_evaluator(str(tmp_path / "cache"))
    try:
        with serving(backing) as (url, _app):
            monkeypatch.setenv("KRL_EVAL_TOKEN", TOKEN)
            results = _train(registry, "via-service", [f"eval.endpoint={url}"])
    finally:
        backing.close()
    assert results
    snapshot = read_snapshot(registry.run_dir("via-service"))
    assert snapshot["final"] and snapshot["kind"] == "http" and snapshot["address"] == url
    assert snapshot["totals"]["done"] >= len(results)  # the service's pool counted every evaluation of the run

    rows, summary = await _cluster_tab(workspace, "via-service", snapshot["taken_at"] + 5)
    # The service's own pool: one CPU device; per-device throughput is not counted by a local pool, so "–".
    assert rows == [("local", "cpu", "–", "–", "ready", "0", "–", "–", "–", "–", "–", "")]
    assert url in summary and "1 node(s) · 1 device(s), 1 ready" in summary
    assert f"done {snapshot['totals']['done']}" in summary and "final snapshot" in summary
    assert "STALE" not in summary

    # Live: the tab re-reads the file each refresh, so a newer snapshot (here one whose stats call failed) shows.
    app = make_app(workspace, open_run="via-service", clock=lambda: snapshot["taken_at"] + 5, live=True,
                   refresh_s=0.2)
    async with app.run_test(size=(180, 40)) as pilot:
        await settle(pilot)
        await pilot.press("9")
        await settle(pilot)

        def shown() -> str:
            return str(app.screen.query_one("#cluster-summary").render())

        assert "final snapshot" in shown()
        write_snapshot(registry.run_dir("via-service"), {**snapshot, "final": False, "error": "ConnectError: refused"})
        for _ in range(50):
            if "stats failed" in shown():
                break
            await pilot.pause(0.1)
        assert "the evaluator's stats failed: ConnectError: refused" in shown() and "final snapshot" not in shown()


@pytest.mark.slow
async def test_a_run_on_a_ray_cluster_shows_its_nodes_and_a_stale_snapshot_says_so(workspace, registry, monkeypatch):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("another test's Ray instance is running in this process")
    # ray://local starts Ray with ray.init(address=None), which joins the Ray cluster last started on this machine
    # (another test's, on a shared machine) instead of starting one: "local" makes Ray start its own.
    monkeypatch.setenv("RAY_ADDRESS", "local")
    results = _train(registry, "on-ray", ["eval.cluster=ray://local"])
    run_dir = registry.run_dir("on-ray")
    snapshot = read_snapshot(run_dir)
    assert snapshot["final"] and snapshot["kind"] == "ray" and snapshot["error"] == ""
    actors = [row for row in snapshot["rows"] if row["role"] == "eval"]
    ready = [row for row in actors if row["state"] == "ready"]
    assert ready and all(row["gpu_util_percent"] is None for row in ready)  # CPU actors: no GPU to read
    # Exactly once: the evaluation actors' done counts add up to the evaluations the run stored.
    assert sum(row["done"] for row in actors) == len(results) > 0
    compile_rows = [row for row in snapshot["rows"] if row["role"] == "compile"]
    assert snapshot["totals"]["evals_per_min"] > 0 and snapshot["totals"]["failures"] == 0
    nodes = {r["worker_id"].split(":")[0] for r in results}
    assert {row["node"] for row in ready} == nodes  # the node the results say they ran on

    rows, summary = await _cluster_tab(workspace, "on-ray", snapshot["taken_at"] + 5)
    by_device = {(cells[0], cells[1]): cells for cells in rows}
    for row in ready:
        cells = by_device[(row["node"], row["device"])]
        assert cells[4] == "ready" and cells[6] == str(row["done"]) and cells[7] == "0"
        assert cells[8] == f"{row['evals_per_min']:.1f}" and cells[3] == "–"
    for row in compile_rows:  # the cluster's compile actors, where it has them (evaluator/scale/cluster_compile.py)
        assert by_device[(row["node"], row["device"])][1].startswith("compile")
        assert snapshot["totals"]["compile_queue_depth"] is not None and "compile actor(s)" in summary
    assert "ray://local" in summary and f"done {len(results)}" in summary and "final snapshot" in summary

    # What a killed job leaves: its last periodic snapshot, never marked final, growing old.
    write_snapshot(run_dir, {**snapshot, "final": False})
    _, fresh = await _cluster_tab(workspace, "on-ray", snapshot["taken_at"] + 5)
    _, old = await _cluster_tab(workspace, "on-ray", snapshot["taken_at"] + 600)
    assert "STALE" not in fresh and "STALE: last snapshot" in old and "10m00s ago" in old


async def test_a_local_run_has_no_cluster_tab(recorded_demo, workspace):
    _reg, run = recorded_demo
    assert not (workspace / RECORDED_RUN / SNAPSHOT_FILE).exists()  # the local pool records no snapshot
    app = make_app(workspace, open_run=RECORDED_RUN, clock=time.time)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        assert app.screen.run["name"] == RECORDED_RUN
        await pilot.press("9")
        await settle(pilot)
        assert not app.screen.query(ClusterPanel) and not app.screen.query("#cluster")
        assert app.screen.query_one("TabbedContent").active == "curves"
