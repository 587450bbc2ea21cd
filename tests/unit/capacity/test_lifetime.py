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


def test_a_probe_that_cannot_start_is_a_failure_not_a_cancel(tmp_path):
    """Regression: a probe whose command could not be started was recorded as stopped by a signal named after
    the exception, so `cancelled`, as if the sweep had been interrupted."""
    from bench.capacity.probe import _Reaper
    from bench.contract import read_run_json

    with pytest.raises(FileNotFoundError), open(tmp_path / "log", "ab") as log, _Reaper(tmp_path) as reaper:
        reaper.start(["/nonexistent/probe"], dict(os.environ), log)
    run = read_run_json(tmp_path)
    assert run["status"] == "failed" and "could not start: FileNotFoundError" in run["message"]


def test_the_stop_signals_wait_while_a_probe_starts_and_the_probe_gets_them(tmp_path):
    """A signal cannot land inside Popen (the probe would start unseen by the sweep), and the started probe
    does not inherit the sweep's block: SIGTERM ends it."""
    from bench.capacity.probe import _Reaper

    with open(tmp_path / "log", "ab") as log, _Reaper(tmp_path) as reaper:
        proc = reaper.start([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), log)
        assert not set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & set(lifetime.SIGNALS)  # unblocked again
        blocked = open(f"/proc/{proc.pid}/status").read().split("SigBlk:")[1].split()[0]
        assert all(not int(blocked, 16) & (1 << (s - 1)) for s in lifetime.SIGNALS)
        proc.terminate()
        assert proc.wait(timeout=10) == -signal.SIGTERM
