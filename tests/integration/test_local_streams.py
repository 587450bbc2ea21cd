"""`nanochat-bench train`'s output keeps its streams apart: the ranks' step lines on stdout, a failure's
cause (the rank's `error (...)` line, torchrun's line) on stderr, as the README says; train.log has both.

    python -m pytest tests/integration/test_local_streams.py -q
"""

import os
import subprocess
import sys

import pytest

from bench.contract import read_run_json

TINY = ["--depth=1", "--max_seq_len=32", "--device_batch_size=2", "--total_batch_size=128",
        "--eval_every=-1", "--sample_every=-1", "--model_tag=test_local_streams"]
DIVERGING = ["--matrix_lr=1e4", "--embedding_lr=1e4", "--unembedding_lr=1e4", "--num_iterations=200"]


def train(base_dir, run_dir, *train_args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base_dir), OMP_NUM_THREADS="1")
    for key in ("NANOCHAT_VAL_FILES_K", "NANOCHAT_BENCH_RUN_DIR"):
        env.pop(key, None)
    return subprocess.run([sys.executable, "-m", "bench.cli", "train", "--nproc", "2", "--run-dir", str(run_dir),
                           "--", *train_args], env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_a_failing_two_rank_run_names_its_cause_on_stderr_only(tiny_base_dir, tmp_path):
    run_dir = tmp_path / "run"
    proc = train(tiny_base_dir, run_dir, *TINY, *DIVERGING)
    assert proc.returncode != 0
    assert read_run_json(run_dir)["status"] == "diverged"
    assert "error (diverged)" in proc.stderr and "torchrun: rank" in proc.stderr
    assert "error (" not in proc.stdout and "torchrun:" not in proc.stdout, proc.stdout[-2000:]
    assert "step 00001/" in proc.stdout and "step 00001/" not in proc.stderr
    log = (run_dir / "train.log").read_text()
    assert "step 00001/" in log and "error (diverged)" in log
