"""The nanochat workload: bench/nanochat/train.py under torchrun, one process per GPU (or CPU rank)."""

import sys
from dataclasses import asdict
from pathlib import Path

from bench.errors import DataError
from bench.schema import WORKLOAD as NANOCHAT_WORKLOAD
from bench.workloads.base import Workload


class Nanochat(Workload):
    name = "nanochat"
    run_workload = NANOCHAT_WORKLOAD

    def check(self, argv: list[str], nproc: int) -> None:
        from bench.nanochat.config import grad_accum_steps, parse_args

        config = parse_args(argv)
        grad_accum_steps(config.total_batch_size, config.device_batch_size, config.max_seq_len, nproc)
        if config.data_bin_dir and not (Path(config.data_bin_dir) / "train.bin").is_file():  # before torchrun
            raise DataError(f"--data_bin_dir={config.data_bin_dir}: no train.bin there; `nanochat-bench data bin` "
                            "writes one (default: $NANOCHAT_BASE_DIR/base_data_bin, ~/.cache/nanochat/base_data_bin)")

    def local_command(self, argv: list[str], nproc: int, python: str | None = None) -> list[str]:
        from bench.launch.torchrun import torchrun_command

        return list(torchrun_command(python or sys.executable, nproc, argv))

    def launch_command(self, python: str, nodes: int, nproc_per_node: int, argv: list,
                       containerised: bool, numa_binding: str | None = None) -> tuple:
        from bench.launch.torchrun import torchrun_command

        return torchrun_command(python, nproc_per_node, argv, nnodes=nodes, numa_binding=numa_binding)

    def manifest_config(self, argv: list[str]) -> dict:
        from bench.nanochat.config import parse_args

        return asdict(parse_args(argv))


WORKLOAD = Nanochat()
