"""pyxis: NVIDIA's Slurm plugin with enroot, `srun --container-image=… --container-mounts=…`.

Each option is one srun token, so no shell quoting is involved beyond shlex; but pyxis splits
`--container-mounts` at ',' and each mount at ':', so paths holding either are refused up front.
`--container-env` makes the exported benchmark variables win over values baked into the image.

The image: pyxis imports a registry reference again for every srun, on every node; so a registry image is
imported once per sweep instead (`enroot import` on the first job's batch host, into
`<sweep>/.images/<name>.sqsh`, under a lock the other jobs wait on), and every run of the sweep starts from that
file. A .sqsh given as the image is used as it is. Either file's sha256 is the run's image digest.
"""

from pathlib import Path

from bench.runtimes import edf
from bench.runtimes.base import (ENROOT_VERSION, ONCE, ImageStep, Runtime, check_enroot_image, image_name,
                                 looks_like_path)


class Pyxis(Runtime):
    name = "pyxis"
    default_image = edf.SQSH_IMAGE  # containers/enroot-import.sh
    mount_forbidden = ":,"
    version = ENROOT_VERSION

    def check_image(self, image, must_exist):
        return check_enroot_image(self.name, image, must_exist)

    def srun_options(self, spec):
        opts = [f"--container-image={spec.image}"]
        if spec.mounts:
            opts.append("--container-mounts=" + ",".join(
                f"{m.src}:{m.target}" + (":ro" if m.readonly else "") for m in spec.mounts))
        if spec.workdir:
            opts.append(f"--container-workdir={spec.workdir}")
        if spec.env:
            opts.append("--container-env=" + ",".join(sorted(spec.env)))
        # $HOME stays out: stale per-user caches there (~/.triton) break runs. Writable: Triton and
        # torch.compile write their caches into the container's own filesystem.
        opts += ["--no-container-mount-home", "--container-writable"]
        return opts

    def sweep_image(self, image, images_dir: Path):
        return None if not image or looks_like_path(image) else str(images_dir / f"{image_name(image)}.sqsh")

    def image_step(self, spec):
        if not spec.image_source:
            return None  # a .sqsh file, on the shared filesystem: every node reads it there
        return ImageStep(f"enroot import of {spec.image_source} into {spec.image}, once per sweep", ONCE,
                         ("enroot", spec.image, spec.image_source), per_node=False, digest_file=spec.image)
