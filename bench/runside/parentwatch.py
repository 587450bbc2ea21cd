"""A rank ends when the torchrun agent that started it is gone (kill -9 of the agent), instead of
training on as an orphan that no Ctrl-C or SIGTERM reaches any more. The local launcher's workload
dies with the launcher (PR_SET_PDEATHSIG); the agent cannot give its workers that, so each rank
watches its own parent: a new parent pid (the orphan's reaper) means the agent died.
"""

import os
import threading
import time
from typing import Callable

INTERVAL_S = 1.0  # one getppid() a second


def watch_parent(on_orphaned: Callable[[str], None]) -> None:
    """Start a daemon thread that calls on_orphaned(message) once the parent process has gone."""
    parent = os.getppid()

    def run() -> None:
        while os.getppid() == parent:
            time.sleep(INTERVAL_S)
        on_orphaned(f"the torchrun agent (pid {parent}) that started this rank is gone; "
                    f"the rank stopped instead of training on as an orphan")

    threading.Thread(target=run, name="parent-watch", daemon=True).start()
