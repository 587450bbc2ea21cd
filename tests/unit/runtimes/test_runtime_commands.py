"""What each runtime adds to srun and how it wraps the command, compared with complete expected token
lists (ReFrame's container tests do the same). Runtimes that cannot run on this machine (CE, pyxis,
apptainer, sarus: no such Slurm plugins or binaries here) are checked as text only.

    python -m pytest tests/unit/runtimes -q
"""

import os
import subprocess
import tomllib

import pytest

import bench.runtimes as runtimes
from bench.runtimes import LaunchSpec, Mount, Var
from bench.runtimes.apptainer import STEP_ENV

CMD = ("python", "-m", "bench.nanochat.train", Var("SLURM_JOB_ID", "--rdzv_id="))
ENV = {"NANOCHAT_BENCH_RUN_DIR": "/s/run", "NANOCHAT_BASE_DIR": "/s/base", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


def spec(run_dir, gpus=True, **kw):
    base = dict(command=CMD, image="/img/nb.sqsh", mounts=(Mount("/s"), Mount("/data", "/d", readonly=True)),
                env=ENV, workdir="/workspace/nanochat-bench", run_dir=str(run_dir), gpus=gpus)
    return LaunchSpec(**{**base, **kw})


def launch(name, s):
    rt = runtimes.get(name)
    rt.check(s)
    return rt.srun_options(s), rt.wrap(s)


def test_bare_runs_the_command_as_is(tmp_path):
    assert launch("bare", spec(tmp_path, image=None)) == ([], list(CMD))


def test_pyxis_options(tmp_path):
    opts, argv = launch("pyxis", spec(tmp_path))
    assert opts == ["--container-image=/img/nb.sqsh", "--container-mounts=/s:/s,/data:/d:ro",
                    "--container-workdir=/workspace/nanochat-bench",
                    "--container-env=NANOCHAT_BASE_DIR,NANOCHAT_BENCH_RUN_DIR,NCCL_DEBUG_SUBSYS",
                    "--no-container-mount-home", "--container-writable"]
    assert argv == list(CMD)


def test_apptainer_exec_with_nv_only_on_gpus(tmp_path):
    s = spec(tmp_path, image="/img/nb.sif")
    _, argv = launch("apptainer", s)
    env_file = tmp_path / "apptainer.env"
    assert argv == ["bash", "-c", STEP_ENV, "bash",
                    "apptainer", "exec", "--cleanenv", "--no-home", f"--env-file={env_file}", "--nv", "--bind=/s:/s",
                    "--bind=/data:/d:ro", "--pwd=/workspace/nanochat-bench", "/img/nb.sif", *CMD]
    # literal values from a file: --env would split NCCL_DEBUG_SUBSYS=INIT,NET at its comma
    assert runtimes.get("apptainer").write_files(s) == [env_file]
    assert env_file.read_text().splitlines() == ["NANOCHAT_BASE_DIR=/s/base", "NANOCHAT_BENCH_RUN_DIR=/s/run",
                                                 "NCCL_DEBUG_SUBSYS=INIT,NET"]
    _, argv = launch("apptainer", spec(tmp_path, image="/img/nb.sif", gpus=False))
    assert "--nv" not in argv


def test_apptainer_passes_the_steps_slingshot_variables_through_cleanenv(tmp_path):
    """Regression: --cleanenv dropped the SLINGSHOT_* variables Slurm sets in each step (the VNIs libfabric's cxi
    provider needs to reach the other nodes); the step's bash now copies them to APPTAINERENV_*, which apptainer
    passes in. Run in real bash, with `env` standing in for apptainer."""
    _, argv = launch("apptainer", spec(tmp_path, image="/img/nb.sif"))
    prefix = argv[:argv.index("apptainer")]
    step = {"PATH": os.environ["PATH"], "SLINGSHOT_VNIS": "1054,1055", "SLINGSHOT_DEVICES": "cxi0,cxi1"}
    out = subprocess.run([*prefix, "env"], env=step, capture_output=True, text=True, check=True).stdout.splitlines()
    assert {"APPTAINERENV_SLINGSHOT_VNIS=1054,1055", "APPTAINERENV_SLINGSHOT_DEVICES=cxi0,cxi1"} <= set(out)
    assert subprocess.run([*prefix, "true"], env={"PATH": os.environ["PATH"]}).returncode == 0  # none set


def test_apptainer_keeps_the_gpus_slurm_gave_the_step(tmp_path):
    """Regression: --cleanenv dropped the CUDA_VISIBLE_DEVICES Slurm sets in each step, and --nv shows every GPU of
    the node, so on a node shared with other jobs the ranks took GPUs 0..N-1, whoever held them. Set (even empty,
    no GPU), it is passed in as APPTAINERENV_CUDA_VISIBLE_DEVICES; unset, nothing is. Run in real bash, with
    `env` standing in for apptainer."""
    _, argv = launch("apptainer", spec(tmp_path, image="/img/nb.sif"))
    prefix = argv[:argv.index("apptainer")]

    def passed(step):
        out = subprocess.run([*prefix, "env"], env={"PATH": os.environ["PATH"], **step}, capture_output=True,
                             text=True, check=True).stdout.splitlines()
        return [line for line in out if line.startswith("APPTAINERENV_CUDA")]

    assert passed({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["APPTAINERENV_CUDA_VISIBLE_DEVICES=2,3"]
    assert passed({"CUDA_VISIBLE_DEVICES": ""}) == ["APPTAINERENV_CUDA_VISIBLE_DEVICES="]
    assert passed({}) == []


def test_podman_and_podman_hpc(tmp_path):
    _, argv = launch("podman", spec(tmp_path, image="localhost/nb:1"))
    assert argv == ["podman", "run", "--rm", "--network=host", "--ipc=host", "--device=nvidia.com/gpu=all",
                    "--env=CUDA_VISIBLE_DEVICES", "--volume=/s:/s", "--volume=/data:/d:ro",
                    "--workdir=/workspace/nanochat-bench",
                    "--env=NANOCHAT_BASE_DIR=/s/base", "--env=NANOCHAT_BENCH_RUN_DIR=/s/run",
                    "--env=NCCL_DEBUG_SUBSYS=INIT,NET", "--env=SLURM_*", "--env=SLINGSHOT_*",
                    "localhost/nb:1", *CMD]
    _, argv = launch("podman-hpc", spec(tmp_path, image="localhost/nb:1"))
    assert argv[:8] == ["podman-hpc", "run", "--rm", "--network=host", "--ipc=host", "--gpu", "--nccl",
                        "--env=CUDA_VISIBLE_DEVICES"]


@pytest.mark.parametrize("name", ["podman", "podman-hpc"])
def test_podman_keeps_the_gpus_slurm_gave_the_step(tmp_path, name):
    """Regression: podman passes no host variable it is not told to, and its GPU devices are every GPU of the node,
    so the CUDA_VISIBLE_DEVICES Slurm sets in each step never reached the ranks, which on a node shared with other
    jobs trained on GPUs 0..N-1, whoever held them. `--env=NAME` without a value takes the host's, where set."""
    _, argv = launch(name, spec(tmp_path, image="localhost/nb:1"))
    assert "--env=CUDA_VISIBLE_DEVICES" in argv[:argv.index("localhost/nb:1")]
    _, argv = launch(name, spec(tmp_path, image="localhost/nb:1", gpus=False))
    assert "--env=CUDA_VISIBLE_DEVICES" not in argv  # a CPU run is given no GPU


def test_sarus_classic(tmp_path):
    _, argv = launch("sarus", spec(tmp_path, image="load/library/nb:1"))
    assert argv == ["sarus", "run", "-e", "NANOCHAT_BASE_DIR=/s/base", "-e", "NANOCHAT_BENCH_RUN_DIR=/s/run",
                    "-e", "NCCL_DEBUG_SUBSYS=INIT,NET", "--mount=type=bind,source=/s,destination=/s",
                    "--mount=type=bind,source=/data,destination=/d,readonly",
                    "--workdir=/workspace/nanochat-bench", "load/library/nb:1", *CMD]


@pytest.mark.parametrize("name,option", [("ce", "--environment"), ("sarus-suite", "--edf")])
def test_edf_runtimes_write_the_edf_into_the_run_dir(tmp_path, name, option):
    image = "/img/nb.sqsh" if name == "ce" else "localhost/nb:1"
    s = spec(tmp_path, image=image)
    opts, argv = launch(name, s)
    assert opts == [f"{option}={tmp_path / 'environment.toml'}"] and argv == list(CMD)
    [path] = runtimes.get(name).write_files(s)
    edf = tomllib.loads(path.read_text())
    assert edf["image"] == image
    assert edf["mounts"] == ["/s:/s", "/data:/d:ro"]
    assert edf["workdir"] == "/workspace/nanochat-bench"
    # Literal values: an image's ENV would win over a ${VAR} reference to the host's value (CE's rule).
    assert edf["env"] == ENV
    assert "annotations" not in edf  # --ofi-hook default: CE's own setting
    for hook, enabled in (("on", "true"), ("off", "false")):
        [path] = runtimes.get(name).write_files(spec(tmp_path, image=image, ofi_hook=hook))
        assert tomllib.loads(path.read_text())["annotations"]["com"]["hooks"]["aws_ofi_nccl"]["enabled"] == enabled


def test_ce_on_cpu_has_no_network_hooks(tmp_path):
    s = spec(tmp_path, gpus=False)
    [path] = runtimes.get("ce").write_files(s)
    edf = tomllib.loads(path.read_text())
    assert "annotations" not in edf and "NCCL_NET" not in edf["env"]


def test_version_commands():
    assert runtimes.get("bare").version_command() is None
    assert runtimes.get("apptainer").version_command() == ["apptainer", "--version"]
    enroot = ["sh", "-c", 'v=$(enroot version) && echo "enroot $v"']  # named: enroot prints the number alone
    assert runtimes.get("pyxis").version_command() == enroot
    assert runtimes.get("ce").version_command() == enroot  # CE runs on enroot; nothing prints CE's own release
    assert runtimes.get("sarus-suite").version_command() == ["sarusctl", "--version"]
    assert runtimes.get("podman-hpc").version_command() == ["podman-hpc", "infohpc"]


def test_classic_sarus_reads_the_digest_of_its_image(tmp_path):
    """`sarus images --digests` is asked for the tag's digest (a listing of sarus's own format, given by a stand-in
    `sarus` on PATH); an image pinned by digest carries it in its reference."""
    fake = tmp_path / "sarus"
    fake.write_text("#!/bin/sh\necho 'REPOSITORY TAG DIGEST IMAGE-ID CREATED SIZE SERVER'\n"
                    "echo 'load/library/nb latest sha256:0a1b 0123 2026-12-01 10GB index.docker.io'\n"
                    "echo 'load/library/nb v2 sha256:ffff 4567 2026-12-02 10GB index.docker.io'\n")
    fake.chmod(0o755)
    sarus = runtimes.get("sarus")
    argv = sarus.id_command(LaunchSpec(command=("true",), image="load/library/nb:latest"))
    out = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert out.stdout.strip() == "sha256:0a1b"
    pinned = sarus.id_command(LaunchSpec(command=("true",), image="load/library/nb@sha256:beef"))
    assert subprocess.run(pinned, capture_output=True, text=True).stdout.strip() == "sha256:beef"
