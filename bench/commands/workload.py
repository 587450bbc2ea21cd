"""`nanochat-bench model | train | preflight | smoke`: the workload's size, a local training run, the
communication pre-flight, the smoke test.

- `model --depth D [--json]`: parameters, FLOPs per token, dimensions and a memory estimate, counted
  from the GPT's shape (GPTConfig): no model is built, nothing trained.
- `train [--workload NAME] [--nproc N] [--run-dir DIR] -- <trainer flags>`: the workload's
  trainer on this machine (bench/launch/local.py; bench/workloads/).
- `smoke`: data, tokenizer and a tiny 2-rank training run in seconds, with no GPU and no network
  (one rank per GPU when there are GPUs), leaving a complete run directory.
"""

import argparse
import difflib
import functools
import json
import os
import shlex
import sys
import time
from pathlib import Path

from bench import paths, workloads
from bench.commands import nonempty
from bench.errors import ConfigError, os_reason
from bench.nanochat.tokenizer import DEFAULT_VOCAB_SIZE, check_vocab_size
from bench.contract import ENV_BASE_DIR, RUN_JSON, RunJsonError, read_run_json

# The smoke run: tiny enough for two CPU ranks in a minute or two, big enough for the loss to fall.
SMOKE_DATA = dict(num_shards=4, docs_per_shard=512, row_group_size=32)
SMOKE_VOCAB = 1024
SMOKE_TRAIN = dict(depth=2, max_seq_len=128, device_batch_size=4)


def register(subparsers) -> None:
    m = subparsers.add_parser("model", help="parameters, FLOPs per token, dims and memory of a depth (no training)")
    m.add_argument("--depth", type=int, default=20, help="transformer depth (default: 20)")
    m.add_argument("--vocab_size", type=int, default=DEFAULT_VOCAB_SIZE,
                   help=f"vocabulary size (default: {DEFAULT_VOCAB_SIZE})")
    m.add_argument("--max_seq_len", type=int, default=2048, help="context length (default: 2048)")
    m.add_argument("--device_batch_size", type=int, default=32, help="for the memory estimate (default: 32)")
    m.add_argument("--world_size", type=int, default=1, help="ranks sharing optimizer state (default: 1)")
    m.add_argument("--total_batch_size", type=int, default=524288,
                   help="tokens per step: sets gradient accumulation for the memory estimate (default: 524288)")
    m.add_argument("--aspect_ratio", type=int, default=64, help="width = depth x this (default: 64)")
    m.add_argument("--eager", action="store_true", help="memory without torch.compile (as capacity probes run)")
    m.add_argument("--json", action="store_true", help="print JSON instead of a table")
    m.set_defaults(func=cmd_model)

    # no abbreviations: the trainer's --run (a run's name) would be taken for --run-dir and name the run directory
    t = subparsers.add_parser("train", help="train on this machine with torchrun (no Slurm)",
                              description="Example: nanochat-bench train --nproc 2 -- --depth=4 --num_iterations=50\n"
                                          "         nanochat-bench train --workload nntile -- --config-path=cfg.json "
                                          "--batch=8 --seq-tile=64",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--workload", default=workloads.DEFAULT, choices=workloads.names(),
                   help=f"{workloads.summaries()} (default: {workloads.DEFAULT}; a stage's flags: "
                        "python -m bench.nanochat.<stage> --help)")
    t.add_argument("--python", default=None, type=nonempty("--python", "an interpreter"),
                   help="the workload's interpreter (default: this one for nanochat; for nntile "
                        "$NANOCHAT_BENCH_NNTILE_PYTHON, else the environment bench/workloads/nntile/env.sh builds)")
    t.add_argument("--nproc", type=int, default=None, help="processes (default: number of GPUs, else 1; nntile: 1)")
    t.add_argument("--run-dir", default=None, type=nonempty("--run-dir", "a directory"),
                   help="run directory (default: ./runs/local/<timestamp>)")
    t.add_argument("--overwrite", action="store_true", help="delete the run --run-dir already holds (its files; "
                   "anything else there is kept) and train afresh there (without it such a directory is refused, "
                   "unless --resume_from_step continues it)")
    t.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then trainer flags (python -m bench.nanochat.train "
                   "--help; nntile: <NNTile python> bench/workloads/nntile/runner.py --help)")
    t.set_defaults(func=cmd_train, unrecognized_hint=functools.partial(trainer_flags_hint, t))

    p = subparsers.add_parser("preflight", help="bus bandwidth of all_reduce, reduce_scatter and all_gather on this "
                              "machine's ranks (torchrun; in a job: -m bench.nanochat.preflight)")
    p.add_argument("--nproc", type=int, default=None, help="ranks (default: number of GPUs, else 2)")
    p.add_argument("--max-mib", type=int, default=None, help="largest buffer (default: 1024 on GPU, 4 on CPU)")
    p.add_argument("--json", default=None, type=nonempty("--json", "a file"), help="write the records there")
    p.set_defaults(func=cmd_preflight)

    s = subparsers.add_parser("smoke", help="generate data, train a tokenizer and a tiny model (2 ranks); seconds, "
                              "no GPU needed")
    s.add_argument("--base-dir", default="runs/smoke/base", type=nonempty("--base-dir", "a directory"),
                   help="NANOCHAT_BASE_DIR for the smoke data and tokenizer; reused when present "
                        "(default: runs/smoke/base)")
    s.add_argument("--run-dir", default=None, type=nonempty("--run-dir", "a directory"),
                   help="run directory (default: ./runs/smoke/<timestamp>)")
    s.add_argument("--overwrite", action="store_true",
                   help="delete the run --run-dir already holds (its files; anything else there is kept) and "
                        "train afresh there")
    s.add_argument("--nproc", type=int, default=None, help="ranks (default: number of GPUs, else 2)")
    s.add_argument("--steps", type=int, default=40, help="training steps (default: 40)")
    s.set_defaults(func=cmd_smoke)


def trainer_flags_hint(parser: argparse.ArgumentParser, given: list[str], extra: list[str], args,
                       whose: str = "trainer flags") -> str:
    """`train --nproc 2 --depth=2`: only what follows `--` is the trainer's, so argparse refused --depth=2 as
    train's; the command as it should be written: train's own flags (`parser`'s) before `--`, the rest after.
    `whose`: what goes after `--` (`reframe` passes ReFrame's flags there)."""
    takes_value = {s: a.nargs != 0 for a in parser._actions for s in a.option_strings}  # no public accessor
    for name in (e.split("=", 1)[0] for e in extra if e.startswith("--")):
        # --run_dir is a typo of --run-dir, not a trainer flag: moved after --, the trainer would refuse it too
        close = difflib.get_close_matches(name, [s for s in takes_value if s.startswith("--")], n=1, cutoff=0.8)
        if close:
            return f"{name} is not a flag of {args.command} (did you mean {close[0]}?)"
    tokens, own, trainer, i = given[given.index(args.command) + 1:], [], [], 0
    while i < len(tokens):
        name = tokens[i].split("=", 1)[0]
        if tokens[i] == "--":
            trainer += tokens[i + 1:]
            break
        n = 1 + (takes_value.get(name, False) and "=" not in tokens[i])
        (own if name in takes_value else trainer).extend(tokens[i:i + n])
        i += n
    return f"{whose} go after --: {shlex.join(['nanochat-bench', args.command, *own, '--', *trainer])}"


# ------------------------------------------------------------------------------------------------
# model


STRATEGIES = ("zero2", "fsdp", "fsdp+ac", "fsdp+ac+offload")  # the memory estimate's rows (parallel.py)


def model_summary(depth: int, vocab_size: int = DEFAULT_VOCAB_SIZE, max_seq_len: int = 2048,
                  device_batch_size: int = 32, world_size: int = 1, total_batch_size: int = 524288,
                  aspect_ratio: int = 64, compiled: bool = True) -> dict:
    """Sizes of the GPT at `depth`, counted from its shape (GPTConfig, held equal to the built model: no model is
    built, which took minutes at a depth of 100000), and per memory strategy the predicted peak memory per rank on
    CUDA (bench/nanochat/memory.py); the trainer's default, zero2, gives the totals."""
    from bench.nanochat.config import check_depth_limit, grad_accum_steps, shape_problem
    from bench.nanochat.gptconfig import GPTConfig
    from bench.nanochat.memory import GIB, MemoryPoint, estimate

    sizes = {"depth": depth, "vocab_size": vocab_size, "max_seq_len": max_seq_len,
             "device_batch_size": device_batch_size, "world_size": world_size, "total_batch_size": total_batch_size,
             "aspect_ratio": aspect_ratio}
    for name, value in sizes.items():
        if value < 1:
            raise ConfigError(f"--{name}={value}: must be >= 1")
    check_depth_limit(depth)
    check_vocab_size(vocab_size)  # a model of a vocabulary no tokenizer here has is a typo, not one to size
    if problem := shape_problem(depth, aspect_ratio):  # the trainer's check: GPT() would only assert
        raise ConfigError(f"--depth={depth} --aspect_ratio={aspect_ratio}: {problem}")
    config = GPTConfig.from_depth(depth, vocab_size, max_seq_len, aspect_ratio)
    n_wte = n_lm_head = vocab_size * config.n_embd  # the embedding and the unembedding, vocab x width each
    num_params = config.num_params()
    n_matrix = num_params - n_wte - n_lm_head
    weights = 4 * (num_params - n_wte) + 2 * n_wte  # fp32 master weights, bf16 embedding on CUDA
    adam = (2 * 4 * n_lm_head + 2 * 2 * n_wte) / world_size  # exp_avg + exp_avg_sq, sharded when W > 1
    muon = 4 * n_matrix / world_size  # momentum, kept by each matrix's owner rank
    grad_accum = grad_accum_steps(total_batch_size, device_batch_size, max_seq_len, world_size)  # the trainer's rule
    by_strategy = {}
    for name in STRATEGIES:
        e = estimate(MemoryPoint(depth, aspect_ratio, vocab_size, max_seq_len, device_batch_size, world_size, name,
                                 "cuda", compiled, grad_accum))
        by_strategy[name] = {"peak_gib": e.peak_bytes / GIB, "need_gib": e.need_bytes / GIB, "phase": e.phase,
                             "host_gib": e.host_bytes / GIB,
                             "components_gib": {k: v / GIB for k, v in e.components.items()}}
        if name == "zero2":
            zero2 = {k: v / GIB for k, v in e.phases["backward"].items()}
    return {
        "depth": depth, "n_layer": config.n_layer, "model_dim": config.n_embd, "n_head": config.n_head,
        "n_kv_head": config.n_kv_head, "head_dim": config.n_embd // config.n_head, "mlp_hidden": 4 * config.n_embd,
        "vocab_size": vocab_size, "max_seq_len": max_seq_len,
        "num_params": num_params, "params_embedding": n_wte, "params_lm_head": n_lm_head, "params_matrices": n_matrix,
        "flops_per_token": config.flops_per_token(),
        "memory_gib": {"weights": weights / GIB, "grads": weights / GIB, "optimizer": (adam + muon) / GIB,
                       "activations_estimate": zero2.get("activations", 0) + zero2.get("logits", 0),
                       "total_estimate": by_strategy["zero2"]["peak_gib"]},
        "memory_by_strategy": by_strategy,
        "memory_assumes": {"device_batch_size": device_batch_size, "world_size": world_size,
                           "grad_accum": grad_accum, "compiled": compiled},
    }


def cmd_model(args) -> int:
    s = model_summary(args.depth, args.vocab_size, args.max_seq_len, args.device_batch_size, args.world_size,
                      args.total_batch_size, args.aspect_ratio, compiled=not args.eager)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    mem = s["memory_gib"]
    print(f"depth {s['depth']}: {s['n_layer']} layers, model_dim {s['model_dim']}, {s['n_head']} heads x "
          f"{s['head_dim']} (kv heads {s['n_kv_head']}), MLP {s['mlp_hidden']}, vocab {s['vocab_size']:,}, "
          f"context {s['max_seq_len']:,}")
    print(f"parameters:      {s['num_params']:,} (embedding {s['params_embedding']:,}, lm_head "
          f"{s['params_lm_head']:,}, matrices {s['params_matrices']:,})")
    print(f"FLOPs per token: {s['flops_per_token']:e}")
    a = s["memory_assumes"]
    print(f"memory per rank (device_batch_size={a['device_batch_size']}, world_size={a['world_size']}, "
          f"grad_accum={a['grad_accum']}, {'compiled' if a['compiled'] else 'eager'}): "
          f"weights {mem['weights']:.2f} GiB, grads {mem['grads']:.2f} GiB, optimizer {mem['optimizer']:.2f} GiB, "
          f"activations ~{mem['activations_estimate']:.1f} GiB")
    print("predicted peak per GPU by --strategy (bench/nanochat/memory.py; need = peak + allocator and context):")
    for name, m in s["memory_by_strategy"].items():
        host = f", host {m['host_gib']:.1f} GiB" if "offload" in name else ""
        print(f"  {name:<16} peak {m['peak_gib']:7.1f} GiB, need {m['need_gib']:7.1f} GiB ({m['phase']}){host}")
    return 0


# ------------------------------------------------------------------------------------------------
# train


def _nproc(given: int | None, cpu_default: int, per_gpu: bool = True) -> int:
    """--nproc, else one rank per GPU (cpu_default without one; 1 where the workload is not a rank per GPU)."""
    if given is None and not per_gpu:
        given = 1
    if given is None:
        import torch

        given = torch.cuda.device_count() if torch.cuda.is_available() else cpu_default
    if given < 1:
        raise ConfigError(f"--nproc {given}: must be >= 1 (or left out: one per GPU, else {cpu_default})")
    return given


def cmd_train(args) -> int:
    from bench.launch.local import default_run_dir, run_local
    from bench.runside.runclaim import resuming

    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    workload = workloads.get(args.workload)
    nproc = _nproc(args.nproc, 1, workload.rank_per_gpu)
    workload.check(train_args, nproc)  # bad flags fail here, before any process starts (the trainer checks again)
    workload.local_command(train_args, nproc, args.python)  # a missing interpreter too
    if args.overwrite and resuming(train_args):
        raise ConfigError("--overwrite with --resume_from_step: the first deletes the run the second would "
                          "continue; give one of them")
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir("local")
    print(f"run directory: {run_dir}")
    rc = run_local(train_args, nproc, run_dir, workload=args.workload, python=args.python, overwrite=args.overwrite)
    # the run's exit status stands whatever its record says: a run.json that cannot be read is a note beside it
    try:
        status, unread = read_run_json(run_dir).get("status"), None
    except RunJsonError as e:
        status, unread = None, e.problem
    except OSError as e:
        status, unread = None, f"{run_dir / RUN_JSON} cannot be read: {os_reason(e)}"
    try:
        if unread:
            print(f"note: the run ended with exit status {rc}; its status is not known: {unread}", file=sys.stderr)
        else:
            print(f"run directory: {run_dir} (status: {status})")
    except OSError:  # the terminal went away (the run itself is recorded)
        pass
    return rc


def cmd_preflight(args) -> int:
    import subprocess

    from bench.workloads.torchrun import torchrun_command

    nproc = _nproc(args.nproc, 2)
    if args.max_mib is not None and args.max_mib < 1:  # 0 would mean the default, -1 a buffer of 4 bytes
        raise ConfigError(f"--max-mib {args.max_mib}: must be >= 1 (MiB; default: 1024 on GPU, 4 on CPU)")
    if args.json:
        check_json_target(args.json)
    argv = [*(["--max-mib", str(args.max_mib)] if args.max_mib else []), *(["--json", args.json] if args.json else [])]
    cmd = list(torchrun_command(sys.executable, nproc, argv, module="bench.nanochat.preflight"))
    return subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}).returncode


def check_json_target(path: str) -> None:
    """Rank 0 writes --json after the whole measurement: a path it could not write is refused before it starts."""
    import tempfile

    target, parent = Path(path), Path(path).parent
    reason = ("a directory of that name is in the way" if target.is_dir() else
              f"no such directory {parent}" if not parent.exists() else
              f"{parent} is a file, not a directory" if not parent.is_dir() else None)
    if not reason:  # a file made and removed there: W_OK says yes to root, and for /proc or a read-only mount
        try:
            tempfile.NamedTemporaryFile(dir=parent, prefix=f".{target.name}.").close()
        except OSError as e:
            reason = f"no file can be made in {parent} ({os_reason(e)})"
    if reason:
        raise ConfigError(f"--json {path}: cannot be written: {reason}")


# ------------------------------------------------------------------------------------------------
# smoke


def prepare_smoke_data(base_dir: Path) -> None:
    """Shards from the offline corpus and a small tokenizer under base_dir, unless already there."""
    from bench.nanochat import dataset, tokenizer

    os.environ[ENV_BASE_DIR] = str(base_dir)
    have_shards = len(list((base_dir / paths.DATA_DIR).glob("*.parquet"))) >= SMOKE_DATA["num_shards"]
    have_tokenizer = (base_dir / paths.TOKENIZER_DIR / tokenizer.TOKENIZER_PKL).is_file()
    if have_shards and have_tokenizer:
        print(f"reusing smoke data and tokenizer in {base_dir}")
        return
    t0 = time.time()
    # smoke's own data directory: its --overwrite is the run's, and it sets NANOCHAT_BASE_DIR from --base-dir
    elsewhere = f"give smoke another --base-dir (not {base_dir})"
    dataset.generate_shards(**SMOKE_DATA, elsewhere=elsewhere, overwrite_flag=None)
    tokenizer.train_tokenizer(vocab_size=SMOKE_VOCAB, elsewhere=elsewhere)
    print(f"generated {SMOKE_DATA['num_shards']} shards and a {SMOKE_VOCAB}-token tokenizer in {base_dir} "
          f"({time.time() - t0:.1f}s)")


def smoke_train_args(steps: int, nproc: int) -> list[str]:
    B, T = SMOKE_TRAIN["device_batch_size"], SMOKE_TRAIN["max_seq_len"]
    return [f"--depth={SMOKE_TRAIN['depth']}", f"--max_seq_len={T}", f"--device_batch_size={B}",
            f"--total_batch_size={B * T * nproc}", f"--num_iterations={steps}",
            f"--eval_every={max(1, steps // 2)}", f"--eval_tokens={2 * B * T * nproc}",
            "--sample_every=1000000", "--run=smoke"]


def cmd_smoke(args) -> int:
    from bench.launch.local import default_run_dir, run_local
    from bench.runside.runclaim import refuse_early

    nproc = _nproc(args.nproc, 2)
    if args.steps < 1:
        raise ConfigError(f"--steps={args.steps}: must be >= 1")
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir("smoke")
    # the run would refuse it after the data; before --base-dir is made, so that a refusal leaves nothing behind
    refuse_early(run_dir, overwrite=args.overwrite, resumable=False)
    base_dir = Path(args.base_dir).resolve()
    try:
        base_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--base-dir {args.base_dir}: cannot be made: {os_reason(e)}; give smoke a directory "
                          f"it can write (default: runs/smoke/base)") from None
    prepare_smoke_data(base_dir)
    env = dict(os.environ, **{ENV_BASE_DIR: str(base_dir)})
    print(f"training a tiny model with {nproc} rank(s); run directory: {run_dir}")
    rc = run_local(smoke_train_args(args.steps, nproc), nproc, run_dir, env=env, overwrite=args.overwrite,
                   resumable=False)
    print_smoke_summary(run_dir)
    return rc


def print_smoke_summary(run_dir: Path) -> None:
    """The run's figures (by the analysis' steady-state rule) and a report of it, HTML and Markdown."""
    from bench.analysis import summarize_runs
    from bench.analysis.rundir import read_run_dir

    row = read_run_dir(run_dir)
    fmt = lambda key, spec: format(row[key], spec) if row.get(key) is not None else "n/a"  # noqa: E731
    print(f"\nsmoke run: {row.get('status')} | {fmt('steps_recorded', 'd')} steps | "
          f"final loss {fmt('final_loss', '.4f')} | "
          f"min val bpb {fmt('min_val_bpb', '.4f')} | median tok/sec {fmt('tok_per_sec', ',.0f')} "
          f"({row.get('steady_rule') or 'no steady steps'}) | time to first step {fmt('time_to_first_step_s', '.1f')}s")
    print(f"run directory: {run_dir.resolve()} (run.json, metrics.jsonl, train.log)")
    report = summarize_runs(run_dir, run_dir / "report")
    print(f"report: {Path(report).resolve()} (and report.md beside it)")
