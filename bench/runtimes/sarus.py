"""sarus: CSCS's classic `srun sarus run …`, and Sarus Suite's `srun --edf=<EDF>`.

Classic Sarus passes the host environment into the container, where the image's own variables win
(CSCS's Sarus user guide), and selects GPUs from the host's CUDA_VISIBLE_DEVICES through its NVIDIA hook;
so every variable of the run is given as a literal `-e NAME=VALUE`, besides mounts and the workdir. Sarus Suite
(Podman-based, early access on Alps) reads the same EDF files as CE, through `--edf=`, and takes
registry references only (no .sqsh paths).

Sarus Suite's images: runs read them from its Parallax store, a read-only SquashFS store on the parallel
filesystem that `sarusctl migrate` fills (Podman's own store on the node is /dev/shm). So once per sweep the
first job's batch host makes sure the image is there: `sarusctl pull` (a registry image) and `sarusctl migrate`,
under a lock the other jobs wait on, unless `sarusctl images` already lists it. An image built with Podman
(`localhost/...`, the default) is migrated where it was built: containers/sarus-suite-migrate.sh. Sarus Suite is
early access and not available here: this step is rendered and checked as text only; the output format of
`sarusctl images` (a line naming the repository and tag, as `podman images`) is an assumption.
"""

from pathlib import Path

from bench.runtimes.base import IMAGES_DIR, ONCE, ImageStep, Runtime, image_name, inner
from bench.runtimes.ce import ContainerEngine


class Sarus(Runtime):
    name = "sarus"
    default_image = "load/library/nanochat-bench:latest"  # the name `sarus load` gives
    mount_forbidden = ":,"  # --mount=type=bind,source=…,destination=…
    tty_flags = ("-t",)
    site_keys = ("env", "mounts", "devices", "flags")
    version = ("sarus", "--version")

    def wrap(self, spec):
        argv = ["sarus", "run", *(t for name, value in sorted(spec.env.items()) for t in ("-e", f"{name}={value}"))]
        for m in spec.mounts:
            argv.append(f"--mount=type=bind,source={m.src},destination={m.target}"
                        + (",readonly" if m.readonly else ""))
        if spec.workdir:
            argv.append(f"--workdir={spec.workdir}")
        if spec.gpus:
            argv += [f"--device={d}" for d in spec.devices] + list(spec.flags)
        return [*argv, spec.image, *inner(spec)]

    def id_command(self, spec):
        # `sarus images --digests` lists REPOSITORY, TAG, DIGEST first (as `docker images --digests`; an
        # assumption checked as text only, Sarus is not available here); an image made by `sarus load` has none
        if "@" in spec.image:  # pinned by digest: the reference holds it (the listing shows no tag for it)
            return ("echo", spec.image.rsplit("@", 1)[1])
        repository, sep, tag = spec.image.rpartition(":")
        if not sep or "/" in tag:  # no tag (a colon only in a registry's port): Sarus's default
            repository, tag = spec.image, "latest"
        return ("sh", "-c", 'sarus images --digests | awk -v r="$1" -v t="$2" \'$1 == r && $2 == t {print $3; exit}\'',
                "sh", repository, tag)


class SarusSuite(ContainerEngine):
    name = "sarus-suite"
    default_image = "localhost/nanochat-bench:latest"
    option = "--edf"
    site_keys = ("env", "mounts", "annotations", "devices")
    version = ("sarusctl", "--version")  # an assumption: a clap-style --version (not documented in its guide)

    def check_image(self, image, must_exist):
        return Runtime.check_image(self, image, must_exist)  # Podman-style references, no .sqsh

    def edf_devices(self, spec):
        return list(spec.devices) if spec.gpus else []  # its `devices` key: Podman --device values, CDI names

    def image_step(self, spec):
        marker = str(Path(spec.run_dir).parent / IMAGES_DIR / f"{image_name(spec.image)}.migrated")
        return ImageStep(f"sarusctl migrate of {spec.image} into the Parallax store, once per sweep", ONCE,
                         ("sarusctl", marker, spec.image), per_node=False)
