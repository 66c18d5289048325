"""`--help` as a new user reads it (issue 26 item 20): flags show no `<bool>` type, and the defaults written in an
option's help survive typer's markup instead of leaving "cuda | triton | torch ." behind."""

from __future__ import annotations

import re

COMMANDS = (("check",), ("train",), ("eval",), ("runs", "resume"), ("runs", "fork"), ("runs", "stop"), ("logs",),
            ("doctor",), ("rag", "build"), ())


def test_help_shows_no_type_for_flags_and_keeps_written_defaults(krl):
    for command in COMMANDS:
        done = krl(*command, "--help", env={"COLUMNS": "200"})
        text = done.stdout + done.stderr
        assert done.code == 0 and "Usage:" in text, (command, text)
        assert "<bool>" not in text, (command, text)
        assert not re.search(r"\w \.\s*│", text), (command, text)  # a default swallowed as markup
    check = krl("check", "--help", env={"COLUMNS": "200"}).stdout
    assert "cuda | triton | torch (default: guessed from the file)." in check
    assert re.search(r"--no-timing\s+Check correctness only", check)
