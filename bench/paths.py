"""Where nanochat's files live on a machine: NANOCHAT_BASE_DIR, else upstream's ~/.cache/nanochat, and their
folders there.

Standard library only: the NNTile interpreter and the batch scripts' bookkeeping import it too.
"""

import hashlib
import os
import re
from pathlib import Path

from bench.contract import ENV_BASE_DIR

DEFAULT_BASE_DIR = Path("~") / ".cache" / "nanochat"  # karpathy/nanochat/nanochat/common.py get_base_dir
# Its layout, as upstream's: the shards, their pre-tokenized copy (`data bin`, the NNTile runner's), the tokenizer
DATA_DIR, BIN_DIR, TOKENIZER_DIR = "base_data", "base_data_bin", "tokenizer"
MAX_SHARD = 1822  # upstream's FineWeb-Edu shards are 0..1822 (`data download`'s; a plan's advice stays below)
# the folder under the base directory each phase's checkpoints live in (bench/nanochat/checkpoint.py writes them)
PHASE_DIRS = {"base": "base_checkpoints", "mid": "mid_checkpoints", "sft": "chatsft_checkpoints"}
# <name>.attempt-<time>: a stage's run directory or checkpoints that a rerun set aside, kept whole, never read again
SET_ASIDE = ".attempt-"


def base_dir(given: str | None = None) -> str:
    """`given` (a flag or a setting), else $NANOCHAT_BASE_DIR, else ~/.cache/nanochat; not made absolute."""
    return given or os.environ.get(ENV_BASE_DIR) or str(DEFAULT_BASE_DIR.expanduser())


def folder_tag(name: str, folder: str | os.PathLike) -> str:
    """`<name>-<8 hex digits of folder's path>`: a checkpoint tag read by its name, yet two folders of one name in
    different places (.../a/speedrun/x and .../b/speedrun/x) never share checkpoints under one base directory."""
    return f"{name}-{hashlib.sha256(os.fspath(folder).encode()).hexdigest()[:8]}"


def saved_steps(checkpoint_dir: str | os.PathLike) -> list[int]:
    """The steps with a model and meta file in checkpoint_dir (<base>/<PHASE_DIRS[phase]>/<tag>), ascending."""
    names = {p.name for p in Path(checkpoint_dir).glob("*_*")}
    metas = [m for m in map(re.compile(r"meta_(\d{6})\.json").fullmatch, names) if m]
    return sorted(int(m[1]) for m in metas if f"model_{m[1]}.pt" in names)
