"""Device and process-group set-up for the trainer (upstream keeps these in nanochat/common.py).

One process per GPU under torchrun: NCCL with the rank's device bound (`device_id`, so the
communicator is created eagerly and bound to the right GPU) on CUDA, gloo on CPU. A single process
without torchrun's environment runs undistributed. Every rank seeds 42, so initial weights agree.
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from bench.errors import ConfigError
from bench.nanochat.common import get_dist_info
from bench.nanochat import numanode
from bench.runside.join import join_bound, join_group


def autodetect_device_type() -> str:
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def compute_init(device_type: str, join_timeout_s: float = -1) -> tuple[bool, int, int, int, torch.device]:
    """(distributed, rank, local_rank, world_size, device), the process group initialised if needed; a rank
    that has not joined `join_timeout_s` after this one ends the run (bench/runside/join.py)."""
    if device_type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device_type=cuda but torch sees no CUDA device; use --device_type=cpu or leave it empty")
    if device_type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("--device_type=mps but MPS is not available; use --device_type=cpu")
    torch.manual_seed(42)
    if device_type == "cuda":
        torch.cuda.manual_seed(42)
        torch.set_float32_matmul_precision("high")  # TF32 for the fp32 matmuls, as upstream
    distributed, rank, local_rank, world_size = get_dist_info()
    join_timeout_s = join_bound(join_timeout_s, world_size, int(os.environ.get("LOCAL_WORLD_SIZE", world_size)))
    device = torch.device(device_type)
    if distributed and device_type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(f"local rank {local_rank} has no GPU: this node has {torch.cuda.device_count()}; "
                              f"start at most that many processes per node (--nproc_per_node)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        if os.environ.get(numanode.ENV_BIND):  # torchrun's --numa-binding without numactl
            line = numanode.bind(numanode.gpu_pci_address(local_rank))
            if rank == 0:
                print(line, flush=True)
    if distributed:
        kw = {"backend": "nccl", "device_id": device} if device_type == "cuda" else {"backend": "gloo"}
        join_group(lambda timeout: dist.init_process_group(**kw, timeout=timeout), rank, world_size, join_timeout_s)
        set_collective_timeout(None)  # the join's bound was for the join alone
        dist.barrier()
    return distributed, rank, local_rank, world_size, device


def compute_cleanup() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def topology() -> tuple[int, int]:
    """(nodes, processes per node) from torchrun's environment; (1, 1) without it."""
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    return max(1, world_size // max(1, local_world_size)), local_world_size


def set_collective_timeout(seconds: float | None) -> None:
    """The default process group's timeout for the collectives issued from now on (None: the backend's
    own, 10 min NCCL, 30 min gloo). torch has no public call to change a live group's timeout."""
    from torch.distributed import constants
    from torch.distributed.distributed_c10d import _set_pg_timeout

    if seconds:
        timeout = timedelta(seconds=seconds)
    elif dist.get_backend() == "nccl":
        timeout = getattr(constants, "default_pg_nccl_timeout", None) or timedelta(minutes=10)
    else:
        timeout = constants.default_pg_timeout
    _set_pg_timeout(timeout)
