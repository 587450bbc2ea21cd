"""Each runtime's image step (bench/runtimes/*, slurm/image-*.sh): which runtime gets which step, the step
scripts run by real bash (podman's with the real podman of this machine where it has one), the image made once
per sweep under its lock, the digest computed once per sweep, and `--env NAME=` unsetting NAME everywhere.

    python -m pytest tests/unit/runtimes/test_image_steps.py -q
"""

import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from bench import runtimes, sites
from bench.errors import ConfigError
from bench.launch import jobrecord
from bench.launch.job import LaunchOptions, assemble, interactive_minutes, write_job
from bench.launch.plan import DataShape, Sweep, allowance_minutes
from bench.launch.render import render_interactive, render_sbatch
from bench.runtimes import Var
from bench.runtimes.base import inner
from tests.support.stubs import write_stubs

REPO = Path(__file__).resolve().parents[3]
SLURM = REPO / "slurm"
CPU = {"device_type": "cpu", "depth": 2, "max_seq_len": 64, "device_batch_size": 2, "total_batch_size": 512}


def one_run(tmp_path, runtime, image=None, site=None, env=None, check_images=False, gpus=False):
    images = {runtime: image} if image else {}
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), images=images, check_images=check_images, site=site,
                         env=env or {})
    sweep = Sweep([2], 4 if gpus else 2, [runtime], train={} if gpus else CPU, scaling="weak" if gpus else "strong",
                  data=DataShape.from_counts(52, 250))
    [job] = assemble(sweep, opts, tmp_path / "sweep", note=lambda _: None)
    return job


def test_which_runtime_gets_which_step(tmp_path):
    sweep = tmp_path / "sweep"
    assert one_run(tmp_path, "bare").runs[0].image_step is None
    assert one_run(tmp_path, "ce", "/img/nb.sqsh").runs[0].image_step is None  # CE reads the file (or pulls itself)
    assert one_run(tmp_path, "pyxis", "/img/nb.sqsh").runs[0].image_step is None  # a file on the shared filesystem
    podman = one_run(tmp_path, "podman").runs[0]
    assert podman.image_step.per_node and podman.image_step.args == ("podman", "localhost/nanochat-bench:latest", "")
    assert podman.image_lines()[0][:2] == ["srun", "--nodes=2"]  # one task on every node of the run
    assert one_run(tmp_path, "podman-hpc").runs[0].image_step.args[0] == "podman-hpc"
    # a registry image for pyxis or apptainer: made into a file once per sweep, which the run then uses
    pyxis = one_run(tmp_path, "pyxis", "nvcr.io#nvidia/pytorch:25.10-py3").runs[0]
    sqsh = str(sweep / ".images" / "nvcr.io+nvidia+pytorch+25.10-py3.sqsh")
    assert pyxis.spec.image == sqsh and f"--container-image={sqsh}" in pyxis.runtime.srun_options(pyxis.spec)
    assert pyxis.image_step.args == ("enroot", sqsh, "nvcr.io#nvidia/pytorch:25.10-py3")
    assert not pyxis.image_step.per_node and pyxis.image_step.digest_file == sqsh
    assert pyxis.manifest["image"]["reference"] == "nvcr.io#nvidia/pytorch:25.10-py3"
    app = one_run(tmp_path, "apptainer", "docker://nvcr.io/nvidia/pytorch:25.10-py3").runs[0]
    assert app.spec.image.endswith("/.images/nvcr.io+nvidia+pytorch+25.10-py3.sif") and app.image_step.args[0] == "apptainer"
    suite = one_run(tmp_path, "sarus-suite").runs[0]
    assert suite.image_step.args[0] == "sarusctl" and suite.image_step.args[1].endswith(".migrated")


def test_the_per_node_image_step_asks_for_the_nodes_cpus(tmp_path):
    """The image step's srun (podman loading an archive on every node) had no -c, so Slurm 22.05 to 23.02, which
    does not pass the job's CPUs on to a step, gave its task one CPU to unpack the image. It asks for the node's
    CPUs as the training srun does, after the batch script and the guide have set them."""
    for name in ("podman", "podman-hpc"):
        job = one_run(tmp_path / name, name)
        assert job.runs[0].image_lines()[0][-1] == Var("cpus_per_node", "--cpus-per-task=")
        batch = render_sbatch(job)
        job.script_name = "interactive.sh"
        for script in (batch, render_interactive(job, str(tmp_path / "base"), 8)):
            step = next(line for line in script.splitlines() if "srun --nodes=2 --ntasks-per-node=1" in line
                        and "--time=10" in line)
            assert '--cpus-per-task="${cpus_per_node}"' in step, step
            assert script.index("\ncpus_per_node=") < script.index(step)


def test_podman_step_reports_a_missing_image_by_node(tmp_path):
    """The real podman of this machine (tests/run installs it): an image no store holds stops the step with the
    one line the run's message becomes."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (tests/run installs it)")
    r = subprocess.run(["bash", str(SLURM / "image-podman.sh"), "podman", "localhost/nanochat-bench:no-such-tag", ""],
                       env={**os.environ, "SLURMD_NODENAME": "nid001"}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stdout.strip().splitlines()[-1].startswith(
        "nanochat-bench: node nid001: image localhost/nanochat-bench:no-such-tag is not in this node's podman storage")
    r = subprocess.run(["bash", str(SLURM / "image-podman.sh"), "podman", "localhost/nanochat-bench:no-such-tag",
                        str(tmp_path / "missing.tar")], env={**os.environ, "SLURMD_NODENAME": "nid002"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "nanochat-bench: node nid002: image localhost/nanochat-bench:no-such-tag: podman " \
        f"load -i {tmp_path / 'missing.tar'} failed" in r.stdout


# podman-hpc's listing, the image looked for on its first line and a long listing after it, written line by line
PODMAN_HPC_LISTING = """#!/bin/bash
echo "localhost/nanochat-bench:latest"
sleep 0.2
for i in $(seq 200); do echo "registry.example/team/other-$i:v1"; done
"""


def test_podman_hpc_step_finds_the_image_on_the_first_line_of_a_long_listing(tmp_path):
    """The listing went into `grep -q` under pipefail: grep ended at the match, podman-hpc's next line met a closed
    pipe (SIGPIPE) and the pipeline failed, so an image in the squash store was reported as missing."""
    stubs = write_stubs(tmp_path / "stubs", (("podman-hpc", PODMAN_HPC_LISTING),))
    r = subprocess.run(["bash", str(SLURM / "image-podman.sh"), "podman-hpc", "nanochat-bench:latest"],
                       env={**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "SLURMD_NODENAME": "nid001"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "node nid001: image nanochat-bench:latest is in the squash store" in r.stdout


def test_a_sweep_image_is_made_once_while_other_jobs_wait(tmp_path):
    """Three jobs start the once-per-sweep step together: one imports, the others wait on the lock and use
    its file. enroot is not installed here: a stand-in on PATH writes the file slowly and counts its calls."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "enroot").write_text('#!/bin/bash\necho call >> "$CALLS"\nsleep 1\necho sqsh > "$3"\n')
    (bindir / "enroot").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls")}
    product = tmp_path / "sweep" / ".images" / "nb.sqsh"
    procs = [subprocess.Popen(["bash", str(SLURM / "image-once.sh"), "enroot", str(product), "nvcr.io#nb:1"], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert (tmp_path / "calls").read_text().count("call") == 1 and product.read_text() == "sqsh\n"
    assert sum("made once for this sweep" in o for o in outs) == 2 and not product.with_name("nb.sqsh.part").exists()
    # a failing import leaves no file the next job would take for the image, and names the node and image
    (bindir / "enroot").write_text('#!/bin/bash\necho "[ERROR] 401 Unauthorized" >&2\necho x > "$3"\nexit 1\n')
    other = tmp_path / "sweep" / ".images" / "other.sqsh"
    r = subprocess.run(["bash", str(SLURM / "image-once.sh"), "enroot", str(other), "nvcr.io#other:1"],
                       env={**env, "SLURMD_NODENAME": "nid007"}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and not other.exists() and not other.with_name("other.sqsh.part").exists()
    assert r.stdout.strip() == (f"nanochat-bench: node nid007: image nvcr.io#other:1: enroot import into {other} "
                                "failed (see its lines above)")


def test_the_image_digest_is_computed_once_per_sweep(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    image = tmp_path / "nb.sqsh"
    image.write_bytes(b"squashfs" * 1000)
    run_dir = sweep / "n1-pyxis-r1"
    run_dir.mkdir(parents=True)
    jobrecord.image(str(run_dir), "--ready", "--step", "an import", "--file", str(image))
    record = json.loads((run_dir / "run.json").read_text())
    import hashlib
    assert record["image"]["digest"] == "sha256:" + hashlib.sha256(image.read_bytes()).hexdigest()
    assert record["image"]["file"] == str(image) and record["launch"]["image_step"] == "an import"
    assert record["launch"]["image_ready_at"] > 0
    # the sweep's next run reads the digest kept in <sweep>/.images/, without reading the image again
    calls = []
    real = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *a: calls.append(a) or real(*a))
    other = sweep / "n2-pyxis-r1"
    other.mkdir()
    jobrecord.image(str(other), "--file", str(image))
    assert json.loads((other / "run.json").read_text())["image"]["digest"] == record["image"]["digest"]
    assert len(calls) == 1  # the cache key only, not the image's bytes
    image.write_bytes(b"rebuilt")  # a rewritten image is hashed again
    os.utime(image, ns=(1, 1))
    jobrecord.image(str(other), "--file", str(image))
    assert json.loads((other / "run.json").read_text())["image"]["digest"] == \
        "sha256:" + real(b"rebuilt").hexdigest()


def test_an_empty_env_value_unsets_the_variable_under_every_runtime(tmp_path):
    """--env NAME= means unset in every runtime, as CE's EDF reads it: no runtime passes it, each starts the
    command under `env -u NAME`, and the command then does not see a value the host (or image) had."""
    for name in runtimes.names():
        job = one_run(tmp_path / name, name, env={"FOO_OFF": "", "FOO_ON": "1"})
        run = job.runs[0]
        assert run.spec.unset == ("FOO_OFF",) and "FOO_OFF" not in run.spec.env and run.spec.env["FOO_ON"] == "1"
        wrapped = run.runtime.wrap(run.spec)
        n = len(run.spec.command)
        assert wrapped[len(wrapped) - n - 3:len(wrapped) - n] == ["env", "-u", "FOO_OFF"], name
        if hasattr(run.runtime, "edf_text"):
            assert "FOO_OFF" not in tomllib.loads(run.runtime.edf_text(run.spec))["env"]
    spec = replace(run.spec, command=(sys.executable, "-c", "import os; print(os.environ.get('FOO_OFF'))"))
    out = subprocess.run(inner(spec), env={**os.environ, "FOO_OFF": "from the host"}, capture_output=True, text=True)
    assert out.stdout.strip() == "None"


def test_the_interactive_salloc_covers_its_own_steps(tmp_path):
    job = one_run(tmp_path, "ce", "/img/nb.sqsh", gpus=True)
    job.script_name = "interactive.sh"
    few, many = interactive_minutes(job, 8), interactive_minutes(job, 240)
    runs = sum(r.time_minutes + 1 for r in job.runs)
    assert few > runs and many > few  # more shards to download and read: more time
    # 240 shards of ~100 MB at 20 MB/s, and the tokenizer's 2e9 characters at 2M/s, each given time as a run is
    assert many == allowance_minutes(240 * 100 / 20 / 3600) + allowance_minutes(2e9 / 2e6 / 3600) + runs
    text = render_interactive(job, str(tmp_path / "base"), 240)
    salloc = next(line for line in text.splitlines() if line.lstrip("# ").startswith("salloc --"))
    assert f"--time={many // 60:02d}:{many % 60:02d}:00" in salloc, salloc
    assert f"allocate nodes for {many} minutes" in text


def test_the_interactive_salloc_covers_the_image_step_before_the_data(tmp_path):
    """The guide puts the run's image in place before its data and tokenizer steps (podman on every node), but its
    salloc gave that step no time: only the training block's own image step was counted."""
    from bench.launch.job import IMAGE_STEP_MINUTES, job_minutes

    job = one_run(tmp_path, "podman")
    job.script_name = "interactive.sh"
    download, tokenizer = allowance_minutes(240 * 100 / 20 / 3600), allowance_minutes(2e9 / 2e6 / 3600)
    assert interactive_minutes(job, 240) == download + tokenizer + IMAGE_STEP_MINUTES + job_minutes(job.runs)


def test_site_image_archive(tmp_path):
    site = tmp_path / "s.toml"
    site.write_text('name = "s"\nnetwork = "ethernet"\n[images.podman]\narchive = "/none/nb.tar"\n')
    loaded = sites.load(str(site))
    assert loaded.image_archives == {"podman": "/none/nb.tar"}
    with pytest.raises(ConfigError, match=r"image archive '/none/nb.tar' \(\[images.podman\] archive"):
        one_run(tmp_path, "podman", site=loaded, check_images=True, image=None)
    site.write_text('name = "s"\nnetwork = "ethernet"\n[images.pyxis]\narchive = "/none/nb.tar"\n')
    with pytest.raises(ConfigError, match="images.pyxis: only podman load an image archive"):
        sites.load(str(site))
    site.write_text('name = "s"\nnetwork = "ethernet"\n[images.nope]\narchive = "/none/nb.tar"\n')
    with pytest.raises(ConfigError, match=rf"images.nope is not a runtime; valid: {', '.join(runtimes.names())}$"):
        sites.load(str(site))  # not "only podman load an image archive", as if nope were a runtime that does not
    archive = tmp_path / "nb.tar"
    archive.write_bytes(b"")  # an interrupted `podman save`: every node's load would fail inside the job
    site.write_text(f'name = "s"\nnetwork = "ethernet"\n[images.podman]\narchive = "{archive}"\n')
    with pytest.raises(ConfigError, match=r"image archive '.*nb.tar' .* is empty \(0 bytes\)"):
        one_run(tmp_path, "podman", site=sites.load(str(site)), check_images=True, image=None)
    archive.write_bytes(b"x")
    job = one_run(tmp_path, "podman", site=sites.load(str(site)), check_images=False)
    assert job.runs[0].image_step.args[2] == str(archive)


def saved_archive(path: Path, member: str, content) -> Path:
    """An uncompressed tar laid out as `podman save` writes one (a layer, then the file naming the images)."""
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for name, data in (("layer.tar", bytes(4096)), (member, json.dumps(content).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_site_archive_not_holding_the_runs_image_is_not_loaded(tmp_path, capsys):
    """alps' archive holds nanochat-bench's image: an nntile sweep's --image podman=... made every node lacking that
    image load the archive (GBs), then stop for want of the image; now it is named in a note and left out. The
    archive's files are made here as `podman save` lays them out (docker-archive, oci-archive)."""
    archive = saved_archive(tmp_path / "nb.tar", "manifest.json",
                            [{"Config": "c.json", "RepoTags": ["localhost/nanochat-bench:latest"], "Layers": []}])
    site = tmp_path / "s.toml"
    site.write_text(f'name = "s"\nnetwork = "ethernet"\n[images.podman]\narchive = "{archive}"\n')
    loaded = sites.load(str(site))
    for image, kept in ((None, True), ("nanochat-bench", True), ("docker.io/x/nntile:1", False),
                        ("localhost/nanochat-bench:v2", False)):
        step = one_run(tmp_path, "podman", site=loaded, check_images=True, image=image).runs[0].image_step
        assert (step.args[2] == str(archive)) == kept and (step.args[2] == "") != kept, image
        out = capsys.readouterr().out
        assert (f"does not hold {image}: the nodes load nothing from it" in out) != kept, out
    # an OCI archive whose ref name is a tag alone does not say which image: kept, as an unreadable one is
    saved_archive(archive, "index.json", {"manifests": [{"annotations": {"org.opencontainers.image.ref.name": "1"}}]})
    assert one_run(tmp_path, "podman", site=loaded, check_images=True, image="x/nntile:2").runs[0].image_step.args[2]


def test_a_missing_site_archive_says_the_path_looked_for_or_the_unset_variable(tmp_path, monkeypatch):
    """alps' archive is ${SCRATCH}/images/...: the error quoted that template alone, not the file looked for, and
    with SCRATCH unset said the file did not exist, where an image's check names the unset variable."""
    site = tmp_path / "s.toml"
    site.write_text('name = "s"\nnetwork = "ethernet"\n[images.podman]\narchive = "${SCRATCH}/images/nb.tar"\n')
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    with pytest.raises(ConfigError) as e:
        one_run(tmp_path, "podman", site=sites.load(str(site)), check_images=True)
    looked_for = str(tmp_path / "scratch" / "images" / "nb.tar")
    assert f"image archive '{looked_for}' ('${{SCRATCH}}/images/nb.tar', [images.podman] archive in site profile " \
           f"{site}) does not exist" in str(e.value)
    monkeypatch.delenv("SCRATCH")
    with pytest.raises(ConfigError) as e:
        one_run(tmp_path, "podman", site=sites.load(str(site)), check_images=True)
    assert "image archive '${SCRATCH}/images/nb.tar' ([images.podman] archive in site profile" in str(e.value)
    assert "names the unset variable(s) SCRATCH; set them or change the profile" in str(e.value)


def test_a_site_archive_named_by_a_variable_is_rendered_with_its_value_on_a_dry_run(tmp_path, monkeypatch):
    """alps' archive is ${SCRATCH}/images/...: the job quotes the path it is given, so a dry run (images not
    checked) that kept the reference would load the literal '${SCRATCH}/...' on every node."""
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    site = tmp_path / "s.toml"
    site.write_text('name = "s"\nnetwork = "ethernet"\n[images.podman]\narchive = "${SCRATCH}/nb.tar"\n')
    job = one_run(tmp_path, "podman", site=sites.load(str(site)), check_images=False)
    assert job.runs[0].image_step.args[2] == str(tmp_path / "scratch" / "nb.tar")
    assert "${SCRATCH}" not in render_sbatch(job)
    write_job(job, render_sbatch(job), manifests=False)
    assert (job.lib_dir / "image-podman.sh").read_text() == (SLURM / "image-podman.sh").read_text()
