"""--numa-binding on a 2-socket x86 node (NUMA nodes 0 and 1, 64 CPUs each) with eight GPUs, four behind each
socket. On VMs and under some BIOS settings a GPU's PCI device names no node (numa_node -1), and torch's binding
takes that as node 0 (torch/numa/binding.py, max(numa_node, 0)): every worker would run on socket 0's CPUs."""

import pytest

from bench.launch import numabind

ARGV = ["--nnodes=1", "--nproc_per_node=8", "--numa-binding", "node", "-m", "bench.nanochat.train"]
GPUS = [f"0000:{bus:02x}:00.0" for bus in (0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb)]


def x86(root, sockets: int = 2, gpu_node=lambda i: i // 4, vendor="0x10de", cls="0x030200"):
    for n in range(sockets):
        (root / f"devices/system/node/node{n}").mkdir(parents=True)
        (root / f"devices/system/node/node{n}/cpulist").write_text(f"{64 * n}-{64 * n + 63}\n")
    for i, gpu in enumerate(GPUS):
        device = root / "bus/pci/devices" / gpu
        device.mkdir(parents=True)
        (device / "vendor").write_text(f"{vendor}\n")
        (device / "class").write_text(f"{cls}\n")
        (device / "numa_node").write_text(f"{gpu_node(i)}\n")
    nic = root / "bus/pci/devices/0000:17:00.0"  # a Mellanox NIC naming no node does not matter to the GPUs
    nic.mkdir(parents=True)
    (nic / "vendor").write_text("0x15b3\n")
    (nic / "class").write_text("0x020700\n")
    (nic / "numa_node").write_text("-1\n")
    return root


def usable(root):
    return numabind.usable(ARGV, which=lambda _: "/usr/bin/numactl", sys_root=root)


@pytest.mark.parametrize("cls", ["0x030200", "0x030000"])
def test_the_flag_is_dropped_where_a_gpu_names_no_node_among_two_sockets(tmp_path, cls):
    argv, warning = usable(x86(tmp_path, gpu_node=lambda i: -1 if i == 5 else i // 4, cls=cls))
    assert argv == ["--nnodes=1", "--nproc_per_node=8", "-m", "bench.nanochat.train"]
    assert GPUS[5] in warning and "numa_node -1" in warning and "\n" not in warning
    assert numabind.gpus_without_node(tmp_path) == [GPUS[5]]


def test_the_flag_is_kept_where_every_gpu_names_its_socket(tmp_path):
    assert usable(x86(tmp_path)) == (ARGV, None)


def test_the_flag_is_kept_on_one_socket_where_node_0_is_the_only_one(tmp_path):
    assert usable(x86(tmp_path, sockets=1, gpu_node=lambda i: -1)) == (ARGV, None)


@pytest.mark.parametrize("vendor, cls", [("0x1002", "0x030200"), ("0x10de", "0x068000")])
def test_a_device_other_than_an_nvidia_gpu_naming_no_node_keeps_the_flag(tmp_path, vendor, cls):
    """An AMD GPU is not torch's CUDA device; an NVSwitch bridge (class 0x0680) is not a GPU."""
    assert usable(x86(tmp_path, gpu_node=lambda i: -1, vendor=vendor, cls=cls)) == (ARGV, None)
