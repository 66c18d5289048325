"""The first hour in the TUI (issue 26), over the workspace the real training loop and evaluator recorded
(tests/app/recorded.py): exports, numbering, widths, dialogs and empty states a new user meets."""

from __future__ import annotations

import csv

import pytest

from tests.app.fixtures import make_app, settle
from tests.app.recorded import RECORDED_RUN


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


async def test_item4_a_single_runs_curve_export_names_the_run(recorded_demo, workspace):
    app = make_app(workspace, open_run=RECORDED_RUN)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        written = app.screen.last_export
    series = next(path for path in written if path.name.endswith("-series.csv"))
    rows = list(csv.DictReader(series.open()))
    assert rows and {row["run"] for row in rows} == {RECORDED_RUN}
    assert len({row["metric"] for row in rows}) > 1
