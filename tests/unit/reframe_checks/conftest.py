"""Fixtures of the ReFrame tests: `make_run` writes one complete run directory (as the analysis tests' does)."""

import random

import pytest

from tests.support.synthetic import H200_PEAK, run_events, write_run


@pytest.fixture
def make_run(tmp_path):
    def make(name: str, tok_s: float = 100_000.0, world_size: int = 8, **manifest):
        fields = {"run_id": name, "sweep_id": "s0", "workload": "nanochat-base", "runtime": "bare", "nodes": 1,
                  "gpus_per_node": world_size, "world_size": world_size,
                  "config": {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "device_batch_size": 32,
                             "num_iterations": 30},
                  "software": {"gpu_name": "NVIDIA H200"}, "peak_flops_per_gpu": H200_PEAK,
                  "launch": {"kind": "slurm", "t0": 1000.0}, "status": "ok", "message": None, **manifest}
        events = run_events(tok_s, 30, 524_288, world_size, 1000.0, 5.0, random.Random(0))
        return write_run(tmp_path / "runs" / name, fields, events)
    return make
