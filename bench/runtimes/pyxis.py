"""pyxis: NVIDIA's Slurm plugin with enroot, `srun --container-image=… --container-mounts=…`.

Each option is one srun token, so no shell quoting is involved beyond shlex; but pyxis splits
`--container-mounts` at ',' and each mount at ':', so paths holding either are refused up front.
`--container-env` makes the exported benchmark variables win over values baked into the image.
"""

from bench.runtimes import edf
from bench.runtimes.base import Runtime, check_enroot_image, env_names


class Pyxis(Runtime):
    name = "pyxis"
    default_image = edf.SQSH_IMAGE  # containers/enroot-import.sh
    mount_forbidden = ":,"

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
            opts.append("--container-env=" + ",".join(env_names(spec.env)))
        # $HOME stays out: stale per-user caches there (~/.triton) break runs. Writable: Triton and
        # torch.compile write their caches into the container's own filesystem.
        opts += ["--no-container-mount-home", "--container-writable"]
        return opts

    def version_command(self):
        return ["enroot", "version"]
