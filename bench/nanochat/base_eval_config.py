"""base_eval's settings (bench/nanochat/base_eval.py), without torch, so the planner reads them on a login node."""

from dataclasses import dataclass

from bench.contract import field as _f
from bench.errors import ConfigError
from bench.nanochat.config import RunSettings, argparse_spellings, check_model_tag, parse_config


@dataclass
class BaseEvalConfig(RunSettings):
    max_per_task: int = _f(-1, "examples per task, after the seeded shuffle (-1 = all)")
    model_tag: str = _f("", "checkpoint folder under base_checkpoints (empty = the largest d<N>, else the newest)")
    model_step: int = _f(-1, "checkpoint step (-1 = the last saved)")

    def validate(self) -> None:
        super().validate()
        if self.max_per_task == 0 or self.max_per_task < -1:
            raise ConfigError(f"--max_per_task={self.max_per_task}: give a number of examples > 0, or -1 for all")
        if self.model_step < -1:
            raise ConfigError(f"--model_step={self.model_step}: give a saved step, or -1 for the last")
        check_model_tag(self.model_tag, "--model_tag", "base_checkpoints/")


def parse(argv: list[str]) -> BaseEvalConfig:
    """BaseEvalConfig from upstream's argparse flag (`--max-per-task 16`) or nanochat's `--key=value`."""
    return parse_config(BaseEvalConfig, argparse_spellings(BaseEvalConfig, argv), "bench.nanochat.base_eval",
                        "nanochat base_eval: the CORE metric of a base checkpoint (--key=value; upstream's "
                        "--max-per-task too)")
