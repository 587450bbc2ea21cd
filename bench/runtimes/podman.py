"""podman and podman-hpc: `srun podman run --rm … IMAGE CMD`, one container per node.

Podman passes no host environment, so each variable of the run is given as a literal `--env=NAME=VALUE`,
which beats a value the image sets (podman-run(1): --env overrides the image's ENV), the SLURM_* and
SLINGSHOT_* (the step's VNIs) variables are passed by pattern, and a GPU run's CUDA_VISIBLE_DEVICES (the step's
GPUs) by name. Host network and IPC namespaces keep the rendezvous and shared memory as on the host. Where
podman's default ulimits exceed what Slurm gives a task (runc: "error setting rlimits"), set
`default_ulimits = []` in containers.conf (CONTAINERS_CONF is passed on to the job like the rest of the
environment). podman-hpc (NERSC) adds its `--gpu` and `--nccl` modules and runs the image it migrated to the
shared squash store.

The image on every node: Podman's storage is node-local, so before each run one srun task per node checks
that the image is there (`podman image exists`) and, where it is not, loads it from the site's archive
(`[images.podman] archive`, made by `podman save`, see containers/README.md); without an archive a node that
lacks the image stops the run at once, naming the node. podman-hpc's nodes see the squash store its `migrate`
filled, so its step checks each node sees the image there. The engine's image id is recorded in run.json.
An archive that does not hold the run's image (another --image) is left out at render (archive_holds).
"""

import json
import tarfile

from bench.runtimes.base import ImageStep, Runtime, inner

PER_NODE = "image-podman.sh"  # slurm/: the image on one node (present, loaded from the archive, or a clear stop)


class Podman(Runtime):
    name = "podman"
    default_image = "localhost/nanochat-bench:latest"  # containers/build.sh tags nanochat-bench:latest
    program = "podman"
    version = (program, "--version")
    tty_flags = ("-it",)
    site_keys = ("env", "mounts", "devices", "flags")
    gpu_options = ("--device=nvidia.com/gpu=all",)  # CDI spec from the NVIDIA container toolkit

    def wrap(self, spec):
        argv = [self.program, "run", "--rm", "--network=host", "--ipc=host"]
        if spec.gpus:
            argv += self.gpu_options
            # the devices are every GPU of the node: the step's own (Slurm's), where set, or a shared node's ranks
            # would take GPUs 0..N-1, whoever holds them
            argv.append("--env=CUDA_VISIBLE_DEVICES")
            argv += [f"--device={d}" for d in spec.devices]
            argv += [f for f in spec.flags if f not in argv]  # the site's modules (podman-hpc --nccl)
        for m in spec.mounts:
            argv.append(f"--volume={m.src}:{m.target}" + (":ro" if m.readonly else ""))
        if spec.workdir:
            argv.append(f"--workdir={spec.workdir}")
        argv += [f"--env={name}={value}" for name, value in sorted(spec.env.items())]
        argv.append("--env=SLURM_*")  # the job's facts, for the trainer's provenance (podman expands the *)
        # the step's Slingshot VNIs and CXI services, which Slurm's switch plugin sets per step and libfabric's cxi
        # provider reads for its auth key: without them it cannot reach the other nodes under the job's VNI
        argv.append("--env=SLINGSHOT_*")
        return [*argv, spec.image, *inner(spec)]

    def image_step(self, spec):
        archive = spec.image_archive or ""
        what = f"{self.program} load of {archive} on the nodes that lack the image" if archive else \
            f"a check that each node holds the image in its {self.program} storage"
        return ImageStep(what, PER_NODE, (self.program, spec.image, archive), per_node=True,
                         id_command=(self.program, "image", "inspect", "--format={{.Id}}", spec.image))


class PodmanHPC(Podman):
    name = "podman-hpc"
    program = "podman-hpc"
    version = (program, "infohpc")  # it has no --version; infohpc's first line is "Podman-HPC Version: X"
    gpu_options = ("--gpu", "--nccl")  # driver libraries; host libfabric + aws-ofi-nccl plugin

    def image_step(self, spec):
        # its squash store is added to `images` and `run` only, so the id comes from the listing
        return ImageStep("a check that each node sees the image in the squash store of podman-hpc", PER_NODE,
                         (self.program, spec.image), per_node=True,
                         id_command=(self.program, "images", "--no-trunc", "--format={{.Id}}", spec.image))


def archive_holds(archive: str, image: str) -> bool | None:
    """Whether a `podman save` archive holds `image`, by the names it was saved under (docker-archive's manifest.json
    RepoTags, oci-archive's index.json ref names) matched on the repository's last component and the tag, since
    podman completes a short name (nanochat-bench -> localhost/nanochat-bench:latest); None when this host cannot
    tell (no such file, a compressed or other archive, a name without its repository, a reference by digest).
    Headers only: a multi-GB archive is read in well under a second."""
    want = _name_and_tag(image)
    try:
        with tarfile.open(archive, "r:") as tar:  # uncompressed, as podman saves: members are skipped, not read
            names = []
            for member in tar:
                name = member.name.removeprefix("./")
                if name in ("manifest.json", "index.json") and (f := tar.extractfile(member)):
                    names += _saved_names(name, json.load(f))
    except (OSError, tarfile.TarError, ValueError, AttributeError, TypeError):
        return None
    saved = [_name_and_tag(n) for n in names if "/" in n or ":" in n]  # an OCI ref name may be a tag alone
    if want is None or not names or len(saved) < len(names) or None in saved:
        return None
    return want in saved


def _saved_names(member: str, data) -> list[str]:
    if member == "manifest.json":  # docker-archive: [{"RepoTags": [...], ...}]
        return [str(t) for entry in data for t in entry.get("RepoTags") or []]
    return [str(m.get("annotations", {}).get("org.opencontainers.image.ref.name")) for m in data.get("manifests", [])]


def _name_and_tag(reference: str) -> "tuple[str, str] | None":
    """(the repository's last component, the tag): `docker.io/x/nntile:1` -> (nntile, 1), `nanochat-bench` ->
    (nanochat-bench, latest); None for a reference by digest."""
    if not reference or "@" in reference:
        return None
    name, _, tag = reference.rsplit("/", 1)[-1].partition(":")
    return name, tag or "latest"
