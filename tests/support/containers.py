"""The project's image, built with Podman from the real Containerfile on a local stand-in for NGC PyTorch.

containers/standin-base.sh makes Debian bookworm (debootstrap) + CPU torch 2.13 with an NGC-style pip
constraint file; containers/build.sh builds the Containerfile on it. Both cache (the debootstrap tarball
under ~/.cache/nanochat-bench, Podman's layers): cold on a fresh machine 6-10 minutes on 2 cores, warm
about a minute. Built when NANOCHAT_BENCH_CONTAINER_TEST=1 or CI=true (CI runs the container tests every
time); elsewhere the tests that need it skip, saying why. Needs root, podman, runc, debootstrap and the
CPU torch wheel for Python 3.11 (TORCH_WHEEL, default the path standin-base.sh names).
"""

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERS = REPO / "containers"
TAG = "localhost/nanochat-bench:test"
DEFAULT_WHEEL = re.search(r"TORCH_WHEEL:-([^}]+)}", (CONTAINERS / "standin-base.sh").read_text()).group(1)
TIMINGS: dict[str, float] = {}


def wanted() -> bool:
    return os.environ.get("NANOCHAT_BENCH_CONTAINER_TEST") == "1" or \
        os.environ.get("CI", "").lower() in ("1", "true", "yes")


def why_not() -> str | None:
    """Why the image cannot be built here (None when it can)."""
    if not wanted():
        return "container build and run: set NANOCHAT_BENCH_CONTAINER_TEST=1 (6-10 min cold; CI always runs it)"
    missing = [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (tests/run installs them as root)"
    if os.geteuid() != 0:
        return "debootstrap needs root"
    if not Path(os.environ.get("TORCH_WHEEL", DEFAULT_WHEEL)).is_file():
        return f"no CPU torch wheel at {os.environ.get('TORCH_WHEEL', DEFAULT_WHEEL)} (set TORCH_WHEEL)"
    return None


def run_step(name: str, argv: list[str], timeout: int = 900, **kw) -> subprocess.CompletedProcess:
    """Run a step, time it, and fail with its output when it fails."""
    start = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, **kw)
    TIMINGS[name] = time.monotonic() - start
    print(f"\n[container test] {name}: {TIMINGS[name]:.1f} s")
    assert out.returncode == 0, f"{name} failed ({out.returncode}):\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out


def podman(*args: str) -> list[str]:
    """podman with containers/podman-local.sh's settings (runc, no default ulimits, host network)."""
    return [str(CONTAINERS / "podman-local.sh"), *args]


def build_standin() -> str:
    return run_step("stand-in base (debootstrap, cached)",
                    [str(CONTAINERS / "standin-base.sh")]).stdout.strip().splitlines()[-1]


def build_image(standin: str, tag: str = TAG) -> str:
    run_step("build Containerfile", [str(CONTAINERS / "build.sh"), "--local", "--base", standin, "--tag", tag])
    return tag
