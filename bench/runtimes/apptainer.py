"""apptainer: `srun apptainer exec --cleanenv --env-file RUN_DIR/apptainer.env [--nv] --bind SRC:DST … IMAGE CMD`
(under a `bash -c` that passes in the step's SLINGSHOT_* variables and CUDA_VISIBLE_DEVICES).

Apptainer passes the host environment in by default, and the image's own variables win over it
(apptainer-userdocs, "Environment and metadata"); so `--cleanenv` starts from the image's, and every
variable of the run is set from an env file of literal values written into the run directory, which
beats the image's value. (A file, not `--env`: that flag splits its argument at commas, and values such
as NCCL_DEBUG_SUBSYS=INIT,NET hold them.) `--nv` binds the host's NVIDIA driver libraries for GPU runs.

The image: a reference (docker://, oras://, a docker-archive:...) would be converted again by every srun on
every node, so it is built into a .sif once per sweep instead (`apptainer build` on the first job's batch host,
into `<sweep>/.images/<name>.sif`, under a lock the other jobs wait on); a .sif given as the image is used as
it is. Either file's sha256 is the run's image digest.
"""

import shlex
from pathlib import Path

from bench.runtimes.base import ONCE, SCHEMES, ImageStep, Runtime, check_image_file, image_name, inner
from bench.contract import write_text_atomic

ENV_FILE = "apptainer.env"
# Slurm's switch plugin sets SLINGSHOT_* (the step's VNIs and CXI services, which libfabric's cxi provider needs for
# its auth key) in each step, on its node, and its GPU plugin CUDA_VISIBLE_DEVICES (the step's GPUs: --nv shows every
# GPU of the node, so without it ranks on a shared node take GPUs 0..N-1, whoever holds them); --cleanenv drops them,
# and an APPTAINERENV_ copy made there passes them in
STEP_ENV = ('for v in "${!SLINGSHOT_@}" ${CUDA_VISIBLE_DEVICES+CUDA_VISIBLE_DEVICES}; '
            'do export "APPTAINERENV_$v=${!v}"; done; exec "$@"')


class Apptainer(Runtime):
    name = "apptainer"
    default_image = "${SCRATCH}/images/nanochat-bench.sif"  # containers/apptainer-build.sh
    program = "apptainer"
    version = (program, "--version")
    mount_forbidden = ":,"  # --bind takes comma-separated SRC:DST lists
    site_keys = ("env", "mounts", "devices", "flags")
    device_files_only = True  # bound like any file; a CDI name needs apptainer's --oci mode, which this is not

    def check_image(self, image, must_exist):
        if image.startswith(SCHEMES):
            return image
        return check_image_file(self.name, image, (".sif",), must_exist, allow_dir=True)

    def wrap(self, spec):
        # --no-home: $HOME stays out, as CSCS advises (stale per-user caches such as ~/.triton break runs)
        argv = ["bash", "-c", STEP_ENV, "bash",
                self.program, "exec", "--cleanenv", "--no-home", f"--env-file={self.env_file(spec)}"]
        if spec.gpus:
            argv.append("--nv")
        for m in spec.mounts:
            argv.append(f"--bind={m.src}:{m.target}" + (":ro" if m.readonly else ""))
        if spec.gpus:  # device files (a site profile's: /dev paths only) are bound like any file
            argv += [f"--bind={d}" for d in spec.devices] + list(spec.flags)
        if spec.workdir:
            argv.append(f"--pwd={spec.workdir}")
        return [*argv, spec.image, *inner(spec)]

    def sweep_image(self, image, images_dir: Path):
        return str(images_dir / f"{image_name(image)}.sif") if image and image.startswith(SCHEMES) else None

    def image_step(self, spec):
        if not spec.image_source:
            return None  # a .sif (or sandbox) on the shared filesystem: every node reads it there
        return ImageStep(f"apptainer build of {spec.image_source} into {spec.image}, once per sweep", ONCE,
                         ("apptainer", spec.image, spec.image_source), per_node=False, digest_file=spec.image)

    def env_file(self, spec) -> Path:
        return Path(spec.run_dir).absolute() / ENV_FILE

    def write_files(self, spec):
        lines = [f"{name}={shlex.quote(value)}" for name, value in sorted(spec.env.items())]
        write_text_atomic(self.env_file(spec), "\n".join(lines) + "\n")
        return [self.env_file(spec)]
