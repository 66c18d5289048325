"""`krl rag build` over an index that exists (issue 26 item 19): refused before any source is read unless
--append/--replace, and --replace with nothing to put in keeps the index. The index is built from the recorded demo
run by the real harvesting and embedding code."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

pytest.importorskip("faiss")


def _krl(monkeypatch, capsys, *args):
    from tests.app.fixtures import run_krl

    code, out, err = run_krl(capsys, monkeypatch, args)
    return code, out + err


def test_item19_an_existing_index_is_refused_early_and_kept_by_an_empty_replace(recorded_demo, workspace, tmp_path,
                                                                                monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "index"
    code, text = _krl(monkeypatch, capsys, "rag", "build", "--source", "runs", "--out", str(out), "--json")
    assert code == 0, text
    stats_before = _krl(monkeypatch, capsys, "rag", "stats", "--index", str(out), "--json")
    code, text = _krl(monkeypatch, capsys, "rag", "build", "--source", "runs", "--out", str(out))
    assert code == 2 and "already exists" in text and "harvested" not in text, text  # before reading any source
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, text = _krl(monkeypatch, capsys, "rag", "build", "--source", str(empty), "--out", str(out), "--replace")
    assert code == 2 and "0 records" in text and "is kept" in text, text
    assert _krl(monkeypatch, capsys, "rag", "stats", "--index", str(out), "--json") == stats_before


def test_item19_the_default_source_needs_nothing_more_and_hub_sources_say_what_to_install(
        recorded_demo, workspace, tmp_path, monkeypatch, capsys):
    # The default is this workspace's own correct kernels: it works offline with what the rag extra installs.
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "index"
    code, text = _krl(monkeypatch, capsys, "rag", "build", "--out", str(out), "--json")
    assert code == 0, text
    report, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])
    assert set(report["by_source"]) == {"runs"} and report["stats"]["records"] > 0, report
    kept = _krl(monkeypatch, capsys, "rag", "stats", "--index", str(out), "--json")
    # --replace whose records are all filtered away keeps the index too (not only an empty source).
    code, text = _krl(monkeypatch, capsys, "rag", "build", "--out", str(out), "--replace", "--backend", "nosuch")
    assert code == 2 and "is kept" in text, text
    assert _krl(monkeypatch, capsys, "rag", "stats", "--index", str(out), "--json") == kept
    # A hub source without `datasets`: exit 2 before anything is read or made, naming the command.
    if importlib.util.find_spec("datasets") is None:
        hub_out = tmp_path / "hub-index"
        for spec in ("kernelbook", "hub:someone/pairs"):
            code, text = _krl(monkeypatch, capsys, "rag", "build", "--source", spec, "--out", str(hub_out))
            assert code == 2 and f"{sys.executable} -m pip install datasets" in text.replace("\n", ""), text
            assert not hub_out.exists()


def test_item19_nothing_to_index_is_an_error_and_makes_no_index(workspace, tmp_path, monkeypatch, capsys):
    from core.registry import Registry

    Registry.for_workspace(workspace).close()  # a workspace with no runs
    out = tmp_path / "index"
    code, text = _krl(monkeypatch, capsys, "rag", "build", "--out", str(out))
    assert code == 2 and "nothing to index" in text and "krl demo" in text, text
    assert not out.exists()
