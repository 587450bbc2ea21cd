"""GPU throughput of the workload: d20 (by default) on 1..N GPUs of one host, as a table.

    python benchmarks/gpu_bench.py --gpus 1,2 --steps 25 --out results/gpu-run
    python benchmarks/gpu_bench.py --gpus 1 --variant baseline --variant "cudnn:--device_batch_size=32" ...

Self-contained on a machine with no network: it generates parquet shards from the offline corpus and
trains a tokenizer of the recipe's 65,536 tokens (the corpus is small, so its documents are mixed with
pseudo-words drawn from a Zipf law, which gives BPE enough distinct pairs for every merge), then runs
`torchrun -m bench.nanochat.train` with the d20 recipe (device batch 32, sequence 2048, total batch
524,288 tokens, so gradient accumulation 8 on one GPU, 4 on two) for a fixed number of steps, and
prints the figures from each run's metrics.jsonl. Evaluation, sampling and CORE are off: only the
training step is timed. The total batch is the same at every GPU count (strong scaling): `eff` is a variant's
tok/s per GPU against its own on one GPU (speed-up / GPUs). `dloss` is the largest gap between a variant's
loss curve and the first variant's at the same GPU count: a speed-up must not change the training (e.g. d12,
200 steps). Figures follow the analysis' steady-state rule (steps after 10); `eff` and `x upstream` are left out
(`-`) where the two runs' figures come by different rules (one cut before step 11 has only warm-up steps).
`loss` is the loss at the last step; `stepdev` the steady steps' largest distance from their median
(a stall inside the measured window shows there). A time limit or a cancel (SIGTERM, SIGINT, SIGHUP) starts no
further run: the table and summary.json hold the runs measured, the cut one included, and a last line names it.

`--upstream DIR` also runs upstream nanochat's own `scripts/base_train.py` from a checkout of karpathy/nanochat
(5c93a56) in the same job, on the same GPUs and data, as the variant `upstream`, and prints each variant's
throughput against it: a ratio read within one job, not across machines. Its figures come from its log
(bench/analysis/upstream.py); its `import wandb` gets an empty module when wandb is missing (with its default
run name `dummy` upstream never calls it). It validates at its first and last step (on one batch of tokens) and
samples and saves a checkpoint at the end, outside the steps it times.

    python benchmarks/gpu_bench.py --steps 15 --upstream /path/to/nanochat --variant bf16 --variant "fp8::--fp8"
"""

import argparse
import json
import os
import random
import re
import runpy
import signal
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

REPO = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, REPO)

from bench.analysis.rundir import read_events, read_run_dir  # noqa: E402
from bench.analysis.upstream import parse_log, read_upstream_log  # noqa: E402
from bench.launch.local import run_local  # noqa: E402
from bench.analysis.figures import steady_mask  # noqa: E402
from bench.capacity.lifetime import Stopped, stop_on_signals  # noqa: E402
from bench.contract import read_run_json  # noqa: E402
from bench.runside.runclaim import holds_a_run  # noqa: E402
from bench.contract import METRICS_JSONL  # noqa: E402
from bench.errors import os_reason  # noqa: E402

UPSTREAM = "upstream"  # the variant name of upstream's own trainer (--upstream)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a variable name of --variant's ENV part

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


def summarize(run_dir: Path, nproc: int) -> dict:
    """The run's figures by the analysis' own steady-state rule (bench.analysis.rundir)."""
    row = read_run_dir(run_dir)
    return {"gpus": nproc, "steady_steps": row.get("steady_steps"), "steady_rule": row.get("steady_rule"),
            "tok_per_sec": row.get("tok_per_sec"),
            "tok_per_sec_per_gpu": row.get("tok_per_sec_per_gpu"), "mfu": row.get("mfu"),
            "dt_ms": row.get("step_time_ms"), "peak_mem_mib": row.get("peak_mem_mib"),
            "time_to_first_step_s": row.get("time_to_first_step_s")}


def step_figures(run_dir: Path) -> dict:
    """The loss at the last step, and the steady steps' largest distance from their median step time
    (a stall inside the measured window shows here: every steady step should lie within 3%)."""
    steps = [e for e in read_events(run_dir / METRICS_JSONL, []) if e.get("event") == "step"]
    mask, _ = steady_mask([e["step"] for e in steps])  # the steps that tok/s and dt ms are medians over
    steady = [e["dt_ms"] for e, m in zip(steps, mask) if m]
    median = statistics.median(steady) if steady else None
    return {"last_loss": steps[-1]["loss"] if steps else None,
            "max_step_dev": max(abs(t / median - 1) for t in steady) if steady else None}


def losses(out: Path, variant: str, nproc: int) -> dict[int, float]:
    """step -> loss of one run: its metrics.jsonl, or upstream's log."""
    if variant == UPSTREAM:
        return {s["step"]: s["loss"] for s in parse_log(upstream_log(out, nproc)).steps}
    events = read_events(out / f"{variant}-{nproc}gpu" / METRICS_JSONL, [])
    return {e["step"]: e["loss"] for e in events if e.get("event") == "step"}


def ratio(row: dict, base: dict | None, key: str) -> float | None:
    """row[key] / base[key] when both runs have the figure by the same steady-state rule, else None: a run cut
    before step 11 (a time limit, a crash) has figures over its later half, warm-up steps, against which the
    other's steady steps would read as a speed-up."""
    ok = base and row[key] and base[key] and row["steady_rule"] == base["steady_rule"]  # a failed run has none
    return row[key] / base[key] if ok else None


def max_loss_deviation(a: dict[int, float], b: dict[int, float]) -> float | None:
    """Largest |loss - reference loss| over the steps both runs logged (None without common steps)."""
    common = a.keys() & b.keys()
    return max(abs(a[s] - b[s]) for s in common) if common else None


def parse_gpus(text: str) -> list[int]:
    """--gpus 1,2,4 -> [1, 2, 4]; anything but positive integers is a ValueError naming the flag."""
    try:
        gpus = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        gpus = []
    if not gpus or min(gpus) < 1:
        raise ValueError(f"--gpus {text!r}: give comma-separated positive GPU counts, e.g. 1,2,4")
    return gpus


def parse_variant(spec: str) -> tuple[str, dict, list[str]]:
    """--variant NAME[:ENV=V,...[:--flag=v ...]] -> (name, extra environment, extra trainer flags)."""
    name, _, rest = spec.partition(":")
    env_part, _, flag_part = rest.partition(":")
    pairs = [kv.split("=", 1) for kv in env_part.split(",") if kv]
    # an ENV name is a shell variable's: `fast:--x=1` (flags without the empty ENV part) is no environment
    if not name or "/" in name or any(len(kv) != 2 or not ENV_NAME.fullmatch(kv[0]) for kv in pairs):
        raise ValueError(f"--variant {spec!r}: give NAME, NAME:ENV=V,... or NAME:ENV=V,...:--flag=v ... "
                         "(NAME without '/', ENV a variable name; an empty ENV part is NAME::--flag=v)")
    return name, dict(pairs), flag_part.split()


def upstream_log(out: Path, nproc: int) -> Path:
    return out / f"{UPSTREAM}-{nproc}gpu.log"


def upstream_checkout(path: str) -> Path:
    """--upstream's checkout, refused (ValueError naming the flag) when it holds no scripts/base_train.py."""
    checkout = Path(path).resolve()
    if not (checkout / "scripts" / "base_train.py").is_file() or not (checkout / "nanochat").is_dir():
        raise ValueError(f"--upstream {path}: no scripts/base_train.py and nanochat/ there; give a checkout of "
                         "karpathy/nanochat (5c93a56)")
    return checkout


def upstream_flags(args) -> list[str]:
    """Upstream's configurator flags for the same run. Its validation runs at step 0 and at the last step
    whatever eval_every says (on one batch of tokens here), and it samples at the last step; an interval past
    the horizon keeps both from happening in between (-1 would be every step: `step % -1 == 0`). Its run name
    stays its default `dummy` (no wandb): torchrun would take a `--run=` for its own --run-path."""
    past = args.steps + 1
    return [f"--depth={args.depth}", f"--device_batch_size={args.device_batch_size}",
            f"--total_batch_size={args.total_batch_size}", f"--num_iterations={args.steps}",
            f"--eval_every={past}", f"--eval_tokens={args.total_batch_size}", "--core_metric_every=-1",
            f"--sample_every={past}"]


def run_upstream(checkout: Path, flags: list[str], nproc: int, log: Path) -> tuple[int, dict, Stopped | None]:
    """Upstream's base_train under torchrun (through this file's --upstream-child), its output into `log`;
    (exit status, its figures from the log, the Stopped that ended it early if a signal did)."""
    import torch

    # upstream starts its process group on CUDA only: without a GPU it runs as one plain process
    launch = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    cmd = [sys.executable, *(launch if torch.cuda.is_available() else []), str(Path(__file__).resolve()),
           "--upstream-child", str(checkout), *flags]
    print(f"upstream {checkout} on {nproc} GPU(s) -> {log}", flush=True)
    stop = None
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=checkout, stdout=f, stderr=subprocess.STDOUT).returncode
        except Stopped as e:  # subprocess.run has killed it: what it logged so far is still read
            rc, stop = 128 + e.signum, e
    row = read_upstream_log(log) or {}
    if row.get("status") == "ok":  # its final lines printed: what fails after them is its report (needs psutil)
        rc = 0
    return rc, {"gpus": nproc, **{k: row.get(k) for k in ("steady_steps", "steady_rule", "tok_per_sec",
                                                           "tok_per_sec_per_gpu", "mfu", "peak_mem_mib")},
                "dt_ms": row.get("step_time_ms"), "time_to_first_step_s": None, "last_loss": row.get("final_loss"),
                "max_step_dev": None}, stop


def upstream_child(checkout: str, flags: list[str]) -> None:
    """One rank of upstream's base_train, as `python -m scripts.base_train` would run it from its checkout."""
    try:
        import wandb  # noqa: F401
    except ImportError:  # imported at the top of upstream's script, never called with --run=dummy
        sys.modules["wandb"] = types.ModuleType("wandb")
    sys.path.insert(0, checkout)  # its `nanochat` package, before anything of this checkout
    sys.argv = ["scripts/base_train.py", *flags]
    runpy.run_path("scripts/base_train.py", run_name="__main__")


def writable_dir(flag: str, path: Path) -> None:
    """`path` made if missing; a ValueError naming the flag when it cannot be made or written, before the data
    (a tokenizer of minutes at 65k) is prepared for runs that could not write their results."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{flag} {path}: {os_reason(e)}; give a writable directory") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: not writable; give a writable directory")


def stopped_by(run_dir: Path) -> str | None:
    """The signal's name (SIGTERM, ...) when the launcher stopped this run on one, else None."""
    try:
        evidence = read_run_json(run_dir).get("evidence") or []
    except (OSError, ValueError):  # no readable run.json: nothing says it was stopped
        return None
    return next((e.get("signal") for e in evidence
                 if e.get("source") == "launcher" and e.get("kind") == "stopped" and e.get("signal")), None)


def stopped_line(stop: Stopped, rows: list[dict], curves: dict, variants: list, gpus: list[int],
                 checkout: Path | None) -> str:
    """What a signal (a time limit, a cancel) left: the run it cut, where its log ends, and the runs not started."""
    planned = [(v[0], n) for v in variants for n in gpus] + [(UPSTREAM, n) for n in gpus if checkout]
    done = [(r["variant"], r["gpus"]) for r in rows]
    not_run = ", ".join(f"{name} on {n}" for name, n in planned if (name, n) not in done)
    line = f"stopped by {stop}"
    if done:
        cut, steps = done[-1], curves[done[-1]]
        logged = f"its last step logged {max(steps)}" if steps else "no step logged"
        line += f" during {cut[0]} on {cut[1]} GPU(s) ({logged}); the table holds it and the runs before it"
    return line + (f"; not run: {not_run} GPU(s)" if not_run else "")


def check_run_dirs(out: Path, names: list[str], gpus: list[int]) -> None:
    """Each run gets a run directory of its own under --out: two runs of one name and GPU count, or a run
    directory that already holds a run (run_local refuses it), is a ValueError before anything runs."""
    dirs = [f"{name}-{nproc}gpu" for name in names for nproc in gpus]
    if twice := sorted({d for d in dirs if dirs.count(d) > 1}):
        raise ValueError(f"--variant/--gpus: {', '.join(twice)} would run twice into one run directory; "
                         "give each variant its own NAME and each GPU count once")
    taken = [d for d in dirs if holds_a_run(out / d)]
    taken += [log.name for log in (upstream_log(out, n) for n in gpus) if UPSTREAM in names and log.exists()]
    if taken:
        raise ValueError(f"--out {out} already holds {', '.join(taken)}: give a new --out, or remove those "
                         "run directories to run them again")


def main() -> int:
    if sys.argv[1:2] == ["--upstream-child"]:
        upstream_child(sys.argv[2], sys.argv[3:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="1", help="comma-separated GPU counts to run (default 1)")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--steps", type=int, default=25,
                    help="optimizer steps per run, at least 1 (first 11 are warm-up; default 25)")
    ap.add_argument("--device_batch_size", type=int, default=32)
    ap.add_argument("--total_batch_size", type=int, default=524288)
    ap.add_argument("--vocab_size", type=int, default=65536)
    ap.add_argument("--base-dir", default="/tmp/nanochat-bench-gpu", help="data and tokenizer (made once)")
    ap.add_argument("--synthetic", action="store_true",
                    help="random tokens of a synthetic tokenizer (bench/capacity/data.py), ready in seconds: "
                         "for throughput and breakdowns, not for losses")
    ap.add_argument("--out", default="gpu-bench", help="run directories and summary.json go here")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME or NAME:ENV=V,...:--flag=v ... to compare variants (default: one 'baseline')")
    ap.add_argument("--upstream", metavar="DIR",
                    help="also run upstream nanochat's own base_train from this checkout (5c93a56), same GPUs and data")
    args = ap.parse_args()

    base_dir, out = Path(args.base_dir).resolve(), Path(args.out).resolve()
    try:  # every run's settings checked before the first of them starts (each can take minutes)
        gpus = parse_gpus(args.gpus)
        if args.steps < 1:  # the trainer, and upstream's, take 0 or less as "derive the horizon": hours at d20
            raise ValueError(f"--steps {args.steps}: give a positive number of optimizer steps")
        variants = [parse_variant(v) for v in args.variant or ["baseline"]]
        checkout = upstream_checkout(args.upstream) if args.upstream else None
        if checkout and args.synthetic:
            raise ValueError("--upstream with --synthetic: upstream reads only parquet shards; leave one out")
        if checkout and UPSTREAM in [v[0] for v in variants]:
            raise ValueError(f"--variant {UPSTREAM}: that name is --upstream's; give the variant another")
        check_run_dirs(out, [v[0] for v in variants] + [UPSTREAM] * bool(checkout), gpus)
        writable_dir("--base-dir", base_dir)
        writable_dir("--out", out)
    except ValueError as e:
        ap.error(str(e))
    # `torchrun -m bench.nanochat.train` finds `bench` in the working directory before PYTHONPATH:
    # run from this checkout, so that comparing two checkouts measures each one's own code.
    os.chdir(REPO)
    data_flags = []
    if args.synthetic:
        from bench.capacity import data

        os.environ["NANOCHAT_BASE_DIR"] = str(base_dir)
        data_flags = [f"--data_bin_dir={data.prepare(base_dir, args.vocab_size, tokens=1 << 26)}"]
    else:
        prepare_data(base_dir, args.vocab_size)
    rows, stop = [], None
    try:  # a time limit or a cancel ends the runs, not the table of those already measured
        with stop_on_signals():
            for name, env_extra, variant_flags in variants:
                for nproc in gpus:
                    flags = [f"--depth={args.depth}", f"--device_batch_size={args.device_batch_size}",
                             f"--total_batch_size={args.total_batch_size}", f"--num_iterations={args.steps}",
                             "--eval_every=-1", "--core_metric_every=-1", "--sample_every=-1", "--run=dummy",
                             *data_flags, *variant_flags]
                    run_dir = out / f"{name}-{nproc}gpu"
                    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
                           **env_extra}
                    rc = run_local(flags, nproc, run_dir, env=env)
                    rows.append({"variant": name, "rc": rc, **summarize(run_dir, nproc), **step_figures(run_dir)})
                    print(json.dumps(rows[-1]), flush=True)
                    if signame := stopped_by(run_dir):  # run_local took the signal and passed it to the run
                        raise Stopped(signal.Signals[signame])
            for nproc in gpus if checkout else []:
                rc, figures, stop = run_upstream(checkout, upstream_flags(args), nproc, upstream_log(out, nproc))
                rows.append({"variant": UPSTREAM, "rc": rc, **figures})
                print(json.dumps(rows[-1]), flush=True)
                if stop:
                    raise stop
    except Stopped as e:
        stop = e
    curves = {(r["variant"], r["gpus"]): losses(out, r["variant"], r["gpus"]) for r in rows}  # each read once
    for row in rows:  # strong-scaling efficiency (the total batch is fixed) against the same variant's 1-GPU figure
        base = next((r for r in rows if r["variant"] == row["variant"] and r["gpus"] == 1), None)
        row["efficiency"] = ratio(row, base, "tok_per_sec_per_gpu")
        # a faster variant must train the same model: its loss curve against the first variant's
        first = next(r for r in rows if r["gpus"] == row["gpus"])
        row["loss_dev"] = max_loss_deviation(curves[row["variant"], row["gpus"]],
                                             curves[first["variant"], first["gpus"]])
        upstream = next((r for r in rows if r["variant"] == UPSTREAM and r["gpus"] == row["gpus"]), None)
        row["vs_upstream"] = ratio(row, upstream, "tok_per_sec")
    (out / "summary.json").write_text(json.dumps(rows, indent=2))

    columns = [("GPUs", "gpus", "d", 5), ("tok/s", "tok_per_sec", ",.0f", 12),
               ("tok/s/GPU", "tok_per_sec_per_gpu", ",.0f", 12), ("MFU %", "mfu", ".2f", 8),
               ("dt ms", "dt_ms", ".1f", 9), ("peak MiB", "peak_mem_mib", ",.0f", 10),
               ("TTFS s", "time_to_first_step_s", ".1f", 8), ("eff", "efficiency", ".3f", 7),
               ("dloss", "loss_dev", ".4f", 9), ("loss", "last_loss", ".3f", 8), ("stepdev", "max_step_dev", ".1%", 9)]
    if checkout:
        columns.append(("x upstream", "vs_upstream", ".3f", 11))
    print(f"{'variant':<14}" + "".join(f"{title:>{width}}" for title, _, _, width in columns))
    for r in rows:
        cells = (format(r[key], spec) if r[key] is not None else "-" for _, key, spec, _ in columns)
        print(f"{r['variant']:<14}" + "".join(f"{cell:>{width}}" for cell, (_, _, _, width) in zip(cells, columns)))
    if stop:
        print(stopped_line(stop, rows, curves, variants, gpus, checkout), flush=True)
        return 128 + stop.signum
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
