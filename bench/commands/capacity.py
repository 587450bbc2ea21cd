"""`nanochat-bench capacity`: the largest model this node trains, per memory strategy (bench/capacity/).

    nanochat-bench capacity --gpus 1 --strategies zero2,fsdp,fsdp+ac,fsdp+ac+offload --out runs/capacity
    nanochat-bench capacity --depths 12,24,36 --no-batch-search --out runs/capacity   # a memory-vs-size curve
    nanochat-bench capacity --report --out runs/capacity      # the report of what is there (no probes)
"""

import re
from pathlib import Path

from bench.commands import nonempty
from bench.errors import ConfigError

DEFAULT_STRATEGIES = "zero2,fsdp,fsdp+ac,fsdp+ac+offload"
_SIZE = re.compile(r"^\s*(\d+\.?\d*|\.\d+)\s*(?:([kmgt])(ib|b)?|b)?\s*$", re.IGNORECASE)  # one number: not 1.5.5
# Under ~256M a rank fails in its start-up, not in the model: pyarrow's import (~200M), gloo's threads, the token
# files' mapping, all after the cap is set (bench/capacity/capped.py); the probe was recorded failed, not oom. The
# smallest probe (d2-a32-b1, --seq 64, 1 and 2 ranks) reached its model from 256M; this floor keeps a margin.
MIN_MEMORY_LIMIT_MIB = 320
WHY_MIN = ("under ~256M a rank fails in its start-up, importing pyarrow, starting gloo's threads or mapping the token "
           "files, not in the model")


def parse_size(text: str) -> int:
    """`760M`, `2G`, `1.5GiB`, `123456` -> bytes: K, M, G, T and KiB ... TiB are powers of 1024, KB ... TB of 1000."""
    m = _SIZE.match(str(text))
    if not m:
        raise ConfigError(f"--memory-limit {text!r}: give bytes or a size such as 760M, 2G, 1.5GiB (K, M, G: powers "
                          "of 1024, as KiB, MiB, GiB; KB, MB, GB: of 1000)")
    # 2GB is 2e9 bytes, as a vendor's GB is; README's 875M and the floor's 320M are MiB, as Slurm's --mem 875M is
    base = 1000 if (m[3] or "").lower() == "b" else 1024
    size = int(float(m[1]) * base ** " kmgt".index((m[2] or " ").lower()))
    if size < 1:  # 0.1 bytes: named as given, not as the 0 it rounds to
        raise ConfigError(f"--memory-limit {text!r}: less than a byte; give a size such as 760M, 2G, 1.5GiB")
    if size < MIN_MEMORY_LIMIT_MIB << 20:
        units = [u for u in "MG" if float(m[1]) * 1024 ** " kmgt".index(u.lower()) >= MIN_MEMORY_LIMIT_MIB << 20]
        give = f"a unit forgotten? give e.g. {' or '.join(m[1] + u for u in units)}" if not m[2] and units else \
            "give e.g. 760M, 2G, 1.5GiB"
        raise ConfigError(f"--memory-limit {text!r}: {size:,} bytes, too little for a probe to start (at least "
                          f"{MIN_MEMORY_LIMIT_MIB}M: {WHY_MIN}); {give}")
    return size


def parse_ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(t) for t in str(text).split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"{flag} {text!r}: give comma-separated positive integers, e.g. 12,24,36")
    return values


def parse_strategies(text: str) -> list[str]:
    """`zero2, fsdp,fsdp+ac` -> the names, trimmed, empty items left out (SweepConfig checks each)."""
    return [s.strip() for s in str(text).split(",") if s.strip()]


def register(subparsers) -> None:
    p = subparsers.add_parser("capacity", help="the largest model this node trains, per memory strategy",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=None, help="ranks per probe (default: the GPUs here, else 1)")
    p.add_argument("--strategies", default=DEFAULT_STRATEGIES,
                   help=f"comma-separated values of the trainer's --strategy (default: {DEFAULT_STRATEGIES})")
    p.add_argument("--search", action="store_true",
                   help="find each strategy's largest model (the default when no --depths are given)")
    p.add_argument("--depths", default=None, help="also measure these depths at batch 1 (e.g. 12,24,36)")
    p.add_argument("--aspect-ratios", default="64", help="widths = depth x each of these (default: 64, nanochat's)")
    p.add_argument("--max-depth", type=int, default=128, help="largest depth the search considers (default: 128)")
    p.add_argument("--seq", type=int, default=2048, help="sequence length (default: 2048)")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per probe (default: 3)")
    p.add_argument("--time-per-point", type=float, default=600.0,
                   help="seconds a probe may take before it counts as a hang (default: 600)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole sweep: no probe starts after it (default: none); run again to resume")
    p.add_argument("--no-batch-search", dest="batch_search", action="store_false",
                   help="skip the tok/s probes at the largest batch that fits")
    p.add_argument("--max-batch", type=int, default=64, help="largest device batch tried for tok/s (default: 64)")
    p.add_argument("--vocab-size", type=int, default=65536, help="vocabulary of the probes' tokenizer (default: 65536)")
    p.add_argument("--memory-limit", default=None,
                   help="CPU stand-in for a smaller machine: address space each rank may add after start-up "
                        "(RLIMIT_AS), e.g. 760M (M, G: MiB, GiB; MB, GB: 10^6, 10^9 bytes)")
    p.add_argument("--device-type", default="", choices=["", "cuda", "cpu"], help="default: cuda if a GPU is visible")
    p.add_argument("--out", default="runs/capacity", type=nonempty("--out", "a directory"),
                   help="sweep directory; an existing one is resumed "
                   "(default: runs/capacity)")
    p.add_argument("--report", action="store_true", help="write <out>/report/capacity.md and figures; alone: "
                   "only the report of what <out> holds")
    p.set_defaults(func=cmd_capacity)


def cmd_capacity(args) -> int:
    from bench.capacity.sweep import SweepConfig, Sweep

    out = Path(args.out)
    depths = parse_ints(args.depths, "--depths") if args.depths else []
    if not (args.report and not args.search and not depths):
        nproc, gpu = _gpus() if args.gpus is None else (args.gpus, None)  # --gpus 0 is refused, not read as unset
        cfg = SweepConfig(out=out, strategies=parse_strategies(args.strategies),
                          nproc=nproc, search=args.search or not depths, depths=depths,
                          aspect_ratios=parse_ints(args.aspect_ratios, "--aspect-ratios"), max_depth=args.max_depth,
                          max_seq_len=args.seq, steps=args.steps, time_per_point=args.time_per_point,
                          budget_s=args.budget, batch_search=args.batch_search, max_batch=args.max_batch,
                          vocab_size=args.vocab_size,
                          memory_limit=parse_size(args.memory_limit) if args.memory_limit else None,
                          device_type=args.device_type)
        Sweep(cfg, gpus_counted=args.gpus is None, gpu=gpu).run()
        print(f"summary: {out / 'summary.json'} (every probe: {out / 'probes.csv'})")
    if args.report:
        from bench.analysis.capacity import write_capacity_report
        from bench.capacity.rebuild import rebuild_summary, summary_is_stale
        from bench.capacity.sweep import SUMMARY_JSON, load_summary

        if out.exists() and not out.is_dir():  # else read as a sweep without a summary or a probe
            raise ConfigError(f"--out {out} is a file, not a directory; give the directory a capacity sweep wrote")
        # a sweep that was killed before it could write one, or after an earlier sweep had written its own
        if not (out / SUMMARY_JSON).is_file() or summary_is_stale(out):
            rebuilt = rebuild_summary(out)["rebuilt"]
            print(f"{out / SUMMARY_JSON}: rebuilt from the finished probes under {out / 'runs'} ({rebuilt})")
        path = write_capacity_report([out], out / "report")
        print(f"report: {path}")
        if stopped := load_summary(out).get("interrupted"):
            print(f"note: the sweep did not finish ({stopped}): the report holds the probes that did; run the "
                  "same command without --report to resume it")
    return 0


def _gpus() -> tuple[int, tuple | None]:
    """(the default --gpus, the first GPU's (name, bytes) where it was asked: the sweep's machine, not asked again)."""
    import sys

    from bench.capacity.sweep import _gpu, gpu_count, visible_gpus

    if visible_gpus() == []:
        return 1, None
    if (gpu := _gpu())[0] is None:
        return 1, gpu
    count, why = gpu_count()
    if why:  # the ranks' own list is the best count left; without one, the least there is
        counted = f"counted from CUDA_VISIBLE_DEVICES: probing with {count}" if count else "not counted: probing with 1"
        print(f"note: nvidia-smi -L {why}, so the GPUs were {counted}; give --gpus N for another count",
              file=sys.stderr)
    return max(1, count or 0), gpu
