"""run.json's writers take turns: a slow writer keeps its update and so does the one that waited for it;
a writer stopped while it holds the lock does not hold the others, and no writer waits longer than the cap.

    python -m pytest tests/unit/contract/test_run_json_lock.py -q
"""

import fcntl
import multiprocessing
import os
import signal
import threading
import time

from bench.contract import Evidence, record_evidence
from bench.contract.files import _locked, load_manifest, write_manifest

SLOW_S = 3.0  # a holder slower than the old bound (2 s), which then let the waiter write over it


def _slow_writer(run_dir, held, stop_inside):
    with _locked(run_dir):
        manifest = load_manifest(run_dir)
        held.set()
        if stop_inside:
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(SLOW_S)
        manifest.evidence.append(Evidence(source="wrapper", kind="rank_exited", rank=1, message="slow one"))
        write_manifest(run_dir, manifest)


def _start(run_dir, stop_inside):
    ctx = multiprocessing.get_context("fork")
    held = ctx.Event()
    proc = ctx.Process(target=_slow_writer, args=(str(run_dir), held, stop_inside))
    proc.start()
    assert held.wait(30), "the writer never took the lock"
    return proc


def test_a_writer_waits_for_a_slow_one_and_both_updates_stay(tmp_path):
    proc = _start(tmp_path, stop_inside=False)
    record_evidence(tmp_path, Evidence(source="trainer", kind="error", rank=0, message="the waiter"))
    proc.join(30)
    messages = [e.message for e in load_manifest(tmp_path).evidence]
    assert sorted(messages) == ["slow one", "the waiter"]


def test_a_stopped_holder_does_not_hold_the_other_writers(tmp_path):
    proc = _start(tmp_path, stop_inside=True)
    try:
        for _ in range(100):  # until it has stopped itself
            with open(f"/proc/{proc.pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] in ("T", "t"):
                    break
            time.sleep(0.05)
        began = time.time()
        record_evidence(tmp_path, Evidence(source="trainer", kind="error", rank=0, message="not held"))
        waited = time.time() - began
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
    assert [e.message for e in load_manifest(tmp_path).evidence] == ["not held"]
    assert waited < 5, f"waited {waited:.1f} s behind a stopped writer (the bound is 10 s)"


def test_a_write_from_a_signal_handler_inside_a_write_does_not_wait_for_itself(tmp_path):
    """SIGTERM while this very thread rewrites run.json: the handler's own record goes on at once."""
    previous = signal.getsignal(signal.SIGUSR1)
    waited = []

    def handler(signum, frame):
        began = time.time()
        record_evidence(tmp_path, Evidence(source="trainer", kind="cancelled", rank=0, message="from the handler"))
        waited.append(time.time() - began)

    signal.signal(signal.SIGUSR1, handler)
    try:
        with _locked(tmp_path):
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.1)  # the handler runs here, inside the lock
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert waited and waited[0] < 5, f"the handler waited {waited} s for its own thread's lock (the bound is 10 s)"
    assert [e.message for e in load_manifest(tmp_path).evidence] == ["from the handler"]


def _queued_writer(run_dir, rank, go):
    go.wait()
    with _locked(run_dir):  # a rewrite slow on a loaded shared file system, well within the bound alone
        manifest = load_manifest(run_dir)
        time.sleep(0.2)
        manifest.evidence.append(Evidence(source="trainer", kind="cancelled", rank=rank, message=f"rank {rank}"))
        write_manifest(run_dir, manifest)


def test_writers_queued_longer_than_the_bound_all_keep_their_updates(tmp_path, monkeypatch):
    """Every rank of a large job records its SIGTERM at once: the queue outlasts the bound though each rewrite is
    quick, and a writer that went ahead unlocked at the bound wrote over the ones before it."""
    monkeypatch.setattr("bench.contract.files.LOCK_WAIT_S", 0.5)
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=_queued_writer, args=(str(tmp_path), rank, go)) for rank in range(8)]
    for proc in procs:
        proc.start()
    go.set()
    for proc in procs:
        proc.join(60)
    assert sorted(e.rank for e in load_manifest(tmp_path).evidence) == list(range(8))


def test_writers_behind_a_stuck_holder_never_wait_longer_than_the_cap(tmp_path, monkeypatch):
    """A holder that makes no progress where /proc/locks cannot show it stopped (another node): each waiter that
    gives up rewrites run.json unlocked, which the later ones took for the holder's progress and waited the bound
    again, so the ranks of a large job arriving one after another waited about LOCK_WAIT_S more for each before it."""
    monkeypatch.setattr("bench.contract.files.LOCK_WAIT_S", 0.5)
    monkeypatch.setattr("bench.contract.files.LOCK_WAIT_MAX_S", 1.5)
    holder = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # held by this running process: waited for, as a holder on another node
    waits = {}

    def waiter(rank):
        began = time.time()
        record_evidence(tmp_path, Evidence(source="trainer", kind="cancelled", rank=rank, message=f"rank {rank}"))
        waits[rank] = time.time() - began

    threads = [threading.Thread(target=waiter, args=(rank,)) for rank in range(20)]
    try:
        for thread in threads:
            thread.start()
            time.sleep(0.15)
        for thread in threads:
            thread.join(60)
    finally:
        os.close(holder)
    assert len(waits) == 20 and max(waits.values()) < 2.0, f"waited up to {max(waits.values()):.1f} s (cap 1.5 s)"
