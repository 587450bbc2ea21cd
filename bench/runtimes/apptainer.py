"""apptainer: `srun apptainer exec [--nv] --bind SRC:DST … IMAGE.sif CMD`.

The host environment passes into the container by default, so the exported benchmark variables
need no flags. `--nv` binds the host's NVIDIA driver libraries when the run uses GPUs.
"""

from bench.runtimes.base import Runtime, check_image_file

REF_SCHEMES = ("docker://", "oras://", "library://", "docker-daemon:", "oci-archive:", "docker-archive:")


class Apptainer(Runtime):
    name = "apptainer"
    default_image = "${SCRATCH}/images/nanochat-bench.sif"  # containers/apptainer-build.sh
    program = "apptainer"
    mount_forbidden = ":,"  # --bind takes comma-separated SRC:DST lists

    def check_image(self, image, must_exist):
        if image.startswith(REF_SCHEMES):
            return image
        return check_image_file(self.name, image, (".sif",), must_exist, allow_dir=True)

    def wrap(self, spec):
        argv = [self.program, "exec"]
        if spec.gpus:
            argv.append("--nv")
        for m in spec.mounts:
            argv.append(f"--bind={m.src}:{m.target}" + (":ro" if m.readonly else ""))
        if spec.workdir:
            argv.append(f"--pwd={spec.workdir}")
        return [*argv, spec.image, *spec.command]

    def version_command(self):
        return [self.program, "--version"]
