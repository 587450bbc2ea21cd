"""Heartbeats: which rank a timed-out collective waited for (bench/runside/heartbeat.py).

    python -m pytest tests/unit/runside/test_heartbeat.py -q
"""

import json
import time

from bench.runside.heartbeat import DIR, INTERVAL_S, STOPPED_AFTER_S, Heartbeat, beats, waited_for
from tests.support.synthetic import write_heartbeat as write_beat


def test_a_rank_whose_beat_stopped_is_named(tmp_path):
    now = 1000.0
    write_beat(tmp_path, 0, now - 1, 7)
    write_beat(tmp_path, 1, now - STOPPED_AFTER_S - 5, 7, host="nid2")  # SIGSTOP, a frozen node
    write_beat(tmp_path, 2, now - 2, 7)
    who, stopped = waited_for(str(tmp_path), now)
    assert stopped and who.startswith("rank 1 on nid2 (pid 101) stopped: no heartbeat for 12 s")
    assert "at step 7" in who


def test_else_the_rank_furthest_behind_is_named(tmp_path):
    # every process beats (the waiting ones too); rank 2 is still on step 6, in a slow read
    now = 1000.0
    write_beat(tmp_path, 0, now - 1, 7, event_t=now - 30)
    write_beat(tmp_path, 1, now - 2, 7, event_t=now - 30)
    write_beat(tmp_path, 2, now - 1, 6, event_t=now - 31)
    who, stopped = waited_for(str(tmp_path), now)
    assert not stopped and who == ("rank 2 on nid1 (pid 102) is behind the others: its last event was `step` "
                                   "of step 6, 30 s before its last heartbeat")


def test_a_node_whose_clock_is_behind_is_not_taken_for_a_stopped_one(tmp_path):
    """Regression: nid2's clock runs 60 s behind the reader's, so its two live ranks' fresh beats read 60 s old, and
    rank 3 was named as stopped while rank 4, still on step 6, was the one the others waited for. A beat's age is
    now read on its own node's clock, and steps need none."""
    now = 1000.0
    write_beat(tmp_path, 0, now - 1, 7)
    write_beat(tmp_path, 1, now - 1, 7)
    write_beat(tmp_path, 2, now - 61, 7, host="nid2")
    write_beat(tmp_path, 3, now - 62, 7, host="nid2")
    write_beat(tmp_path, 4, now - 2, 6, host="nid3", event_t=now - 40)
    who, stopped = waited_for(str(tmp_path), now)
    assert not stopped and who.startswith("rank 4 on nid3 (pid 104) is behind the others")


def test_a_stopped_rank_is_named_by_its_own_nodes_clock(tmp_path):
    """nid2's clock is 60 s behind: rank 3 stopped 20 s before its node-mate's last beat, whatever the reader's
    clock says."""
    now = 1000.0
    write_beat(tmp_path, 0, now - 1, 7)
    write_beat(tmp_path, 2, now - 61, 7, host="nid2")
    write_beat(tmp_path, 3, now - 81, 7, host="nid2")
    who, stopped = waited_for(str(tmp_path), now)
    assert stopped and who == "rank 3 on nid2 (pid 103) stopped: no heartbeat for 20 s, last event `step` at step 7"
    here = tmp_path / "here"
    write_beat(here, 0, now - STOPPED_AFTER_S - 3, 7, host="here")  # alone on the reader's node: its clock is `now`
    write_beat(here, 1, now - 1, 7)
    who, stopped = waited_for(str(here), now, host="here")
    assert stopped and who.startswith("rank 0 on here (pid 100) stopped: no heartbeat for 10 s,")


def test_ranks_at_one_step_are_not_told_apart_by_their_nodes_clocks(tmp_path):
    """Regression: every rank beating at step 7, the one whose event read earliest across two nodes' clocks (a few
    milliseconds apart, less than the clocks may disagree) was named as the one the others waited for. Now the
    beats name nobody; a node silent by the reader's clock is named, and the message says how it was judged."""
    now = 1000.0
    write_beat(tmp_path, 0, now - 1, 7, event_t=now - 30.000)
    write_beat(tmp_path, 1, now - 2, 7, host="nid2", event_t=now - 30.002)
    assert waited_for(str(tmp_path), now) is None
    write_beat(tmp_path, 1, now - 20, 7, host="nid2")
    who, stopped = waited_for(str(tmp_path), now)
    assert stopped and who.startswith("rank 1 on nid2 (pid 101) stopped: no heartbeat for 20 s by this node's clock "
                                      "against nid2's (the two clocks are not known to agree)")


def test_no_beats_no_answer_and_bad_files_are_skipped(tmp_path):
    assert waited_for(str(tmp_path)) is None and waited_for(None) is None
    (tmp_path / DIR).mkdir()
    (tmp_path / DIR / "rank0.json").write_text("{half")
    (tmp_path / DIR / "rank1.json").write_text('{"rank": 1}')  # no time
    assert beats(str(tmp_path)) == []


def test_a_heartbeat_is_written_by_its_thread_with_the_last_event(tmp_path):
    hb = Heartbeat(str(tmp_path), rank=3, world_size=4)
    hb.beat("step", 12)
    deadline = time.time() + 10
    while not (tmp_path / DIR / "rank3.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    beat = json.loads((tmp_path / DIR / "rank3.json").read_text())
    assert beat["rank"] == 3 and beat["event"] == "step" and beat["step"] == 12
    assert time.time() - beat["t"] < INTERVAL_S + 5
    single = Heartbeat(str(tmp_path / "one"), rank=0, world_size=1)  # nobody to wait for: nothing written
    single.beat("step", 1)
    assert single.thread is None and not (tmp_path / "one").exists()


def test_a_beat_that_cannot_be_written_is_skipped_and_the_next_one_written(tmp_path, monkeypatch):
    """A write that fails once (rank 0 clearing an earlier run's beats as this rank renames its own) must not
    end the thread: its beat would stop at that event and rank 0 would end a healthy run as hung."""
    from bench.runside import heartbeat

    real, calls = heartbeat._write, []

    def fails_first(path, beat):
        calls.append(beat["event"])
        if len(calls) == 1:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        real(path, beat)

    monkeypatch.setattr(heartbeat, "_write", fails_first)
    monkeypatch.setattr(heartbeat, "INTERVAL_S", 0.05)
    hb = Heartbeat(str(tmp_path), rank=1, world_size=2)
    hb.beat("step", 4)
    deadline = time.time() + 10
    while not (tmp_path / DIR / "rank1.json").exists() and time.time() < deadline:
        time.sleep(0.02)
    written = (tmp_path / DIR / "rank1.json").exists()  # by the thread: stop()'s last beat would write it too
    hb.stop()
    assert written and calls[:2] == ["step", "step"]


def test_a_silent_rank_is_named_by_its_watcher(tmp_path):
    from bench.runside.heartbeat import silent_rank

    now = 1000.0
    write_beat(tmp_path, 0, now - 1, 7)
    write_beat(tmp_path, 1, now - 31, 7, host="nid2")
    assert silent_rank(str(tmp_path), {1}, 30.0, now).startswith(
        "rank 1 on nid2 (pid 101) stopped: no heartbeat for 31 s (--heartbeat_timeout_s=30)")
    assert silent_rank(str(tmp_path), {1}, 40.0, now) is None
    assert silent_rank(str(tmp_path), {0}, 30.0, now) is None


def test_a_finished_rank_is_not_a_silent_one(tmp_path):
    from bench.runside.heartbeat import silent_rank

    beat = Heartbeat(str(tmp_path), 1, 2)
    beat.beat("step", 3)
    time.sleep(0.2)
    beat.stop()
    assert json.loads((tmp_path / DIR / "rank1.json").read_text())["done"] is True
    assert silent_rank(str(tmp_path), {1}, 10.0, time.time() + 60) is None


def test_beats_of_an_earlier_run_are_not_this_runs(tmp_path, monkeypatch):
    """A re-run into a former 4-rank directory: rank 3's old beat must not be named."""
    monkeypatch.setenv("NANOCHAT_BENCH_T0", "2000.5")
    write_beat(tmp_path, 3, 1500.0, 12)  # the earlier run's (no run token, or another one)
    beat = Heartbeat(str(tmp_path), 1, 2)
    beat.beat("step", 2)
    deadline = time.time() + 10
    while not (tmp_path / DIR / "rank1.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert [b["rank"] for b in beats(str(tmp_path))] == [1]
    assert "rank 3" not in (waited_for(str(tmp_path), time.time() + 60) or ("",))[0]


def test_under_slurm_the_launch_time_in_run_json_tells_this_attempts_beats(tmp_path, monkeypatch):
    """A batch job exports no NANOCHAT_BENCH_T0: `runjson start` writes the attempt's launch time into run.json
    right before srun, and a resubmitted attempt's stale rank 3 must not be named."""
    from bench.contract import update_run_json

    monkeypatch.delenv("NANOCHAT_BENCH_T0", raising=False)
    update_run_json(tmp_path, launch={"kind": "slurm", "t0": 1000.25})
    write_beat(tmp_path, 3, 1500.0, 12)  # the first attempt's (another token)
    beat = Heartbeat(str(tmp_path), 1, 2)
    assert beat.state["run"] == "1000.250000"
    beat.beat("step", 2)
    deadline = time.time() + 10
    while not (tmp_path / DIR / "rank1.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert [b["rank"] for b in beats(str(tmp_path))] == [1]


def test_a_rank_on_a_node_whose_clock_is_behind_is_not_taken_for_a_silent_one(tmp_path):
    """Rank 1's node runs 60 s behind rank 0's: its fresh beats read 60 s old there, and the watcher ended a healthy
    run as `hung`. A beat that keeps changing is alive whatever its clock says; one that stops is still named."""
    from bench.runside.heartbeat import silent_rank

    seen: dict = {}
    skew = 60.0
    for now in (1000.0, 1005.0, 1010.0, 1015.0):
        write_beat(tmp_path, 1, now - skew, 7, host="nid2")  # written just now, by its own clock
        assert silent_rank(str(tmp_path), {1}, 30.0, now, seen) is None
    assert silent_rank(str(tmp_path), {1}, 30.0, 1040.0, seen) is None  # 25 s without a new beat
    assert silent_rank(str(tmp_path), {1}, 30.0, 1046.0, seen).startswith(
        "rank 1 on nid2 (pid 101) stopped: no heartbeat for 31 s (--heartbeat_timeout_s=30)")


def test_a_watcher_that_was_itself_stopped_does_not_take_its_peers_for_silent(tmp_path, monkeypatch):
    """The whole job stopped a while and continued (Slurm suspending and resuming it, gang scheduling): the watcher
    woke first and read rank 1's beat from before the pause, as old as the pause by both clocks, and ended a healthy
    run as hung. A watcher that was not running itself has not seen its peers meanwhile: it watches them afresh."""
    from bench.runside import heartbeat

    monkeypatch.delenv("NANOCHAT_BENCH_T0", raising=False)
    monkeypatch.setattr(heartbeat, "INTERVAL_S", 0.05)
    real, results = heartbeat.silent_rank, []

    def silent_rank(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(heartbeat, "silent_rank", silent_rank)

    def wait_for(n):
        deadline = time.time() + 30
        while len(results) < n and time.time() < deadline:
            time.sleep(0.01)
        return len(results) >= n

    write_beat(tmp_path, 1, time.time(), 7)
    watcher = Heartbeat(str(tmp_path), 0, 2, on_silent=lambda verdict: None)
    watcher.silent_after_s = 0.5
    watcher.beat("step", 7)
    assert wait_for(1)
    with watcher._writing:  # the watcher's thread stops at its next beat, as rank 1 does (it beats no more)
        time.sleep(1.0)  # the pause: longer than --heartbeat_timeout_s
        paused = len(results)
    assert wait_for(paused + 1)  # the first look after the pause, before rank 1 could beat again
    watcher.stop()
    assert results[paused] is None
