"""What every nanochat stage does around its own work: one start-up, one step record, one end, one main().

A stage (base pretraining, mid-training, SFT, the evaluations) is `run(config, record) -> (summary, status,
message)` over a settings dataclass deriving from bench.nanochat.config.RunSettings, started by `main(run, parse)`;
`begin`, `log_step` and `end` give every stage the same process group, run record, lines and events.
"""

import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # before CUDA initialises

import sys  # noqa: E402
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

from bench import netgate
from bench.logline import format_step_line, format_val_line
from bench.metrics import WARMUP_STEPS, peak_flops
from bench.nanochat import gcfreeze, preflight
from bench.nanochat.common import get_dist_info, print0
from bench.runside.console import detach_output, drain_output
from bench.nanochat.compute import autodetect_device_type, compute_cleanup, compute_init, topology
from bench.runside.guard import check_finite
from bench.nanochat.loss_eval import evaluate_bpb
from bench.nanochat.network_gate import stop_on_wrong_network
from bench.runside.runrecord import RunRecord, open_record, process_start_time, runtime_start_time, say
from bench.nanochat.watchdog import Watchdog


@dataclass
class Session:
    """The process group and device a stage runs on, and how its collectives are bounded."""

    ddp: bool
    rank: int
    world_size: int
    device: torch.device
    device_type: str
    backend: str | None
    watchdog: Watchdog
    peak_flops: float | None
    first_step: int | None = None  # the first step this start of the trainer logged (a resumed run's is later)

    @property
    def master(self) -> bool:
        return self.rank == 0

    def autocast(self):
        """bf16 autocast on CUDA (nanochat's), nothing elsewhere."""
        if self.device_type == "cuda":
            return torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16)
        return nullcontext()

    def synchronize(self) -> None:
        if self.device_type == "cuda":
            torch.cuda.synchronize()


def begin(config, record: RunRecord, title: str) -> Session:
    """Bring up the process group (every collective bounded from here on), stop a multi-node run on the wrong
    network, time the collectives when asked, and start the run record with `config`'s settings."""
    print0(title)
    device_type = config.device_type or autodetect_device_type()
    if not config.device_type:
        print0(f"Autodetected device type: {device_type}")
    ddp, rank, _, world_size, device = compute_init(device_type, config.join_timeout_s)
    backend = torch.distributed.get_backend() if ddp else None
    watchdog = Watchdog(config.watchdog_s, ddp)
    watchdog.start()
    record.emit("dist_init", world_size=world_size, backend=backend)
    print0(f"Distributed world size: {world_size}")
    # the network gate: NCCL set its communicator up in init_process_group (device_id) and said which network it
    # took; a multi-node run on another than the site's stops here, on every rank together, before any collective
    # measures that network (bench/netgate.py)
    stop_on_wrong_network(topology()[0], ddp, device, record, backend)
    if config.preflight and ddp:  # the collectives' bus bandwidth, on this very process group
        pre = preflight.summary(preflight.measure(device), world_size, backend)
        record.emit("preflight", world_size=world_size, busbw_gbps=pre["busbw_gbps"], bytes=pre["bytes"])
        record.update(preflight=pre)
        print0(f"Pre-flight busbw at {pre['bytes'] / 2**20:,.0f} MiB: " +
               ", ".join(f"{c} {bw:.2f} GB/s" for c, bw in pre["busbw_gbps"].items()))
    gpu_name = torch.cuda.get_device_name(device) if device_type == "cuda" else None
    session = Session(ddp, rank, world_size, device, device_type, backend, watchdog, peak_flops(gpu_name))
    nodes, per_node = topology()
    record.start(asdict(config), world_size, nodes, per_node if device_type == "cuda" else 0, session.peak_flops)
    print0(f"Peak FLOPs per GPU for MFU: {session.peak_flops if session.peak_flops else 'unknown (MFU not computed)'}"
           f"{f' ({gpu_name})' if gpu_name else ''}")
    return session


def log_step(session: Session, record: RunRecord, step: int, num_iterations: int, loss: float, lrm: float,
             dt: float, tok_per_sec: float, mfu: float | None, total_time_s: float, grad_norm=None,
             line: str | None = None, **split) -> None:
    """One optimizer step on record: nanochat's step line (or the stage's own `line`), the watchdog armed from
    the slowest step so far, the GC frozen after the first, and the `first_step`/`step`/`steady` events."""
    print0(line if line is not None else
           format_step_line(step, num_iterations, loss, lrm, dt, tok_per_sec, mfu, total_time_s, grad_norm))
    session.watchdog.arm(dt)  # the first step's compilation is the floor
    gcfreeze.after_step(step, first=session.first_step is None)  # outside the timed region
    if session.first_step is None:
        record.emit("first_step")
        session.first_step = step
    record.emit("step", step=step, loss=loss, lrm=lrm, dt_ms=dt * 1000, tok_per_sec=tok_per_sec, mfu=mfu,
                total_time_s=total_time_s, grad_norm=grad_norm, **split)
    if step == session.first_step + WARMUP_STEPS:  # a resumed run compiles and warms up again (analysis/figures.py)
        record.emit("steady", step=step)


def validate_bpb(session: Session, record: RunRecord, model, batches, steps: int, token_bytes, step: int) -> float:
    """Validation bits per byte over `steps` batches, model in eval mode and back: checked finite (a diverged run
    ends here), nanochat's val line and the `val` event."""
    model.eval()
    with session.autocast():
        val_bpb = evaluate_bpb(model, batches, steps, token_bytes)
    check_finite(step, val_bpb, "validation bpb")
    print0(format_val_line(step, val_bpb))
    record.emit("val", step=step, val_bpb=val_bpb)
    model.train()
    return val_bpb


def scale_lrs(optimizers, frac: float) -> None:
    """Fresh optimizers' learning rates x `frac`, kept as the `initial_lr` that optimizer_step's `lrm` multiplies."""
    for opt in optimizers:
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"] = group["lr"] * frac


def out_of_time(session: Session, deadline: float, dt: float) -> bool:
    """Whether the next step would end after `deadline` (epoch s); every rank gets the same answer (a tiny
    all-reduce a step, only with a deadline), so no rank steps into a collective the others left."""
    if deadline <= 0 or dt == 0.0:
        return False
    late = torch.tensor([float(time.time() + 1.5 * dt > deadline)], device=session.device)
    if session.ddp:
        torch.distributed.all_reduce(late, op=torch.distributed.ReduceOp.MAX)
    return bool(late.item())


def muon_momentum(step: int) -> float:
    """Muon's momentum, 0.85 at step 0 rising linearly to 0.95 at step 300 (pre- and mid-training)."""
    frac = min(step / 300, 1)
    return (1 - frac) * 0.85 + frac * 0.95


def optimizer_step(model, optimizers, lrm: float, timer, muon=None, momentum: float | None = None) -> None:
    """One update: every optimizer's groups at `lrm` x their initial LR (Muon's momentum set when given), the
    step timed as the split's `optim` (the sharded optimizers' collectives inside it count as comm), then the
    gradients cleared."""
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * lrm
    if muon is not None and momentum is not None:
        for group in muon.param_groups:
            group["momentum"] = momentum
    with timer.section("optim"):
        for opt in optimizers:
            opt.step()
    model.zero_grad(set_to_none=True)


def end(session: Session, record: RunRecord, total_training_time_s: float, min_val_bpb: float | None = None,
        training: bool = True, **fields) -> float:
    """The stage's last lines and its `end` event; returns the peak memory (MiB, 0 off CUDA). An evaluation stage
    (`training` False) ends as nanochat's evaluation scripts do, without the training time and minimum bpb lines
    (a log reader would take them for a training run's), which its `end` event still records."""
    gcfreeze.release()
    cuda = session.device_type == "cuda"
    peak_mem_mib = torch.cuda.max_memory_allocated() / 1024 / 1024 if cuda else 0.0  # 0: the contract's "not measured"
    print0(f"Peak memory usage: {peak_mem_mib:.2f}MiB" if cuda else
           f"Peak memory usage: not measured on {session.device_type}")
    if training:
        print0(f"Total training time: {total_training_time_s / 60:.2f}m")
    if training and min_val_bpb is not None:
        print0(f"Minimum validation bpb: {min_val_bpb:.4f}")
    record.emit("end", peak_mem_mib=peak_mem_mib, total_training_time_s=total_training_time_s,
                min_val_bpb=min_val_bpb, **fields)
    return peak_mem_mib


def stopped(session: Session, summary: dict, message: str) -> tuple[dict, str, str]:
    """A stage's result when --deadline stopped it: the reason on stderr (rank 0), as every other cause's."""
    if session.master:
        say(message)
    return summary, "timeout", message


def main(run: Callable, parse: Callable, argv: list[str] | None = None) -> int:
    """A stage's entry point: records the run's status however it ends; a failing rank ends its process at once
    (torchrun then stops the others) instead of leaving them to wait for a collective timeout."""
    _, rank, _, _ = get_dist_info()
    record = open_record(rank)
    if record is None:
        return 1
    detach_output()  # after the signal mask (threads inherit it); a stdout nobody reads must not stop training
    config = None
    try:
        record.emit("start", t=process_start_time())
        record.emit("runtime_start", t=runtime_start_time())
        record.emit("imports_done")
        if record.run_dir:
            # each rank's NCCL lines into the run directory, where every rank reads the network its NCCL took
            # for the gate, which makes sure those lines are written when it is expected (bench/netgate.py)
            nccl = netgate.debug_env(os.environ, str(Path(record.run_dir, "nccl", f"rank{rank}.log")))
            if "NCCL_DEBUG_FILE" in nccl:
                Path(record.run_dir, "nccl").mkdir(parents=True, exist_ok=True)
            os.environ.update(nccl)
        config = parse(sys.argv[1:] if argv is None else argv)
        record.heartbeat.silent_after_s = config.heartbeat_timeout_s
        summary, status, message = run(config, record)
        record.finish(status, message, result=summary)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a status, then the process ends
        if isinstance(e, SystemExit) and config is None and not e.code:
            return 0  # --help
        record.die(e, getattr(config, "device_batch_size", None))
    compute_cleanup()
    drain_output(timeout_s=30.0)  # the status is recorded; the last lines wait a while for a paused reader
    return 0
