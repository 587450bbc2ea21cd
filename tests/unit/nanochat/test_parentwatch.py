"""A rank ends when the torchrun agent that started it is gone (bench/nanochat/parentwatch.py).

    python -m pytest tests/unit/nanochat/test_parentwatch.py -q
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

# the agent: starts the rank, prints its pid, then waits to be killed
AGENT = textwrap.dedent("""
    import subprocess, sys, time
    rank = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
    print(rank.pid, flush=True)
    time.sleep(120)
""")
RANK = textwrap.dedent("""
    import os, sys, time
    from bench.nanochat.parentwatch import watch_parent
    def orphaned(message):
        open(sys.argv[1], "w").write(message)
        os._exit(3)
    watch_parent(orphaned)
    time.sleep(120)  # training, as far as the watch knows
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_rank_ends_within_seconds_of_its_agent(tmp_path):
    said = tmp_path / "said"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, RANK, str(said)], stdout=subprocess.PIPE, text=True)
    rank = int(agent.stdout.readline())
    time.sleep(1.0)
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait()
    deadline = time.time() + 10
    while _alive(rank) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(rank), "the rank trains on as an orphan"
    assert said.read_text().startswith(f"the torchrun agent (pid {agent.pid}) that started this rank is gone")
