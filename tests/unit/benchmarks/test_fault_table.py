"""benchmarks/fault_table.py: the fault cases it is asked for by name."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "fault_table.py"


def test_a_case_name_with_a_typo_is_refused_naming_the_cases(tmp_path):
    """A mistyped name was left out without a word: the tiny data was staged and an empty table printed."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cases", "kill9_rank0,kill9_rnak1", "--no-slurm",
                           "--keep", str(tmp_path / "stage")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--cases: no case kill9_rnak1; the cases: kill9_rank0, kill9_rank1," in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "stage").exists()  # nothing staged
