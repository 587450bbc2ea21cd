"""Communication pre-flight: bus bandwidth of the collectives training uses, on the run's own process group.

Before the first step every run (unless --preflight=0) times all_reduce (DDP-style averaging), and the
reduce_scatter and all_gather of the sharded optimizers (bench/nanochat/adamw.py, muon.py), at a few sizes
up to 1 GiB on GPUs (4 MiB on CPU, where gloo is the backend and a test's seconds matter). Bandwidths as
nccl-tests defines them (nccl-tests doc/PERFORMANCE.md): algbw = bytes / time, with bytes the full buffer
(all_gather's output, reduce_scatter's input); busbw = algbw x 2(n-1)/n for all_reduce and x (n-1)/n for
the other two, so busbw compares with the link's bandwidth whatever the rank count (0 on one rank: nothing
crosses a link).

    torchrun --nproc_per_node=4 -m bench.nanochat.preflight          # alone, inside any runtime
    nanochat-bench preflight --nproc 2                               # the same on this machine
"""

import argparse
import json
import sys
import time
import warnings

import torch
import torch.distributed as dist

# torch 2.13 renames these two (same collectives); the old names work on every version supported
warnings.filterwarnings("ignore", message=r".*(reduce_scatter_tensor|all_gather_into_tensor).* is deprecated")

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")
GPU_SIZES = (1 << 20, 16 << 20, 256 << 20, 1 << 30)
CPU_SIZES = (64 << 10, 1 << 20, 4 << 20)
GPU_ITERS, CPU_ITERS = (5, 2), (3, 1)  # (timed, warm-up) runs of each collective and size


def bus_factor(collective: str, n: int) -> float:
    return 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n


def _run_once(collective: str, buf: torch.Tensor, part: torch.Tensor) -> None:
    if collective == "all_reduce":
        dist.all_reduce(buf)
    elif collective == "reduce_scatter":
        dist.reduce_scatter_tensor(part, buf)
    else:
        dist.all_gather_into_tensor(buf, part)


def measure(device: torch.device, sizes=None) -> list[dict]:
    """One record per (collective, size): bytes, time_us (mean of the timed runs), algbw_gbps, busbw_gbps.
    A collective the backend lacks (gloo's reduce_scatter in some torch versions) is left out."""
    n = dist.get_world_size()
    cuda = device.type == "cuda"
    sizes = sizes or (GPU_SIZES if cuda else CPU_SIZES)
    iters, warmup = GPU_ITERS if cuda else CPU_ITERS
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    out = []
    for size in sizes:
        numel = max(n, size // 4 // n * n)  # float32, divisible by the ranks
        buf = torch.ones(numel, dtype=torch.float32, device=device)
        part = torch.empty(numel // n, dtype=torch.float32, device=device)
        for collective in COLLECTIVES:
            try:
                for _ in range(warmup):
                    _run_once(collective, buf, part)
            except (RuntimeError, NotImplementedError):  # e.g. gloo's reduce_scatter in some torch versions
                continue
            sync()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                _run_once(collective, buf, part)
            sync()
            seconds = (time.perf_counter() - t0) / iters
            nbytes = numel * 4
            algbw = nbytes / seconds / 1e9
            out.append({"collective": collective, "bytes": nbytes, "time_us": seconds * 1e6,
                        "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(collective, n)})
        del buf, part
    if cuda:
        torch.cuda.empty_cache()  # the buffers were the largest allocations yet: give them back to training
    return out


def summary(records: list[dict], world_size: int, backend: str) -> dict:
    """run.json's `preflight`: every record, and the busbw of each collective at its largest size."""
    largest = {}
    for r in records:
        if r["bytes"] >= largest.get(r["collective"], {}).get("bytes", 0):
            largest[r["collective"]] = r
    return {"backend": backend, "world_size": world_size, "records": records,
            "busbw_gbps": {c: r["busbw_gbps"] for c, r in largest.items()},
            "bytes": max((r["bytes"] for r in records), default=0)}


def format_table(records: list[dict]) -> str:
    from tabulate import tabulate

    rows = [(r["collective"], f"{r['bytes'] / 2**20:,.2f}", f"{r['time_us']:,.0f}", f"{r['algbw_gbps']:.2f}",
             f"{r['busbw_gbps']:.2f}") for r in records]
    return tabulate(rows, headers=("collective", "MiB", "time us", "algbw GB/s", "busbw GB/s"), tablefmt="plain",
                    disable_numparse=True)


def main(argv: list[str] | None = None) -> int:
    """Alone under torchrun (any runtime): the table on rank 0, and --json for the records."""
    from bench.nanochat.compute import autodetect_device_type, compute_cleanup, compute_init

    ap = argparse.ArgumentParser(prog="python -m bench.nanochat.preflight", description=__doc__.split("\n\n")[0],
                                 allow_abbrev=False)  # whole flag names, as every nanochat-bench command
    ap.add_argument("--device_type", default="", help="cuda | cpu (default: autodetect)")
    ap.add_argument("--max-mib", type=int, default=None, help="largest buffer in MiB (default: 1024 on GPU, 4 on CPU)")
    ap.add_argument("--json", default=None, help="write the records there (rank 0)")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv[1:] if argv[:1] == ["--"] else argv)  # torchrun ... -m <module> -- <flags>
    if args.max_mib is not None and args.max_mib < 1:  # 0 would mean the default, -1 a buffer of 4 bytes
        ap.error(f"--max-mib: must be >= 1, not {args.max_mib}")
    device_type = args.device_type or autodetect_device_type()
    distributed, rank, _, world, device = compute_init(device_type)
    if not distributed:  # one process without torchrun: a group of one, in this process's own store
        if device_type == "cuda":
            device = torch.device("cuda", 0)
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", store=dist.HashStore(), rank=0,
                                world_size=1)
    sizes = None
    if args.max_mib:
        base = GPU_SIZES if device_type == "cuda" else CPU_SIZES
        # the built-in sizes below it, then the buffer asked for: the largest measured, as --help says
        sizes = [s for s in base if s < args.max_mib << 20] + [args.max_mib << 20]
    records = measure(device, sizes)
    if rank == 0:
        print(f"pre-flight: {world} rank(s), backend {dist.get_backend()}")
        print(format_table(records))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary(records, world, dist.get_backend()), f, indent=2)
    compute_cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
