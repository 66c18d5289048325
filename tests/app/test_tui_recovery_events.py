"""The run detail's Checkpoints tab lists what the training loop recorded about failures: retries, checkpoints
kept or restored, resumes. The run is the real loop's (tests/app/loop_workspace.py): core/step_recovery.py wrote its
events while the Tinker SDK autospecs failed its update twice, and procman resumed it."""

from __future__ import annotations

import pytest

pytest.importorskip("tinker")  # the run is made against its SDK's autospecs

from app.screens.run_detail import RECOVERY_EVENT_KINDS  # noqa: E402
from tests.app.fixtures import make_app, open_registry, settle  # noqa: E402


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


async def test_the_checkpoints_tab_lists_what_step_recovery_recorded(loop_runs):
    from textual.widgets import DataTable

    workspace, ids = loop_runs
    with open_registry(workspace) as reg:
        recorded = [e for e in reg.events(ids["flaky"], limit=100_000) if e["kind"] in RECOVERY_EVENT_KINDS]
        checkpoints = reg.checkpoints(ids["flaky"])
    app = make_app(workspace, open_run="flaky")
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("5")
        await settle(pilot)
        table = app.screen.query_one("#events-table", DataTable)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        checkpoint_rows = app.screen.query_one("#checkpoints-table", DataTable).row_count
    kinds = [str(row[1]) for row in rows]
    messages = [str(row[2]) for row in rows]
    assert set(kinds) <= set(RECOVERY_EVENT_KINDS) and "warning" not in kinds
    assert len(rows) == len(recorded) and kinds == [e["kind"] for e in reversed(recorded)]  # newest first
    for wanted in ("try 1/2 failed", "weights restored from step-000001-rolling", "gave up",
                   "resuming from checkpoint step-000001"):
        assert any(wanted in m for m in messages), (wanted, messages)
    assert messages[0].startswith("finished") and messages[-1].startswith("created")
    assert checkpoint_rows == len(checkpoints) > 1
