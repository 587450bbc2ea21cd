"""Small things every part of the workload uses: the base directory, rank-0 printing, dist info."""

import os
from pathlib import Path

from bench import paths
from bench.runside import console
from bench.errors import ConfigError, os_reason


# What an error that cannot write under the base directory tells the user to do instead (free space first, where
# the disk is full: errors.os_remedy)
ELSEWHERE = f"set {paths.ENV_BASE_DIR} to another directory"


def get_base_dir(create: bool = True) -> Path:
    """NANOCHAT_BASE_DIR (default ~/.cache/nanochat): shards, tokenizer and checkpoints live here. Made where absent
    unless not `create` (a reader's: a command that then finds nothing leaves no empty one behind)."""
    path = Path(paths.base_dir())
    try:
        if create or path.exists():  # a file in its place is refused either way
            path.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # every command lives under it: one line, not a traceback
        raise ConfigError(f"the base directory {path} ({paths.ENV_BASE_DIR}) cannot be used: {os_reason(e)}; set "
                          f"{paths.ENV_BASE_DIR} to a writable directory") from None
    return path


def get_dist_info() -> tuple[bool, int, int, int]:
    """(is_distributed, rank, local_rank, world_size) from torchrun's environment."""
    if all(k in os.environ for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")):
        return True, int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    return False, 0, 0, 1


def print0(*args, **kwargs) -> None:
    """print on rank 0 only (nanochat's print0); through the output thread once detach_output() ran."""
    if int(os.environ.get("RANK", 0)) == 0:
        console.write(kwargs.get("sep", " ").join(map(str, args)) + kwargs.get("end", "\n"))
