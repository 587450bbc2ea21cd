"""Our chat_sft against upstream nanochat 5c93a56's own scripts/chat_sft.py: the same staged data, tokenizer and
initial weights, the first training steps' losses compared.

    NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat PYTHONPATH=$PWD \\
        /tmp/upstream-venv/bin/python benchmarks/compare_chat_sft.py [--steps 20] [--base-dir DIR]

Needs a checkout of upstream karpathy/nanochat at 5c93a56 (never vendored here) and, in this Python, the
`datasets` package upstream loads with. Into one NANOCHAT_BASE_DIR (a temporary one unless --base-dir) go
generated shards, a 512-token tokenizer, `data generate --chat` stand-ins and a tiny base checkpoint trained by
our trainer; both sides then fine-tune that checkpoint on CPU in one process (`--source=base`), upstream's
`load_dataset` redirected to the staged parquet files by benchmarks/compare_chat_data.py. Upstream's wandb import
gets an empty module (the run is "dummy": wandb is never called), and its report section is not written (its
module needs psutil; the report is not compared). Both score MMLU and ARC-Easy at the last step, on a few
problems (--eval_metrics_max_problems).

Compared: every training step's loss (within --rtol), its num_tokens, each validation loss and the accuracies'
line; exit status 1 on any difference.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEP_RE = re.compile(r"^Step (\d+)/(\d+) \| Training loss: ([-\d.naninf]+)\| lrm: ([-\d.]+)\| num_tokens: ([\d,]+)")
VAL_RE = re.compile(r"^Step (\d+) \| Validation loss: ([-\d.naninf]+)")
METRICS_RE = re.compile(r"^Step (\d+) \| (mmlu_acc: .*)$")
BASE_FLAGS = ["--device_type=cpu", "--depth=2", "--max_seq_len=256", "--device_batch_size=2",
              "--total_batch_size=512", "--num_iterations=5", "--save_every=5", "--eval_every=-1",
              "--sample_every=-1", "--preflight=0"]


def sft_flags(steps: int) -> list[str]:
    """The flags both sides run with (upstream's configurator takes the same --key=value)."""
    return ["--device_type=cpu", "--source=base", "--device_batch_size=2", "--target_examples_per_step=4",
            f"--num_iterations={steps + 1}", "--eval_every=10", "--eval_steps=2",
            f"--eval_metrics_every={10 * steps}", "--eval_metrics_max_problems=8"]  # the metrics at the last step


def stage(base: Path) -> None:
    """Shards, tokenizer, chat stand-ins and the tiny base checkpoint, unless already there."""
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cli = [sys.executable, "-m", "bench.cli"]
    steps = []
    if not (base / "base_data").is_dir():
        steps.append(cli + ["data", "generate", "--shards", "3", "--docs-per-shard", "256", "--row-group-size", "16"])
    if not (base / "chat_data").is_dir():
        steps.append(cli + ["data", "generate", "--chat"])
    if not (base / "tokenizer" / "tokenizer.pkl").is_file():
        steps.append(cli + ["tokenizer", "train", "--vocab_size", "512"])
    if not (base / "base_checkpoints" / "d2").is_dir():
        steps.append([sys.executable, "-m", "bench.nanochat.train"] + BASE_FLAGS)
    for command in steps:
        subprocess.run(command, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)


def run_side(command: list[str], base: Path, cwd: Path) -> dict:
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=str(REPO), OMP_NUM_THREADS="1",
               HF_DATASETS_OFFLINE="1", HF_HOME=str(base / "hf"))
    env.pop("NANOCHAT_BENCH_RUN_DIR", None)
    out = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"error: {' '.join(command[:4])} ... failed ({out.returncode}):\n{out.stderr[-3000:]}")
    steps, vals, metrics = {}, {}, {}
    for line in out.stdout.splitlines():
        if m := STEP_RE.match(line):
            steps[int(m[1])] = (float(m[3]), int(m[5].replace(",", "")))
        elif m := VAL_RE.match(line):
            vals[int(m[1])] = float(m[2])
        elif m := METRICS_RE.match(line):
            metrics[int(m[1])] = m[2]
    return {"steps": steps, "vals": vals, "metrics": metrics}


def upstream_child(upstream: Path, argv: list[str]) -> None:
    """In upstream's checkout (its configurator is read by a relative path): run its chat_sft as __main__."""
    import importlib
    import runpy

    sys.path[:0] = [str(upstream), str(REPO / "benchmarks"), str(REPO)]
    sys.modules["wandb"] = types.ModuleType("wandb")  # imported at the top, never used by a "dummy" run
    report = sys.modules["nanochat.report"] = types.ModuleType("nanochat.report")  # its markdown report: not compared
    report.get_report = lambda: types.SimpleNamespace(log=lambda **_: None)
    from compare_chat_data import OURS, redirect_load_dataset

    for module in OURS:
        importlib.import_module(module)  # upstream's task modules, so their load_dataset can be redirected
    redirect_load_dataset()
    sys.argv = ["scripts/chat_sft.py", *argv]
    runpy.run_module("scripts.chat_sft", run_name="__main__")


def compare(ours: dict, theirs: dict, steps: int, rtol: float) -> list[str]:
    problems = []
    for step in range(steps):
        a, b = ours["steps"].get(step), theirs["steps"].get(step)
        if a is None or b is None:
            problems.append(f"step {step}: {'no line here' if a is None else 'no line upstream'}")
            continue
        same = abs(a[0] - b[0]) <= rtol * abs(b[0]) and a[1] == b[1]
        print(f"{'same' if same else 'DIFF'}  step {step:3d}: loss {a[0]:.6f} here, {b[0]:.6f} upstream; "
              f"num_tokens {a[1]:,} / {b[1]:,}")
        if not same:
            problems.append(f"step {step}")
    for step in sorted(set(ours["vals"]) | set(theirs["vals"])):
        a, b = ours["vals"].get(step), theirs["vals"].get(step)
        same = a is not None and b is not None and abs(a - b) <= rtol * abs(b)
        print(f"{'same' if same else 'DIFF'}  validation at step {step}: {a} here, {b} upstream")
        if not same:
            problems.append(f"validation at step {step}")
    for step in sorted(set(ours["metrics"]) | set(theirs["metrics"])):
        a, b = ours["metrics"].get(step), theirs["metrics"].get(step)
        print(f"{'same' if a == b else 'DIFF'}  metrics at step {step}: {a} here, {b} upstream")
        if a != b:
            problems.append(f"metrics at step {step}")
    return problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--steps", type=int, default=20, help="training steps compared")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of a loss")
    p.add_argument("--base-dir", help="NANOCHAT_BASE_DIR to stage into and run in (default: a temporary one)")
    p.add_argument("--upstream-child", action="store_true", help=argparse.SUPPRESS)
    args, rest = p.parse_known_args(argv)
    upstream = Path(os.environ.get("NANOCHAT_UPSTREAM_DIR", "/tmp/upstream-nanochat")).resolve()
    if args.upstream_child:
        upstream_child(upstream, rest)
        return 0
    if not (upstream / "scripts" / "chat_sft.py").is_file():
        print(f"error: no upstream nanochat checkout at {upstream} (set NANOCHAT_UPSTREAM_DIR)")
        return 2
    with tempfile.TemporaryDirectory(prefix="sft-compare-") as tmp:
        base = Path(args.base_dir or tmp).resolve()
        base.mkdir(parents=True, exist_ok=True)
        stage(base)
        flags = sft_flags(args.steps)
        ours = run_side([sys.executable, "-m", "bench.nanochat.chat_sft", *flags, "--preflight=0"], base, REPO)
        theirs = run_side([sys.executable, str(Path(__file__).resolve()), "--upstream-child", *flags], base, upstream)
    problems = compare(ours, theirs, args.steps, args.rtol)
    print("all same" if not problems else f"{len(problems)} difference(s): {', '.join(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
