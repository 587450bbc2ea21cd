"""Generated run directories that follow bench/schema.py, for tests and benchmarks/bench_collect.py.

A sweep of (runtime x GPU count x repeat) points with a known throughput model, so tests can check
the analysis against the numbers that went in:
  tok/s = per_gpu_tok_s * n * efficiency(n) * runtime factor * (1 + noise)
Files are written plainly (no fsync): these are fixtures, thousands at a time, not results.
"""

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from bench import schema
from bench.metrics import peak_flops

H200_PEAK = peak_flops("NVIDIA H200")
D20_FLOPS_PER_TOKEN = 3.491758e9


@dataclass
class SweepSpec:
    """What to generate; defaults give a small d20 runtime comparison on H200 nodes of 8 GPUs."""
    runtimes: dict[str, float] = field(default_factory=lambda: {"bare": 1.0, "ce": 0.99, "apptainer": 0.97})
    world_sizes: tuple[int, ...] = (8, 16, 32, 64)
    repeats: int = 3
    steps: int = 30
    per_gpu_tok_s: float = 60_000.0
    efficiency_per_doubling: float = 0.97  # efficiency(n) = this ** log2(n / smallest n)
    noise: float = 0.01  # relative spread of a run's throughput between repeats
    startup_s: dict[str, float] = field(default_factory=lambda: {"bare": 5.0, "ce": 9.0, "apptainer": 7.0})
    depth: int = 20
    max_seq_len: int = 2048
    total_batch_size: int = 524_288
    gpus_per_node: int = 8
    gpu_name: str = "NVIDIA H200"
    sweep_id: str = "sweep0"
    seed: int = 0


def efficiency(spec: SweepSpec, n: int) -> float:
    return spec.efficiency_per_doubling ** math.log2(n / min(spec.world_sizes))


def write_run(run_dir: Path, manifest: dict, events: list[dict], log_lines: list[str] = (),
              check: bool = True) -> Path:
    """Write one run directory: run.json, metrics.jsonl and an optional human log, each through the
    contract's classes (a fixture that does not follow it fails here, not in the test that reads it);
    `check=False` writes the manifest unchecked, for tests of a reader facing a bad one."""
    run_dir.mkdir(parents=True, exist_ok=True)
    data = {"schema_version": schema.SCHEMA_VERSION, **manifest}
    data = schema.RunManifest.from_dict(data).to_dict() if check else data
    (run_dir / schema.RUN_JSON).write_text(json.dumps(data))
    (run_dir / schema.METRICS_JSONL).write_text("".join(json.dumps(schema.parse_event(e)) + "\n" for e in events))
    if log_lines:
        (run_dir / "train.log").write_text("\n".join(log_lines) + "\n")
    return run_dir


def run_events(tok_s: float, steps: int, total_batch_size: int, world_size: int, t0: float,
               startup_s: float, rng: random.Random, peak: float | None = H200_PEAK,
               flops_per_token: float = D20_FLOPS_PER_TOKEN) -> list[dict]:
    """The events of one successful run with steady throughput tok_s after a slow warm-up."""
    t = t0 + startup_s
    evs = [{"event": "start", "t": t},
           {"event": "dist_init", "t": t + 1.0, "world_size": world_size, "backend": "nccl"},
           {"event": "model_ready", "t": t + 3.0, "num_params": 560_988_160, "flops_per_token": flops_per_token}]
    t += 3.0
    total = 0.0
    for step in range(steps):
        rate = tok_s * (0.2 if step == 0 else 0.9 if step <= 10 else 1.0) * (1 + rng.gauss(0, 0.002))
        dt = total_batch_size / rate
        t += dt
        if step == 0:
            evs.append({"event": "first_step", "t": t})
        total += dt if step > 10 else 0.0
        mfu = 100 * flops_per_token * rate / (world_size * peak) if peak else 0.0
        evs.append({"event": "step", "t": t, "step": step, "loss": 11.0 - 0.1 * step, "lrm": 1.0,
                    "dt_ms": dt * 1000, "tok_per_sec": rate, "mfu": mfu, "total_time_s": total})
    evs.append({"event": "val", "t": t + 1, "step": steps, "val_bpb": 1.2})
    evs.append({"event": "end", "t": t + 2, "peak_mem_mib": 70_000.0, "total_training_time_s": total,
                "min_val_bpb": 1.2})
    return evs


def generate_sweep(root: Path, spec: SweepSpec | None = None) -> list[Path]:
    """Write one run directory per (runtime, GPU count, repeat) under root/<sweep_id>/; returns them."""
    spec = spec or SweepSpec()
    rng = random.Random(spec.seed)
    dirs = []
    t0 = 1_764_000_000.0
    for runtime, factor in spec.runtimes.items():
        for n in spec.world_sizes:
            for repeat in range(spec.repeats):
                tok_s = spec.per_gpu_tok_s * n * efficiency(spec, n) * factor * (1 + rng.gauss(0, spec.noise))
                run_id = f"{runtime}-n{n}-r{repeat}"
                nodes = max(1, n // spec.gpus_per_node)
                manifest = {
                    "run_id": run_id, "sweep_id": spec.sweep_id, "workload": schema.WORKLOAD, "runtime": runtime,
                    "repeat": repeat, "nodes": nodes, "gpus_per_node": n // nodes, "world_size": n,
                    "config": {"depth": spec.depth, "max_seq_len": spec.max_seq_len, "device_batch_size": 32,
                               "total_batch_size": spec.total_batch_size, "num_iterations": spec.steps},
                    "software": {"gpu_name": spec.gpu_name, "torch": "2.9.0"}, "slurm": {"job_id": "1000"},
                    "peak_flops_per_gpu": H200_PEAK, "launch": {"kind": "slurm", "t0": t0}, "status": "ok",
                    "message": None,
                }
                events = run_events(tok_s, spec.steps, spec.total_batch_size, n, t0,
                                    spec.startup_s.get(runtime, 5.0), rng)
                dirs.append(write_run(root / spec.sweep_id / run_id, manifest, events))
                t0 += 600
    return dirs


def write_heartbeat(run_dir: Path, rank: int, t: float, step: int | None, event: str = "step",
                    event_t: float | None = None, host: str = "nid1") -> None:
    """One rank's heartbeat file as bench/nanochat/heartbeat.py writes it (pid 100 + rank)."""
    from bench.nanochat.heartbeat import DIR

    path = Path(run_dir) / DIR / f"rank{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rank": rank, "host": host, "pid": 100 + rank, "t": t, "event": event,
                                "step": step, "event_t": event_t or t}))
