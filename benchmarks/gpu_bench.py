"""GPU throughput of the workload: d20 (by default) on 1..N GPUs of one host, as a table.

    python benchmarks/gpu_bench.py --gpus 1,2 --steps 25 --out results/gpu-run
    python benchmarks/gpu_bench.py --gpus 1 --variant baseline --variant "cudnn:--device_batch_size=32" ...

Self-contained on a machine with no network: it generates parquet shards from the offline corpus and
trains a tokenizer of the recipe's 65,536 tokens (the corpus is small, so its documents are mixed with
pseudo-words drawn from a Zipf law, which gives BPE enough distinct pairs for every merge), then runs
`torchrun -m bench.nanochat.train` with the d20 recipe (device batch 32, sequence 2048, total batch
524,288 tokens, so gradient accumulation 8 on one GPU, 4 on two) for a fixed number of steps, and
prints the figures from each run's metrics.jsonl. Evaluation, sampling and CORE are off: only the
training step is timed. Steady state = steps after the warm-up (bench.analysis rule).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

WARMUP_STEPS = 10  # steps 0..10 are compile/allocator warm-up, as in nanochat's total-time rule


def pseudo_word_docs(num_docs: int, words_per_doc: int = 300, vocab: int = 150_000, seed: int = 0) -> list[str]:
    """Documents of Zipf-distributed pseudo-words: enough distinct byte pairs for 65k BPE merges."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "ch", "sh", "qu", "st", "tr"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(vocab)]
    cum, total = [], 0.0
    for i in range(vocab):
        total += 1.0 / (i + 1)
        cum.append(total)
    return [" ".join(rng.choices(words, cum_weights=cum, k=words_per_doc)) for _ in range(num_docs)]


def prepare_data(base_dir: Path, vocab_size: int) -> None:
    """Shards and tokenizer under base_dir, made once and reused."""
    os.environ["NANOCHAT_BASE_DIR"] = str(base_dir)
    from bench.nanochat import corpus, dataset, tokenizer

    if not dataset.list_parquet_files():
        t = time.time()
        dataset.generate_shards(num_shards=4, docs_per_shard=4000, row_group_size=128)
        print(f"generated 4 shards in {time.time() - t:.1f}s", flush=True)
    if not (tokenizer.tokenizer_dir() / "tokenizer.pkl").exists():
        t = time.time()
        texts = corpus.documents(4000, seed=99) + pseudo_word_docs(20_000)
        tokenizer.train_tokenizer(vocab_size=vocab_size, texts=texts, trainer="hf")
        print(f"trained the {vocab_size:,}-token tokenizer in {time.time() - t:.1f}s", flush=True)


def run_trainer(nproc: int, run_dir: Path, flags: list[str], env_extra: dict) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "bench.nanochat.train", "--", *flags]
    env = {**os.environ, "NANOCHAT_BENCH_RUN_DIR": str(run_dir), **env_extra}
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    print("$ " + " ".join(cmd), flush=True)
    with open(run_dir / "train.log", "w") as log:
        proc = subprocess.run(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    return proc.returncode


def summarize(run_dir: Path, nproc: int) -> dict:
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    first = {e["event"]: e for e in reversed(events)}  # earliest event of each kind
    steps = [e for e in events if e["event"] == "step" and e["step"] > WARMUP_STEPS]
    end = next((e for e in events if e["event"] == "end"), {})
    tok = statistics.median(e["tok_per_sec"] for e in steps) if steps else float("nan")
    mfus = [e["mfu"] for e in steps if e.get("mfu") is not None]
    return {
        "gpus": nproc,
        "steady_steps": len(steps),
        "tok_per_sec": tok,
        "tok_per_sec_per_gpu": tok / nproc,
        "mfu": statistics.median(mfus) if mfus else None,
        "dt_ms": statistics.median(e["dt_ms"] for e in steps) if steps else None,
        "peak_mem_mib": end.get("peak_mem_mib"),
        "time_to_first_step_s": first["first_step"]["t"] - first["start"]["t"] if "first_step" in first else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="1", help="comma-separated GPU counts to run (default 1)")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--steps", type=int, default=25, help="optimizer steps per run (first 11 are warm-up)")
    ap.add_argument("--device_batch_size", type=int, default=32)
    ap.add_argument("--total_batch_size", type=int, default=524288)
    ap.add_argument("--vocab_size", type=int, default=65536)
    ap.add_argument("--base_dir", default="/tmp/nanochat-bench-gpu", help="data and tokenizer (made once)")
    ap.add_argument("--out", default="gpu-bench", help="run directories and summary.json go here")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME or NAME:ENV=V,...:--flag=v ... to compare variants (default: one 'baseline')")
    args = ap.parse_args()

    prepare_data(Path(args.base_dir), args.vocab_size)
    out = Path(args.out)
    rows = []
    for spec in args.variant or ["baseline"]:
        name, _, rest = spec.partition(":")
        env_part, _, flag_part = rest.partition(":")
        env_extra = dict(kv.split("=", 1) for kv in env_part.split(",") if kv)
        for nproc in [int(g) for g in args.gpus.split(",")]:
            flags = [f"--depth={args.depth}", f"--device_batch_size={args.device_batch_size}",
                     f"--total_batch_size={args.total_batch_size}", f"--num_iterations={args.steps}",
                     "--eval_every=-1", "--core_metric_every=-1", "--sample_every=-1", "--run=dummy",
                     *flag_part.split()]
            run_dir = out / f"{name}-{nproc}gpu"
            rc = run_trainer(nproc, run_dir, flags, env_extra)
            row = {"variant": name, "rc": rc, **summarize(run_dir, nproc)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    for row in rows:  # weak-scaling efficiency against the same variant's 1-GPU figure
        base = next((r for r in rows if r["variant"] == row["variant"] and r["gpus"] == 1), None)
        row["efficiency"] = row["tok_per_sec_per_gpu"] / base["tok_per_sec_per_gpu"] if base else None
    (out / "summary.json").write_text(json.dumps(rows, indent=2))

    header = f"{'variant':<14}{'GPUs':>5}{'tok/s':>12}{'tok/s/GPU':>12}{'MFU %':>8}{'dt ms':>9}{'peak MiB':>10}{'TTFS s':>8}{'eff':>7}"
    print(header)
    for r in rows:
        fmt = lambda v, f: format(v, f) if v is not None else "-"  # noqa: E731
        print(f"{r['variant']:<14}{r['gpus']:>5}{fmt(r['tok_per_sec'], ',.0f'):>12}{fmt(r['tok_per_sec_per_gpu'], ',.0f'):>12}"
              f"{fmt(r['mfu'], '.2f'):>8}{fmt(r['dt_ms'], '.1f'):>9}{fmt(r['peak_mem_mib'], ',.0f'):>10}"
              f"{fmt(r['time_to_first_step_s'], '.1f'):>8}{fmt(r['efficiency'], '.3f'):>7}")
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
