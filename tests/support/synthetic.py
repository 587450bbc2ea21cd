"""Generated run directories that follow bench/contract/, for tests and benchmarks/bench_collect.py.

A sweep of (runtime x GPU count x repeat) points with a known throughput model, so tests can check
the analysis against the numbers that went in:
  tok/s = per_gpu_tok_s * n * efficiency(n) * runtime factor * (1 + noise)
Weak or strong scaling as the launcher plans it (weak: total batch = device batch x seq x ranks). With
`detail` (the default) a run also records what the analysis explains it with: every start-up milestone
(MILESTONE_S apart, the runtime's own start-up in front), the steady step split, the pre-flight busbw
(intra-node or inter-node), per-rank step times (a straggler where asked) and the network facts given
per runtime (say, bench/nccl_log.py's parse of a real NCCL log). Nothing is hand-written NCCL output.
Files are written plainly (no fsync): these are fixtures, thousands at a time, not results.
"""

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from bench import contract
from bench.metrics import peak_flops

H200_PEAK = peak_flops("NVIDIA H200")
D20_FLOPS_PER_TOKEN = 3.491758e9
SPAWN_S = 2.0  # torchrun's start and its workers' spawn: the part of start - t0 that is not the runtime's
MILESTONE_S = {"imports_done": 6.0, "dist_init": 1.0, "preflight": 0.5, "model_ready": 2.0, "data_ready": 0.2}
OPTIONAL_MILESTONES = ("runtime_start", "imports_done", "preflight", "data_ready", "steady")
BUSBW_GBPS = {"intra": 350.0, "inter": 40.0}  # pre-flight busbw within one node / across nodes
SPLIT_SHARES = {"optim_ms": 0.03, "data_ms": 0.002, "other_ms": 0.005}  # of the step; comm grows with nodes
COMM_SHARE_PER_NODE = 0.01  # exposed communication per node beyond the first, of the step
TEARDOWN_S = 3.0  # from the end event until the launcher sees the run end


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
    gpu_name: str | None = "NVIDIA H200"  # None: a CPU sweep (gpus_per_node 0 in run.json, no peak)
    sweep_id: str = "sweep0"
    seed: int = 0
    scaling: str = "strong"  # or weak: total_batch_size = device_batch_size * max_seq_len * ranks
    device_batch_size: int = 32
    strategy: str | None = "zero2"
    workload: str = contract.WORKLOAD
    detail: bool = True  # record the start-up milestones, step split, pre-flight and per-rank times
    milestones: tuple[str, ...] = OPTIONAL_MILESTONES  # the optional milestones recorded (detail only)
    network: dict[str, dict] = field(default_factory=dict)  # runtime -> run.json network facts
    network_env: dict[str, dict] = field(default_factory=dict)  # runtime -> run.json network_env (rank 0's)
    straggler: dict[str, tuple[int, float]] = field(default_factory=dict)  # runtime -> (rank, slowdown)


def efficiency(spec: SweepSpec, n: int) -> float:
    return spec.efficiency_per_doubling ** math.log2(n / min(spec.world_sizes))


def write_run(run_dir: Path, manifest: dict, events: list[dict], log_lines: list[str] = (),
              check: bool = True) -> Path:
    """Write one run directory: run.json, metrics.jsonl and an optional human log, each through the
    contract's classes (a fixture that does not follow it fails here, not in the test that reads it);
    `check=False` writes the manifest unchecked, for tests of a reader facing a bad one."""
    run_dir.mkdir(parents=True, exist_ok=True)
    data = {"schema_version": contract.SCHEMA_VERSION, **manifest}
    data = contract.RunManifest.from_dict(data).to_dict() if check else data
    (run_dir / contract.RUN_JSON).write_text(json.dumps(data))
    (run_dir / contract.METRICS_JSONL).write_text("".join(json.dumps(contract.parse_event(e)) + "\n" for e in events))
    if log_lines:
        (run_dir / "train.log").write_text("\n".join(log_lines) + "\n")
    return run_dir


def run_events(tok_s: float, steps: int, total_batch_size: int, world_size: int, t0: float,
               startup_s: float, rng: random.Random, peak: float | None = H200_PEAK,
               flops_per_token: float = D20_FLOPS_PER_TOKEN, milestones: tuple[str, ...] = (),
               nodes: int = 1, busbw: dict | None = None) -> list[dict]:
    """The events of one successful run with steady throughput tok_s after a slow warm-up. `milestones`
    records those optional start-up milestones (and the step split in the step events); without them a
    run has start, dist_init, model_ready and first_step only, as runs recorded before the breakdown. An
    unrecorded phase still takes its time (MILESTONE_S); the pre-flight only runs when it is recorded."""
    t = t0 + startup_s
    evs = []
    if "runtime_start" in milestones:
        evs.append({"event": "runtime_start", "t": t - SPAWN_S})
    evs.append({"event": "start", "t": t})
    t += MILESTONE_S["imports_done"]  # imports and loaders take their time whether recorded or not
    if "imports_done" in milestones:
        evs.append({"event": "imports_done", "t": t})
    t += MILESTONE_S["dist_init"]
    evs.append({"event": "dist_init", "t": t, "world_size": world_size, "backend": "nccl" if peak else "gloo"})
    if "preflight" in milestones and busbw is not None:
        t += MILESTONE_S["preflight"]
        evs.append({"event": "preflight", "t": t, "world_size": world_size, "busbw_gbps": busbw, "bytes": 1 << 30})
    t += MILESTONE_S["model_ready"]
    evs.append({"event": "model_ready", "t": t, "num_params": 560_988_160, "flops_per_token": flops_per_token})
    t += MILESTONE_S["data_ready"]
    if "data_ready" in milestones:
        evs.append({"event": "data_ready", "t": t})
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
                    "dt_ms": dt * 1000, "tok_per_sec": rate, "mfu": mfu, "total_time_s": total,
                    **(step_split(dt * 1000, nodes) if milestones else {})})
        if step == 10 and "steady" in milestones:
            evs.append({"event": "steady", "t": t, "step": step})
    evs.append({"event": "val", "t": t + 1, "step": steps, "val_bpb": 1.2})
    evs.append({"event": "end", "t": t + 2, "peak_mem_mib": 70_000.0, "total_training_time_s": total,
                "min_val_bpb": 1.2})
    return evs


def step_split(dt_ms: float, nodes: int) -> dict:
    """The step's parts (bench/nanochat/steptimer.py's fields), adding up to dt_ms."""
    parts = {k: share * dt_ms for k, share in SPLIT_SHARES.items()}
    parts["comm_ms"] = COMM_SHARE_PER_NODE * (nodes - 1) * dt_ms
    parts["fwd_bwd_ms"] = dt_ms - sum(parts.values())
    return parts


def preflight_busbw(world_size: int, nodes: int) -> dict[str, float]:
    """busbw per collective at 1 GiB: 0 on one rank (nccl-tests' definition), the network's across nodes."""
    bw = 0.0 if world_size == 1 else BUSBW_GBPS["inter" if nodes > 1 else "intra"]
    return {c: bw for c in ("all_reduce", "reduce_scatter", "all_gather")}


def rank_times(step_ms: float, world_size: int, per_node: int, straggler: tuple[int, float] | None) -> dict:
    """run.json's breakdown.ranks and slowest rank: every rank at step_ms, the straggler slower."""
    ranks = [{"rank": r, "host": f"nid{r // max(per_node, 1):06d}", "step_ms": step_ms * (1 + 0.001 * (r % 3))}
             for r in range(world_size)]
    if straggler is not None and straggler[0] < world_size:
        ranks[straggler[0]]["step_ms"] = step_ms * (1 + straggler[1])
    slowest = max(ranks, key=lambda r: r["step_ms"])
    return {"ranks": ranks, "slowest_rank": slowest["rank"], "slowest_host": slowest["host"]}


def generate_sweep(root: Path, spec: SweepSpec | None = None) -> list[Path]:
    """Write one run directory per (runtime, GPU count, repeat) under root/<sweep_id>/; returns them."""
    spec = spec or SweepSpec()
    rng = random.Random(spec.seed)
    dirs = []
    t0 = 1_764_000_000.0
    peak = H200_PEAK if spec.gpu_name else None
    for runtime, factor in spec.runtimes.items():
        for n in spec.world_sizes:
            for repeat in range(spec.repeats):
                tok_s = spec.per_gpu_tok_s * n * efficiency(spec, n) * factor * (1 + rng.gauss(0, spec.noise))
                run_id = f"{runtime}-n{n}-r{repeat}"
                nodes = max(1, n // spec.gpus_per_node)
                per_node = n // nodes
                total = (spec.device_batch_size * spec.max_seq_len * n if spec.scaling == "weak"
                         else spec.total_batch_size)
                config = {"depth": spec.depth, "max_seq_len": spec.max_seq_len,
                          "device_batch_size": spec.device_batch_size, "total_batch_size": total,
                          "num_iterations": spec.steps}
                if spec.strategy:
                    config.update(strategy=spec.strategy, aspect_ratio=64)
                manifest = {
                    "run_id": run_id, "sweep_id": spec.sweep_id, "workload": spec.workload, "runtime": runtime,
                    "repeat": repeat, "nodes": nodes, "gpus_per_node": per_node if spec.gpu_name else 0,
                    "world_size": n, "scaling": spec.scaling, "config": config,
                    "software": {"gpu_name": spec.gpu_name, "torch": "2.9.0"}, "slurm": {"job_id": "1000"},
                    "peak_flops_per_gpu": peak, "launch": {"kind": "slurm", "t0": t0}, "status": "ok",
                    "message": None,
                }
                busbw = preflight_busbw(n, nodes)
                if spec.detail:
                    manifest["preflight"] = {"backend": "nccl" if peak else "gloo", "world_size": n,
                                             "bytes": 1 << 30, "busbw_gbps": busbw}
                    manifest["breakdown"] = rank_times(total / tok_s * 1000, n, per_node,
                                                       spec.straggler.get(runtime))
                    if runtime in spec.network:
                        manifest["network"] = {"backend": "nccl", **spec.network[runtime]}
                if runtime in spec.network_env:
                    manifest["network_env"] = dict(spec.network_env[runtime])
                events = run_events(tok_s, spec.steps, total, n, t0, spec.startup_s.get(runtime, 5.0), rng,
                                    peak, milestones=spec.milestones if spec.detail else (), nodes=nodes,
                                    busbw=busbw)
                if spec.detail:  # the launcher saw the run end: the teardown phase
                    manifest["launch"]["finished_at"] = events[-1]["t"] + TEARDOWN_S
                dirs.append(write_run(root / spec.sweep_id / run_id, manifest, events))
                t0 += 600
    return dirs


def write_heartbeat(run_dir: Path, rank: int, t: float, step: int | None, event: str = "step",
                    event_t: float | None = None, host: str = "nid1") -> None:
    """One rank's heartbeat file as bench/runside/heartbeat.py writes it (pid 100 + rank)."""
    from bench.runside.heartbeat import DIR

    path = Path(run_dir) / DIR / f"rank{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rank": rank, "host": host, "pid": 100 + rank, "t": t, "event": event,
                                "step": step, "event_t": event_t or t}))
