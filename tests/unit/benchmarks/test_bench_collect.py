"""benchmarks/bench_collect.py: where it works."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_collect.py"


@pytest.mark.parametrize("where, says", [("missing", "no such directory"), ("a-file", "not a writable directory")])
def test_a_dir_that_cannot_hold_the_runs_is_refused_naming_the_flag(tmp_path, where, says):
    """Its --dir, said to be the work directory, is where a temporary one goes; one missing was a traceback."""
    (tmp_path / "a-file").write_text("")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--runs", "5", "--steps", "3", "--dir", str(tmp_path / where)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"--dir {tmp_path / where}: {says}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
