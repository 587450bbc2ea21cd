"""The chat tasks, mixtures and rendering equal upstream nanochat 5c93a56's on the same staged files
(benchmarks/compare_chat_data.py). Needs an upstream checkout (NANOCHAT_UPSTREAM_DIR) and the `datasets`
package upstream loads with; skipped, saying which, when either is absent.
NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat python -m pytest tests/unit/nanochat/test_chat_upstream.py -q"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

UPSTREAM = os.environ.get("NANOCHAT_UPSTREAM_DIR")


@pytest.mark.skipif(not UPSTREAM or not Path(UPSTREAM, "tasks", "spellingbee.py").is_file(),
                    reason="no upstream nanochat checkout: set NANOCHAT_UPSTREAM_DIR to karpathy/nanochat at 5c93a56")
@pytest.mark.skipif(importlib.util.find_spec("datasets") is None,
                    reason="the `datasets` package (upstream's loader) is not installed in this Python")
def test_same_rows_shuffles_and_renders_as_upstream(tmp_path):
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(tmp_path), HF_HOME=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1",
               PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "benchmarks/compare_chat_data.py", "--rows", "100"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "all same" in out.stdout and "mixture mid_train" in out.stdout
