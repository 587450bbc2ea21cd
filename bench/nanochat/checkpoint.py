"""Checkpoints in upstream's layout (mirrors nanochat/checkpoint_manager.py).

  <base_dir>/base_checkpoints/<model_tag>/model_<step:06d>.pt         rank 0: the model's state_dict
  <base_dir>/base_checkpoints/<model_tag>/meta_<step:06d>.json        rank 0: step, config, loop state
  <base_dir>/base_checkpoints/<model_tag>/optim_<step:06d>_rank<r>.pt every rank: its optimizer shards

Only rank 0 creates the directory (upstream's race, fixed there in Dec 2025); the other ranks wait at
a barrier before writing their optimizer state. Files are written to a temp file of their own and renamed;
a write that fails leaves no temp file and ends the run with a CheckpointError naming the file and why.

The later stages read a stage's model back with `load_model(phase, ...)`: base pretraining writes
base_checkpoints, mid-training mid_checkpoints and SFT chatsft_checkpoints, as upstream.
"""

import errno
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from bench.errors import CheckpointError, ConfigError, os_reason
from bench.contract import atomic_target, write_json_atomic
from bench.paths import PHASE_DIRS, SET_ASIDE, saved_steps

MIB = 1024 * 1024


def _payload_bytes(obj) -> int:
    """The tensor bytes in a (nested) state dict: what torch.save has to write, give or take its headers."""
    if isinstance(obj, torch.Tensor):
        return obj.nbytes
    if isinstance(obj, dict):
        return sum(map(_payload_bytes, obj.values()))
    if isinstance(obj, (list, tuple)):
        return sum(map(_payload_bytes, obj))
    return 0


def checkpoint_error(path: Path, e: Exception, needed: int = 0) -> CheckpointError:
    """`checkpoint write failed: disk full at <path> (...)`, or the error as it came. torch.save reports a
    full disk as a RuntimeError without an errno ('file write failed'): the free space left decides."""
    try:
        free = shutil.disk_usage(path.parent if path.parent.exists() else path.parent.parent).free
    except OSError:
        free = None
    code = getattr(e, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT) or (free is not None and needed and free < needed):
        what = "quota exceeded" if code == errno.EDQUOT else "disk full"
        sizes = f"{needed / MIB:.1f} MiB to write, " if needed else ""
        left = f"{free / MIB:.1f} MiB free" if free is not None else "free space unknown"
        return CheckpointError(f"checkpoint write failed: {what} at {path} ({sizes}{left})")
    reason = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[-1]
    return CheckpointError(f"checkpoint write failed at {path}: {reason}")


def _save_atomic(obj, path: Path) -> None:
    try:
        with atomic_target(path) as tmp:
            torch.save(obj, tmp)
    except (OSError, RuntimeError) as e:
        raise checkpoint_error(path, e, _payload_bytes(obj)) from None


def check_writable(checkpoint_dir: str | os.PathLike, or_else: str = "") -> None:
    """CheckpointError naming `checkpoint_dir` when it could not be made or written into: at start-up, not after
    the steps before the first save. Nothing is made: an empty folder would pass for a model's tag (find_model_tag)
    and be set aside as an earlier attempt's. `or_else`: the caller's other way out (its flags that save one)."""
    checkpoint_dir = Path(checkpoint_dir)
    try:
        nearest = next(p for p in (checkpoint_dir, *checkpoint_dir.parents) if p.exists() or p == p.parent)
        if not nearest.is_dir():
            reason = ("a file of that name is in the way" if nearest == checkpoint_dir else
                      f"{nearest} is a file in the way") + ", not a directory"
        else:  # what making the directory, then a file in it, needs: a file written where it would be made
            with tempfile.TemporaryFile(dir=nearest):
                reason = ""
    except OSError as e:  # EACCES on a parent, a read-only filesystem, a full disk
        reason = os_reason(e)
    if reason:
        raise CheckpointError(f"the checkpoint directory {checkpoint_dir} cannot be written: {reason}; give a "
                              f"NANOCHAT_BASE_DIR that can be" + (f", or {or_else}" if or_else else ""))


def save_checkpoint(checkpoint_dir: str | os.PathLike, step: int, model_state: dict, optimizer_states: list | None,
                    meta: dict, rank: int = 0) -> Path:
    """Write model + meta (rank 0) and this rank's optimizer state (none when None: SFT keeps no optimizer);
    returns the directory once every rank's files are written. Every rank calls it (the barriers)."""
    checkpoint_dir = Path(checkpoint_dir)
    if rank == 0:
        meta_path = checkpoint_dir / f"meta_{step:06d}.json"
        try:
            checkpoint_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise checkpoint_error(checkpoint_dir, e) from None
        _save_atomic(model_state, checkpoint_dir / f"model_{step:06d}.pt")
        try:
            write_json_atomic(meta_path, meta)
        except OSError as e:
            raise checkpoint_error(meta_path, e) from None
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # the directory exists before other ranks write into it
    if optimizer_states is not None:
        _save_atomic(optimizer_states, checkpoint_dir / f"optim_{step:06d}_rank{rank}.pt")
        if dist.is_available() and dist.is_initialized():
            # every rank's state is written before any returns: rank 0 then records the step as the one a
            # resubmitted job resumes from, which a time limit in between would leave without some ranks' state
            dist.barrier()
    return checkpoint_dir


def later_steps_note(checkpoint_dir: str | os.PathLike, step: int) -> str:
    """"" unless checkpoint_dir holds steps after `step` (an earlier, longer run's): the next stage, given no
    step, loads the largest (as upstream), so the checkpoint just saved would be passed over without a word."""
    later = [s for s in saved_steps(checkpoint_dir) if s > step]
    if not later:
        return ""
    return (f"note: {checkpoint_dir} also holds step(s) {', '.join(map(str, later))} from an earlier run; a stage "
            f"reading it without a step loads step {later[-1]}, not {step}: give it the step, or remove the later "
            "files")


def load_model_state(checkpoint_dir: str | os.PathLike, step: int, device="cpu",
                     expect_model_config: dict | None = None, expect_world_size: int | None = None
                     ) -> tuple[dict, dict]:
    """(state_dict, meta) of a saved step. ConfigError naming the saved steps when it is missing, the
    differences when its model is not of `expect_model_config`'s shape, or the world size that saved it
    when that is not `expect_world_size` (the sharded optimizers split their state by rank). All checked
    from the meta file, before the weights are read."""
    checkpoint_dir = Path(checkpoint_dir)
    if step not in (steps := saved_steps(checkpoint_dir)):
        there = ", ".join(map(str, steps)) or "none"
        raise ConfigError(f"no checkpoint of step {step} in {checkpoint_dir} (model_{step:06d}.pt and "
                          f"meta_{step:06d}.json); saved steps there: {there}")
    meta = json.loads((checkpoint_dir / f"meta_{step:06d}.json").read_text())
    saved, now = meta.get("model_config", {}), expect_model_config or {}
    differ = [f"{k} {saved[k]} (now {now[k]})" for k in now if k in saved and saved[k] != now[k]]
    if differ:
        raise ConfigError(f"the checkpoint of step {step} in {checkpoint_dir} is of another model: "
                          f"{', '.join(differ)}; resume with its --depth and tokenizer")
    saved_world = meta.get("world_size")
    if expect_world_size is not None and saved_world is not None and saved_world != expect_world_size:
        raise ConfigError(f"the checkpoint of step {step} in {checkpoint_dir} was written by {saved_world} "
                          f"rank(s); resume it with {saved_world}, not {expect_world_size} (optimizer state is "
                          f"sharded)")
    return torch.load(checkpoint_dir / f"model_{step:06d}.pt", map_location=device), meta


def load_optimizer_states(checkpoint_dir: str | os.PathLike, step: int, rank: int, device="cpu") -> list:
    """This rank's optimizer states of a saved step (load_model_state has checked the world size)."""
    path = Path(checkpoint_dir) / f"optim_{step:06d}_rank{rank}.pt"
    if not path.is_file():
        raise ConfigError(f"no optimizer state for rank {rank} at {path}: resume with the ranks that saved "
                          f"step {step}")
    return torch.load(path, map_location=device)


# the stage that writes each phase's checkpoints (their folders: bench/paths.py PHASE_DIRS)
WRITTEN_BY = {"base": "base pretraining (`nanochat-bench train ... --save_every=N`)",
              "mid": "mid-training (workload mid_train)", "sft": "SFT (workload chat_sft)"}


def phase_dir(phase: str) -> Path:
    from bench.nanochat.common import get_base_dir

    if phase not in PHASE_DIRS:
        raise ConfigError(f"unknown checkpoint source {phase!r}; valid: {', '.join(PHASE_DIRS)}")
    return get_base_dir() / PHASE_DIRS[phase]


def find_model_tag(phase: str) -> str:
    """Upstream's choice without a tag: the largest d<int> folder, else the newest folder. A run of
    `nanochat-bench train` without --model_tag saves under <sweep>-<hash>/<run> (train.default_model_tag): a folder
    holding no checkpoint but such run folders stands for them, so its newest run can be the choice. Checkpoints a
    rerun set aside (<tag>.attempt-<time>, bench/launch/flow.py) are never the choice: given by tag only."""
    root = phase_dir(phase)
    folders = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    tags = [p for p in folders if SET_ASIDE not in p.name]
    if not tags:
        aside = f" but the ones a rerun set aside ({', '.join(sorted(p.name for p in folders))}: give one's name as " \
                "the tag to load it)" if folders else ""
        raise ConfigError(f"no {phase} checkpoints in {root}{aside}: {WRITTEN_BY[phase]} writes them there")
    depths = [(int(p.name[1:]), p.name) for p in tags if re.fullmatch(r"d\d+", p.name)]
    if depths:
        return max(depths)[1]
    candidates = []
    for tag in tags:
        runs = [] if saved_steps(tag) else [p for p in tag.iterdir() if p.is_dir() and saved_steps(p)]
        candidates += runs or [tag]
    return max(candidates, key=lambda p: p.stat().st_mtime).relative_to(root).as_posix()


def load_model(phase: str, device, model_tag: str | None = None, step: int | None = None):
    """(model, meta) of a saved stage: `phase` base | mid | sft, its tag (default: find_model_tag) and step
    (default: the last saved). The model is built on the meta device, materialised, then given the saved
    weights (a compiled model's `_orig_mod.` prefix removed), as upstream's checkpoint_manager does."""
    from bench.nanochat.gpt import GPTConfig, build_model

    tag = model_tag or find_model_tag(phase)
    checkpoint_dir = phase_dir(phase) / tag
    steps = saved_steps(checkpoint_dir)
    if not steps:
        raise ConfigError(f"no {phase} checkpoint in {checkpoint_dir} (model_<step>.pt with its meta_<step>.json): "
                          f"{WRITTEN_BY[phase]} writes them there")
    state, meta = load_model_state(checkpoint_dir, steps[-1] if step is None else step, device)
    if torch.device(device).type in ("cpu", "mps"):  # a CUDA run saved its embedding in bf16: fp32 here, as upstream
        state = {k: v.float() if v.dtype == torch.bfloat16 else v for k, v in state.items()}
    model = build_model(GPTConfig(**meta["model_config"]), device)
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in state.items()}, strict=True, assign=True)
    return model, {**meta, "model_tag": tag, "checkpoint_dir": str(checkpoint_dir)}
