"""Where a profiled step's GPU time went, from the trace that `--profile_step=N` writes.

    python benchmarks/profile_summary.py RUN_DIR/profile_step12.json [--top 25]

Sums the device kernels of a Chrome trace (torch.profiler's export) by kind: matmuls, attention,
compiled elementwise / reduction kernels (Triton), optimizer, communication, copies, and the GPU's
idle time inside the step's wall span; then the largest kernels by name.
"""

import argparse
import json
import sys
from collections import defaultdict

# First match wins: (kind, substrings of a kernel's name, lower-cased).
KINDS = [
    ("communication", ("nccl",)),
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("matmul", ("gemm", "cutlass", "sm90_xmma", "nvjet", "matmul")),
    ("compiled (Triton)", ("triton",)),
    ("optimizer", ("adam", "foreach", "multi_tensor")),
    ("copy / fill", ("memcpy", "memset", "copy", "fill")),
]


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in KINDS if any(k in low for k in keys)), "other")


def is_kernel(event) -> bool:
    """A device kernel, copy or fill that took time: one of 0 us adds nothing (and all of them would make every
    share a division by zero)."""
    return isinstance(event, dict) and event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") \
        and isinstance(event.get("name"), str) and all(type(event.get(k)) in (int, float) for k in ("ts", "dur")) \
        and event["dur"] > 0


def time_covered(kernels: list[dict]) -> float:
    """Microseconds in which at least one kernel ran: the union of their intervals, overlaps counted once."""
    covered, end = 0.0, float("-inf")
    for start, stop in sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels):
        covered += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return covered


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="profile_step<N>.json from a run directory")
    ap.add_argument("--top", type=int, default=25, help="kernels to list by name (default 25; 0: none)")
    args = ap.parse_args()
    if args.top < 0:  # a slice [:-1] would list every kernel but the last, silently
        ap.error(f"--top {args.top}: give how many kernels to list by name, 0 or more")
    try:
        with open(args.trace) as f:
            events = json.load(f)["traceEvents"]
        if not isinstance(events, list):
            raise TypeError("traceEvents is not a list")
    except (OSError, ValueError, KeyError, TypeError) as e:  # TypeError: JSON of another shape (a list, ...)
        print(f"error: {args.trace}: not a readable Chrome trace ({e})", file=sys.stderr)
        return 2
    kernels = [e for e in events if is_kernel(e)]
    if not kernels:
        print(f"error: {args.trace}: no GPU kernels with a duration in the trace (a CPU run?)", file=sys.stderr)
        return 2
    by_kind, by_name, count = defaultdict(float), defaultdict(float), defaultdict(int)
    for e in kernels:
        by_kind[kind_of(e["name"])] += e["dur"]
        by_name[e["name"]] += e["dur"]
        count[e["name"]] += 1
    busy = sum(by_kind.values())
    span = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    covered = time_covered(kernels)  # kernels of several streams (NCCL beside compute) overlap
    overlap = f", {(busy - covered) / 1e3:,.1f} ms of it beside another stream's" if busy > covered else ""
    print(f"{len(kernels):,} kernels; GPU span {span / 1e3:,.1f} ms, kernel time {busy / 1e3:,.1f} ms{overlap} "
          f"(idle {100 * (1 - covered / span) if span else 0:.1f}% of the span)")
    print(f"\n{'kind':<22}{'ms':>10}{'share':>8}")
    for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"{kind:<22}{us / 1e3:>10.1f}{100 * us / busy:>7.1f}%")
    print(f"\n{'ms':>9}{'share':>7}{'calls':>7}  kernel")
    for name, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{us / 1e3:>9.1f}{100 * us / busy:>6.1f}%{count[name]:>7}  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
