"""mid_train's first 20 steps equal upstream nanochat 5c93a56's own scripts/mid_train.py on the same staged data,
tokenizer and base checkpoint (benchmarks/compare_mid_train.py). Needs an upstream checkout
(NANOCHAT_UPSTREAM_DIR) and a Python with `datasets` to run it in (UPSTREAM_PYTHON, default
/tmp/upstream-venv/bin/python); skipped, saying which, when either is absent.

    NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat python -m pytest tests/unit/nanochat/test_mid_upstream.py -q
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

UPSTREAM = os.environ.get("NANOCHAT_UPSTREAM_DIR")
PYTHON = os.environ.get("UPSTREAM_PYTHON", "/tmp/upstream-venv/bin/python")


def _has_datasets(python: str) -> bool:
    if not Path(python).is_file():
        return False
    return subprocess.run([python, "-c", "import datasets"], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not UPSTREAM or not Path(UPSTREAM, "scripts", "mid_train.py").is_file(),
                    reason="no upstream nanochat checkout: set NANOCHAT_UPSTREAM_DIR to karpathy/nanochat at 5c93a56")
@pytest.mark.skipif(not _has_datasets(PYTHON), reason=f"no Python with `datasets` at {PYTHON} (set UPSTREAM_PYTHON)")
def test_first_twenty_steps_match_upstream(tmp_path):
    env = dict(os.environ, UPSTREAM_PYTHON=PYTHON, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "benchmarks/compare_mid_train.py", "--steps", "20", "--base-dir",
                          str(tmp_path / "base")], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "all same" in out.stdout and "step  20  loss here" in out.stdout
