"""Loader throughput: tokens per second of one rank, by tokenizer thread count, and of the .bin format.

    python benchmarks/bench_loader.py                       # uses $NANOCHAT_BASE_DIR if it has data + tokenizer
    python benchmarks/bench_loader.py -B 32 -T 2048 --threads 1 2 4 8 --seconds 10

Without shards and a tokenizer in $NANOCHAT_BASE_DIR it builds a temporary one (generated shards, an
8,192-token tokenizer). The figure to compare with: a d20 rank on an H100 consumes ~135k tokens/s
(spec §9), so the loader must produce more than that on the CPU cores a rank has.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np


def ensure_data(vocab_size: int) -> str | None:
    """Use the data of $NANOCHAT_BASE_DIR, else make a temporary base dir (returned, to be removed)."""
    from bench.errors import DataError
    from bench.nanochat import dataset, tokenizer

    try:
        tokenizer.get_tokenizer()
        dataset.split_files("train")
        return None
    except DataError:
        pass
    os.environ["NANOCHAT_BASE_DIR"] = tempfile.mkdtemp(prefix="bench_loader_")
    print(f"no data in place: generating shards and a {vocab_size:,}-token tokenizer in {os.environ['NANOCHAT_BASE_DIR']}")
    dataset.generate_shards(3, 4096, 512)
    tokenizer.train_tokenizer(vocab_size=vocab_size, max_chars=20_000_000)
    return os.environ["NANOCHAT_BASE_DIR"]


def measure(loader, tokens_per_batch: int, seconds: float) -> tuple[float, int]:
    import torch

    x, _ = next(loader)  # the first batch pays for opening files and loading the tokenizer
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        x, _ = next(loader)
        n += 1
    if x.is_cuda:
        torch.cuda.synchronize()  # the copies are asynchronous
    return n * tokens_per_batch / (time.perf_counter() - t0), n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-B", type=int, default=8, help="device batch size (default: 8)")
    p.add_argument("-T", type=int, default=2048, help="sequence length (default: 2048)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4], help="tokenizer threads to try (default: 1 2 4)")
    p.add_argument("--seconds", type=float, default=5.0, help="measuring time per setting (default: 5)")
    p.add_argument("--device", default="cpu", help="where batches go: cpu or cuda (pinned + non_blocking) (default: cpu)")
    p.add_argument("--vocab_size", type=int, default=8192, help="vocab of a generated tokenizer (default: 8192)")
    args = p.parse_args(argv)
    if min(args.threads) < 1:  # before any data is generated: a pool of 0 threads is a traceback at the end
        p.error(f"--threads: each count must be >= 1, not {min(args.threads)}")
    temporary = ensure_data(args.vocab_size)
    try:
        report(args)
    finally:
        if temporary:
            shutil.rmtree(temporary)
    return 0


def report(args) -> None:
    from bench.nanochat.dataloader import build_loader
    from bench.nanochat.tokenizer import get_tokenizer

    tokens = args.B * args.T
    print(f"B={args.B} T={args.T} ({tokens:,} tokens/batch), vocab {get_tokenizer().get_vocab_size():,}, "
          f"device {args.device}, {os.cpu_count()} CPU cores, base dir {os.environ.get('NANOCHAT_BASE_DIR', '~/.cache/nanochat')}")
    print(f"{'source':22s} {'batches':>8s} {'tokens/s/rank':>14s}")
    for threads in args.threads:
        loader = build_loader(args.B, args.T, "train", device=args.device, tokenizer_threads=threads)
        rate, n = measure(loader, tokens, args.seconds)
        print(f"{f'parquet, {threads} thread(s)':22s} {n:8d} {rate:14,.0f}")
    with tempfile.TemporaryDirectory() as d:
        stream = np.random.default_rng(0).integers(0, 65536, size=20 * (tokens + 1), dtype=np.uint16)
        for split in ("train", "val"):
            stream.tofile(os.path.join(d, f"{split}.bin"))
        rate, n = measure(build_loader(args.B, args.T, "train", device=args.device, data_bin_dir=d), tokens, args.seconds)
        print(f"{'train.bin (uint16)':22s} {n:8d} {rate:14,.0f}")


if __name__ == "__main__":
    sys.exit(main())
