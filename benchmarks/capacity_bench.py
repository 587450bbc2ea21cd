"""One GPU host's capacity per memory strategy, within one time budget, and the memory model's error there.

    python benchmarks/capacity_bench.py OUT_DIR                # one GPU: zero2, fsdp, fsdp+ac, fsdp+ac+offload
    python benchmarks/capacity_bench.py OUT_DIR --tiny         # the same on CPU, tiny, under an address-space cap

Self-contained with no network: the probes' tokenizer (65,536 tokens) and random tokens are generated in
seconds (bench/capacity/data.py). It runs `nanochat-bench capacity` (bench/capacity/sweep.py) with
--budget (default 480 s: no probe starts after it, a running one is stopped at it), so the whole command
ends within about 9 minutes: per strategy a depth-24 point, then the capacity at device batch 1 (seq 2048,
3 optimizer steps a probe, no torch.compile, the first probe where the memory model puts the border);
then the tok/s at the largest batch that fits. Then it compares the model with every measured peak
(memory_check.csv), refits its constants (calibration.json, memory_calibration.json's format) and writes
the capacity report (report/capacity.md). Running it again with the same OUT_DIR resumes: probes already
done are read back. On a CPU host without --tiny it refuses at once (the probes' memory would be the host's),
naming settings that fit.
"""

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path

REPO = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, REPO)

from bench.analysis.capacity import write_capacity_report  # noqa: E402
from bench.capacity import calibrate  # noqa: E402
from bench.capacity.cpuhost import TINY_MEMORY_LIMIT_MIB  # noqa: E402
from bench.capacity.sweep import Sweep, SweepConfig  # noqa: E402
from bench.commands.capacity import parse_strategies  # noqa: E402
from bench.errors import ConfigError  # noqa: E402

# fsdp first (the reference of the ratios), offload before fsdp+ac: should the budget run short, the
# prediction that checkpointing adds nothing at batch 1 is the one left unmeasured.
STRATEGIES = "fsdp,zero2,fsdp+ac+offload,fsdp+ac"
GPU = dict(max_seq_len=2048, aspect_ratios=[64], max_depth=128, depths=[24], max_batch=32, vocab_size=65536)
# CPU: widths 32 x depth, so Newton-Schulz stays cheap; the cap puts the border inside the family.
TINY = dict(max_seq_len=64, aspect_ratios=[32], max_depth=8, depths=[], max_batch=2, vocab_size=65536,
            memory_limit=TINY_MEMORY_LIMIT_MIB << 20, device_type="cpu")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="output directory: runs/, summary.json, probes.csv, memory_check.csv, report/")
    ap.add_argument("--strategies", default=STRATEGIES, help=f"default: {STRATEGIES}")
    ap.add_argument("--gpus", type=int, default=1, help="ranks per probe (default: 1)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds of probes in all (default: 480)")
    ap.add_argument("--time-per-point", type=float, default=200.0, help="a probe's own limit (default: 200 s)")
    ap.add_argument("--max-batch", type=int, default=None, help="largest batch of the tok/s probes (1 = none; "
                    "default: 32 on a GPU, 2 with --tiny)")
    ap.add_argument("--tiny", action="store_true",
                    help=f"CPU, tiny shapes, {TINY_MEMORY_LIMIT_MIB} MiB cap per rank: checks the command")
    args = ap.parse_args(argv)

    t0 = time.time()
    out = Path(args.out).resolve()
    preset = dict(TINY if args.tiny else GPU)
    if args.max_batch is not None:  # 0 is refused by SweepConfig, not read as unset
        preset["max_batch"] = args.max_batch
    try:
        cfg = SweepConfig(out=out, strategies=parse_strategies(args.strategies), nproc=args.gpus, search=True, steps=3,
                          time_per_point=args.time_per_point, budget_s=args.budget, **preset)
        summary = Sweep(cfg, log=lambda line: print(line, flush=True)).run()
    except ConfigError as e:  # e.g. a CPU host without --tiny: one line naming what would fit
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: the probe is ended, the finished ones summarised
        summary = out / "summary.json"  # written only once a probe has finished
        print(f"interrupted; the finished probes are in {summary}" if summary.is_file() else
              "interrupted before any probe finished; nothing summarised", file=sys.stderr)
        return 130

    rows = calibrate.check(summary)
    write_rows(out / "memory_check.csv", rows)
    print("\n" + error_line(rows))
    for r in rows:
        meas = f"{r['measured_peak_bytes'] / 2**30:7.1f}" if r["measured_peak_bytes"] else "      -"
        host = f"  host {r['measured_host_bytes'] / 2**30:.1f} vs {r['predicted_host_bytes'] / 2**30:.1f} GiB" \
            if r["measured_host_bytes"] else ""
        err = f"{100 * r['error']:+6.1f}%" if r["error"] is not None else "      "
        print(f"  {r['strategy']:<16} d{r['depth']:<3} b{r['device_batch_size']:<3} measured {meas} GiB  predicted "
              f"{r['predicted_peak_bytes'] / 2**30:7.1f} GiB {err} ({r['phase']}){host}")
    fitted, facts = calibrate.refit(summary)
    (out / "calibration.json").write_text(json.dumps(fitted, indent=2) + "\n")
    after = [abs(r["error"]) for r in calibrate.check(summary, fitted) if r["error"] is not None]
    print(f"refit over {facts['probes_used']} backward-bound probe(s): {facts['fitted'] or 'nothing to fit'}"
          + (f"; largest error after it {100 * max(after):.1f}%" if after and facts["fitted"] else ""))
    report = write_capacity_report([out], out / "report")
    print(f"report: {report}\nsummary: {out / 'summary.json'}\nwall time {time.time() - t0:.0f} s")
    return 0


def error_line(rows: list[dict]) -> str:
    """The memory model's errors against the measured peaks (calibrate.check's rows): how many, largest, median."""
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    return f"memory model vs measured peak: {len(errors)} probe(s)" + (
        f", largest error {100 * max(errors):.1f}%, median {100 * statistics.median(errors):.1f}%" if errors else "")


def write_rows(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["strategy"])
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    sys.exit(main())
