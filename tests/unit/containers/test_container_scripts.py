"""The container scripts' command lines: --help prints the usage and runs nothing, a bad argument is one line.
    python -m pytest tests/unit/containers/test_container_scripts.py -q
Every tool the scripts call (podman, enroot, apptainer, sarus, ...) is a stub that records its call.
"""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CONTAINERS = REPO / "containers"
TOOLS = ["podman", "podman-hpc", "docker", "enroot", "apptainer", "sarus", "sarusctl", "debootstrap", "lfs"]
# Scripts that take arguments, with a usage line each shows in its --help.
SCRIPTS = ["build.sh", "apptainer-build.sh", "enroot-import.sh", "podman-hpc.sh", "sarus-load.sh",
           "sarus-suite-migrate.sh", "standin-base.sh"]


@pytest.fixture
def run(tmp_path):
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >>"{calls}"\n')
        (bin_dir / tool).chmod(0o755)

    def _run(script, *args, **extra_env):
        env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "SCRATCH": str(tmp_path),
               "TMPDIR": str(tmp_path), "TORCH_WHEEL": str(tmp_path / "no.whl"), **extra_env}
        out = subprocess.run([str(CONTAINERS / script), *args], capture_output=True, text=True, env=env,
                             timeout=60, cwd=tmp_path)
        return out, calls.read_text() if calls.exists() else ""
    return _run


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_the_usage_and_runs_nothing(run, script):
    out, calls = run(script, "--help")
    assert out.returncode == 0, out.stderr
    assert f"containers/{script}" in out.stdout and calls == ""


def test_podman_local_help_is_its_own_not_podmans(run):
    """Regression: `podman-local.sh --help` ran `podman --runtime runc --help`; a subcommand's --help still does."""
    out, calls = run("podman-local.sh", "--help")
    assert out.returncode == 0 and "containers/podman-local.sh run" in out.stdout and calls == ""
    out, calls = run("podman-local.sh", "run", "--help")
    assert calls == "podman --runtime runc run --network host --help\n"


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_unknown_option_is_one_line_naming_it(run, script):
    out, calls = run(script, "--bogus")
    assert out.returncode == 2 and calls == ""
    assert out.stderr.count("\n") == 1 and f"{script}: " in out.stderr and "'--bogus'" in out.stderr, out.stderr


@pytest.mark.parametrize("flag", ["--target", "--tag", "--base"])
def test_build_flag_without_its_value_is_one_line(run, flag):
    out, calls = run("build.sh", flag)
    assert out.returncode == 2 and calls == ""
    assert out.stderr.count("\n") == 1 and f"build.sh: {flag} needs a value" in out.stderr, out.stderr
    assert "unbound variable" not in out.stderr


@pytest.mark.parametrize("image", [
    "nanochat-bench", "nanochat-bench:latest", "team/nanochat-bench:v1",
    "registry.example:5000/team/nanochat-bench:tag", "registry.example:5000/nanochat-bench",
    "registry.example:5000/team/nanochat-bench@sha256:0123abcd",
    "registry.example:5000/team/nanochat-bench:tag@sha256:0123abcd"])
def test_apptainer_sif_is_named_after_the_last_path_component(run, tmp_path, image):
    """Regression: the tag was cut at the first ':', so a registry with a port gave registry.example.sif."""
    out, calls = run("apptainer-build.sh", image)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{tmp_path}/images/nanochat-bench.sif\n"
    assert f"apptainer build --force {tmp_path}/images/nanochat-bench.sif apptainer.def\n" in calls


@pytest.mark.parametrize("engine, save", [
    (None, "podman save --format docker-archive -o"), ("podman", "podman save --format docker-archive -o"),
    ("docker", "docker save -o"), ("{bin}/docker", "docker save -o")])
def test_sarus_load_saves_a_docker_archive_with_either_engine(run, tmp_path, engine, save):
    """Regression: `docker save --format docker-archive` failed, docker save having no --format."""
    engine = engine and engine.format(bin=tmp_path / "bin")
    out, calls = run("sarus-load.sh", "nanochat-bench:v1", **({"CONTAINER_ENGINE": engine} if engine else {}))
    assert out.returncode == 0, out.stderr
    saved = calls.splitlines()[0]
    assert saved.startswith(f"{save} ") and saved.endswith("/image.tar nanochat-bench:v1"), calls
    assert calls.splitlines()[1] == f"sarus load {saved.split()[-2]} nanochat-bench:v1"


@pytest.mark.parametrize("engine, save, bootstrap", [
    (None, "podman save --format oci-archive -o", "Bootstrap: oci-archive From: nanochat-bench.oci.tar"),
    ("docker", "docker save -o", "Bootstrap: docker-archive From: nanochat-bench.docker.tar")])
def test_apptainer_build_bootstraps_from_the_archive_its_engine_saves(run, tmp_path, engine, save, bootstrap):
    """Regression: `docker save --format oci-archive` failed; docker's own archive is a docker archive."""
    stub = tmp_path / "bin" / "apptainer"
    stub.write_text(f'#!/bin/sh\necho "apptainer $* $(grep -E \'^(Bootstrap|From):\' apptainer.def | tr \'\\n\' \' \')"'
                    f' >>"{tmp_path / "calls"}"\n')
    out, calls = run("apptainer-build.sh", **({"CONTAINER_ENGINE": engine} if engine else {}))
    assert out.returncode == 0, out.stderr
    saved, built = calls.splitlines()
    archive = bootstrap.split()[-1]
    assert saved.startswith(f"{save} ") and saved.endswith(f"/{archive} nanochat-bench:latest"), calls
    assert built == f"apptainer build --force {tmp_path}/images/nanochat-bench.sif apptainer.def {bootstrap} "


def test_apptainer_build_into_a_relative_image_dir_writes_the_sif_there(run, tmp_path):
    """A relative IMAGE_DIR was handed to `apptainer build`, which runs inside the script's scratch directory:
    the SIF went there (or nowhere) and was deleted with it on exit, while the script printed its path."""
    stub = tmp_path / "bin" / "apptainer"
    stub.write_text('#!/bin/sh\n[ "$1" = build ] && echo sif >"$3"\n')
    out, _ = run("apptainer-build.sh", IMAGE_DIR="my images")
    assert out.returncode == 0, out.stderr
    sif = tmp_path / "my images" / "nanochat-bench.sif"
    assert out.stdout == f"{sif}\n" and sif.read_text() == "sif\n"


@pytest.mark.parametrize("script, args, engine", [
    ("build.sh", [], None), ("build.sh", ["--local"], "docker"), ("build.sh", [], "podman-hpc"),
    ("apptainer-build.sh", [], None), ("sarus-load.sh", [], None), ("sarus-load.sh", [], "docker")])
def test_a_missing_engine_is_one_line_as_another_missing_tool(run, tmp_path, script, args, engine):
    """Regression: without podman, build.sh stopped with bash's 'line 47: podman: command not found' (exit 127), and
    apptainer-build.sh and sarus-load.sh alike at their `podman save`; --local runs podman whatever the engine."""
    missing = "podman" if engine is None or "--local" in args else engine
    (tmp_path / "bin" / missing).unlink()
    system = tmp_path / "system"  # the host's tools but the stubbed ones: a real podman must not be found there
    system.mkdir()
    for folder in (Path("/usr/bin"), Path("/bin")):
        for tool in folder.iterdir():
            if tool.name not in TOOLS and not (system / tool.name).exists():
                (system / tool.name).symlink_to(tool)
    out, calls = run(script, *args, PATH=f"{tmp_path / 'bin'}:{system}",
                     **({"CONTAINER_ENGINE": engine} if engine else {}))
    assert out.returncode == 2 and calls == "", (out.stderr, calls)
    assert out.stderr.startswith(f"{script}: {missing} is not installed ("), out.stderr
    assert out.stderr.count("\n") == 1 and "CONTAINER_ENGINE" in out.stderr
