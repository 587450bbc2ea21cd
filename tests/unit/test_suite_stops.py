"""The suite itself: stopped by SIGTERM, it tears its fixtures down (the test Slurm clusters among them).

    python -m pytest tests/unit/test_suite_stops.py -q
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_sigterm_ends_the_suite_through_its_fixtures_teardown(tmp_path):
    """Regression: a SIGTERM killed pytest outright, leaving what session fixtures had started (slurmctld, slurmd,
    munged and their jobs) running; it now ends the suite as Ctrl-C does, fixtures torn down."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_configure  # noqa: F401\n")
    (tmp_path / "test_long.py").write_text(
        "import pathlib, time, pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def cluster():\n"
        "    pathlib.Path('started').write_text('')\n"
        "    yield\n"
        "    pathlib.Path('torn_down').write_text('')\n"
        "def test_long(cluster):\n"
        "    time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_long.py"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while not (tmp_path / "started").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert (tmp_path / "torn_down").exists(), out
    assert proc.returncode == 2 and "stopped by SIGTERM" in out, out
