"""A memory strategy must not change the training: the same 2-rank CPU run (gloo) under zero2 and under
FSDP2 with activation checkpointing gives the same loss at every step. Gradient clipping is off: zero2
clips each rank's local gradient (upstream's choice), FSDP the averaged one, so with it on they differ.

    python -m pytest tests/integration/test_train_strategies.py -q
"""

import json
import os

import pytest

from bench.launch.local import run_local
from bench.contract import TRAIN_LOG
from bench.contract import METRICS_JSONL, read_run_json

B, T, W, STEPS = 2, 64, 2, 4


def losses(tiny_base_dir, run_dir, strategy):
    args = ["--depth=2", f"--max_seq_len={T}", f"--device_batch_size={B}", f"--total_batch_size={B * T * W}",
            f"--num_iterations={STEPS}", "--eval_every=-1", "--sample_every=-1", "--save_every=0", "--grad_clip=0",
            f"--strategy={strategy}"]
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(tiny_base_dir), OMP_NUM_THREADS="1")
    env.pop("NANOCHAT_VAL_FILES_K", None)
    rc = run_local(args, nproc=W, run_dir=run_dir, env=env)
    assert rc == 0, (run_dir / TRAIN_LOG).read_text()[-3000:]
    assert read_run_json(run_dir)["config"]["strategy"] == strategy
    events = [json.loads(line) for line in (run_dir / METRICS_JSONL).read_text().splitlines()]
    return [e["loss"] for e in events if e["event"] == "step"]


@pytest.mark.slow
def test_fsdp_with_checkpointing_trains_like_zero2(tiny_base_dir, tmp_path):
    zero2 = losses(tiny_base_dir, tmp_path / "zero2", "zero2")
    fsdp = losses(tiny_base_dir, tmp_path / "fsdp-ac", "fsdp+ac")
    assert len(zero2) == len(fsdp) == STEPS
    assert zero2[-1] < zero2[0] - 0.1  # it trains
    assert fsdp == pytest.approx(zero2, abs=1e-4), f"zero2 {zero2} vs fsdp+ac {fsdp}"
