"""Checkpoints in upstream's layout (mirrors the saving half of nanochat/checkpoint_manager.py).

  <base_dir>/base_checkpoints/<model_tag>/model_<step:06d>.pt         rank 0: the model's state_dict
  <base_dir>/base_checkpoints/<model_tag>/meta_<step:06d>.json        rank 0: step, config, loop state
  <base_dir>/base_checkpoints/<model_tag>/optim_<step:06d>_rank<r>.pt every rank: its optimizer shards

Only rank 0 creates the directory (upstream's race, fixed there in Dec 2025); the other ranks wait at
a barrier before writing their optimizer state. Files are written to a temp file of their own and renamed.
"""

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from bench.schema import atomic_target, write_json_atomic


def _save_atomic(obj, path: Path) -> None:
    with atomic_target(path) as tmp:
        torch.save(obj, tmp)


def save_checkpoint(checkpoint_dir: str | os.PathLike, step: int, model_state: dict, optimizer_states: list,
                    meta: dict, rank: int = 0) -> Path:
    """Write model + meta (rank 0) and this rank's optimizer state; returns the directory."""
    checkpoint_dir = Path(checkpoint_dir)
    if rank == 0:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        _save_atomic(model_state, checkpoint_dir / f"model_{step:06d}.pt")
        write_json_atomic(checkpoint_dir / f"meta_{step:06d}.json", meta)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # the directory exists before other ranks write into it
    _save_atomic(optimizer_states, checkpoint_dir / f"optim_{step:06d}_rank{rank}.pt")
    return checkpoint_dir


def load_model_state(checkpoint_dir: str | os.PathLike, step: int, device="cpu") -> tuple[dict, dict]:
    """(state_dict, meta) of a saved step, for tests and later stages."""
    checkpoint_dir = Path(checkpoint_dir)
    state = torch.load(checkpoint_dir / f"model_{step:06d}.pt", map_location=device)
    meta = json.loads((checkpoint_dir / f"meta_{step:06d}.json").read_text())
    return state, meta
