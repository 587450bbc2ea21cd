"""--numa-binding on a GH200 node: four Grace CPUs (NUMA nodes 0-3, 72 CPUs each) and four H100s whose HBM is a
node of its own without CPUs (4, 12, 20, 28). A GPU's PCI device may name its Grace node, its HBM node or none
(-1) in sysfs. torch's binding (torch/numa/binding.py) and ours read a sysfs tree laid out as the kernel's here;
the distances are illustrative, only which Grace node is nearest each HBM node matters."""

import builtins
from types import SimpleNamespace

import pytest

from bench.launch import numabind
from bench.nanochat import numanode

GRACE = [0, 1, 2, 3]
HBM = [4, 12, 20, 28]
GPUS = ["0009:01:00.0", "0019:01:00.0", "0029:01:00.0", "0039:01:00.0"]
ARGV = ["--nnodes=2", "--nproc_per_node=4", "--numa-binding=node", "-m", "bench.nanochat.train"]


def cpus_of(node: int) -> set[int]:
    return set(range(72 * node, 72 * node + 72)) if node in GRACE else set()


def distance(a: int, b: int) -> int:
    if a == b:
        return 10
    if {a, b} <= set(GRACE):
        return 40
    grace_a, grace_b = (x if x in GRACE else HBM.index(x) for x in (a, b))
    return 80 if grace_a == grace_b else 120


def gh200(root, reported: str):
    """The sysfs of one GH200 node, each GPU's numa_node `reported` as its grace node, its hbm node or -1."""
    nodes = root / "devices/system/node"
    online = GRACE + HBM
    for n in online:
        (nodes / f"node{n}").mkdir(parents=True)
        (nodes / f"node{n}/cpulist").write_text(ranges(cpus_of(n)) + "\n")
        (nodes / f"node{n}/distance").write_text(" ".join(str(distance(n, m)) for m in online) + "\n")
    (nodes / "online").write_text("0-4,12,20,28\n")
    (nodes / "possible").write_text("0-35\n")
    for i, gpu in enumerate(GPUS):
        (root / "bus/pci/devices" / gpu).mkdir(parents=True)
        node = {"grace": GRACE[i], "hbm": HBM[i], "none": -1}[reported]
        (root / "bus/pci/devices" / gpu / "numa_node").write_text(f"{node}\n")
    return root


def ranges(cpus: set[int]) -> str:
    return f"{min(cpus)}-{max(cpus)}" if cpus else ""


@pytest.fixture
def torch_binding(monkeypatch):
    """torch's binding reading the fake sysfs (its paths are absolute), on a task holding every CPU of the node,
    with numactl installed."""
    from torch.numa import binding

    def reading(root):
        def fake_open(path, *args, **kwargs):
            path = str(path)
            return builtins.open(root / path[len("/sys/"):] if path.startswith("/sys/") else path, *args, **kwargs)

        monkeypatch.setattr(binding, "open", fake_open, raising=False)
        monkeypatch.setattr(binding.torch.cuda, "get_device_properties", lambda i: SimpleNamespace(
            pci_domain_id=int(GPUS[i][:4], 16), pci_bus_id=1, pci_device_id=0))
        monkeypatch.setattr(binding, "_get_allowed_cpu_indices_for_current_thread", lambda: set(range(288)))
        monkeypatch.setattr(binding.shutil, "which", lambda name: f"/usr/bin/{name}")
        options = binding.NumaOptions(affinity_mode=binding.AffinityMode.NODE)
        return lambda gpu: binding._maybe_wrap_command_args_with_numa_binding(("python", "-m", "train"),
                                                                              gpu_index=gpu, numa_options=options)
    return reading


def test_torchrun_raises_rather_than_falls_back():
    """torchrun's NumaOptions keep should_fall_back_if_binding_fails False: a binding that cannot be done is an
    exception in the agent as it starts the workers, and torchrun ends with it."""
    from torch.distributed.run import config_from_args, parse_args

    config, _, _ = config_from_args(parse_args(["--standalone", "--nproc_per_node=1", "--numa-binding=node", "x.py"]))
    assert config.numa_options.should_fall_back_if_binding_fails is False


def test_torch_binds_each_gpu_to_its_grace_node_where_sysfs_names_it(tmp_path, torch_binding):
    wrap = torch_binding(gh200(tmp_path, "grace"))
    assert [wrap(i)[:2] for i in range(4)] == [("numactl", f"--physcpubind={72 * i}-{72 * i + 71}") for i in range(4)]


def test_torch_fails_a_gpu_whose_sysfs_names_its_hbm_node(tmp_path, torch_binding):
    wrap = torch_binding(gh200(tmp_path, "hbm"))
    with pytest.raises(RuntimeError, match="non-empty set of CPU"):
        wrap(0)


def test_torch_binds_every_gpu_to_node_0_where_sysfs_names_none(tmp_path, torch_binding):
    wrap = torch_binding(gh200(tmp_path, "none"))
    assert {wrap(i)[1] for i in range(4)} == {"--physcpubind=0-71"}


def test_our_wrapper_drops_the_flag_on_a_node_with_cpuless_nodes(tmp_path):
    """Whatever the GPUs' numa_node says, so torch's binding is not reached; the workers bind themselves."""
    argv, warning = numabind.usable(ARGV, which=lambda _: "/usr/bin/numactl", sys_root=gh200(tmp_path, "hbm"))
    assert "--numa-binding=node" not in argv and argv[-1] == "bench.nanochat.train"
    assert "4,12,20,28" in warning and "\n" not in warning
    assert numabind.cpuless_nodes(tmp_path) == HBM


def test_our_wrapper_keeps_the_flag_where_every_node_has_cpus(tmp_path):
    for n in GRACE:
        (tmp_path / f"devices/system/node/node{n}").mkdir(parents=True)
        (tmp_path / f"devices/system/node/node{n}/cpulist").write_text(ranges(cpus_of(n)) + "\n")
    assert numabind.usable(ARGV, which=lambda _: "/usr/bin/numactl", sys_root=tmp_path) == (ARGV, None)


@pytest.mark.parametrize("reported", ["grace", "hbm"])
def test_each_worker_binds_itself_to_its_grace_node(tmp_path, reported):
    root = gh200(tmp_path, reported)
    assert [numanode.node_cpus(gpu, root) for gpu in GPUS] == [(n, cpus_of(n)) for n in GRACE]


def test_a_worker_whose_gpu_names_no_node_stays_unbound(tmp_path):
    assert "no NUMA node known" in numanode.bind(GPUS[1], gh200(tmp_path, "none"))


def test_a_cpuless_node_equally_near_two_nodes_binds_nothing(tmp_path):
    root = gh200(tmp_path, "hbm")
    (root / "devices/system/node/node4/distance").write_text("80 80 120 120 10 120 120 120\n")
    assert numanode.node_cpus(GPUS[0], root) is None
