"""The suite itself: stopped by SIGTERM, it tears its fixtures down (the test Slurm clusters among them); tests/run's
two passes, their statuses and its signals.

    python -m pytest tests/unit/test_suite_stops.py -q
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


# tests/run's passes, with a stand-in `python` that logs what it is asked and stands for pytest (its exit status
# per pass from CODES, "sleep" to wait for a signal) and a `dpkg-query` that finds every package installed, so that
# nothing is installed: what is tested is the script's choice of passes, their statuses and its signals.
STAND_IN_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$LOG"
[[ $1 == -m && $2 == pytest ]] || exit 0
codes=($CODES)
code=${codes[$(grep -c '^-m pytest' "$LOG") - 1]}
if [[ $code == sleep ]]; then
    trap 'echo "pytest got SIGTERM" >> "$LOG"; kill $!; exit 2' TERM
    echo "pytest started" >> "$LOG"
    sleep 60 >/dev/null 2>&1 & wait
fi
exit "$code"
"""


def _run_script(tmp_path: Path, codes: str, *args: str) -> subprocess.Popen:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").write_text(STAND_IN_PYTHON)
    (bin_dir / "dpkg-query").write_text("#!/bin/sh\necho 'install ok installed'\n")
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"), "CODES": codes,
           "NANOCHAT_BENCH_NNTILE_PYTHON": "stand-in"}
    return subprocess.Popen([str(REPO / "tests" / "run"), *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=_as_typed_at_a_terminal)


def _as_typed_at_a_terminal() -> None:
    """The script's signal dispositions as a command typed at a terminal has them: a suite started in the background
    (nohup, a non-interactive shell) passes SIGINT and SIGHUP on ignored, and bash cannot trap what it was started
    ignoring."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _pytest_calls(tmp_path: Path) -> list[str]:
    return [line for line in (tmp_path / "log").read_text().splitlines() if line.startswith("-m pytest")]


@pytest.mark.parametrize("codes, status", [("0 0", 0), ("1 0", 1), ("0 2", 2), ("5 0", 0), ("5 5", 5)])
def test_the_suite_runs_the_unit_tests_on_every_core_then_the_rest(codes, status, tmp_path):
    proc = _run_script(tmp_path, codes, "-q", "-k", "tokenizer")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == status, out
    assert _pytest_calls(tmp_path) == ["-m pytest -n auto -q -k tokenizer tests/unit",
                                       "-m pytest -q -k tokenizer tests --ignore=tests/unit"]
    assert ("exited" in out) == (status not in (0, 5)), out  # a failed pass is named; 5 alone: nothing selected


def test_a_test_path_is_one_pytest_over_it_as_given(tmp_path):
    proc = _run_script(tmp_path, "0", "tests/unit/test_suite_stops.py::test_x", "-q")  # from the repository's root
    proc.communicate(timeout=60)
    assert proc.returncode == 0 and _pytest_calls(tmp_path) == ["-m pytest tests/unit/test_suite_stops.py::test_x -q"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_script_ends_the_running_pass_and_starts_no_other(sig, tmp_path):
    """tests/run stopped in its first pass: the pass gets a SIGTERM at once (its fixtures' teardown), and the second
    pass never starts (bash alone would wait for the pass to end before acting on the signal, then start the next)."""
    proc = _run_script(tmp_path, "sleep 0")
    deadline = time.time() + 30
    while "pytest started" not in ((tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""):
        assert time.time() < deadline and proc.poll() is None, "the first pass never started"
        time.sleep(0.05)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "the tests after the unit tests were not run" in out, out
    assert "pytest got SIGTERM" in (tmp_path / "log").read_text()
    assert len(_pytest_calls(tmp_path)) == 1
