"""A GPU worker bound to the CPUs of its GPU's NUMA node without numactl.

torchrun's `--numa-binding` starts each worker under numactl; an image without numactl would fail every worker,
so torchrun's wrapper (bench/launch/numabind.py) drops the flag and asks each worker to bind itself instead
(ENV_BIND). The worker reads its GPU's NUMA node from sysfs and restricts itself to that node's CPUs, within
the CPUs Slurm gave the task, with sched_setaffinity: the CPU half of numactl's binding (memory then follows
the first touch of those CPUs). A GPU whose node has no CPUs (a GH200's own HBM is a node of its own, which its PCI
device may name) is bound to the CPUs of the node nearest that one, by the kernel's distance table.
"""

import os
from pathlib import Path

ENV_BIND = "NANOCHAT_BENCH_NUMA_BIND"  # set by torchrun's wrapper when numactl is missing: bind to the GPU's node


def parse_cpulist(text: str) -> set[int]:
    """The kernel's cpulist format ("0-71,144-215", "" for a node without CPUs) as a set of CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def node_cpus(pci_address: str, sys_root: Path = Path("/sys")) -> tuple[int, set[int]] | None:
    """(NUMA node, its CPUs) of the PCI device `pci_address` (0000:1b:00.0), or None where sysfs does not say."""
    try:
        node = int((sys_root / "bus/pci/devices" / pci_address.lower() / "numa_node").read_text())
        if node < 0:
            return None
        cpus = parse_cpulist((sys_root / f"devices/system/node/node{node}/cpulist").read_text())
        if not cpus and (node := nearest_with_cpus(node, sys_root)) is not None:
            cpus = parse_cpulist((sys_root / f"devices/system/node/node{node}/cpulist").read_text())
        return (node, cpus) if node is not None else None
    except (OSError, ValueError):
        return None


def nearest_with_cpus(node: int, sys_root: Path = Path("/sys")) -> int | None:
    """The node with CPUs nearest `node`, one without any (a GH200's HBM: its own Grace CPU's); None where the
    distance table names no single one. A node's distance file lists one distance per online node, in order."""
    base = sys_root / "devices/system/node"
    online = sorted(parse_cpulist((base / "online").read_text()))
    distances = [int(d) for d in (base / f"node{node}/distance").read_text().split()]
    if len(online) != len(distances):
        return None
    cpus = cpus_by_node(sys_root)
    with_cpus = {n: d for n, d in zip(online, distances) if cpus.get(n)}
    nearest = [n for n, d in with_cpus.items() if d == min(with_cpus.values())]
    return nearest[0] if len(nearest) == 1 else None


def cpus_by_node(sys_root: Path = Path("/sys")) -> dict[int, set[int]]:
    """Each NUMA node of this machine and its CPUs (none for a node of memory alone, a GH200's HBM)."""
    nodes = {}
    for cpulist in (sys_root / "devices/system/node").glob("node[0-9]*/cpulist"):
        try:
            nodes[int(cpulist.parent.name[len("node"):])] = parse_cpulist(cpulist.read_text())
        except (OSError, ValueError):
            continue  # a node gone offline since it was listed
    return nodes


def gpu_pci_address(device_index: int) -> str | None:
    """The PCI address of a CUDA device from torch's device properties (None where this torch does not say)."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    ids = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if any(i is None for i in ids):
        return None
    return f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}.0"


def bind(pci_address: str | None, sys_root: Path = Path("/sys")) -> str:
    """Restrict this process to the CPUs of the device's NUMA node that it may use; what was done, in one line."""
    found = node_cpus(pci_address, sys_root) if pci_address else None
    if found is None:
        return f"numa binding: no NUMA node known for GPU {pci_address or '?'}; CPUs left as Slurm bound them"
    node, cpus = found
    usable = cpus & os.sched_getaffinity(0)
    if not usable:
        return f"numa binding: NUMA node {node} of GPU {pci_address} has no CPU this task may use; CPUs left as they are"
    for tid in os.listdir("/proc/self/task"):  # every thread already running (the CUDA driver's, the watchers'):
        try:                                       # Linux binds the one named, and new threads copy their creator
            os.sched_setaffinity(int(tid), usable)
        except (ProcessLookupError, PermissionError):
            pass  # a thread that has ended since
    return f"numa binding: bound to the {len(usable)} CPU(s) of NUMA node {node} (GPU {pci_address}) without numactl"
