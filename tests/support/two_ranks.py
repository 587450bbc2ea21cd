"""Run a worker script as 2 gloo ranks under torchrun (the sharded-optimizer tests' harness)."""

import os
import subprocess
import sys
from pathlib import Path


def run_two_ranks(tmp_path: Path, worker_source: str) -> Path:
    """Write `worker_source` to a script, run it on 2 CPU ranks with the output path as its argument,
    and return that path once every rank exited 0."""
    script, out = tmp_path / "worker.py", tmp_path / "params.pt"
    script.write_text(worker_source)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out
