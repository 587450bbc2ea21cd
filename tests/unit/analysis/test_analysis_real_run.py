"""A real tiny CPU training (2 ranks, gloo) analysed end to end: the run directory of `smoke`.

python -m pytest tests/unit/analysis/test_analysis_real_run.py -q      (~40 s: a real torchrun)
"""

import json
import os
import subprocess
import sys
import time

import pandas as pd
import pytest

from bench import contract
from bench.analysis import summarize_runs
from bench.analysis.collect import load_table
from bench.analysis.upstream import read_upstream_log

TINY_FLAGS = ["--depth=2", "--max_seq_len=128", "--device_batch_size=2", "--eval_tokens=512",
              "--total_batch_size=512", "--num_iterations=16", "--eval_every=8", "--sample_every=-1"]


@pytest.mark.slow
def test_two_rank_cpu_run_is_collected_and_reported(tmp_path, base_dir_env):
    run_dir = tmp_path / "runs" / "smoke" / "run0"
    run_dir.mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", contract.ENV_RUN_DIR: str(run_dir), contract.ENV_T0: f"{time.time():.6f}"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "bench.nanochat.train", "--", *TINY_FLAGS]
    with open(run_dir / "train.log", "w") as log:
        proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=240)
    log_text = (run_dir / "train.log").read_text()
    assert proc.returncode == 0, f"the trainer failed:\n{log_text[-3000:]}"

    # run.json's final_loss is the last step line's loss, as mid-training and SFT record theirs (it stayed null)
    result = contract.read_run_json(run_dir)["result"]
    last = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if '"event": "step"' in line][-1]
    assert last["step"] == 15 and result["final_loss"] == pytest.approx(last["loss"])

    html = summarize_runs(run_dir, tmp_path / "report")
    row = load_table(tmp_path / "report").iloc[0]
    assert (row["status"], row["world_size"], row["depth"]) == ("ok", 2, 2)
    assert pd.isna(row["skip_reason"]) and row["steps_recorded"] == 16 and row["steady_rule"] == "step > 10"
    assert row["tok_per_sec"] > 0 and row["tok_per_sec_per_gpu"] == pytest.approx(row["tok_per_sec"] / 2)
    assert row["startup_overhead_s"] > 0 and row["time_to_first_step_s"] > 0
    assert row["mfu"] != row["mfu"]  # NaN: no peak on CPU, so no MFU
    assert row["min_val_bpb"] > 0
    # the human log of the same run, read by the upstream-log parser, gives the same throughput
    from_log = read_upstream_log(run_dir / "train.log")
    assert from_log["tok_per_sec"] == pytest.approx(row["tok_per_sec"], rel=0.01, abs=1.0)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "1 run(s), 1 in the figures" in md and html.exists()
