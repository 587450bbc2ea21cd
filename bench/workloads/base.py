"""The interface every workload implements (the launchers call only these). Standard library only."""


class Workload:
    name = ""  # the command line's name (`--workload NAME`)
    run_workload = ""  # run.json's `workload`: part of the key under which the analysis compares runs

    def check(self, argv: list[str], nproc: int) -> None:
        """Refuse flags that cannot work, with one clear line, before any process starts."""
        raise NotImplementedError

    def local_command(self, argv: list[str], nproc: int, python: str | None = None) -> list[str]:
        """The command that trains on this machine (bench/launch/local.py runs it)."""
        raise NotImplementedError

    def local_env(self) -> dict[str, str]:
        """Variables the local command needs besides the run contract's (set when not already set)."""
        return {}

    def launch_command(self, python: str, nodes: int, nproc_per_node: int, argv: list,
                       containerised: bool, numa_binding: str | None = None) -> tuple:
        """The command each node of a Slurm job runs (bench/launch/job.py), as tokens (str or
        bench.runtimes.Var); `numa_binding` when its GPU workers are to be bound to their NUMA node."""
        raise NotImplementedError

    def launch_env(self, base_dir: str, gpus_per_node: int) -> dict[str, str]:
        """Variables a Slurm job exports for this workload (passed into containers like the contract's)."""
        return {}

    def sweep_argv(self, train: dict) -> list[str]:
        """The trainer flags of a sweep point from `--train-arg KEY=VALUE` pairs, checked (bench/launch/plan.py)."""
        raise NotImplementedError

    def manifest_config(self, argv: list[str]) -> dict:
        """run.json's `config` for these flags, as the launcher writes it before the run starts."""
        raise NotImplementedError
