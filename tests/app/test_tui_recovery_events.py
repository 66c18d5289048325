"""The run detail's Checkpoints tab lists what the training loop recorded about failures: retries, checkpoints
kept or restored, resumes (core/step_recovery.py writes them)."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from core.registry import Registry
from tests.app.fixtures import make_app, settle


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


async def test_checkpoints_tab_shows_retry_and_checkpoint_events(workspace):
    with Registry.for_workspace(workspace) as reg:
        run = reg.create_run("flaky", config={"max_steps": 4}, backend="tinker", status="failed")
        reg.add_checkpoint(run["id"], 1, "step-000001", "tinker://r/weights/step-000001",
                           "tinker://r/sampler_weights/step-000001")
        reg.add_event(run["id"], "retry", "step 2: try 1/2 failed (KrlError: Tinker failed); retrying in 10 s")
        reg.add_event(run["id"], "checkpoint", "gave up; resume point: final checkpoint at step 1")
        reg.add_event(run["id"], "warning", "not a recovery event")
    app = make_app(workspace, open_run="flaky")
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("5")
        await settle(pilot)
        table = app.screen.query_one("#events-table", DataTable)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        kinds = [row[1] for row in rows]
        assert kinds[0] == "checkpoint" and "retry" in kinds and "warning" not in kinds  # newest first
        assert any("resume point" in row[2] for row in rows)
        assert app.screen.query_one("#checkpoints-table", DataTable).row_count == 1
