"""Our mid_train against upstream nanochat 5c93a56's own scripts/mid_train.py: the first steps' losses.

    NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat UPSTREAM_PYTHON=/tmp/upstream-venv/bin/python \\
        python benchmarks/compare_mid_train.py [--steps 20] [--base-dir DIR]

Both run on CPU, one process, on the same NANOCHAT_BASE_DIR: `data generate --chat` stand-ins, a small BPE
tokenizer, and a tiny base checkpoint written by our trainer (so upstream's checkpoint_manager must read our
checkpoint to start at all). Upstream runs in UPSTREAM_PYTHON (a Python with `datasets` and upstream's
dependencies), its `load_dataset` pointed at the staged parquet files by compare_chat_data's redirection,
torch.compile off (TORCHDYNAMO_DISABLE=1: an identity on CPU, and slow to build there). Its `import wandb` is
satisfied by an empty module when wandb is not installed: with --run=dummy upstream never calls it.

Compared: the step lines' losses (upstream's debiased EMA, printed to 6 decimals) of the first --steps steps
and the validation bpb lines; the exit status is 1 on any relative difference beyond --tolerance. The two sides
agree exactly up to the first optimizer step, then drift apart by rounding alone: upstream's Muon runs its
Newton-Schulz iteration in bf16 on CPU, ours in fp32 there (bench/nanochat/muon.py: CPUs emulate bf16 matmuls
slowly). `--muon-bf16` runs ours in bf16 on CPU too, leaving only the order of bf16 roundings (ours batches the
matrices of one shape) between them.
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = {"depth": 2, "max_seq_len": 128, "device_batch_size": 2}  # the base model both stages start from
BASE_STEPS = 5


def stage_flags(steps: int) -> list[str]:
    """The flags both sides get: `steps` optimizer steps (upstream counts batches: steps + 1)."""
    B, T = TINY["device_batch_size"], TINY["max_seq_len"]
    return ["--device_type=cpu", f"--max_seq_len={T}", f"--device_batch_size={B}", f"--total_batch_size={B * T}",
            f"--num_iterations={steps + 1}", "--eval_every=10", f"--eval_tokens={B * T * 2}", "--dry_run=1"]


def prepare_base(base: Path) -> None:
    """Staged chat stand-ins, shards, a 512-token tokenizer and a base checkpoint (ours) under `base`."""
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=str(REPO))
    if not (base / "tokenizer" / "tokenizer.pkl").is_file():
        code = ("from bench.nanochat import dataset, tokenizer, chatgen\n"
                "dataset.generate_shards(3, 256, 16)\ntokenizer.train_tokenizer(vocab_size=512)\nchatgen.generate()\n")
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
    if not list((base / "base_checkpoints").glob("d*/model_*.pt")):
        subprocess.run([sys.executable, "-m", "bench.nanochat.train", "--device_type=cpu", f"--depth={TINY['depth']}",
                        f"--max_seq_len={TINY['max_seq_len']}", f"--device_batch_size={TINY['device_batch_size']}",
                        f"--total_batch_size={TINY['max_seq_len'] * TINY['device_batch_size']}",
                        f"--num_iterations={BASE_STEPS}", "--eval_every=-1", "--sample_every=-1",
                        f"--save_every={BASE_STEPS}", "--preflight=0"], env=env, check=True, capture_output=True)


def run_ours(module: str, flags: list[str], base: Path, muon_bf16: bool = False) -> str:
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop("NANOCHAT_BENCH_RUN_DIR", None)
    out = subprocess.run([sys.executable, __file__, "--ours-child", "1" if muon_bf16 else "0", module, *flags,
                          "--preflight=0"], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"ours ({module}) failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out.stdout


def run_upstream(script: str, flags: list[str], base: Path, upstream: Path, python: str) -> str:
    """upstream's `script` (scripts/xxx.py) in its own checkout, through this file's --child mode."""
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=f"{upstream}{os.pathsep}{REPO}",
               TORCHDYNAMO_DISABLE="1", OMP_NUM_THREADS="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(base / "hf"))
    out = subprocess.run([python, __file__, "--child", script, *flags], cwd=upstream, env=env, capture_output=True,
                         text=True)
    if out.returncode:
        raise SystemExit(f"upstream {script} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out.stdout


def child(script: str, flags: list[str]) -> None:
    """Inside upstream's checkout: the staged files behind `load_dataset`, then upstream's script as __main__."""
    import importlib
    import runpy
    import types

    try:
        import wandb  # noqa: F401
    except ImportError:  # imported at the top of upstream's scripts, never called with --run=dummy
        sys.modules["wandb"] = types.ModuleType("wandb")
    for module in ("tasks.smoltalk", "tasks.mmlu", "tasks.gsm8k", "tasks.arc", "tasks.humaneval"):
        importlib.import_module(module)
    sys.path.insert(0, str(REPO / "benchmarks"))
    from compare_chat_data import redirect_load_dataset

    redirect_load_dataset()
    sys.argv = [script, *flags]
    runpy.run_path(script, run_name="__main__")


def ours_child(muon_bf16: str, module: str, flags: list[str]) -> None:
    """Our stage as __main__, with Newton-Schulz in bf16 on CPU as well when asked (upstream's arithmetic)."""
    import runpy

    if muon_bf16 == "1":
        from bench.nanochat import muon

        muon.orthogonalize = lambda G, steps: muon.zeropower_via_newtonschulz5(G, steps, dtype=muon.torch.bfloat16)
    sys.argv = [module, *flags]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def lines(output: str) -> tuple[dict[int, float], dict[int, float]]:
    """(step -> loss, step -> val bpb) from nanochat's step and validation lines."""
    from bench.logline import VAL_RE, parse_step_line

    steps, vals = {}, {}
    for line in output.splitlines():
        parsed = parse_step_line(line)
        if parsed:
            steps[parsed["step"]] = parsed["loss"]
        m = VAL_RE.match(line.strip())
        if m:
            vals[int(m["step"])] = float(m["val_bpb"])
    return steps, vals


def compare(ours: str, theirs: str, steps: int, tolerance: float) -> list[str]:
    """Every difference beyond `tolerance`, one line each; each step's pair printed."""
    (our_steps, our_vals), (up_steps, up_vals) = lines(ours), lines(theirs)
    failures, largest = [], 0.0
    for s in range(1, steps + 1):
        a, b = our_steps.get(s), up_steps.get(s)
        same = a is not None and b is not None and abs(a - b) <= tolerance * abs(b)
        largest = max(largest, abs(a - b) / abs(b)) if same else largest
        print(f"step {s:3d}  loss here {a}  upstream {b}  {'same' if same else 'DIFF'}")
        if not same:
            failures.append(f"step {s}: loss {a} here, {b} upstream")
    for s in sorted(set(our_vals) | set(up_vals)):
        a, b = our_vals.get(s), up_vals.get(s)
        same = a is not None and b is not None and abs(a - b) <= max(tolerance * abs(b), 1e-4)  # 4 decimals
        print(f"val at step {s:3d}  bpb here {a}  upstream {b}  {'same' if same else 'DIFF'}")
        if not same:
            failures.append(f"validation at step {s}: bpb {a} here, {b} upstream")
    print(f"largest relative loss difference of the matching steps: {largest:.2e}")
    return failures


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2:])
        return 0
    if argv[:1] == ["--ours-child"]:
        ours_child(argv[1], argv[2], argv[3:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="optimizer steps compared (default: 20)")
    p.add_argument("--base-dir", default=None, help="NANOCHAT_BASE_DIR to stage into (default: a fresh temporary one)")
    p.add_argument("--tolerance", type=float, default=1e-3, help="largest relative difference taken as equal "
                   "(default: 1e-3; bf16 itself rounds to 4e-3)")
    p.add_argument("--muon-bf16", action="store_true", help="ours with upstream's bf16 Newton-Schulz on CPU")
    args = p.parse_args(argv)
    upstream = Path(os.environ.get("NANOCHAT_UPSTREAM_DIR", "/tmp/upstream-nanochat"))
    python = os.environ.get("UPSTREAM_PYTHON", sys.executable)  # an interpreter with upstream's requirements
    if not (upstream / "scripts" / "mid_train.py").is_file():
        print(f"error: no upstream nanochat checkout at {upstream} (set NANOCHAT_UPSTREAM_DIR)")
        return 2
    import tempfile

    base = Path(args.base_dir or tempfile.mkdtemp(prefix="compare-mid-")).absolute()
    base.mkdir(parents=True, exist_ok=True)
    prepare_base(base)
    flags = stage_flags(args.steps)
    print(f"base directory {base}; both stages with: {' '.join(flags)}")
    theirs = run_upstream("scripts/mid_train.py", flags, base, upstream, python)
    ours = run_ours("bench.nanochat.mid_train", flags, base, args.muon_bf16)
    failures = compare(ours, theirs, args.steps, args.tolerance)
    for f in failures:
        print(f"DIFF  {f}")
    print("all same" if not failures else f"{len(failures)} difference(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
