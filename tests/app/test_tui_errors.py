"""Errors in the TUI's background loaders reach the user (one Worker.StateChanged route, app/screens/base.py):
a registry that is not one, or that is corrupted, shows its error instead of an empty runs table."""

from __future__ import annotations

import shutil

import pytest

from tests.app.fixtures import make_app, settle


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KRL_CONFIG_DIR", str(tmp_path / "config"))


def notifications(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_a_file_that_is_not_a_registry_is_shown_as_an_error(workspace):
    (workspace / "registry.db").write_bytes(b"this is not an SQLite database at all" * 100)
    app = make_app(workspace)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert any("not a kernelrl registry" in text for text in notifications(app)), notifications(app)


def corrupt(registry_file, from_fraction: float = 0.0) -> None:
    """Overwrite the registry's pages after the first (from `from_fraction` of the file on) with garbage:
    'database disk image is malformed' on the first query that reads them."""
    data = bytearray(registry_file.read_bytes())
    page_size = int.from_bytes(data[16:18], "big") or 65536
    start = max(page_size, int(len(data) * from_fraction) // page_size * page_size)
    for offset in range(start, len(data), 97):
        data[offset] = (data[offset] + 0x5A) % 256
    registry_file.write_bytes(bytes(data))


@pytest.fixture
def corrupted_workspace(recorded_demo_source, workspace):
    from tests.app.recorded import copy_workspace

    copy_workspace(recorded_demo_source, workspace)
    corrupt(workspace / "registry.db")
    return workspace


async def test_a_corrupted_registry_is_shown_as_an_error(corrupted_workspace):
    app = make_app(corrupted_workspace)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert any("malformed" in text or "corrupt" in text for text in notifications(app)), notifications(app)


async def test_a_read_only_copy_of_a_workspace_opens_in_the_tui(recorded_demo_source, workspace, make_read_only):
    from app.widgets.run_table import RunTable
    from tests.app.recorded import RECORDED_RUN, copy_workspace

    copy_workspace(recorded_demo_source, workspace)
    make_read_only(workspace / "registry.db", workspace)
    app = make_app(workspace, reconcile=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert app.screen.query_one(RunTable).names() == [RECORDED_RUN]
        assert not [text for text in notifications(app) if "error" in text.lower()], notifications(app)


async def test_escape_sequences_in_stored_names_are_shown_defanged(registry, workspace):
    """Names are checked at creation; one written before that check (or by hand) must not reach the terminal."""
    from app.widgets.run_table import RunTable

    run = registry.create_run("plain", status="finished")
    registry.conn.execute("UPDATE runs SET name = ? WHERE id = ?", ("evil\x1b[2J", run["id"]))
    app = make_app(workspace)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        shown = app.screen.query_one(RunTable).cell_text(run["id"], "name")
        assert "\x1b" not in shown and shown.startswith("evil")
