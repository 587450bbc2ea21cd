"""Chat evaluation equals upstream nanochat 5c93a56's on one checkpoint trained here and the same staged data: the
categorical accuracies and predicted letters, the generated token ids greedy and sampled
(benchmarks/compare_chat_eval.py). Needs an upstream checkout (NANOCHAT_UPSTREAM_DIR) and upstream's dependencies
in this Python; skipped, saying which, when either is absent.
NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat /tmp/upstream-venv/bin/python -m pytest tests/unit/nanochat/test_chat_eval_upstream.py -q"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

UPSTREAM = os.environ.get("NANOCHAT_UPSTREAM_DIR")


@pytest.mark.slow
@pytest.mark.skipif(not UPSTREAM or not Path(UPSTREAM, "nanochat", "engine.py").is_file(),
                    reason="no upstream nanochat checkout: set NANOCHAT_UPSTREAM_DIR to karpathy/nanochat at 5c93a56")
@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("datasets", "filelock", "rustbpe")),
                    reason="upstream's dependencies (datasets, filelock, rustbpe) are not installed in this Python")
def test_same_scores_and_generated_ids_as_upstream(tmp_path):
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1", PYTHONPATH=os.getcwd(),
               OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "benchmarks/compare_chat_eval.py", "--base-dir", str(tmp_path / "base"),
                          "-x", "6", "-m", "16"], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("same  ") == 6 and "all same" in out.stdout
