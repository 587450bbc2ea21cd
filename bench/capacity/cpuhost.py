"""A capacity sweep on CPU: the probes' memory is the host's, so a sweep must not be able to exhaust it.

Without a cap, a probe grows until the host's available memory falls to the guard (bench/capacity/probe.py
stops it there), leaving every other process on the machine a few GiB. So on CPU each rank needs an
address-space cap (--memory-limit, bench/capacity/capped.py), and the ranks' caps together may take at most
half of what the host has available above the guard: address space bounds resident memory, and the other
half covers each rank's start-up footprint (torch and the trainer's imports) and the rest of the machine.
"""

from bench.errors import ConfigError

# What benchmarks/capacity_bench.py --tiny runs: a search that ends inside its family within minutes on CPU.
# Its cap sits between the shapes the CPU test expects to fit and to fail (tests/integration/test_capacity.py).
TINY_MEMORY_LIMIT_MIB = 875
TINY_CPU_FLAGS = (f"--device-type cpu --memory-limit {TINY_MEMORY_LIMIT_MIB}M --seq 64 --aspect-ratios 32 "
                  "--max-depth 8 --max-batch 2")


def check_cpu_host(cfg, machine_info: dict, host_floor: int) -> None:
    """ConfigError for a CPU sweep without a cap, or with caps beyond half the room above the guard, naming
    the settings that fit this host; nothing for a GPU sweep."""
    if machine_info["device_type"] != "cpu":
        return
    room = (machine_info["host_available_bytes"] or 0) - host_floor
    fits = max(0, room // 2 // cfg.nproc) >> 20  # MiB per rank
    hint = (f"e.g. `nanochat-bench capacity {TINY_CPU_FLAGS}` (what benchmarks/capacity_bench.py --tiny runs); "
            f"this host allows --memory-limit up to {fits}M with --gpus {cfg.nproc}")
    if cfg.memory_limit is None:
        raise ConfigError(f"capacity on CPU: give --memory-limit, or the probes grow until this host "
                          f"({room / 2**30:.1f} GiB available above its {host_floor / 2**30:.1f} GiB guard) runs "
                          f"low; {hint}")
    if cfg.memory_limit * cfg.nproc > room // 2:
        raise ConfigError(f"--memory-limit {cfg.memory_limit >> 20}M x {cfg.nproc} rank(s): more than half of "
                          f"the {room / 2**30:.1f} GiB this host has available above its guard; {hint}")
