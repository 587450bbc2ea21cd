"""metrics.jsonl on a full disk: a short write is cut back to the last whole line, never taking another process's
line with it (rank 0's events and another rank's error event share the file).

    python -m pytest tests/unit/contract/test_event_writer.py -q
"""

import errno
import json
import os

import pytest

from bench.contract import METRICS_JSONL, EventWriter

THEIRS = b'{"event": "error", "t": 2.0, "kind": "failed", "message": "boom", "rank": 1}\n'


def _short_write(monkeypatch, writer, before=b"", after=b""):
    """The writer's next write appends `before` as another process, writes half its line (a full disk), then
    `after` is appended by the other process."""
    real = os.write

    def write(fd, data):
        if fd != writer._fd:
            return real(fd, data)
        monkeypatch.setattr(os, "write", real)
        other = os.open(writer.path, os.O_WRONLY | os.O_APPEND)
        try:
            real(other, before)
            written = real(fd, data[:len(data) // 2])
            real(other, after)
        finally:
            os.close(other)
        return written

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_short_write_never_cuts_a_line_another_process_appended(tmp_path, monkeypatch, when):
    writer = EventWriter(tmp_path)
    writer.emit("start", t=1.0)
    _short_write(monkeypatch, writer, **{when: THEIRS})
    with pytest.raises(OSError) as failed:
        writer.emit("imports_done", t=3.0)
    assert failed.value.errno == errno.ENOSPC
    text = (tmp_path / METRICS_JSONL).read_bytes()
    assert text.endswith(THEIRS) and json.loads(text.splitlines()[0])["event"] == "start"
    if when == "before":  # the half line is the file's last: cut back, the file parses
        assert [json.loads(line)["event"] for line in text.splitlines()] == ["start", "error"]


def test_a_short_write_alone_is_cut_back_to_the_last_whole_line(tmp_path, monkeypatch):
    writer = EventWriter(tmp_path)
    writer.emit("start", t=1.0)
    whole = (tmp_path / METRICS_JSONL).read_bytes()
    _short_write(monkeypatch, writer)
    with pytest.raises(OSError):
        writer.emit("imports_done", t=3.0)
    assert (tmp_path / METRICS_JSONL).read_bytes() == whole


def test_a_half_line_left_by_another_writer_does_not_take_the_next_event_with_it(tmp_path):
    """A rank's short write that could not be cut back (another rank appended first, or it died): the next event
    starts its own line, so a reader loses only the half line, with a note, not the event joined to it."""
    from bench.analysis.rundir import read_events

    EventWriter(tmp_path).emit("start", t=1.0)
    with open(tmp_path / METRICS_JSONL, "ab") as f:
        f.write(THEIRS[:len(THEIRS) // 2])
    writer = EventWriter(tmp_path)
    writer.emit("imports_done", t=3.0)
    writer.emit("first_step", t=4.0)
    notes = []
    events = read_events(tmp_path / METRICS_JSONL, notes)
    assert [e["event"] for e in events] == ["start", "imports_done", "first_step"]
    assert notes == ["metrics.jsonl: 1 malformed line(s) left out"]
