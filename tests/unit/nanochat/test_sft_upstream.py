"""Our chat_sft trains as upstream nanochat 5c93a56's scripts/chat_sft.py does: the same losses, step by step, on
the same staged data, tokenizer and base checkpoint (benchmarks/compare_chat_sft.py). Needs an upstream checkout
(NANOCHAT_UPSTREAM_DIR) and the `datasets` package upstream loads with; skipped, saying which, when either is
absent.
NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat /tmp/upstream-venv/bin/python -m pytest tests/unit/nanochat/test_sft_upstream.py -q"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

UPSTREAM = os.environ.get("NANOCHAT_UPSTREAM_DIR")


@pytest.mark.skipif(not UPSTREAM or not Path(UPSTREAM, "scripts", "chat_sft.py").is_file(),
                    reason="no upstream nanochat checkout: set NANOCHAT_UPSTREAM_DIR to karpathy/nanochat at 5c93a56")
@pytest.mark.skipif(importlib.util.find_spec("datasets") is None,
                    reason="the `datasets` package (upstream's loader) is not installed in this Python")
def test_the_first_steps_lose_what_upstreams_lose(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "benchmarks/compare_chat_sft.py", "--steps", "8", "--base-dir",
                          str(tmp_path)], env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "all same" in out.stdout and "same  step   7:" in out.stdout and "validation at step 8" in out.stdout
    assert "same  metrics at step 8: mmlu_acc:" in out.stdout
