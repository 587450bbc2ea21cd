"""Our base_loss and base_eval (CORE) against upstream nanochat's own scripts, on one checkpoint and one bundle.

    NANOCHAT_BASE_DIR=/tmp/core-compare python benchmarks/compare_core_eval.py \\
        [--upstream /tmp/upstream-nanochat] [--upstream-python /tmp/upstream-venv/bin/python] [--max-per-task 16]

Needs a checkout of upstream karpathy/nanochat at 5c93a56 (never vendored here) and a Python with its
dependencies. What $NANOCHAT_BASE_DIR lacks is made first: shards and a 1,024-token tokenizer (as the smoke job
makes them), a depth-2 base checkpoint trained by our trainer (`--save_every`), and a generated eval bundle.
Upstream's GPT loads our checkpoint as it is (same state-dict layout and meta), and its tokenizer our
tokenizer.pkl. Both sides run on the CPU: upstream's `scripts.base_loss` and `scripts.base_eval` in one process
(its distributed set-up is NCCL only), ours as our stages (base_eval with --nproc ranks, the examples strided).

Compared: train and val bpb (upstream's script prints 4 decimals: equal within 5e-5; its evaluate_bpb called as
the script calls it gives the full figure: equal within a relative 1e-6), the seven samples (equal), each
task's accuracy and centred accuracy and CORE (upstream's CSV, 6 decimals: equal within 5e-7). Exit status 1 on
any difference.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PREFIX = "<|bos|>"
# upstream's own functions, called as its base_loss calls them, for the bpb in full precision (its script prints
# 4 decimals); run by the upstream Python in the upstream checkout
UPSTREAM_BPB = """
import json, sys
from nanochat.checkpoint_manager import load_model
from nanochat.common import compute_init
from nanochat.dataloader import tokenizing_distributed_data_loader
from nanochat.loss_eval import evaluate_bpb
from nanochat.tokenizer import get_token_bytes
B, split_tokens = int(sys.argv[1]), int(sys.argv[2])
_, _, _, _, device = compute_init("cpu")
model, _, meta = load_model("base", device, phase="eval")
T = meta["model_config"]["sequence_len"]
out = {s: evaluate_bpb(model, tokenizing_distributed_data_loader(B, T, s, device=device), split_tokens // (B * T),
                       get_token_bytes(device=device)) for s in ("train", "val")}
print("BPB " + json.dumps(out))
"""


def sh(cmd: list[str], env: dict, cwd: Path | None = None) -> str:
    """stdout+stderr of a command; the upstream scripts end in a traceback at their report (psutil), after
    every figure is printed, so the exit status is not checked here: missing figures are."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return proc.stdout + proc.stderr


def prepare(base: Path, env: dict, steps: int) -> None:
    if not (base / "tokenizer" / "tokenizer.pkl").is_file():
        subprocess.run([sys.executable, "-c", "from pathlib import Path; from bench.commands.workload import "
                        f"prepare_smoke_data; prepare_smoke_data(Path({str(base)!r}))"], env=env, check=True)
    if not list((base / "base_checkpoints").glob("*/model_*.pt")):
        subprocess.run([sys.executable, "-m", "bench.nanochat.train", "--depth=2", "--max_seq_len=128",
                        "--device_batch_size=8", "--total_batch_size=1024", f"--num_iterations={steps}",
                        "--eval_every=-1", "--sample_every=-1", f"--save_every={steps}", "--model_tag=d2",
                        "--run=compare"], env=env, check=True, stdout=subprocess.DEVNULL)
    if not (base / "eval_bundle" / "core.yaml").is_file():
        subprocess.run([sys.executable, "-m", "bench.cli", "data", "generate", "--eval-bundle"], env=env, check=True)


def bpb_and_samples(text: str) -> tuple[dict, list[str]]:
    bpb = {m[1]: float(m[2]) for m in re.finditer(r"^(train|val) bpb: ([0-9.]+)$", text, re.M)}
    return bpb, [line for line in text.splitlines() if line.startswith(SAMPLE_PREFIX)]


def csv_rows(text: str) -> dict:
    """{label: (accuracy, centred)} and CORE: (None, core) from the CSV printed (or written)."""
    rows = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0] not in ("Task", ""):
            try:
                rows[parts[0]] = (float(parts[1]) if parts[1] else None, float(parts[2]))
            except ValueError:
                continue
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", default=os.environ.get("NANOCHAT_UPSTREAM_DIR", "/tmp/upstream-nanochat"))
    ap.add_argument("--upstream-python", default=os.environ.get("UPSTREAM_PYTHON", sys.executable),
                    help="an interpreter with upstream's requirements (default: $UPSTREAM_PYTHON, else this one)")
    ap.add_argument("--max-per-task", type=int, default=16)
    ap.add_argument("--device-batch-size", type=int, default=4)
    ap.add_argument("--split-tokens", type=int, default=4096)
    ap.add_argument("--nproc", type=int, default=2, help="ranks of our base_eval (default: 2)")
    ap.add_argument("--train-steps", type=int, default=60, help="steps of the checkpoint trained if none (default: 60)")
    args = ap.parse_args()
    base = Path(os.environ.get("NANOCHAT_BASE_DIR") or tempfile.mkdtemp(prefix="core-compare-")).resolve()
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=str(REPO))
    prepare(base, env, args.train_steps)
    upstream_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    loss_flags = [f"--device_batch_size={args.device_batch_size}", f"--split_tokens={args.split_tokens}"]

    theirs_loss = sh([args.upstream_python, "-m", "scripts.base_loss", *loss_flags], upstream_env, Path(args.upstream))
    full = sh([args.upstream_python, "-c", UPSTREAM_BPB, str(args.device_batch_size), str(args.split_tokens)],
              upstream_env, Path(args.upstream))
    full_bpb = next((json.loads(line[4:]) for line in full.splitlines() if line.startswith("BPB ")), {})
    theirs_core = sh([args.upstream_python, "-m", "scripts.base_eval", f"--max-per-task={args.max_per_task}"],
                     upstream_env, Path(args.upstream))
    with tempfile.TemporaryDirectory(prefix="core-compare-runs-") as runs:
        ours_loss = sh([sys.executable, "-m", "bench.nanochat.base_loss", *loss_flags],
                       dict(env, NANOCHAT_BENCH_RUN_DIR=f"{runs}/loss"))
        sh([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}", "-m",
            "bench.nanochat.base_eval", "--", f"--max_per_task={args.max_per_task}"],
           dict(env, NANOCHAT_BENCH_RUN_DIR=f"{runs}/eval"))
        loss_json = json.loads(Path(runs, "loss", "run.json").read_text())
        eval_csv = Path(runs, "eval", "base_eval.csv")
        ours_core = csv_rows(eval_csv.read_text()) if eval_csv.is_file() else {}
        print(f"our runs: base_loss {loss_json['status']}, base_eval "
              f"{json.loads(Path(runs, 'eval', 'run.json').read_text())['status']}")

    problems = []
    up_bpb, up_samples = bpb_and_samples(theirs_loss)
    _, our_samples = bpb_and_samples(ours_loss)
    print(f"{'figure':<36} {'upstream':>12} {'ours':>14}")
    for split in ("train", "val"):
        ours = loss_json.get("scores", {}).get(f"{split}_bpb")
        theirs = up_bpb.get(split)
        print(f"{split + ' bpb':<36} {theirs if theirs is not None else 'missing':>12} "
              f"{f'{ours:.6f}' if ours is not None else 'missing':>14}")
        if theirs is None or ours is None or abs(ours - theirs) > 5e-5:
            problems.append(f"{split} bpb")
        exact = full_bpb.get(split)
        print(f"{split + ' bpb, full precision':<36} {f'{exact:.10f}' if exact is not None else 'missing':>12} "
              f"{f'{ours:.10f}' if ours is not None else 'missing':>14}")
        if exact is None or ours is None or abs(ours - exact) > 1e-6 * abs(exact):
            problems.append(f"{split} bpb in full precision")
    if not up_samples or up_samples != our_samples:
        problems.append("samples")
    print(f"{'samples (7, greedy, 16 tokens)':<36} {len(up_samples):>12} "
          f"{'equal' if up_samples == our_samples else 'DIFFER':>14}")
    up_core = csv_rows(theirs_core)
    for label in list(up_core) + [k for k in ours_core if k not in up_core]:
        theirs, ours = up_core.get(label), ours_core.get(label)
        same = theirs is not None and ours is not None and all(
            (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= 5e-7)
            for a, b in zip(theirs, ours))
        print(f"{label:<36} {str(theirs and theirs[-1]):>12} {str(ours and ours[-1]):>14}"
              f"{'' if same else '  DIFFER'}")
        if not same:
            problems.append(label)
    if not up_core:
        problems.append("upstream printed no CORE table:\n" + theirs_core[-2000:])
    print(f"checkpoint and bundle in {base}")
    if problems:
        print("differences: " + "; ".join(problems))
        return 1
    print(f"equal: bpb within a relative 1e-6, samples, and {len(up_core) - 1} tasks + CORE within 5e-7 (centred; accuracy too)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
