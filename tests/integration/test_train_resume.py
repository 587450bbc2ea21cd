"""--resume_from_step: a run stopped at a checkpoint and resumed trains exactly as one that never stopped.

Real training on CPU: 2 ranks (torchrun, gloo), so the sharded optimizers' state is saved and restored
per rank; the .bin loader, whose resume is exact (the parquet loader's skips ahead, as upstream's does).

    python -m pytest tests/integration/test_train_resume.py -q
"""

import json
import os
import re
import shutil

import numpy as np
import pytest
import torch

from bench.launch.local import run_local
from bench.nanochat.checkpoint import load_model_state, save_checkpoint
from bench.contract import METRICS_JSONL, read_run_json

B, T, W, STEPS, SAVE = 2, 32, 2, 8, 4
VOCAB = 512  # tests/conftest.py's tiny tokenizer


def train(tiny_base_dir, run_dir, bin_dir, tag, *extra):
    args = ["--depth=2", f"--max_seq_len={T}", f"--device_batch_size={B}", f"--total_batch_size={2 * B * T * W}",
            f"--num_iterations={STEPS}", "--eval_every=-1", "--sample_every=-1", f"--data_bin_dir={bin_dir}",
            f"--model_tag={tag}", *extra]
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(tiny_base_dir), OMP_NUM_THREADS="1")
    rc = run_local(args, nproc=W, run_dir=run_dir, env=env)
    assert rc == 0, (run_dir / "train.log").read_text()[-3000:]
    return [json.loads(line) for line in (run_dir / METRICS_JSONL).read_text().splitlines()]


@pytest.mark.slow
def test_resumed_run_matches_the_uninterrupted_one(tiny_base_dir, tmp_path):
    rng = np.random.default_rng(0)
    rng.integers(0, VOCAB, 40 * (B * T + 1), dtype=np.uint16).tofile(tmp_path / "train.bin")
    rng.integers(0, VOCAB, 4 * (B * T + 1), dtype=np.uint16).tofile(tmp_path / "val.bin")
    checkpoints = tiny_base_dir / "base_checkpoints"
    whole = train(tiny_base_dir, tmp_path / "whole", tmp_path, "resume_whole", f"--save_every={SAVE}")
    # the resumed run starts from a copy of the step-4 checkpoint, under its own tag
    (checkpoints / "resume_part").mkdir()
    for f in (checkpoints / "resume_whole").glob(f"*_{SAVE:06d}*"):
        shutil.copy(f, checkpoints / "resume_part")
    part = train(tiny_base_dir, tmp_path / "part", tmp_path, "resume_part", f"--resume_from_step={SAVE}",
                 f"--save_every={SAVE}")

    steps_whole = {e["step"]: e for e in whole if e["event"] == "step"}
    steps_part = [e for e in part if e["event"] == "step"]
    assert [e["step"] for e in steps_part] == list(range(SAVE, STEPS))
    for e in steps_part:  # loss (the EMA continues), grad norm and LR schedule as if never stopped
        ref = steps_whole[e["step"]]
        assert e["loss"] == pytest.approx(ref["loss"], rel=1e-5), e["step"]
        assert e["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-4) and e["lrm"] == ref["lrm"]
    final_whole, _ = load_model_state(checkpoints / "resume_whole", STEPS)
    final_part, meta = load_model_state(checkpoints / "resume_part", STEPS)
    for name, value in final_whole.items():
        assert torch.allclose(final_part[name], value, rtol=1e-4, atol=1e-6), name
    assert meta["world_size"] == W and meta["dataloader_state_dict"]["window"] % W == 0
    assert not (checkpoints / "resume_part" / f"model_{SAVE:06d}.pt").stat().st_mtime > \
        (checkpoints / "resume_part" / f"model_{STEPS:06d}.pt").stat().st_mtime  # step 4 not rewritten
    assert read_run_json(tmp_path / "part")["config"]["resume_from_step"] == SAVE
    assert [e["event"] for e in part].count("first_step") == 1


@pytest.mark.slow
@pytest.mark.parametrize("saved, expected", [
    (None, "no checkpoint of step 3 in .*resume_bad_.*saved steps there: none"),
    ({"n_layer": 3, "n_embd": 192},
     "checkpoint of step 3 in .* is of another model: n_layer 3 \\(now 2\\), n_embd 192 \\(now 128\\)"),
])
def test_resume_from_a_missing_or_foreign_checkpoint_is_a_clear_error(tiny_base_dir, tmp_path, saved, expected):
    tag = f"resume_bad_{tmp_path.name}"
    if saved is not None:
        save_checkpoint(tiny_base_dir / "base_checkpoints" / tag, 3, {}, [{}], {"step": 3, "model_config": saved})
    run_dir = tmp_path / "run"
    args = ["--depth=2", f"--max_seq_len={T}", f"--device_batch_size={B}", f"--total_batch_size={B * T}",
            "--num_iterations=4", "--eval_every=-1", "--sample_every=-1", f"--model_tag={tag}",
            "--resume_from_step=3"]
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(tiny_base_dir), OMP_NUM_THREADS="1")
    assert run_local(args, nproc=1, run_dir=run_dir, env=env) != 0
    run = read_run_json(run_dir)
    assert run["status"] == "failed" and re.search(expected, run["message"]), run["message"]
    log = (run_dir / "train.log").read_text()
    assert "[rank 0] error (failed): " in log and 'nanochat/train.py", line' not in log  # a user error: no traceback
