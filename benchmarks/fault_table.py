"""Runs each fault of the injection suite once and prints a Markdown table of how the run ended.

    python benchmarks/fault_table.py                         # every fault, Slurm ones included (root)
    python benchmarks/fault_table.py --cases kill9_rank0,sigstop_rank1 --cap 120
    python benchmarks/fault_table.py --no-slurm --out /tmp/faults.md

Columns: the fault; seconds from the fault (or from launch, for faults at start) until the last
process of the run ended ("> N, killed" when some were still alive after the cap and were killed);
run.json's status and message (or the error line of a command refused before any run); the events
metrics.jsonl still yields (bench.analysis.rundir.read_events); whether a Python traceback reached
stderr or a log; and whether the outcome meets the goal of issue 15, else its first miss.
The faults and their goals are tests/faults/cases.py; the tests assert the same goals.
"""

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "faults"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cases import CASES, Ctx  # noqa: E402
from harness import Unavailable, problems  # noqa: E402

MESSAGE_CHARS = 90


def tiny_base_dir(root: Path) -> Path:
    """The test suite's tiny data (tests/conftest.py): 3 shards x 256 documents, row groups of 16, vocab 512."""
    from bench.nanochat import dataset, tokenizer

    base = root / "base"
    os.environ["NANOCHAT_BASE_DIR"] = str(base)
    os.environ.pop("NANOCHAT_VAL_FILES_K", None)
    dataset.generate_shards(3, 256, 16)
    tokenizer.train_tokenizer(vocab_size=512)
    del os.environ["NANOCHAT_BASE_DIR"]
    return base


def short(text: str | None, n: int = MESSAGE_CHARS) -> str:
    text = " ".join((text or "").split())
    return (text[: n - 1] + "…" if len(text) > n else text).replace("|", "\\|")


def last_line(text: str) -> str:
    """The last line a command printed (the exception of a traceback, say)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def row(case, outcome, cap: float) -> list[str]:
    if outcome is None:
        return [case.title, "–", "–", "not staged here", "–", "–", "–"]
    seconds = f"> {cap:.0f}, killed" if outcome.seconds is None else f"{outcome.seconds:.1f}"
    status = outcome.status or ("refused" if outcome.error_lines else "–")
    message = outcome.message or (outcome.error_lines[0] if outcome.error_lines else None) or \
        (outcome.run_json_problem if outcome.run_dir else last_line(outcome.output))
    missed = problems(outcome, case.expect)
    return [case.title, seconds, status, short(message), "–" if outcome.events is None else str(outcome.events),
            "yes" if outcome.traceback else "no", "yes" if not missed else f"no: {short(missed[0], 70)}"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    p.add_argument("--cap", type=float, default=60.0, help="seconds to wait for a run to end before killing it "
                                                            "(at least each case's bound; default: 60)")
    p.add_argument("--no-slurm", action="store_true", help="leave out the Slurm cases")
    p.add_argument("--out", default=None, help="also write the table to this file")
    p.add_argument("--keep", default=None, metavar="DIR", help="stage the cases under DIR and keep it (default: "
                                                               "a temporary directory, removed)")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.cases.split(",") if n.strip()] or [c.name for c in CASES]
    if unknown := [n for n in names if n not in {c.name for c in CASES}]:  # else left out without a word
        p.error(f"--cases: no case {', '.join(unknown)}; the cases: {', '.join(c.name for c in CASES)}")
    wanted = [c for c in CASES if c.name in names and not (c.slurm and args.no_slurm)]
    header = ["fault", "s until last process ended", "status", "message", "events kept", "traceback", "meets goal"]
    align = [":---", "---:", ":---", ":---", "---:", ":---", ":---"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="faults-")) as tmp:
        root = Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        base = tiny_base_dir(root)
        cluster = None
        if any(c.slurm for c in wanted):
            from cluster import FaultCluster

            cluster = FaultCluster(root / "slurm").start()
        try:
            for i, case in enumerate(wanted):
                ctx = Ctx(work=root / f"{i:02d}-{case.name}", base_dir=base, cap_s=args.cap, cluster=cluster)
                ctx.work.mkdir()
                t = time.time()
                try:
                    outcome = case.run(ctx)
                except Unavailable as e:
                    print(f"{case.name}: not staged ({e})", file=sys.stderr)
                    outcome = None
                lines.append("| " + " | ".join(row(case, outcome, case.cap(ctx))) + " |")
                print(f"{case.name}: {time.time() - t:.0f}s", file=sys.stderr, flush=True)
        finally:
            if cluster is not None:
                cluster.stop()
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
