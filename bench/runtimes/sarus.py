"""sarus: CSCS's classic `srun sarus run …`, and Sarus Suite's `srun --edf=<EDF>`.

Classic Sarus passes the host environment into the container, where the image's own variables win
(CSCS's Sarus user guide), and selects GPUs from the host's CUDA_VISIBLE_DEVICES through its NVIDIA hook;
so every variable of the run is given as a literal `-e NAME=VALUE`, besides mounts and the workdir. Sarus Suite
(Podman-based, early access on Alps) reads the same EDF files as CE, through `--edf=`, and takes
registry references only (no .sqsh paths).
"""

from bench.runtimes.base import Runtime
from bench.runtimes.ce import ContainerEngine


class Sarus(Runtime):
    name = "sarus"
    default_image = "load/library/nanochat-bench:latest"  # the name `sarus load` gives
    mount_forbidden = ":,"  # --mount=type=bind,source=…,destination=…
    tty_flags = ("-t",)

    def wrap(self, spec):
        argv = ["sarus", "run", *(t for name, value in sorted(spec.env.items()) for t in ("-e", f"{name}={value}"))]
        for m in spec.mounts:
            argv.append(f"--mount=type=bind,source={m.src},destination={m.target}"
                        + (",readonly" if m.readonly else ""))
        if spec.workdir:
            argv.append(f"--workdir={spec.workdir}")
        if spec.gpus:
            argv += [f"--device={d}" for d in spec.devices] + list(spec.flags)
        return [*argv, spec.image, *spec.command]

    def version_command(self):
        return ["sarus", "--version"]


class SarusSuite(ContainerEngine):
    name = "sarus-suite"
    default_image = "localhost/nanochat-bench:latest"
    option = "--edf"

    def check_image(self, image, must_exist):
        return Runtime.check_image(self, image, must_exist)  # Podman-style references, no .sqsh

    def edf_devices(self, spec):
        return list(spec.devices) if spec.gpus else []  # its `devices` key: Podman --device values, CDI names
