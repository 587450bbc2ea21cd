"""The shared-filesystem check of multi-node stage points: python -m pytest tests/unit/workloads/test_sharedfs.py -q

This host's own /proc/mounts is real; the network filesystems a cluster has (Lustre, NFS) cannot be mounted
here, so those cases give check_shared a mount table as /proc/mounts would print it.
"""

import pytest

from bench import sites, workloads
from bench.errors import ConfigError
from bench.workloads.sharedfs import check_shared, mount_of

CLUSTER_MOUNTS = """\
/dev/sda1 / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw 0 0
10.0.0.1@o2ib:/scratch /scratch lustre rw,flock 0 0
nas:/home /users nfs4 rw 0 0
nas:/proj /my\\040project nfs rw 0 0
"""


def test_one_node_always_shares():
    assert check_shared("/tmp/anything", 1) is None


def test_a_local_disk_is_refused_naming_path_and_type(tmp_path):
    _, fstype = mount_of(tmp_path)
    (tmp_path / "base").mkdir()
    reason = check_shared(tmp_path / "base", 2)
    assert fstype not in ("nfs", "lustre")  # this host's disk is local
    assert reason and str(tmp_path / "base") in reason and f"on {fstype}" in reason and "2 nodes" in reason


def test_network_filesystems_pass_local_ones_do_not():
    assert check_shared("/scratch/me/nanochat", 4, mounts_text=CLUSTER_MOUNTS) is None
    assert check_shared("/users/me/.cache/nanochat", 4, mounts_text=CLUSTER_MOUNTS) is None
    assert check_shared("/my project/base", 2, mounts_text=CLUSTER_MOUNTS) is None  # \040 is a space
    reason = check_shared("/tmp", 2, mounts_text=CLUSTER_MOUNTS)  # paths this host has: the table judges them
    assert "on tmpfs (mounted at /tmp)" in reason
    assert "on ext4 (mounted at /)" in check_shared("/usr", 2, mounts_text=CLUSTER_MOUNTS)


def test_a_site_declares_its_shared_paths(tmp_path):
    cluster = sites.load("test-cluster")
    assert cluster.shared_paths == ("/",)
    assert check_shared(tmp_path, 2, cluster) is None
    site = tmp_path / "site.toml"
    site.write_text('name = "s"\nnetwork = "ethernet"\nshared_paths = ["/srv/shared"]\n')
    mine = sites.load(str(site))
    assert check_shared("/srv/shared/base", 2, mine, mounts_text=CLUSTER_MOUNTS) is None
    assert "shared_paths of site profile s" in check_shared("/usr", 2, mine, mounts_text=CLUSTER_MOUNTS)
    site.write_text('name = "s"\nnetwork = "ethernet"\nshared_paths = ["scratch"]\n')
    with pytest.raises(ConfigError, match="shared_paths: 'scratch' is not an absolute path"):
        sites.load(str(site))


@pytest.mark.parametrize("workload", ["base_loss", "base_eval", "chat_eval", "mid_train", "chat_sft"])
def test_every_stage_reading_a_checkpoint_needs_a_shared_base_directory_on_several_nodes(workload, tmp_path):
    """Every rank of every node loads the checkpoint the stage before wrote on one node: a flow's evaluations
    on a node-local disk would wait in the queue, then fail after pre-training's hours."""
    from bench.launch.plan import Sweep

    train = {"device_type": "cpu", **({"source": "sft"} if workload == "chat_eval" else {})}
    (tmp_path / "base").mkdir()  # here, on this host's local disk
    assert workloads.get(workload).reads_checkpoint and not workloads.get("nanochat").reads_checkpoint

    def points(site):
        return Sweep([1, 2], 2, ["bare"], train=train, workload=workload,
                     site=sites.load(site) if site else None, base_dir=str(tmp_path / "base")).points()

    one, two = points(None)
    assert one.possible and not two.possible and "not a filesystem all 2 nodes share" in two.reason
    assert all(p.possible for p in points("test-cluster"))  # its shared_paths: its one host is every node


def test_a_path_this_host_does_not_see_is_not_judged_by_the_filesystem_of_its_ancestor(tmp_path):
    """A login node that does not mount the nodes' /capstor: the nearest directory it has is `/`, whose local
    disk said nothing of /capstor, yet every multi-node point of every stage after pre-training was refused."""
    from bench.launch.plan import Sweep

    unseen = tmp_path / "capstor" / "scratch"
    assert check_shared(unseen, 2, mounts_text=CLUSTER_MOUNTS) is None
    assert check_shared(unseen, 2) is None
    one, two = Sweep([1, 2], 2, ["bare"], train={"device_type": "cpu"}, workload="base_loss",
                     base_dir=str(unseen)).points()
    assert one.possible and two.possible
    unseen.mkdir(parents=True)  # once this host has it, on its local disk: refused as before
    assert "not a filesystem all 2 nodes share" in check_shared(unseen, 2)
