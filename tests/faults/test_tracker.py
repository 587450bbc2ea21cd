"""The fault harness finds a run's processes by what they are now, not what they were when first seen.

torchrun forks each worker and the worker then execs the trainer: a scan between the fork and the exec
sees the agent's command line and environment under the worker's pid and start time. A tracker that kept
that first sight never found rank 1 (a CI run lost 60 s and then failed on it).
"""

import os
import subprocess
import sys
import time
import uuid

from harness import TAG_ENV, Tracker

# The parent forks; the child waits for a go-file, then execs with RANK=1 and a command line of its own
# (spelt in two parts so that the parent's, which holds this source, does not match).
FORK_THEN_EXEC = """
import os, sys, time
go = sys.argv[1]
pid = os.fork()
if pid == 0:
    while not os.path.exists(go):
        time.sleep(0.02)
    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "the-" + "worker"],
              {**os.environ, "RANK": "1"})
time.sleep(60)
"""


def test_a_worker_first_seen_before_its_exec_is_found_after_it(tmp_path):
    tag = uuid.uuid4().hex
    go = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-c", FORK_THEN_EXEC, str(go)], env={**os.environ, TAG_ENV: tag})
    tracker = Tracker(tag)
    try:
        deadline = time.time() + 30
        while len(tracker.alive()) < 2:  # the parent and its not yet exec'd child, both seen
            assert time.time() < deadline, "the forked child never appeared"
            tracker.scan()
            time.sleep(0.05)
        assert not any("the-worker" in m.cmdline for m in tracker.alive())
        go.touch()
        worker = tracker.find(lambda m: "the-worker" in m.cmdline and m.env.get("RANK") == "1", timeout=30)
        assert worker.pid != proc.pid
    finally:
        tracker.kill_all()
        proc.wait(timeout=30)
    # SIGKILL is delivered when the process next runs: the worker may outlive kill_all by a moment
    assert tracker.wait_gone(time.time() + 30) is not None, [m.cmdline for m in tracker.alive()]
