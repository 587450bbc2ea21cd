"""Plain logs of upstream nanochat's base_train -> the same flat row as a run directory.

The step and validation lines are read with bench/logline.py (the one parser shared with the
trainer); the start-up and final lines (late-2025 base_train, `print0` output) give the config:
  Autodetected device type: cuda       (cpu: no GPU, so no MFU)
  Distributed world size: 8            num_layers: 20
  Tokens / micro-batch / rank: 32 x 2048 = 65,536
  Total batch size 524,288 => gradient accumulation steps: 1
  Estimated FLOPs per token: 3.491758e+09
  GPU: NVIDIA H100 80GB HBM3 | Peak FLOPS (BF16): 9.89e+14     (newer trees only)
  Peak memory usage: 75422.02MiB       Minimum validation bpb: 0.8123
This trainer's own console log (train.log, a benchmark script's output) has the same lines and more, read so that
its runs are never pooled with runs that trained another program or on another GPU, nor taken for upstream's (its
runtime, which it does not name, is unknown):
  nanochat-bench: base pretraining (nanochat-faithful)
  Peak FLOPs per GPU for MFU: 989000000000000.0 (NVIDIA H200)
  FP8 matmuls (tensorwise, e4m3 forward, e5m2 gradients): 121 Linear(s), lm_head included
  Fused kernels: rotary_norm, softcap_loss as Triton kernels (bench/nanochat/fused.py)
  Memory strategy: fsdp+ac
Upstream's logged MFU assumes the H100 peak whatever the GPU; on a GPU it is kept only when nothing
better is known, and the row says so (`mfu_source`); a CPU run has no MFU.
"""

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from bench.analysis.figures import diverged, step_figures
from bench.analysis.regular_files import open_regular
from bench.logline import parse_step_line, parse_val_line, steps_digest
from bench.metrics import peak_flops
from bench.contract import WORKLOAD

UPSTREAM_PEAK = 989e12  # nanochat's hard-coded H100 SXM bf16 peak behind its logged mfu

_num = r"([\d,]+(?:\.\d+)?(?:e[+-]?\d+)?)"
HEADER_RES = {
    "device_type": re.compile(r"^Autodetected device type: (\w+)"),
    "world_size": re.compile(r"Distributed world size: (\d+)"),
    "depth": re.compile(r"^num_layers: (\d+)"),
    "micro_batch": re.compile(r"^Tokens / micro-batch / rank: (\d+) x (\d+) ="),
    "total_batch_size": re.compile(r"^Total batch size ([\d,]+) =>"),
    "flops_per_token": re.compile(r"^Estimated FLOPs per token: " + _num),
    "num_params": re.compile(r"^Number of parameters: ([\d,]+)"),
    "vocab_size": re.compile(r"^Vocab size: ([\d,]+)"),
    "gpu": re.compile(r"^GPU: (.+?) \| Peak FLOPS \(BF16\): " + _num),
    # this trainer's lines (bench/nanochat/stagerun.py, fp8.py, fused.py, train.py)
    "ours": re.compile(r"^nanochat-bench: "),  # the banner each of this trainer's stages prints first
    "own_gpu": re.compile(r"^Peak FLOPs per GPU for MFU: (?:" + _num + r"|unknown \(MFU not computed\))"
                          r"(?: \((.+)\))?$"),
    "fp8": re.compile(r"^FP8 matmuls \(.*\): (\d+) Linear\(s\)(, lm_head included)?$"),
    "fused_kernels": re.compile(r"^Fused kernels: (.+) as Triton kernels"),
    "strategy": re.compile(r"^Memory strategy: (\S+)$"),
    "peak_mem_mib": re.compile(r"^Peak memory usage: " + _num + "MiB"),
    "total_training_time_m": re.compile(r"^Total training time: " + _num + "m"),
    "min_val_bpb": re.compile(r"^Minimum validation bpb: " + _num),
}


def _f(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass
class LogRun:
    """What one plain log says: step and validation records, and header/final facts."""
    steps: list[dict] = field(default_factory=list)
    vals: list[dict] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    restarts: int = 0  # times the step counter went back: several runs written into one log


# The lines a stage ends with: what follows them is another stage's (or run's) section of a combined log
CLOSING = ("peak_mem_mib", "total_training_time_m", "min_val_bpb")


def parse_log(path: Path) -> LogRun:
    """Every nanochat line of a log; other lines (warnings, banners, Slurm noise) are skipped. A log of several
    stages (a flow's output in one file) is read in sections, each a stage's start-up to its closing lines; the
    facts are those of the sections with step lines, not an evaluation stage's after them (its world size, peak
    memory and banner taken for the training run's)."""
    run = LogRun()
    section, stepped, closed = {}, False, False

    def end_section() -> None:
        if stepped:
            run.facts.update(section)

    try:
        with io.TextIOWrapper(open_regular(path), errors="replace") as f:  # no link, FIFO or device
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("step "):
                    if rec := parse_step_line(line):
                        if closed:
                            end_section()
                            section, stepped, closed = {}, False, False
                        if run.steps and rec["step"] < run.steps[-1]["step"]:
                            run.restarts += 1
                        run.steps.append(rec)
                        stepped = True
                elif line.startswith("Step "):
                    if rec := parse_val_line(line):
                        run.vals.append(rec)
                else:
                    facts = {}
                    key = _header(line.strip(), facts)
                    # a stage's banner, a start-up line after closing lines, or a closing line again: a new section
                    if key and ((key == "ours" and (section or stepped)) or (closed and key not in CLOSING)
                                or (key in CLOSING and facts.keys() & section.keys())):
                        end_section()
                        section, stepped, closed = {}, False, False
                    section.update(facts)
                    closed = closed or key in CLOSING
    except OSError:
        return LogRun()
    end_section()
    return run


def _header(line: str, facts: dict) -> str | None:
    """The fact a start-up or closing line gives, into `facts`; its key in HEADER_RES (None: no such line)."""
    for key, rx in HEADER_RES.items():
        m = rx.search(line)  # each pattern anchors itself (^) where it must start the line
        if not m:
            continue
        if key == "micro_batch":
            facts["device_batch_size"], facts["max_seq_len"] = int(m[1]), int(m[2])
        elif key == "device_type":
            facts[key] = m[1]
        elif key == "gpu":
            facts["gpu_name"], facts["peak_flops_per_gpu"] = m[1].strip(), _f(m[2])
        elif key == "ours":
            facts[key] = True
        elif key == "own_gpu":  # a GPU this trainer knows no peak of: its name alone; on a CPU neither
            if m[1]:
                facts["peak_flops_per_gpu"] = _f(m[1])
            if m[2]:
                facts["gpu_name"] = m[2]
        elif key == "fp8":  # the count takes lm_head in where it is included: --fp8_lm_head alone converts 1
            lm_head = m[2] is not None
            facts["fp8"], facts["fp8_lm_head"] = int(m[1]) > int(lm_head), lm_head
        elif key == "fused_kernels":  # as run.json records them: the names, comma-separated
            facts[key] = ",".join(name.strip() for name in m[1].split(","))
        elif key == "strategy":
            facts[key] = m[1]
        elif key == "total_training_time_m":
            facts["total_training_time_s"] = _f(m[1]) * 60
        elif key in ("world_size", "depth", "total_batch_size", "num_params", "vocab_size"):
            facts[key] = int(_f(m[1]))
        else:
            facts[key] = _f(m[1])
        return key
    return None


def read_upstream_log(path: Path) -> dict | None:
    """The flat row of an upstream log, or None when it holds no nanochat step line."""
    run = parse_log(path)
    if not run.steps:
        return None
    from bench.analysis.rundir import precision  # rundir reads logs through this module: imported here

    facts = dict(run.facts)
    fp8 = {k: facts.pop(k) for k in ("fp8", "fp8_lm_head") if k in facts}
    # a log of this trainer names no runtime (bare metal or a container): never upstream's, nor a runtime it guessed
    runtime = None if facts.pop("ours", False) else "upstream"
    world = facts.get("world_size", 1)  # upstream prints the world size only under torchrun
    peak = facts.get("peak_flops_per_gpu") or peak_flops(facts.get("gpu_name"))
    assumed = None if facts.get("device_type") == "cpu" else UPSTREAM_PEAK  # no GPU: no peak to assume
    # the workload is ours: the row compares with our runs of the same config
    row = {"source": str(path), "source_kind": "upstream_log", "run_id": path.stem, "workload": WORKLOAD,
           "runtime": runtime, "precision": precision(fp8, WORKLOAD), **facts, "world_size": world,
           "peak_flops_per_gpu": peak,
           "num_iterations": run.steps[-1]["num_iterations"], "steps_digest": steps_digest(run.steps)}
    figs, notes = step_figures(run.steps, world, facts.get("flops_per_token"), peak or assumed)
    if not peak and figs.get("mfu") is not None:
        figs["mfu_source"] = f"assumed {UPSTREAM_PEAK:.3g} FLOP/s per GPU (upstream's H100 peak; GPU not in log)"
    row.update({k: v for k, v in figs.items() if v is not None})
    if row.get("min_val_bpb") is None and run.vals:
        row["min_val_bpb"] = min(v["val_bpb"] for v in run.vals)
    finished = "min_val_bpb" in facts or "total_training_time_s" in facts
    row["status"] = "ok" if finished else "running"
    if not finished:
        notes.append("no final lines (Total training time / Minimum validation bpb): unfinished or cut")
    if "world_size" not in facts:
        notes.append("no 'Distributed world size' line: one process assumed")
    if run.restarts:
        row["skip_reason"] = f"log holds several runs (step counter restarts {run.restarts} time(s)); not split"
    elif not finished:
        row["skip_reason"] = "log has no final lines: run unfinished or log cut"
    else:
        row["skip_reason"] = diverged(run.steps) or (None if row.get("tok_per_sec") else "no steady-state step")
    row["notes"] = "; ".join(notes) or None
    return row
