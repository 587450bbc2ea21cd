"""A capacity sweep's probes live no longer than the sweep: whatever way the sweep ends.

- Ctrl-C, SIGTERM and SIGHUP to the sweep become `Stopped` (a KeyboardInterrupt, so the command line prints
  "interrupted"), raised in the main thread: every `finally` runs, so the running probe's tree is killed
  and the summary of the finished probes is written (Python's default SIGTERM would end the sweep at once,
  leaving the probe to run on with parent 1, holding its memory or the GPU);
- the probe starts in a session and process group of its own (a Ctrl-C at the terminal reaches only the
  sweep, which then ends the probe in order), and asks the kernel for SIGTERM when the sweep dies
  (PR_SET_PDEATHSIG), so even a SIGKILL of the sweep takes the probe with it.
"""

import ctypes
import os
import signal
from contextlib import contextmanager, suppress

PR_SET_PDEATHSIG = 1
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """The sweep was told to stop by a signal (its number in `signum`)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum, _frame):
    raise Stopped(signum)


@contextmanager
def stop_on_signals():
    """Within the block, SIGINT/SIGTERM/SIGHUP raise Stopped; the previous handlers come back after it."""
    try:
        previous = {s: signal.signal(s, _raise) for s in SIGNALS}
    except ValueError:  # not the main thread: the caller's handlers stay as they are
        yield
        return
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def child_setup(parent_pid: int):
    """A preexec_fn for a probe: its own session, SIGTERM when `parent_pid` (the sweep) dies, and the
    kernel's first choice when the host runs out of memory (its pinned buffers may not count as its own
    resident memory, so that no other process is killed in its place)."""

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # the sweep blocks them while it starts a probe
        os.setsid()
        with suppress(OSError, AttributeError):  # not Linux: only the sweep's own clean-up ends the probe
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the sweep died before the request above took hold
            os._exit(1)
        with suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")

    return setup
