"""torchrun's `--numa-binding` only where it can work: it runs each worker under `numactl`, so an image
without numactl would fail every worker at start. Without it the flag is dropped with one warning line and
each worker binds itself to the CPUs of its GPU's NUMA node (bench/nanochat/numanode.py), instead of the run
failing. The same on a machine with a NUMA node without CPUs (a GH200 node: each GPU's HBM is one): torch binds a
worker to the CPUs of the node its GPU's PCI device names, so one naming its HBM node leaves none, and torchrun
fails before any worker starts, while one naming no node (-1) binds every worker to node 0's CPUs. The workers'
own binding takes the CPUs nearest a node without any, and leaves a GPU without a node unbound."""

import shutil
from pathlib import Path
from typing import Callable, Optional

from bench.nanochat.numanode import parse_cpulist

FLAG = "--numa-binding"


def usable(argv: list[str], which: Callable[[str], Optional[str]] = shutil.which,
           sys_root: Path = Path("/sys")) -> tuple[list[str], Optional[str]]:
    """(argv without `--numa-binding` when numactl is missing or a NUMA node has no CPUs, the warning) or
    (argv, None)."""
    flags = [a for a in argv if a == FLAG or a.startswith(FLAG + "=")]
    if not flags:
        return argv, None
    if not which("numactl"):
        why = "needs numactl, which this image lacks; each worker binds itself to its GPU's NUMA node's CPUs " \
              "instead (sched_setaffinity; install numactl for numactl's binding)"
    elif cpuless := cpuless_nodes(sys_root):
        why = (f"cannot bind a GPU whose NUMA node has no CPUs, as node(s) {','.join(map(str, cpuless))} here "
               "(a GH200's HBM); each worker binds itself to the CPUs nearest its GPU's node instead "
               "(sched_setaffinity)")
    else:
        return argv, None
    kept, rest = [], iter(argv)
    for a in rest:
        if a == FLAG:  # `--numa-binding node`: its value goes too
            next(rest, None)
        elif not a.startswith(FLAG + "="):
            kept.append(a)
    return kept, f"torchrun: {flags[0]} {why}"


def cpuless_nodes(sys_root: Path = Path("/sys")) -> list[int]:
    """The NUMA nodes of this machine without CPUs (memory alone)."""
    nodes = []
    for cpulist in (sys_root / "devices/system/node").glob("node[0-9]*/cpulist"):
        try:
            if not parse_cpulist(cpulist.read_text()):
                nodes.append(int(cpulist.parent.name[len("node"):]))
        except (OSError, ValueError):
            continue  # a node gone offline since it was listed
    return sorted(nodes)
