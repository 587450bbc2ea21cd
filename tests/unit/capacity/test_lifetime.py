"""The sweep's signals and its probes' lifetime (bench/capacity/lifetime.py), with real signals and processes.

    python -m pytest tests/unit/capacity/test_lifetime.py -q
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from bench.capacity import lifetime


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_in_the_block_raises_stopped_and_the_old_handler_comes_back(sig):
    before = signal.getsignal(sig)
    with pytest.raises(lifetime.Stopped) as e, lifetime.stop_on_signals():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler raises at the next bytecode
    assert e.value.signum == sig and e.value.args[0] == sig.name and isinstance(e.value, KeyboardInterrupt)
    assert signal.getsignal(sig) is before


def test_a_child_dies_with_the_process_that_started_it(tmp_path):
    """A middle process starts `sleep` with child_setup and is then SIGKILLed: the kernel ends the sleep."""
    code = ("import subprocess, sys, os; from bench.capacity import lifetime; "
            "p = subprocess.Popen(['sleep', '300'], preexec_fn=lifetime.child_setup(os.getpid())); "
            "print(p.pid, flush=True); sys.stdin.read()")
    middle = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = int(middle.stdout.readline())
    assert os.getsid(child) == child  # a session (and process group) of its own
    middle.kill()
    middle.wait()
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{child}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return  # dead, waiting for init to reap it
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the child outlived the process that started it")
