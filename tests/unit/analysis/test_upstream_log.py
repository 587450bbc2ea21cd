"""Plain logs of upstream nanochat's base_train: parsed with the shared step-line regex into a row.

python -m pytest tests/unit/analysis/test_upstream_log.py -q
"""

from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.collect import collect
from bench.analysis.upstream import UPSTREAM_PEAK, parse_log, read_upstream_log

REPO = Path(__file__).resolve().parents[3]

# The start-up lines of a late-2025 8-GPU d20 run, as upstream prints them (spec §7).
HEADER = """\
Autodetected device type: cuda
2025-11-20 10:00:01,123 - nanochat.common - INFO - Distributed world size: 8
Vocab size: 65,536
num_layers: 20
model_dim: 1280
num_heads: 10
num_kv_heads: 10
Tokens / micro-batch / rank: 32 x 2048 = 65,536
Tokens / micro-batch: 524,288
Total batch size 524,288 => gradient accumulation steps: 1
Number of parameters: 560,988,160
Estimated FLOPs per token: 3.491758e+09
Calculated number of iterations from target data:param ratio: 21,400
Step 00000 | Validation bpb: 3.3025
"""
FOOTER = """\
Step 00020 | Validation bpb: 1.4012
Peak memory usage: 75422.02MiB
Total training time: 0.10m
Minimum validation bpb: 1.4012
"""


def upstream_step(step: int, dt_ms: float) -> str:
    """base_train's f-string of late 2025, written out here independently of bench/logline.py."""
    tok = int(524288 / (dt_ms / 1000))
    mfu = 100 * 3.491758e9 * 524288 / (dt_ms / 1000) / (989e12 * 8)
    return (f"step {step:05d}/{21400:05d} ({100 * step / 21400:.2f}%) | loss: {11.0 - step * 0.1:.6f} | "
            f"grad norm: {0.5:.4f} | lrm: {1.0:.2f} | dt: {dt_ms:.2f}ms | tok/sec: {tok:,} | "
            f"mfu: {mfu:.2f} | total time: {max(0, step - 10) * dt_ms / 60000:.2f}m")


def write_log(path, steps=20, footer=True, extra=""):
    lines = [upstream_step(s, 40000.0 if s == 0 else 500.0) for s in range(steps)]
    path.write_text(HEADER + "\n".join(lines) + "\n" + extra + (FOOTER if footer else ""))
    return path


def test_design_example_line_parses(tmp_path):
    line = ("step 00042/21400 (0.20%) | loss: 7.123456 | lrm: 1.00 | dt: 487.12ms | tok/sec: 1,076,234 | "
            "mfu: 47.52 | total time: 0.34m")
    log = tmp_path / "one.log"
    log.write_text(line + "\n")
    run = parse_log(log)
    assert run.steps == [{"step": 42, "num_iterations": 21400, "loss": 7.123456, "grad_norm": None, "lrm": 1.0,
                          "dt_ms": 487.12, "tok_per_sec": 1_076_234.0, "mfu": 47.52, "total_time_s": 0.34 * 60}]


def test_upstream_log_becomes_a_row(tmp_path):
    row = read_upstream_log(write_log(tmp_path / "base_train.log"))
    assert row["source_kind"] == "upstream_log" and row["runtime"] == "upstream" and row["status"] == "ok"
    assert row["skip_reason"] is None
    assert (row["world_size"], row["depth"], row["device_batch_size"], row["max_seq_len"],
            row["total_batch_size"]) == (8, 20, 32, 2048, 524_288)
    assert row["flops_per_token"] == pytest.approx(3.491758e9)
    assert row["steady_steps"] == 9  # steps 11..19
    assert row["tok_per_sec"] == pytest.approx(524288 / 0.5, rel=1e-5)
    assert row["peak_mem_mib"] == pytest.approx(75422.02) and row["min_val_bpb"] == pytest.approx(1.4012)
    # no GPU line in this log: MFU uses upstream's own assumed peak, and the row says so
    assert row["mfu"] == pytest.approx(100 * 3.491758e9 * row["tok_per_sec"] / (8 * UPSTREAM_PEAK))
    assert "assumed" in row["mfu_source"]


def test_an_upstream_log_whose_loss_went_nan_is_no_run_to_compare(tmp_path):
    """Upstream's base_train prints `loss: nan` and goes on: such a log is left out of the figures, the step named."""
    log = write_log(tmp_path / "base_train.log")
    log.write_text(log.read_text().replace("loss: 9.500000", "loss: nan"))
    row = read_upstream_log(log)
    assert "loss" in row["skip_reason"] and "step 15" in row["skip_reason"]


def test_gpu_line_gives_the_real_peak(tmp_path):
    log = write_log(tmp_path / "a100.log")
    log.write_text("GPU: NVIDIA A100-SXM4-80GB | Peak FLOPS (BF16): 3.12e+14\n" + log.read_text())
    row = read_upstream_log(log)
    assert row["gpu_name"] == "NVIDIA A100-SXM4-80GB" and row["mfu_source"] == "recomputed"
    assert row["mfu"] == pytest.approx(100 * 3.491758e9 * row["tok_per_sec"] / (8 * 312e12))


def test_unfinished_and_concatenated_logs_are_not_used(tmp_path):
    row = read_upstream_log(write_log(tmp_path / "cut.log", footer=False))
    assert row["status"] == "running" and "unfinished" in row["skip_reason"]
    two = write_log(tmp_path / "two.log", extra="\n".join(upstream_step(s, 500.0) for s in range(15)) + "\n")
    row = read_upstream_log(two)
    assert "several runs" in row["skip_reason"]


def test_a_flows_combined_log_takes_its_facts_from_the_training_stages_section(tmp_path):
    """A speedrun's output in one file (base_train's lines, then base_loss's and base_eval's on fewer ranks) was
    read with the last stage's start-up and closing lines winning: pre-training's row had base_eval's world size
    (its tok/s per GPU and MFU 8 times too high), peak memory and banner (runtime unknown, not upstream)."""
    def evaluation(title, ranks, mib):
        return (f"nanochat-bench: {title}\nAutodetected device type: cuda\nDistributed world size: {ranks}\n"
                f"Peak FLOPs per GPU for MFU: 989000000000000.0 (NVIDIA H200)\nval bpb: 0.9100\n"
                f"Peak memory usage: {mib}MiB\n")
    log = write_log(tmp_path / "speedrun.log")
    alone = read_upstream_log(log)
    log.write_text(log.read_text() + evaluation("base model loss (nanochat-faithful)", 1, "1000.00")
                   + evaluation("base model evaluation, CORE (nanochat-faithful)", 2, "2000.00"))
    row = read_upstream_log(log)
    assert (row["world_size"], row["peak_mem_mib"], row["runtime"], row["min_val_bpb"]) == (8, 75422.02, "upstream",
                                                                                             1.4012)
    assert row["mfu"] == pytest.approx(alone["mfu"]) and pd.isna(row.get("gpu_name")) and row["skip_reason"] is None


def test_logs_without_step_lines_are_not_runs(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\nstep 1 of the plan\n")
    assert read_upstream_log(tmp_path / "notes.txt") is None
    write_log(tmp_path / "base_train.log")
    job = tmp_path / "jobs" / "compare-n1"  # a batch job's own Slurm log repeats its runs' output
    job.mkdir(parents=True)
    (job / "job.sbatch").write_text("#!/bin/bash\n")
    write_log(job / "slurm-42.log")
    table = collect([tmp_path]).table
    assert list(table["run_id"]) == ["base_train"]


def test_upstream_logs_record_no_node_count_and_the_report_says_so(tmp_path):
    """Upstream logs carry no node count: the report's table left the cell blank and its findings read
    "upstream at 8 ranks (nodes )". Now the cell is '–' and the finding says the count was not recorded."""
    from bench.analysis.report import write_report

    (tmp_path / "runs").mkdir()
    log8 = write_log(tmp_path / "runs" / "n8.log")
    (tmp_path / "runs" / "n4.log").write_text(log8.read_text().replace("world size: 8", "world size: 4"))
    write_report(collect([tmp_path / "runs"]).table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "upstream at 8 ranks (nodes not recorded) reaches 50.0% parallel efficiency" in md and "(nodes )" not in md
    row = next(line for line in md.splitlines() if line.startswith("| upstream ") and "50.0%" in line)
    assert [c.strip() for c in row.split("|")[1:4]] == ["upstream", "8", "–"]


def test_a_cpu_log_has_no_mfu_and_trained_on_the_cpu(tmp_path):
    """A log of upstream's CPU run (`Autodetected device type: cpu`) got an MFU against the H100 peak upstream
    assumes (0.0% in the report, whose methods say none on CPU) and read as 'device not recorded'. Now it has
    no MFU and its device is the CPU, as a run of this trainer on the CPU."""
    from bench.analysis.scaling import with_config

    log = write_log(tmp_path / "cpu.log")
    log.write_text(log.read_text().replace("device type: cuda", "device type: cpu"))
    row = read_upstream_log(log)
    assert row["device_type"] == "cpu" and row.get("mfu") is None and row.get("mfu_source") is None
    assert with_config(collect([tmp_path]).table)["device"].tolist() == ["CPU"]
    assert read_upstream_log(write_log(tmp_path / "gpu.log"))["device_type"] == "cuda"


def test_the_report_says_whose_peak_the_mfu_of_a_log_without_a_gpu_line_uses(tmp_path):
    """The report's methods said MFU is none on an unknown GPU, yet a log that names no GPU shows one, against
    the H100 peak upstream assumes: the methods now say so, with that peak."""
    from bench.analysis.report import write_report

    (tmp_path / "runs").mkdir()
    write_log(tmp_path / "runs" / "n8.log")
    table = collect([tmp_path / "runs"]).table
    assert table["mfu"].notna().all() and table["gpu_name"].isna().all()
    write_report(table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "except in an upstream log that names no GPU" in md and f"{UPSTREAM_PEAK / 1e12:g} TFLOP/s" in md


def test_this_trainers_own_log_says_what_it_trained_and_on_which_gpu(tmp_path):
    """This trainer's console log (a benchmark script's output beside its runs) was read as upstream's: every such
    log was bf16 with no fused kernels on a device 'not recorded', so an --fp8 run and a bf16 one of the same shape,
    or runs on an H100 and an H200, were pooled as repeats of one point (their median a figure no run measured).
    Now the log's GPU, FP8, fused-kernel and strategy lines are read as run.json records them, and the runs are
    told apart; upstream's own log, without those lines, is read as before."""
    from bench.analysis.scaling import scaling_table

    own = ("Peak FLOPs per GPU for MFU: 989000000000000.0 (NVIDIA H200)\n{fp8}{fused}Memory strategy: {strategy}\n")
    variants = {"bf16": {}, "fp8": {"fp8": "FP8 matmuls (tensorwise, e4m3 forward, e5m2 gradients): 120 Linear(s)\n"},
                "fp8lm": {"fp8": "FP8 matmuls (tensorwise, e4m3 forward, e5m2 gradients): 121 Linear(s), "
                                 "lm_head included\n"},
                "lm-only": {"fp8": "FP8 matmuls (tensorwise, e4m3 forward, e5m2 gradients): 1 Linear(s), "
                                   "lm_head included\n"},
                "fused": {"fused": "Fused kernels: rotary_norm, softcap_loss as Triton kernels "
                                   "(bench/nanochat/fused.py)\n"},
                "fsdp": {"strategy": "fsdp+ac"}}
    (tmp_path / "logs").mkdir()
    for name, lines in variants.items():
        text = write_log(tmp_path / "logs" / f"{name}.log").read_text()
        head = own.format(**{"fp8": "", "fused": "", "strategy": "zero2", **lines})
        (tmp_path / "logs" / f"{name}.log").write_text(text.replace("Vocab size:", head + "Vocab size:"))
    (tmp_path / "logs" / "h100.log").write_text((tmp_path / "logs" / "bf16.log").read_text().replace("H200", "H100"))
    write_log(tmp_path / "logs" / "upstream.log")

    rows = {r["run_id"]: r for r in collect([tmp_path / "logs"]).table.to_dict("records")}
    assert {n: rows[n]["precision"] for n in ("bf16", "fp8", "fp8lm", "lm-only", "upstream")} == {
        "bf16": "bf16", "fp8": "fp8", "fp8lm": "fp8 + fp8 lm_head", "lm-only": "bf16 + fp8 lm_head",
        "upstream": "bf16"}
    assert rows["fused"]["fused_kernels"] == "rotary_norm,softcap_loss" and rows["fsdp"]["strategy"] == "fsdp+ac"
    assert rows["bf16"]["gpu_name"] == "NVIDIA H200" and rows["h100"]["gpu_name"] == "NVIDIA H100"
    assert rows["bf16"]["peak_flops_per_gpu"] == 989e12 and rows["bf16"]["mfu_source"] == "recomputed"
    assert pd.isna(rows["upstream"]["gpu_name"]) and pd.isna(rows["upstream"]["fused_kernels"])
    points = scaling_table(collect([tmp_path / "logs"]).table)
    assert len(points) == 8 and set(points["runs"]) == {1}  # each log its own point: no two pooled


def test_this_trainers_own_log_is_not_upstreams_runtime(tmp_path):
    """This trainer's console log was given the runtime `upstream`, so a report of results/h200-d20/same-job/ said
    that upstream ran 157,803 tok/s with ours.log's figures, beside upstream.log's own. Now a log that opens with this
    trainer's banner has no runtime (it names none: 'unknown' in the report), and upstream's log keeps `upstream`."""
    from bench.analysis.scaling import scaling_table

    same_job = REPO / "results" / "h200-d20" / "same-job"
    rows = {r["run_id"]: r["runtime"] for r in collect([same_job]).table.to_dict("records")}
    assert rows["upstream"] == "upstream" and pd.isna(rows["ours"]) and pd.isna(rows["ours-after-cleanup"])
    points = scaling_table(collect([same_job]).table)
    assert sorted(zip(points["runtime"], points["runs"])) == [("unknown", 2), ("upstream", 1)]
