"""pyxis: NVIDIA's Slurm plugin with enroot, `srun --container-image=… --container-mounts=…`.

Each option is one srun token, so no shell quoting is involved beyond shlex; but pyxis splits
`--container-mounts` at ',' and each mount at ':', so paths holding either are refused up front.
`--container-env` makes the exported benchmark variables win over values baked into the image.
"""

from bench.runtimes import edf
from bench.runtimes.base import Runtime, check_image_file, check_registry_ref, env_names, looks_like_path


class Pyxis(Runtime):
    name = "pyxis"
    description = "NVIDIA pyxis + enroot: srun --container-image=<.sqsh or registry#image>"
    default_image = edf.SQSH_IMAGE  # containers/enroot-import.sh
    mount_forbidden = ":,"

    def check_image(self, image, must_exist):
        if looks_like_path(image):
            # pyxis reads a value not starting with '/' or './' as a registry image: make it absolute.
            return check_image_file(self.name, image, (".sqsh",), must_exist)
        return check_registry_ref(self.name, image)

    def srun_options(self, spec):
        opts = [f"--container-image={spec.image}"]
        if spec.mounts:
            opts.append("--container-mounts=" + ",".join(
                f"{m.src}:{m.target}" + (":ro" if m.readonly else "") for m in spec.mounts))
        if spec.workdir:
            opts.append(f"--container-workdir={spec.workdir}")
        if spec.env:
            opts.append("--container-env=" + ",".join(env_names(spec.env)))
        # $HOME stays out: stale per-user caches there (~/.triton) break runs.
        opts.append("--no-container-mount-home")
        return opts

    def version_command(self):
        return ["enroot", "version"]
