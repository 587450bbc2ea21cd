"""The README's main job: `nanochat-bench smoke` on a machine with no GPU and no network.

    python -m pytest tests/e2e/test_smoke.py -q
"""

import json
import os
import subprocess
import sys

import pytest

from bench.logline import parse_step_line
from bench.contract import read_run_json


@pytest.mark.slow
def test_smoke_leaves_a_complete_run_directory(tmp_path):
    base, run_dir = tmp_path / "base", tmp_path / "runs" / "smoke" / "r1"
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "bench.cli", "smoke", "--steps", "12", "--base-dir", str(base),
                           "--run-dir", str(run_dir)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = read_run_json(run_dir)
    assert run["status"] == "ok" and run["world_size"] == 2
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "step" for e in events) == 12 and events[-1]["event"] == "end"
    log = (run_dir / "train.log").read_text().splitlines()
    assert sum(parse_step_line(line) is not None for line in log) == 12
    # what it prints: where the run is, and the figures
    assert f"run directory: {run_dir.resolve()}" in proc.stdout
    assert "smoke run: ok | 12 steps | final loss" in proc.stdout and "min val bpb" in proc.stdout
    # and it ends by collecting and reporting its own run
    report = run_dir / "report" / "report.html"
    assert f"report: {report.resolve()}" in proc.stdout
    assert report.stat().st_size > 10_000 and "<img" in report.read_text()
    assert (base / "tokenizer" / "tokenizer.pkl").exists()
