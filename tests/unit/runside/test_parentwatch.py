"""A rank ends when the torchrun agent that started it is gone (bench/runside/parentwatch.py).

    python -m pytest tests/unit/runside/test_parentwatch.py -q
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

from bench.runside.parentwatch import INTERVAL_S

# the agent: starts the rank, prints its pid, then waits to be killed
AGENT = textwrap.dedent("""
    import subprocess, sys, time
    rank = subprocess.Popen([sys.executable, "-c", *sys.argv[1:]])
    print(rank.pid, flush=True)
    time.sleep(120)
""")
RANK = textwrap.dedent("""
    import os, sys, time
    from bench.runside.parentwatch import watch_parent
    def orphaned(message):
        open(sys.argv[1], "w").write(message)
        os._exit(3)
    watch_parent(orphaned)
    open(sys.argv[2], "w").close()  # watching: the agent may go now
    time.sleep(120)  # training, as far as the watch knows
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _wait(condition, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def test_a_rank_ends_within_seconds_of_its_agent(tmp_path):
    said, watching = tmp_path / "said", tmp_path / "watching"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, RANK, str(said), str(watching)], stdout=subprocess.PIPE,
                             text=True)
    rank = int(agent.stdout.readline())
    try:
        # the agent must outlive the watch's start: killed before it, the rank's parent is already the reaper
        assert _wait(watching.exists), "the rank never started its watch"
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait()
        assert _wait(lambda: not _alive(rank), INTERVAL_S + 10), "the rank trains on as an orphan"
    finally:
        for pid in (agent.pid, rank):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        agent.wait()
    assert said.read_text().startswith(f"the torchrun agent (pid {agent.pid}) that started this rank is gone")
