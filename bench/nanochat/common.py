"""Small things every part of the workload uses: the base directory, rank-0 printing, dist info."""

import os
from pathlib import Path

from bench.schema import ENV_BASE_DIR


def get_base_dir() -> Path:
    """NANOCHAT_BASE_DIR (default ~/.cache/nanochat): shards, tokenizer and checkpoints live here."""
    base = os.environ.get(ENV_BASE_DIR) or os.path.join(os.path.expanduser("~"), ".cache", "nanochat")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def get_dist_info() -> tuple[bool, int, int, int]:
    """(is_distributed, rank, local_rank, world_size) from torchrun's environment."""
    if all(k in os.environ for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")):
        return True, int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    return False, 0, 0, 1


def print0(*args, **kwargs) -> None:
    """print on rank 0 only (nanochat's print0)."""
    if int(os.environ.get("RANK", 0)) == 0:
        print(*args, **kwargs, flush=True)
