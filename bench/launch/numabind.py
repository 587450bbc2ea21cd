"""torchrun's `--numa-binding` only where it can work: it runs each worker under `numactl`, so an image
without numactl would fail every worker at start. Without it the flag is dropped with one warning line and
each worker binds itself to the CPUs of its GPU's NUMA node (bench/nanochat/numanode.py), instead of the run
failing. The same on a machine with a NUMA node without CPUs (a GH200 node: each GPU's HBM is one): torch binds a
worker to the CPUs of the node its GPU's PCI device names, so one naming its HBM node leaves none, and torchrun
fails before any worker starts, while one naming no node (-1) binds every worker to node 0's CPUs. So too on a
machine of several NUMA nodes with CPUs (a 2-socket x86 node, often a VM) where some GPU's PCI device names no
node: torch would bind its worker to node 0's CPUs, maybe the far socket's, and crowd every such worker there. The
workers' own binding takes the CPUs nearest a node without any, and leaves a GPU without a node unbound."""

import shutil
from pathlib import Path
from typing import Callable, Optional

from bench.nanochat.numanode import cpus_by_node

FLAG = "--numa-binding"


def usable(argv: list[str], which: Callable[[str], Optional[str]] = shutil.which,
           sys_root: Path = Path("/sys")) -> tuple[list[str], Optional[str]]:
    """(argv without `--numa-binding` when numactl is missing, a NUMA node has no CPUs or, among several nodes with
    CPUs, a GPU names no node, the warning) or (argv, None)."""
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
    elif (unplaced := gpus_without_node(sys_root)) and len(nodes_with_cpus(sys_root)) > 1:
        why = (f"would bind GPU(s) {','.join(unplaced)} to NUMA node 0's CPUs, as their PCI device names no node "
               "(numa_node -1) on a machine of several NUMA nodes; each worker binds itself to its GPU's node's CPUs "
               "instead (sched_setaffinity), leaving one whose GPU names none as Slurm bound it")
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
    return sorted(n for n, cpus in cpus_by_node(sys_root).items() if not cpus)


def nodes_with_cpus(sys_root: Path = Path("/sys")) -> list[int]:
    return sorted(n for n, cpus in cpus_by_node(sys_root).items() if cpus)


def gpus_without_node(sys_root: Path = Path("/sys")) -> list[str]:
    """The PCI addresses of the NVIDIA GPUs (3D or VGA controllers) whose PCI device names no NUMA node (-1)."""
    gpus = []
    for device in (sys_root / "bus/pci/devices").glob("*"):
        try:
            if (device / "vendor").read_text().strip().lower() != "0x10de":
                continue
            if not (device / "class").read_text().strip().lower().startswith(("0x0302", "0x0300")):
                continue
            if int((device / "numa_node").read_text()) < 0:
                gpus.append(device.name)
        except (OSError, ValueError):
            continue  # a device without these files (or gone since it was listed) is no GPU torch binds
    return sorted(gpus)
