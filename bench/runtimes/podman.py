"""podman and podman-hpc: `srun podman run --rm … IMAGE CMD`, one container per node.

Podman passes no host environment, so each variable of the run is given as a literal `--env=NAME=VALUE`,
which beats a value the image sets (podman-run(1): --env overrides the image's ENV), and the SLURM_*
variables are passed by pattern. Host network and
IPC namespaces keep the rendezvous and shared memory as on the host. Where podman's default
ulimits exceed what Slurm gives a task (runc: "error setting rlimits"), set `default_ulimits = []` in
containers.conf (CONTAINERS_CONF is passed on to the job like the rest of the environment). podman-hpc (NERSC) adds its
`--gpu` and `--nccl` modules and runs the image it migrated to the shared squash store.
"""

from bench.runtimes.base import Runtime


class Podman(Runtime):
    name = "podman"
    default_image = "localhost/nanochat-bench:latest"  # containers/build.sh tags nanochat-bench:latest
    program = "podman"
    tty_flags = ("-it",)

    def gpu_options(self) -> list[str]:
        return ["--device=nvidia.com/gpu=all"]  # CDI spec from the NVIDIA container toolkit

    def wrap(self, spec):
        argv = [self.program, "run", "--rm", "--network=host", "--ipc=host"]
        if spec.gpus:
            argv += self.gpu_options()
            argv += [f"--device={d}" for d in spec.devices]
            argv += [f for f in spec.flags if f not in argv]  # the site's modules (podman-hpc --nccl)
        for m in spec.mounts:
            argv.append(f"--volume={m.src}:{m.target}" + (":ro" if m.readonly else ""))
        if spec.workdir:
            argv.append(f"--workdir={spec.workdir}")
        argv += [f"--env={name}={value}" for name, value in sorted(spec.env.items())]
        argv.append("--env=SLURM_*")  # the job's facts, for the trainer's provenance (podman expands the *)
        return [*argv, spec.image, *spec.command]

    def version_command(self):
        return [self.program, "--version"]


class PodmanHPC(Podman):
    name = "podman-hpc"
    program = "podman-hpc"

    def gpu_options(self):
        return ["--gpu", "--nccl"]  # driver libraries; host libfabric + aws-ofi-nccl plugin

    def version_command(self):
        return [self.program, "infohpc"]  # it has no --version; infohpc's first line is "Podman-HPC Version: X"
