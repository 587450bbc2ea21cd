"""base_loss and base_eval (CORE) equal upstream nanochat 5c93a56's own scripts on one checkpoint trained here and a
generated bundle of the real format (benchmarks/compare_core_eval.py): train/val bpb, the samples, every task's
accuracy and centred accuracy, and CORE. Needs an upstream checkout (NANOCHAT_UPSTREAM_DIR) and a Python with its
dependencies (NANOCHAT_UPSTREAM_PYTHON, default /tmp/upstream-venv/bin/python); skipped, saying which, when either is
absent.
NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat python -m pytest tests/unit/nanochat/test_core_eval_upstream.py -q"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

UPSTREAM = os.environ.get("NANOCHAT_UPSTREAM_DIR")
UPSTREAM_PYTHON = os.environ.get("NANOCHAT_UPSTREAM_PYTHON", "/tmp/upstream-venv/bin/python")


@pytest.mark.slow
@pytest.mark.skipif(not UPSTREAM or not Path(UPSTREAM, "scripts", "base_eval.py").is_file(),
                    reason="no upstream nanochat checkout: set NANOCHAT_UPSTREAM_DIR to karpathy/nanochat at 5c93a56")
@pytest.mark.skipif(not Path(UPSTREAM_PYTHON).is_file(),
                    reason="no Python with upstream's dependencies: set NANOCHAT_UPSTREAM_PYTHON")
def test_same_bpb_samples_and_core_as_upstream(tmp_path):
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(tmp_path / "base"), PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "benchmarks/compare_core_eval.py", "--upstream", UPSTREAM,
                          "--upstream-python", UPSTREAM_PYTHON, "--train-steps", "20"],
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "equal: bpb within a relative 1e-6" in out.stdout and out.stdout.count("\n") > 25
