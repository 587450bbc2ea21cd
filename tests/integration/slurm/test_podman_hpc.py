"""podman-hpc for real on the two-node test cluster: the project's image, migrated to a squash store once, as
on a login node, then `srun podman-hpc run ...` on both nodes training the tiny model on CPU (no `--gpu`).

    NANOCHAT_BENCH_CONTAINER_TEST=1 flock /tmp/slurm-tests.lock \\
        python -m pytest tests/integration/slurm/test_podman_hpc.py -q -s

What runs for real: podman-hpc from PyPI (tested with 1.2.2: its CLI and site configuration, `migrate` with a
static mksquashfs run inside the image, `images`, `infohpc`, `run` with its default arguments), its
fuse-overlayfs-wrap mount program (squashfuse on the migrated image, fuse-overlayfs over it), Podman with runc,
and Slurm. What is the test's own: the site configuration file (tests/support/containers.py writes it;
/etc/podman_hpc is never read), with no modules or OCI hooks (they give --gpu and --nccl, which a CPU machine
has no use for); `migrate` reads the image from Podman's storage, where the session's fixture built it (no
`podman-hpc build` or `pull`: no registry here); and both "nodes" are one host, so they share one node
storage and one squash store, and the containers share the host's PID
namespace (containers.conf `pidns = "host"`: otherwise both torchrun agents are PID 1 on one host name, and
c10d's rendezvous, which names a node by host name and PID, waits for a second node forever).
"""

import json
import os

import pytest

from bench import cli
from bench.contract import METRICS_JSONL, read_run_json
from tests.support import containers

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(1500)]

TINY = ["--gpus-per-node=2", "--depth=2", "--max_seq_len=64", "--device_batch_size=2", "--num_iterations=6",
        "--eval_every=-1", "--device_type=cpu", "--no-exclusive"]


@pytest.fixture(scope="module")
def site(podman_image, tmp_path_factory):
    """A podman-hpc site holding the project's image in its squash store only (migrated, as users do)."""
    why = containers.podman_hpc_why_not()
    if why and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {why}")  # the second runtime tested for real may not vanish from CI
    if why:
        pytest.skip(why)
    site = containers.PodmanHPCSite(tmp_path_factory.mktemp("podman-hpc"))
    site.migrate(podman_image)
    yield site
    site.remove_containers()


def test_podman_hpc_trains_on_two_nodes_from_the_migrated_image(
        slurm_cluster, tiny_base_dir, site, podman_image, standin_image, tmp_path, monkeypatch):
    for name, value in site.env().items():  # sbatch passes the environment on to the job and its srun
        monkeypatch.setenv(name, value)
    assert site.images() == {podman_image: "true"}  # the nodes' own storage is empty: only the squash store has it
    sweep = tmp_path / "sweep"
    assert cli.main(["submit", "--nodes=2", "--runtimes=podman-hpc", f"--image=podman-hpc={podman_image}", *TINY,
                     f"--base-dir={tiny_base_dir}", f"--out={sweep}"]) == 0
    code = cli.main(["status", str(sweep), "--wait", "--poll=2", "--timeout=600"])
    run_dir = sweep / "n2-podman-hpc-r1"
    run = read_run_json(run_dir)
    assert code == 0 and run["status"] == "ok", (run["status"], run.get("message"),
                                                 (run_dir / "train.log").read_text()[-3000:])

    assert run["runtime"] == "podman-hpc" and run["nodes"] == 2 and run["world_size"] == 4
    assert run["launch"]["runtime_version"].startswith("Podman-HPC Version: ")  # the job ran `podman-hpc infohpc`
    # The image step: every node saw the image in the squash store before the run (its start-up phase image_ready)
    assert run["launch"]["t0"] <= run["launch"]["image_ready_at"] and "squash store" in run["launch"]["image_step"]
    log = "".join(p.read_text() for p in run_dir.glob("slurm-*.log"))
    assert all(f"node {n}: image {podman_image} is in the squash store" in log for n in ("n1", "n2")), log[-2000:]
    assert run["image"]["id"]  # podman-hpc image inspect, on the batch host
    # Facts only the image has: its build record (/etc/nanochat-bench/image.json) and its own Python
    # (Debian's, where the host's may be another build).
    assert run["image"]["reference"] == podman_image and run["image"]["build"]["base_image"] == standin_image
    image_python = containers.run_step("image's python", containers.podman(
        "run", "--rm", podman_image, "python", "-c", "import platform; print(platform.python_version())"))
    assert run["software"]["python"] == image_python.stdout.strip()

    events = [json.loads(line) for line in (run_dir / METRICS_JSONL).read_text().splitlines()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "end", [e["event"] for e in events]
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == list(range(6)) and all(e["loss"] > 0 for e in steps)

    # Each node's container ran on the squashed image: the mount program mounted it, once per node.
    mounts = [line for line in site.mount_log.read_text().splitlines()
              if line.startswith("Mount squash ") and str(site.squash_dir) in line]
    assert len(mounts) >= 2, site.mount_log.read_text()[-3000:]
    assert site.images() == {podman_image: "true"}  # and left no copy in the nodes' storage
