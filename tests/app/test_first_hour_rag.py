"""`krl rag build` over an index that exists (issue 26 item 19): refused before any source is read unless
--append/--replace, and --replace with nothing to put in keeps the index. The index is built from the recorded demo
run by the real harvesting and embedding code."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("faiss")


def _krl(monkeypatch, capsys, *args):
    from app.cli import main

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["krl", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
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
