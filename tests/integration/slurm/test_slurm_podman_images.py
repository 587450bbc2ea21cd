"""Plain podman's image step for real on the two-node test cluster: before the run, one srun task per node
loads the project's image from the site's `podman save` archive into that node's own storage, the run trains
the tiny model on both nodes from there, and run.json records the step as its start-up phase image_ready;
a node without the image and without an archive stops the run in seconds, naming the node and the image.

    NANOCHAT_BENCH_CONTAINER_TEST=1 flock /tmp/slurm-tests.lock \\
        python -m pytest tests/integration/slurm/test_slurm_podman_images.py -q -s

What is staged: both "nodes" are one host, so the test gives each its own Podman storage (a real site's nodes
have their own disks) through a `podman` first on PATH that adds `--root`/`--runroot` under the node's name
(SLURMD_NODENAME, which srun sets in every task). Podman, its load and run, Slurm and the training are real.
The two containers share the host's PID namespace (containers.conf `pidns = "host"`), as in
test_podman_hpc.py: otherwise both torchrun agents are PID 1 on one host name, which c10d takes for one node.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from bench import breakdown, cli
from bench.contract import read_run_json
from tests.support import containers

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(1500)]

TINY = ["--gpus-per-node=2", "--depth=2", "--max_seq_len=64", "--device_batch_size=2", "--num_iterations=6",
        "--eval_every=-1", "--device_type=cpu", "--no-exclusive"]
NODES = ("n1", "n2")  # tests/integration/slurm/slurm_cluster.py


@pytest.fixture(scope="module")
def node_storage(podman_image):
    """A `podman` that keeps each node's images apart, an archive of the project's image, and the roots."""
    # short: podman refuses a --runroot over 50 characters, which pytest's own temporary paths can pass
    root = Path(tempfile.mkdtemp(prefix="pn-", dir="/tmp"))
    real = shutil.which("podman")
    bindir = root / "bin"
    bindir.mkdir()
    (bindir / "podman").write_text(
        "#!/bin/bash\n# each test node's own storage, as each node of a cluster has its own disk\n"
        f'node=${{SLURMD_NODENAME:-login}}\nexec {real} --root "{root}/$node/root" --runroot "{root}/$node/run" "$@"\n')
    (bindir / "podman").chmod(0o755)
    (root / "containers.conf").write_text(
        '[containers]\ndefault_ulimits = []\npidns = "host"\n\n[engine]\nruntime = "runc"\n')
    archive = root / "nanochat-bench.tar"
    containers.run_step("podman save", containers.podman("save", "-o", str(archive), podman_image))
    yield root, bindir, archive
    for node in NODES:  # the loaded copies (2 GB each)
        subprocess.run([real, "--root", f"{root}/{node}/root", "--runroot", f"{root}/{node}/run", "system", "reset",
                        "--force"], capture_output=True, timeout=300)
    shutil.rmtree(root, ignore_errors=True)


def node_has(root, real, node: str, image: str) -> bool:
    return subprocess.run([real, "--root", f"{root}/{node}/root", "--runroot", f"{root}/{node}/run", "image",
                           "exists", image], capture_output=True, timeout=120).returncode == 0


def site_file(tmp_path, archive=None):
    text = 'name = "test-podman"\nnetwork = "ethernet"\n[partitions.debug]\nmax_time = "1-00:00:00"\n'
    if archive:
        text += f'[images.podman]\narchive = "{archive}"\n'
    path = tmp_path / "site.toml"
    path.write_text(text)
    return path


def test_podman_loads_the_image_on_both_nodes_before_the_run(
        slurm_cluster, tiny_base_dir, podman_image, node_storage, tmp_path, monkeypatch):
    root, bindir, archive = node_storage
    real = shutil.which("podman")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("CONTAINERS_CONF", str(root / "containers.conf"))  # sbatch passes the environment on
    assert not any(node_has(root, real, n, podman_image) for n in NODES)  # the nodes start without the image

    sweep = tmp_path / "sweep"
    assert cli.main(["submit", "--nodes=2", "--runtimes=podman", f"--image=podman={podman_image}", *TINY,
                     f"--site={site_file(tmp_path, archive)}", f"--base-dir={tiny_base_dir}", f"--out={sweep}"]) == 0
    code = cli.main(["status", str(sweep), "--wait", "--poll=2", "--timeout=900"])
    run_dir = sweep / "n2-podman-r1"
    run = read_run_json(run_dir)
    log = "".join(p.read_text() for p in run_dir.glob("slurm-*.log"))
    print(log[-4000:])
    assert code == 0 and run["status"] == "ok", (run["status"], run.get("message"), log[-3000:])

    # Each node loaded the image into its own storage, from the archive, before the run.
    for node in NODES:
        assert f"node {node}: image {podman_image} loaded from {archive}" in log, log[-3000:]
        assert node_has(root, real, node, podman_image)
    launch = run["launch"]
    assert launch["t0"] < launch["image_ready_at"] < run["started_at"]
    assert launch["image_step"] == f"podman load of {archive} on the nodes that lack the image"
    loaded_id = subprocess.run([real, "--root", f"{root}/n1/root", "--runroot", f"{root}/n1/run", "image",
                                "inspect", "--format={{.Id}}", podman_image], capture_output=True, text=True)
    assert run["image"]["id"] == loaded_id.stdout.strip() and run["image"]["reference"] == podman_image
    # The analysis shows the step as its own start-up phase, before the runtime's.
    assert breakdown.LABELS["image_ready"] == "image on the nodes"
    assert launch["image_ready_at"] - launch["t0"] > 0

    # A run whose image is on no node, with no archive named: it stops in seconds, naming the node and image.
    missing = "localhost/nanochat-bench:absent"
    sweep2 = tmp_path / "sweep2"
    assert cli.main(["submit", "--nodes=2", "--runtimes=podman", f"--image=podman={missing}", *TINY,
                     f"--site={site_file(tmp_path)}", f"--base-dir={tiny_base_dir}", f"--out={sweep2}"]) == 0
    cli.main(["status", str(sweep2), "--wait", "--poll=1", "--timeout=300"])
    failed = read_run_json(sweep2 / "n2-podman-r1")
    assert failed["status"] == "failed" and f"image {missing} is not in this node's podman storage" in \
        failed["message"] and "node n" in failed["message"], failed["message"]
    assert failed["launch"]["finished_at"] - failed["launch"]["t0"] < 60
    assert failed["launch"].get("image_ready_at") is None and failed.get("started_at") is None
