"""SFT's settings and batch arithmetic (upstream 5c93a56 scripts/chat_sft.py's settings block), without torch, so
the planner reads them on a login node.

Every example of a step is one conversation: `target_examples_per_step` over all ranks, `device_batch_size` of
them per micro-batch per rank, so the gradient accumulation is target / (device batch x ranks), which must be a
whole number (upstream asserts it). `-1` turns a periodic evaluation off, final one included (upstream ran
validation at every step for a negative `eval_every`; bench/nanochat/config.py fixes the same trap).
"""

from dataclasses import dataclass

from bench.contract import field as _f
from bench.errors import ConfigError
from bench.nanochat.config import RunSettings, check_model_tag, check_weight_decay, parse_config

SOURCES = ("base", "mid")  # the checkpoints SFT may start from (upstream: base|mid)
DTYPES = ("bfloat16", "float32")


@dataclass
class SFTConfig(RunSettings):
    # input model
    source: str = _f("mid", "checkpoint to start from: base | mid")
    model_tag: str = _f("", "checkpoint subdirectory to load, and to save under (default: the largest d<int> folder "
                            "to load, d<n_layer> to save)")
    step: int = _f(-1, "checkpoint step to load (-1 = the last saved)")
    # compute and precision
    dtype: str = _f("bfloat16", "autocast dtype on CUDA: bfloat16 | float32 (no autocast)")
    device_batch_size: int = _f(4, "conversations per micro-batch per rank")
    # optimisation
    num_epochs: int = _f(1, "epochs over the training mixture (when num_iterations is -1)")
    num_iterations: int = _f(-1, "optimizer steps + 1, as upstream counts them (-1 = (rows // "
                                 "target_examples_per_step) x num_epochs)")
    target_examples_per_step: int = _f(32, "conversations per optimizer step over all ranks")
    unembedding_lr: float = _f(0.004, "AdamW lr of lm_head, x (dim/768)^-0.5, x init_lr_frac")
    embedding_lr: float = _f(0.2, "AdamW lr of the embedding, x (dim/768)^-0.5, x init_lr_frac")
    matrix_lr: float = _f(0.02, "Muon lr of the block matrices, x init_lr_frac")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    init_lr_frac: float = _f(0.02, "the learning rates' fraction at step 0 (then linear to 0)")
    # evaluation
    eval_every: int = _f(100, "validation loss every this many steps and at the last (-1 = off)")
    eval_steps: int = _f(100, "batches per rank per validation")
    eval_metrics_every: int = _f(200, "MMLU and ARC-Easy accuracy every this many steps and at the last (-1 = off)")
    eval_metrics_max_problems: int = _f(1024, "problems per task of those accuracies")

    def validate(self) -> None:
        super().validate()
        if self.source not in SOURCES:
            raise ConfigError(f"--source={self.source!r}: SFT starts from the checkpoint of one of "
                              f"{', '.join(SOURCES)}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype={self.dtype!r}: valid values are {', '.join(DTYPES)}")
        check_model_tag(self.model_tag, "--model_tag", f"{self.source}'s checkpoint folder and chatsft_checkpoints/")
        self.check_positive("device_batch_size", "target_examples_per_step", "num_epochs", "eval_steps",
                            "eval_metrics_max_problems")
        for name in ("num_iterations", "eval_every", "eval_metrics_every", "step"):
            if getattr(self, name) < -1 or getattr(self, name) == 0 and name != "step":
                raise ConfigError(f"--{name}={getattr(self, name)}: give a count > 0, or -1 (the default's meaning: "
                                  f"{SFTConfig.__dataclass_fields__[name].metadata['doc']})")
        if self.num_iterations == 1:  # the last pass only evaluates: 0 updates, the input model saved as sft
            raise ConfigError("--num_iterations=1: counts the last pass, which only evaluates, so 1 makes no update; "
                              "give at least 2 (1 update), or -1 for one epoch")
        check_weight_decay(self.weight_decay)
        self.check_rates("unembedding_lr", "embedding_lr", "matrix_lr", "init_lr_frac")


def parse_sft_args(argv: list[str]) -> SFTConfig:
    return parse_config(SFTConfig, argv, "bench.nanochat.chat_sft",
                        "nanochat SFT (flags as upstream chat_sft: --key=value)")


def batch_sizes_that_work(target: int, device_batch_size: int, world_size: int) -> list[int]:
    """Device batch sizes <= the asked one whose micro-batches over all ranks divide the target."""
    return [b for b in range(device_batch_size, 0, -1) if target % (b * world_size) == 0]


def sft_grad_accum(target: int, device_batch_size: int, world_size: int) -> int:
    """Micro-steps per optimizer step; a ConfigError naming the device batch sizes and targets that would work."""
    examples = device_batch_size * world_size
    if target % examples == 0:
        return target // examples
    sizes = batch_sizes_that_work(target, device_batch_size, world_size)
    lower = target // examples * examples
    targets = [t for t in (lower, lower + examples) if t > 0]
    options = [f"--device_batch_size={' | '.join(map(str, sizes[:6]))}"] if sizes else []
    options.append(f"--target_examples_per_step={' | '.join(map(str, targets))}")
    raise ConfigError(f"--target_examples_per_step={target} is not a multiple of device_batch_size x world_size = "
                      f"{device_batch_size} x {world_size} = {examples}; for {world_size} rank(s) use "
                      + " or ".join(options))
