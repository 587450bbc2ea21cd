"""benchmarks/step_floor.py times the parts of a GPU step; without a GPU it says so and stops."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "step_floor.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer of a machine without a GPU")
def test_without_a_gpu_it_stops_with_a_clear_message():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--depth", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "step_floor needs a CUDA GPU" in proc.stderr
    assert "Traceback" not in proc.stderr
