"""A nanochat stage under torchrun: the part of the workload interface every stage shares.

A stage names its trainer module (`python -m <module>` on every rank, through torchrun) and the parser of
its settings dataclass; its command lines, its check before any process starts, its run.json config and its
sweep settings follow from those. What differs per stage is its plan (the batch arithmetic at each rank
count, its time estimate), so a stage overrides `plan()` and nothing else it does not need.

A stage after pre-training estimates its time from the FLOPs of the model it loads (`model_estimate`), which
the plan knows only inside a flow (PointContext.model, from pre-training's flags); alone, the model is its
checkpoint's, unknown until a rank reads it, so there is no estimate and the run gets the default limit.
"""

import importlib
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from bench.errors import ConfigError
from bench.workloads.base import PointContext, Settings, Workload
from bench.workloads.torchrun import torchrun_command

# what the chat stages read, staged before the job (`data download --chat`)
CHAT_DATA = (("data", "download", "--chat"), "the chat data for mid-training, SFT and chat evaluation")
NO_MODEL = "est ?: the model is its checkpoint's (plan it in a --flow for an estimate)"


def model_estimate(point: PointContext, config, tokens: float, batch: float, work: str,
                   share: float = 1.0) -> tuple[float | None, str]:
    """(wall hours, the note saying what they assume) of running `tokens` through the flow's model at `share`
    of its training FLOPs per token, `batch` rows a forward per rank (the MFU model's B); (None, why) on a CPU,
    without a known model or without a known GPU peak (the plan's last line says which)."""
    if config.device_type == "cpu":
        return None, ""
    if point.model is None:
        return None, NO_MODEL
    hours = point.estimate.hours(share * point.model.flops_per_token * tokens, point.ranks, batch)
    return hours, "" if hours is None else f"est: {work}, d{point.model.depth}"


def interpreter(python: str | None) -> str:
    """`--python` (a path or a name on PATH), else this interpreter; one that is not there is refused before
    any process starts or any run directory is made."""
    if python and shutil.which(python) is None:
        raise ConfigError(f"--python={python}: no such interpreter; give a path or a name on PATH (default: "
                          f"this one, {sys.executable})")
    return python or sys.executable


def argv_of(flags: dict) -> list[str]:
    """nanochat's `--key=value` flags, sorted (so a rendered job is the same whatever order flags came in)."""
    return [f"--{k}={v}" for k, v in sorted(flags.items())]


class TorchrunStage(Workload):
    family = "nanochat"
    module = ""  # the trainer module every rank runs
    parser = ""  # "module:function" turning the stage's flags into its settings (imported on first use)
    sweep_defaults: dict = {}  # flags a sweep sets unless told otherwise (e.g. a short horizon)
    weak_scaled: tuple[str, str] = ()  # (flag, what it is) that weak scaling grows with the ranks: not the user's
    local_launcher = "torchrun"
    rank_per_gpu = True

    def parse(self, argv: list[str]):
        """The stage's settings from its flags (a ConfigError naming a bad one)."""
        module, function = self.parser.split(":")
        return getattr(importlib.import_module(module), function)(argv)

    def check(self, argv: list[str], nproc: int) -> None:
        config = self.parse(argv)
        if self.reads_val_files(Settings(config, argv=tuple(argv))):
            from bench.nanochat.dataset import resolve_val_files_k

            resolve_val_files_k()  # a bad NANOCHAT_VAL_FILES_K here, before torchrun starts (each rank checks again)

    def local_command(self, argv: list[str], nproc: int, python: str | None = None) -> list[str]:
        return list(torchrun_command(interpreter(python), nproc, argv, module=self.module))

    def launch_command(self, python: str, nodes: int, nproc_per_node: int, argv: list,
                       containerised: bool, numa_binding: str | None = None,
                       join_timeout_s: int | None = None) -> tuple:
        return torchrun_command(python, nproc_per_node, argv, nnodes=nodes, numa_binding=numa_binding,
                                module=self.module, join_timeout_s=join_timeout_s)

    def manifest_config(self, argv: list[str]) -> dict:
        return asdict(self.parse(argv))

    def settings(self, train: dict, scaling: str) -> Settings:
        self.refuse_weak_scaled(train, scaling)
        train = {**self.sweep_defaults, **train}
        return Settings(self.parse(argv_of(train)), argv=tuple(argv_of(train)), train=train)

    def refuse_weak_scaled(self, train: dict, scaling: str) -> None:
        if self.weak_scaled and scaling == "weak" and self.weak_scaled[0] in train:
            flag, product = self.weak_scaled
            raise ConfigError(f"--{flag} is what weak scaling grows with the ranks ({product}); fix it with "
                              "--scaling strong, or leave it out")

    def uses_gpus(self, settings: Settings) -> bool:
        return settings.config.device_type != "cpu"


class ChatStage(TorchrunStage):
    """A stage that reads the chat data (mid_train, chat_sft, chat_eval): `data download --chat` stages it all."""

    staging = CHAT_DATA
    reads_checkpoint = True  # the base, mid or SFT checkpoint

    def missing_staged(self, base_dir: str, settings: Settings | None = None) -> str:
        from bench.nanochat.chatdata import missing_staged

        return missing_staged(Path(base_dir))
