"""Where a result came from: software versions, GPU, git revision, Slurm job, image, network env.

Recorded in run.json by the trainer (and the launcher) so that every figure can be traced and
compared like with like. Cheap and failure-proof: a fact that cannot be read is left out, never raised.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.contract import slurm_facts, write_json_atomic

# Environment prefixes that change communication performance; defaults drift between runtimes and
# releases (e.g. CE hooks set NCCL_*/FI_* themselves), so the effective values are recorded.
NETWORK_ENV_PREFIXES = ("NCCL_", "FI_", "TORCH_NCCL_", "CUDA_DEVICE_MAX_CONNECTIONS", "UCX_")
# Names that look like credentials are never recorded, whatever their prefix (run.json is shared).
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY|AUTH", re.IGNORECASE)

# Set by the launcher (bench/launch) so the trainer can record what wrapped it.
ENV_RUNTIME = "NANOCHAT_BENCH_RUNTIME"
ENV_IMAGE = "NANOCHAT_BENCH_IMAGE"

# Baked into the image by the Containerfile (`python -m bench.provenance bake ...`): what the image was
# built from. The image's own digest cannot be inside it: the batch script's image step records it in run.json
# (bench/launch/jobrecord.py), beside what the trainer finds here.
BUILD_INFO_PATH = Path("/etc/nanochat-bench/image.json")
# Podman writes this file into every container; with --privileged it also names the image and its id.
CONTAINERENV_PATH = Path("/run/.containerenv")


def git_revision(build: dict | None = None) -> str | None:
    """The project's git revision (with -dirty when modified) if this is a checkout, else the one baked
    into the image at build time."""
    repo = Path(__file__).resolve().parent.parent
    described = _output(["git", "-C", str(repo), "describe", "--always", "--dirty", "--abbrev=12"], timeout=5)
    return described or (build or {}).get("git_revision") or None


def _output(cmd: list[str], timeout: float) -> str | None:
    """A command's stripped output when it succeeds and says something, else None."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


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
        driver = _output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], timeout=10)
        info["driver"] = driver.splitlines()[0] if driver else None
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        info["cudnn"] = str(cudnn) if cudnn else None
    return info


def network_env(environ=os.environ) -> dict:
    """The variables under NETWORK_ENV_PREFIXES, less any whose name looks like a credential."""
    return {k: v for k, v in sorted(environ.items())
            if k.startswith(NETWORK_ENV_PREFIXES) and not SECRET_NAME.search(k)}


def build_info(path: Path = BUILD_INFO_PATH) -> dict | None:
    """What the image was built from (reference, base image, git revision, time), when baked in."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def containerenv(path: Path = CONTAINERENV_PATH) -> dict | None:
    """Podman's `/run/.containerenv` as a dict (`key="value"` lines), or None outside Podman."""
    try:
        text = path.read_text()
    except OSError:
        return None
    pairs = (line.partition("=") for line in text.splitlines())
    return {key.strip(): value.strip().strip('"') for key, sep, value in pairs if sep}


def detect_runtime(environ=os.environ, root: Path = Path("/")) -> str:
    """The runtime around this process from what each leaves behind; the launcher's ENV_RUNTIME wins.

    Docker's /.dockerenv is not used: CI machines are often Docker containers themselves, and a bare
    run there must stay "bare"."""
    if environ.get(ENV_RUNTIME):
        return environ[ENV_RUNTIME]
    if environ.get("APPTAINER_CONTAINER") or environ.get("SINGULARITY_CONTAINER"):
        return "apptainer"
    if (root / CONTAINERENV_PATH.relative_to("/")).exists():
        return "podman"
    return "bare"


def sidecar_digest(reference: str | None) -> str | None:
    """`sha256:<hex>` from the `<image file>.sha256` that containers/enroot-import.sh writes next to a
    SquashFS image (sha256sum format), when the reference is such a file and it is visible here."""
    if not reference or "/" not in reference:
        return None
    try:
        words = Path(os.path.expandvars(reference) + ".sha256").read_text().split()
    except OSError:
        return None
    return f"sha256:{words[0]}" if words and re.fullmatch(r"[0-9a-f]{64}", words[0]) else None


def image(environ=os.environ, build: dict | None = None, podman: dict | None = None) -> dict:
    """Image reference and digest: the launcher's reference first, then what the runtime or the build left; the
    digest of a SquashFS image from its sidecar (the batch script records the others' digests and ids)."""
    build, podman = build or {}, podman or {}
    reference = (environ.get(ENV_IMAGE) or podman.get("image") or environ.get("APPTAINER_CONTAINER")
                 or build.get("reference") or None)
    info = {"reference": reference, "digest": sidecar_digest(reference)}
    if podman.get("imageid"):
        info["id"] = podman["imageid"]
    if build:
        info["build"] = build
    return info


def collect(environ=os.environ) -> dict:
    """Everything above, as the run.json fields `software`, `git_revision`, `slurm`, `image`, `runtime`,
    `network_env`."""
    build = build_info()
    return {
        "software": software(),
        "git_revision": git_revision(build),
        "slurm": slurm_facts(environ),
        "image": image(environ, build, containerenv()),
        "runtime": detect_runtime(environ),
        "network_env": network_env(environ),
    }


def bake(path: str | os.PathLike, *, reference: str = "", base_image: str = "", git_revision: str = "") -> dict:
    """Write the build facts into the image (run by the Containerfile); empty values are left out."""
    facts = {"reference": reference, "base_image": base_image, "git_revision": git_revision,
             "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    facts = {k: v for k, v in facts.items() if v}
    write_json_atomic(path, facts)
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.provenance",
                                     description="Bake build facts into an image, or print this process's provenance.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("bake", help="write build facts as JSON (Containerfile)")
    p.add_argument("path", nargs="?", default=str(BUILD_INFO_PATH))
    p.add_argument("--reference", default="", help="the image's own name:tag")
    p.add_argument("--base-image", default="", help="the BASE_IMAGE it was built from")
    p.add_argument("--git-revision", default="", help="the project's git revision")
    sub.add_parser("show", help="print collect() as JSON")
    args = parser.parse_args(argv)
    if args.command == "bake":
        facts = bake(args.path, reference=args.reference, base_image=args.base_image,
                     git_revision=args.git_revision)
    else:
        facts = collect()
    json.dump(facts, sys.stdout, indent=2, sort_keys=True, default=str)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
