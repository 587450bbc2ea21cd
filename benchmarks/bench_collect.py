"""Times `collect` and `report` on many generated run directories (goal: under 10 s each on 2 cores).

    OMP_NUM_THREADS=1 python benchmarks/bench_collect.py                  # 10,000 runs of 50 steps
    python benchmarks/bench_collect.py --runs 2000 --steps 200 --workers 2

Prints one line per phase: generation (not part of the goal), a cold collect, an incremental
collect with nothing changed, one with 1% of the runs changed, and the report (tables + figures).
"""

import argparse
import json
import os
import resource
import tempfile
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: bench and tests.support

from bench import contract  # noqa: E402
from bench.analysis.collect import collect  # noqa: E402
from bench.analysis.report import write_report  # noqa: E402
from tests.support.synthetic import SweepSpec, generate_sweep  # noqa: E402

GOAL_S = 10.0


def spec_for(runs: int, steps: int) -> SweepSpec:
    """A sweep of about `runs` run directories: 5 runtimes x 8 GPU counts x as many repeats as needed."""
    runtimes = {"bare": 1.0, "ce": 0.99, "pyxis": 0.99, "apptainer": 0.97, "podman": 0.96}
    world_sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    repeats = max(1, round(runs / (len(runtimes) * len(world_sizes))))
    return SweepSpec(runtimes=runtimes, world_sizes=world_sizes, repeats=repeats, steps=steps)


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the collect workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(label: str, fn):
    """(result, wall seconds, CPU seconds): CPU time tells the cost when other work shares the cores."""
    t, c = time.perf_counter(), cpu_seconds()
    result = fn()
    return result, time.perf_counter() - t, cpu_seconds() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10_000, help="run directories to generate (default: 10000)")
    ap.add_argument("--steps", type=int, default=50, help="step events per run (default: 50)")
    ap.add_argument("--workers", type=int, default=None, help="collect processes (default: CPU count, max 8)")
    ap.add_argument("--dir", default=None, help="an existing directory to work in, e.g. on the filesystem to "
                    "measure: the runs go into a temporary directory under it, removed after (default: the "
                    "system's temporary directory)")
    args = ap.parse_args()
    if args.dir and not (os.path.isdir(args.dir) and os.access(args.dir, os.W_OK | os.X_OK)):  # else a traceback
        ap.error(f"--dir {args.dir}: not a writable directory" if os.path.exists(args.dir) else
                 f"--dir {args.dir}: no such directory (give an existing one)")

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root, out = Path(tmp) / "runs", Path(tmp) / "table"
        dirs, t_gen, _ = timed("generate", lambda: generate_sweep(root, spec_for(args.runs, args.steps)))
        print(f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f} runs={len(dirs)} steps/run={args.steps} "
              f"workers={args.workers or 'auto'}")
        print(f"generate                {t_gen:7.2f} s wall  (not part of the goal)")
        res, wall, cpu = timed("collect", lambda: collect([root], out, workers=args.workers))
        _line("collect (cold)", wall, cpu, f"read {res.read}")
        res, wall, cpu = timed("collect", lambda: collect([root], out, workers=args.workers))
        _line("collect (no change)", wall, cpu, f"read {res.read}, unchanged {res.reused}")
        for d in dirs[:: 100]:  # 1% of the runs get one more event
            with open(d / contract.METRICS_JSONL, "a") as f:
                f.write(json.dumps({"event": "val", "t": time.time(), "step": 0, "val_bpb": 1.0}) + "\n")
        res, wall, cpu = timed("collect", lambda: collect([root], out, workers=args.workers))
        _line("collect (1% changed)", wall, cpu, f"read {res.read}, unchanged {res.reused}")
        _, wall, cpu = timed("report", lambda: write_report(res.table, Path(tmp) / "report", source=str(root)))
        _line("report (md+html+figs)", wall, cpu, "")


def _line(label: str, wall: float, cpu: float, what: str) -> None:
    verdict = "met" if wall < GOAL_S else "MISSED"
    print(f"{label:22s} {wall:7.2f} s wall {cpu:7.2f} s cpu  [goal < {GOAL_S:.0f} s: {verdict}]  {what}")


if __name__ == "__main__":
    main()
