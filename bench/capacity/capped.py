"""The trainer under an address-space cap that counts from the end of its start-up (RLIMIT_AS).

    NANOCHAT_BENCH_MEMORY_CAP=<bytes> torchrun ... -m bench.capacity.capped -- <trainer flags>

A CPU stand-in for a machine with less memory: each rank imports torch and the trainer first, then may
grow its address space by the cap and no more, so the cap measures what the model needs, not how large
the libraries' mappings are on this machine. Allocations beyond it fail like an out-of-memory
(the trainer records `oom`). Address space is not resident memory (thread stacks and allocator arenas
are reserved, not used), so a cap is a bound with some slack, not an exact figure; MALLOC_ENV keeps that
slack the same from run to run.
"""

import os
import resource
import sys

ENV_CAP = "NANOCHAT_BENCH_MEMORY_CAP"
# glibc's allocator, pinned, so that address space follows live memory: a fixed mmap threshold turns off the
# adaptive one (which keeps freed blocks of up to 32 MiB in the heap, more or fewer by the order of frees) and
# two arenas at most. A tiny probe's peak then repeats within 2 MiB; without these it varied by 60-150 MiB.
MALLOC_ENV = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072"}


def vm_size() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


def main() -> int:
    from bench.nanochat import train  # torch and the trainer's imports: the start-up footprint

    limit = vm_size() + int(os.environ[ENV_CAP])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return train.main()


if __name__ == "__main__":
    sys.exit(main())
