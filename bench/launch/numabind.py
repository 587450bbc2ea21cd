"""torchrun's `--numa-binding` only where it can work: it runs each worker under `numactl`, so an image
without numactl would fail every worker at start. Without it the flag is dropped with one warning line and
each worker binds itself to the CPUs of its GPU's NUMA node (bench/nanochat/numanode.py), instead of the run
failing."""

import shutil
from typing import Callable, Optional

FLAG = "--numa-binding"


def usable(argv: list[str], which: Callable[[str], Optional[str]] = shutil.which) -> tuple[list[str], Optional[str]]:
    """(argv without `--numa-binding` when numactl is missing, the warning) or (argv, None)."""
    flags = [a for a in argv if a == FLAG or a.startswith(FLAG + "=")]
    if not flags or which("numactl"):
        return argv, None
    kept, rest = [], iter(argv)
    for a in rest:
        if a == FLAG:  # `--numa-binding node`: its value goes too
            next(rest, None)
        elif not a.startswith(FLAG + "="):
            kept.append(a)
    return kept, (f"torchrun: {flags[0]} needs numactl, which this image lacks; each worker binds itself to its "
                  "GPU's NUMA node's CPUs instead (sched_setaffinity; install numactl for numactl's binding)")
