"""Fixtures of the analysis tests: run directories written to the bench/contract/ contract.

`make_run(name, tok_s=..., world_size=..., runtime=..., **manifest)` writes one complete, successful
run (run.json + metrics.jsonl) whose steady-state throughput is tok_s; tests then damage it as they need.
`raw=True` writes the manifest as given, unchecked, for tests of what the reader does with a bad one.
"""

import random

import pytest

from tests.support.synthetic import H200_PEAK, run_events, write_run


@pytest.fixture
def make_run(tmp_path):
    def make(name: str = "run0", tok_s: float = 100_000.0, world_size: int = 8, runtime: str = "bare",
             steps: int = 30, peak: float | None = H200_PEAK, t0: float | None = 1000.0, startup_s: float = 5.0,
             root=None, raw: bool = False, **manifest):
        root = root or tmp_path / "runs"
        fields = {"run_id": name, "sweep_id": "s0", "workload": "nanochat-base", "runtime": runtime,
                  "nodes": 1, "gpus_per_node": world_size, "world_size": world_size,
                  "config": {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288,
                             "device_batch_size": 32, "num_iterations": steps},
                  "software": {"gpu_name": "NVIDIA H200" if peak else None},
                  "peak_flops_per_gpu": peak, "status": "ok", "message": None}
        if t0 is not None:
            fields["launch"] = {"kind": "slurm", "t0": t0}
        fields.update(manifest)
        events = run_events(tok_s, steps, 524_288, world_size, t0 or 1000.0, startup_s, random.Random(0), peak)
        return write_run(root / name, fields, events, check=not raw)
    return make
