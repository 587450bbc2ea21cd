"""base_loss's settings (bench/nanochat/base_loss.py), without torch, so the planner reads them on a login node."""

from dataclasses import dataclass

from bench.contract import field as _f
from bench.errors import ConfigError
from bench.nanochat.config import RunSettings, check_model_tag, parse_config

SPLITS = ("train", "val")


@dataclass
class BaseLossConfig(RunSettings):
    device_batch_size: int = _f(32, "sequences per forward per rank")
    split_tokens: int = _f(20 * 524288, "tokens evaluated per split; a multiple of device_batch_size x the "
                                        "checkpoint's sequence length x ranks")
    model_tag: str = _f("", "checkpoint folder under base_checkpoints (empty = the largest d<N>, else the newest)")
    model_step: int = _f(-1, "checkpoint step (-1 = the last saved)")
    max_seq_len: int = _f(-1, "the checkpoint's sequence length, for the planner's rounding of split_tokens "
                              "(-1 = read it from the checkpoint; else it must be the checkpoint's)")

    def validate(self) -> None:
        super().validate()
        self.check_positive("device_batch_size", "split_tokens")
        if self.model_step < -1:
            raise ConfigError(f"--model_step={self.model_step}: give a saved step, or -1 for the last")
        check_model_tag(self.model_tag, "--model_tag", "base_checkpoints/")
        if self.max_seq_len == 0 or self.max_seq_len < -1:  # were read as -1, silently
            raise ConfigError(f"--max_seq_len={self.max_seq_len}: give the checkpoint's sequence length, or -1 to "
                              f"read it from the checkpoint")


def parse(argv: list[str]) -> BaseLossConfig:
    return parse_config(BaseLossConfig, argv, "bench.nanochat.base_loss",
                        "nanochat base_loss: train/val bpb of a base checkpoint (flags as upstream: --key=value)")
