"""A run's segment record (core/segments.py): the 13 keys every writer of `runs.segments` shares, opened, asked to
stop and closed as plain JSON-ready dicts; and the run statuses as a StrEnum equal to the strings stored."""

from __future__ import annotations

import json

from core.run_status import ACTIVE_STATUSES, TERMINAL_STATUSES, RunStatus
from core.segments import Segment, close_segment, last_segment, open_segment, request_segment_stop

KEYS = {"index", "started_at", "ended_at", "end_status", "pid", "pid_start_time", "host", "gpus", "start_step",
        "checkpoint", "stop_requested_at", "stop_grace_s", "note"}


def test_a_segment_is_opened_asked_to_stop_and_closed_once():
    identity = {"pid": 42, "pid_start_time": 1.5, "host": "h"}
    row = {"segments": open_segment({"segments": []}, identity, gpus=[1], start_step=3,
                                    checkpoint={"step": 2, "name": "c"}, now=10.0)}
    (first,) = row["segments"]
    assert set(first) == KEYS and first["index"] == 0 and first["gpus"] == [1] and first["ended_at"] is None
    row["segments"] = request_segment_stop(row, 30.0)
    asked = row["segments"][-1]["stop_requested_at"]
    assert asked is not None and request_segment_stop(row, 5.0)[-1]["stop_requested_at"] == asked  # once
    row["segments"] = close_segment(row, RunStatus.STOPPED, "SIGKILL after grace")
    closed = last_segment(row)
    assert closed["end_status"] == "stopped" and closed["note"] == "SIGKILL after grace"
    assert close_segment(row, RunStatus.CRASHED) == row["segments"]  # an ended segment is not closed again
    second = open_segment(row, identity)[-1]
    assert second["index"] == 1 and json.loads(json.dumps(second)) == Segment(**second).to_dict()


def test_run_statuses_are_the_stored_strings():
    assert [str(s) for s in RunStatus] == ["queued", "running", "stopping", "stopped", "finished", "failed",
                                           "crashed"]
    assert RunStatus.RUNNING == "running" and json.dumps(RunStatus.CRASHED) == '"crashed"'
    assert not set(ACTIVE_STATUSES) & set(TERMINAL_STATUSES)
