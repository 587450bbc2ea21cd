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


def test_the_fused_kernels_tolerance_is_relative_to_compiles_own_error():
    """Measured on an H200 (results/h200-d20/fused/step_floor-fused.txt): output 0.0156 both, gradient
    0.0368 fused against 0.0424 compiled: within. A kernel twice as far off on either is not."""
    sys.path.insert(0, str(SCRIPT.parent))
    import step_floor

    assert step_floor.fused_within_tolerance((0.0156, 0.0368), (0.0156, 0.0424))
    assert not step_floor.fused_within_tolerance((0.0312, 0.0368), (0.0156, 0.0424))
    assert not step_floor.fused_within_tolerance((0.0156, 0.0848), (0.0156, 0.0424))
