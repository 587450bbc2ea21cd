"""A worker's own NUMA binding (torchrun's --numa-binding without numactl): its GPU's node read from a sysfs
tree laid out as the kernel's, and the binding applied for real to a child process on this machine's CPUs."""

import os
import subprocess
import sys

import pytest

from bench.nanochat import numanode

GPU = "0000:1b:00.0"


def sysfs(root, node: int, cpulist: str):
    device = root / "bus/pci/devices" / GPU
    device.mkdir(parents=True)
    (device / "numa_node").write_text(f"{node}\n")
    if node >= 0:
        (root / f"devices/system/node/node{node}").mkdir(parents=True)
        (root / f"devices/system/node/node{node}/cpulist").write_text(cpulist + "\n")
    return root


@pytest.mark.parametrize("text, cpus", [("0-3,8-9", {0, 1, 2, 3, 8, 9}), ("5", {5}), ("", set())])
def test_cpulists_parse(text, cpus):
    assert numanode.parse_cpulist(text) == cpus


def test_the_node_of_a_gpu_from_sysfs(tmp_path):
    assert numanode.node_cpus(GPU.upper(), sysfs(tmp_path, 1, "72-143")) == (1, set(range(72, 144)))
    assert numanode.node_cpus("0000:99:00.0", tmp_path) is None  # no such device


def test_a_device_without_a_node_is_left_alone(tmp_path):
    assert "no NUMA node known" in numanode.bind(GPU, sysfs(tmp_path, -1, ""))
    assert "no NUMA node known" in numanode.bind(None, tmp_path)


def test_the_worker_is_bound_to_the_node_cpus_it_may_use(tmp_path):
    """In a child process: a node holding CPU 0 and CPUs this machine does not have binds the child to CPU 0."""
    root = sysfs(tmp_path, 0, "0,4096-4097")
    ours = os.sched_getaffinity(0)
    code = ("import os, sys, threading\nfrom pathlib import Path\nfrom bench.nanochat import numanode\n"
            # running before the bind, and until the process ends, however slowly a loaded host gets to it
            "t = threading.Thread(target=threading.Event().wait, daemon=True); t.start()\n"
            f"print(numanode.bind({GPU!r}, Path({str(root)!r})))\nprint(sorted(os.sched_getaffinity(0)))\n"
            "print(sorted(os.sched_getaffinity(t.native_id)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert "bound to the 1 CPU(s) of NUMA node 0" in out[0] and out[1] == out[2] == "[0]"
    assert os.sched_getaffinity(0) == ours  # this process untouched


def test_a_node_with_none_of_the_tasks_cpus_changes_nothing(tmp_path):
    message = numanode.bind(GPU, sysfs(tmp_path, 3, "4096-4097"))
    assert "has no CPU this task may use" in message
