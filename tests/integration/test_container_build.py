"""The real Containerfile, built with Podman on a local stand-in for NGC PyTorch, and a smoke run inside it.
    NANOCHAT_BENCH_CONTAINER_TEST=1 python -m pytest tests/integration/test_container_build.py -q -s

The image comes from tests/support/containers.py (built when NANOCHAT_BENCH_CONTAINER_TEST=1 or CI=true:
6 to 10 minutes cold on 2 cores, about a minute warm); -s prints the time of each step. Nothing is mocked:
`podman run` runs `nanochat-bench smoke` inside (offline data, a small tokenizer, a tiny model on 2 CPU
ranks), writing its run directory to a bind-mounted folder.
"""

import json
import subprocess

import pytest

from bench.contract import EVENTS, METRICS_JSONL, RUN_JSON
from tests.support.containers import CONTAINERS, REPO, TIMINGS, podman, run_step

DEPS_TAG = "localhost/nanochat-bench-deps:test"
# Inside the image: offline data, a small tokenizer and 20 steps of a tiny model on 2 CPU ranks (gloo).
SMOKE = ["nanochat-bench", "smoke", "--base-dir", "/data", "--run-dir", "/out/run", "--steps", "20"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module", autouse=True)
def print_timings():
    """The build and run times, printed once at the end (visible with -s)."""
    yield
    for name, seconds in TIMINGS.items():
        print(f"[container test] {name:40s} {seconds:7.1f} s")


@pytest.fixture
def image(podman_image):
    return podman_image


@pytest.fixture
def standin(standin_image):
    return standin_image


def test_smoke_run_inside_the_image_leaves_a_valid_run_directory(image, standin, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "out").mkdir()
    run_step("smoke run in container", podman(
        "run", "--rm", "-v", f"{tmp_path / 'data'}:/data", "-v", f"{tmp_path / 'out'}:/out",
        "-e", "OMP_NUM_THREADS=1", "-e", "NCCL_DEBUG=WARN", image, *SMOKE))
    run_dir = tmp_path / "out" / "run"
    manifest = json.loads((run_dir / RUN_JSON).read_text())
    assert manifest["status"] == "ok", manifest.get("message")
    assert manifest["runtime"] == "podman"  # detected from /run/.containerenv, no launcher involved
    assert manifest["image"]["reference"] == image
    assert manifest["image"]["build"]["base_image"] == standin
    assert manifest["software"]["torch"].startswith("2.13.0") and manifest["world_size"] == 2
    assert manifest["network_env"]["NCCL_DEBUG"] == "WARN"  # the effective NCCL_* environment is recorded

    events = [json.loads(line) for line in (run_dir / METRICS_JSONL).read_text().splitlines()]
    names = [e["event"] for e in events]
    assert names[0] == "start" and names[-1] == "end", names
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 20 and all(set(EVENTS["step"]) <= set(e) for e in steps)
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert any(e["event"] == "val" for e in events)
    assert (tmp_path / "data" / "tokenizer").is_dir()  # --base-dir: the image sets no NANOCHAT_* path itself


def test_image_keeps_the_base_images_torch_and_pip_constraint(image, standin):
    probe = ("import os, torch, numpy; "
             "print(torch.__version__, numpy.__version__, os.environ.get('PIP_CONSTRAINT'), os.getcwd())")
    base = run_step("probe base", podman("run", "--rm", standin, "python", "-c", probe)).stdout.split()
    built = run_step("probe image", podman("run", "--rm", image, "python", "-c", probe)).stdout.split()
    assert built[:3] == base[:3]  # same torch, numpy and constraint file: installed next to, not over
    assert built[3] == "/workspace/nanochat-bench"
    out = run_step("pip check", podman("run", "--rm", image, "pip", "check"))
    assert "No broken requirements" in out.stdout


def test_deps_stage_runs_a_bind_mounted_checkout(image, standin):
    # Shares its layers with the full image, so this build takes seconds.
    run_step("build deps stage", [str(CONTAINERS / "build.sh"), "--local", "--target", "deps", "--base", standin,
                              "--tag", DEPS_TAG])
    out = run_step("deps stage run", podman(
        "run", "--rm", "-v", f"{REPO}:/workspace/nanochat-bench:ro", DEPS_TAG,
        "python", "-m", "bench.cli", "edf", "--image", "/images/img.sqsh", "--no-default-env"))
    assert 'image = "/images/img.sqsh"' in out.stdout.splitlines()
    missing = subprocess.run(podman("run", "--rm", DEPS_TAG, "nanochat-bench", "--version"),
                             capture_output=True, text=True)
    assert missing.returncode != 0  # the deps stage has the prerequisites only, not the project


