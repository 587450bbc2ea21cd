"""`collect` over run directories that are not what they say: a FIFO named metrics.jsonl, symbolic links
out of the root, round in it, or as the root itself. It reads only regular files, follows no link, never
blocks, and says in the row what it left unread.

    python -m pytest tests/unit/analysis/test_collect_hostile.py -q
"""

import os
import threading

import pandas as pd
import pytest

from bench.analysis.collect import collect
from bench.analysis.rundir import read_run_dir
from bench.errors import AnalysisError


class FifoWatch:
    """A FIFO whose write end waits, in a thread, for a reader: `opened` tells whether anyone opened it
    for reading. Nothing is timed; the thread is released at the end by our own non-blocking open."""

    def __init__(self, path):
        os.mkfifo(path)
        self.path, self.opened, self.done = path, False, False
        self.thread = threading.Thread(target=self._wait, daemon=True)
        self.thread.start()

    def _wait(self):
        with open(self.path, "wb") as f:  # blocks until a reader opens the FIFO
            if not self.done:
                self.opened = True
                f.write(b'{"event": "start", "t": 1}\n')  # let a blocked reader go on

    def release(self):
        self.done = True
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self.thread.join(timeout=30)
        os.close(fd)


def test_a_fifo_named_metrics_jsonl_is_never_opened(make_run):
    d = make_run("fifo")
    (d / "metrics.jsonl").unlink()
    fifo = FifoWatch(d / "metrics.jsonl")
    try:
        table = collect([d.parent]).table
    finally:
        fifo.release()
    assert not fifo.opened
    row = table.iloc[0]
    assert row["run_id"] == "fifo" and row["status"] == "ok"
    assert "metrics.jsonl is a FIFO, not a regular file (not read)" in row["notes"]


def test_a_fifo_named_like_a_log_is_never_opened(make_run, tmp_path):
    d = make_run("quiet", steps=0)
    (d / "metrics.jsonl").write_text("")
    watches = [FifoWatch(d / "train.log"), FifoWatch(d.parent / "upstream.log")]
    try:
        collect([d.parent])
    finally:
        for w in watches:
            w.release()
    assert not any(w.opened for w in watches)


def test_run_json_linked_out_of_the_root_is_not_followed(make_run, tmp_path):
    secret = tmp_path / "outside.json"
    secret.write_text('{"schema_version": 1, "run_id": "leaked", "status": "ok", "message": "outside"}')
    d = make_run("linked")
    (d / "run.json").unlink()
    (d / "run.json").symlink_to(secret)
    row = read_run_dir(d)
    assert row["run_id"] == "linked" and row["message"] != "outside"
    assert "run.json is a symbolic link (not followed)" in (row["skip_reason"] or "")


def test_links_round_in_or_out_of_the_root_are_not_walked(make_run, tmp_path):
    root = tmp_path / "runs"
    make_run("real", root=root / "sweep")
    (root / "sweep" / "loop").symlink_to(root)  # round in
    elsewhere = tmp_path / "elsewhere"
    make_run("outside", root=elsewhere)
    (root / "out").symlink_to(elsewhere)  # out of the root
    (root / "sweep" / "linked-run").symlink_to(elsewhere / "outside")
    table = collect([root]).table
    assert list(table["run_id"]) == ["real"]


def test_a_symlink_loop_as_the_root_is_one_clear_error(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(AnalysisError, match=r"loop: .*symbolic link"):
        collect([tmp_path / "loop"])
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(AnalysisError, match=r"symbolic link"):
        collect([tmp_path / "a"])


def test_counts_past_64_bits_are_unknown_not_a_crash(make_run):
    # JSON's integers have no bound: a damaged run.json's nodes or an event's num_params ended collect in an
    # OverflowError (no float holds 10**400) or a TypeError (no int64 holds 2**63)
    d = make_run("huge", nodes=2 ** 63, repeat=10 ** 400)
    lines = (d / "metrics.jsonl").read_text().splitlines()
    lines = [line.replace('"num_params": ', '"num_params": 1' + "0" * 400 + ', "x": ') for line in lines]
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    row = collect([d.parent]).table.iloc[0]
    assert row["run_id"] == "huge" and row["status"] == "ok" and pd.isna(row["skip_reason"])
    assert row[["nodes", "repeat", "num_params"]].isna().all()
    assert "out-of-range repeat, nodes treated as unknown" in row["notes"]
