"""A nanochat stage under torchrun: the part of the workload interface every stage shares.

A stage names its trainer module (`python -m <module>` on every rank, through torchrun) and the parser of
its settings dataclass; its command lines, its check before any process starts, its run.json config and its
sweep settings follow from those. What differs per stage is its plan (the batch arithmetic at each rank
count), so a stage overrides `plan()` and nothing else it does not need. A stage is one module holding
`WORKLOAD = TheStage()` and one line in bench/workloads/__init__.py.
"""

import sys
from dataclasses import asdict

from bench.workloads.base import Settings, Workload


def argv_of(flags: dict) -> list[str]:
    """nanochat's `--key=value` flags, sorted (so a rendered job is the same whatever order flags came in)."""
    return [f"--{k}={v}" for k, v in sorted(flags.items())]


class TorchrunStage(Workload):
    module = ""  # the trainer module every rank runs
    sweep_defaults: dict = {}  # flags a sweep sets unless told otherwise (e.g. a short horizon)

    def parse(self, argv: list[str]):
        """The stage's settings from its flags (a ConfigError naming a bad one)."""
        raise NotImplementedError

    def check(self, argv: list[str], nproc: int) -> None:
        self.parse(argv)

    def local_command(self, argv: list[str], nproc: int, python: str | None = None) -> list[str]:
        from bench.workloads.torchrun import torchrun_command

        return list(torchrun_command(python or sys.executable, nproc, argv, module=self.module))

    def launch_command(self, python: str, nodes: int, nproc_per_node: int, argv: list,
                       containerised: bool, numa_binding: str | None = None) -> tuple:
        from bench.workloads.torchrun import torchrun_command

        return torchrun_command(python, nproc_per_node, argv, nnodes=nodes, numa_binding=numa_binding,
                                module=self.module)

    def manifest_config(self, argv: list[str]) -> dict:
        return asdict(self.parse(argv))

    def settings(self, train: dict, scaling: str) -> Settings:
        train = {**self.sweep_defaults, **train}
        return Settings(self.parse(argv_of(train)), argv=tuple(argv_of(train)), train=train)

    def uses_gpus(self, settings: Settings) -> bool:
        return settings.config.device_type != "cpu"
