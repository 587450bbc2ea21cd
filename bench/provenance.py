"""Where a result came from: software versions, GPU, git revision, Slurm job, image, network env.

Recorded in run.json by the trainer (and the launcher) so that every figure can be traced and
compared like with like. Cheap and failure-proof: a fact that cannot be read is left out, never raised.
"""

import os
import platform
import subprocess
from pathlib import Path

# Environment prefixes that change communication performance; defaults drift between runtimes and
# releases (e.g. CE hooks set NCCL_*/FI_* themselves), so the effective values are recorded.
NETWORK_ENV_PREFIXES = ("NCCL_", "FI_", "TORCH_NCCL_", "CUDA_DEVICE_MAX_CONNECTIONS", "UCX_")

# Set by the launcher (bench/launch) so the trainer can record what wrapped it.
ENV_RUNTIME = "NANOCHAT_BENCH_RUNTIME"
ENV_IMAGE = "NANOCHAT_BENCH_IMAGE"
ENV_IMAGE_DIGEST = "NANOCHAT_BENCH_IMAGE_DIGEST"

SLURM_VARS = {
    "job_id": "SLURM_JOB_ID",
    "job_name": "SLURM_JOB_NAME",
    "nodelist": "SLURM_JOB_NODELIST",
    "num_nodes": "SLURM_JOB_NUM_NODES",
    "partition": "SLURM_JOB_PARTITION",
    "account": "SLURM_JOB_ACCOUNT",
    "cluster": "SLURM_CLUSTER_NAME",
}


def git_revision() -> str | None:
    """The project's git revision (with -dirty when modified), if this is a checkout."""
    repo = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(repo), "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def software() -> dict:
    """Versions of Python, torch, CUDA, NCCL, and the GPU name and driver when there is a GPU."""
    info: dict = {"python": platform.python_version(), "hostname": platform.node()}
    try:
        import torch
    except ImportError:
        return info
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        info["gpu_name"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
        try:
            info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - builds without NCCL
            pass
        info["driver"] = _nvidia_driver()
    return info


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def network_env(environ=os.environ) -> dict:
    return {k: v for k, v in sorted(environ.items()) if k.startswith(NETWORK_ENV_PREFIXES)}


def slurm(environ=os.environ) -> dict | None:
    if "SLURM_JOB_ID" not in environ:
        return None
    return {key: environ[var] for key, var in SLURM_VARS.items() if var in environ}


def image(environ=os.environ) -> dict:
    return {"reference": environ.get(ENV_IMAGE), "digest": environ.get(ENV_IMAGE_DIGEST)}


def collect(environ=os.environ) -> dict:
    """Everything above, as the run.json fields `software`, `git_revision`, `slurm`, `image`, `runtime`,
    `network_env`."""
    return {
        "software": software(),
        "git_revision": git_revision(),
        "slurm": slurm(environ),
        "image": image(environ),
        "runtime": environ.get(ENV_RUNTIME, "bare"),
        "network_env": network_env(environ),
    }
