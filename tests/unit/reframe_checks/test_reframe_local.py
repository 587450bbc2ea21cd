"""Real ReFrame on this machine: the check through ReFrame's `local` scheduler, its job script run with stand-ins
for srun and scontrol (one task, here), training the tiny model on 2 CPU ranks in seconds.

    python -m pytest tests/unit/reframe_checks/test_reframe_local.py -q
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.commands.reframe import reframe_command
from bench.reframe_checks.checks import ENVIRON_FEATURE
from tests.support.stubs import write_stubs

REPO = Path(__file__).resolve().parents[3]
TINY = ["-n", "%scaling=strong", "-S", "depth=2",
        "-S", "train_args=max_seq_len=64,device_batch_size=2,num_iterations=13,total_batch_size=512,eval_every=-1"]
STUBS = (("scontrol", '#!/bin/bash\n[ "$2" = hostnames ] && echo localhost || echo " NodeAddr=127.0.0.1"\n'),
         ("srun", '#!/bin/bash\nwhile [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done\nexec "$@"\n'))


def local_config(path: Path, base_dir: Path, **partition) -> Path:
    """A one-partition system on this host: scheduler and launcher local, 2 CPU ranks, runtime bare."""
    extras = {"gpus_per_node": 2, "train": ["device_type=cpu"], "exclusive": False, "numa_binding": "none",
              "base_dir": str(base_dir)}
    part = {"name": "cpu", "scheduler": "local", "launcher": "local", "environs": ["nanochat-bench"],
            "features": ["bare"], "extras": {"nanochat_bench": extras}, **partition}
    config = {"systems": [{"name": "here", "hostnames": [".*"], "partitions": [part]}],
              "environments": [{"name": "nanochat-bench", "features": [ENVIRON_FEATURE]}]}
    path.write_text(f"site_configuration = {config!r}\n")
    return path


def reframe(cwd: Path, config: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """reframe -r in `cwd`; its output and its report's one test case."""
    r, [case] = reframe_cases(cwd, config, *args)
    return r, case


def reframe_cases(cwd: Path, config: Path, *args: str, action: str = "-r") -> tuple[subprocess.CompletedProcess,
                                                                                      list[dict]]:
    """reframe -r (or `action`: --dry-run) in `cwd`; its output and its report's test cases."""
    found = shutil.which("reframe", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert found, "reframe is missing: pip install -e '.[test]' installs reframe-hpc"
    stubs = cwd / "stubs" if (cwd / "stubs").is_dir() else write_stubs(cwd / "stubs", STUBS)
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "localhost", "SLURMD_NODENAME": "localhost",
           "SLURM_CPUS_ON_NODE": "2"}
    env.pop("NANOCHAT_BENCH_REFERENCES", None)
    _, *command = reframe_command(str(config), [*args, "--report-file=report.json", action])  # as the CLI runs it
    r = subprocess.run([found, *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return r, [c for run in json.loads((cwd / "report.json").read_text())["runs"] for c in run["testcases"]]


def test_the_perflog_and_report_name_the_run_directory_reframe_keeps(tiny_base_dir, tmp_path):
    """A passing case's stage directory is removed after its performance is logged: run_dir named that copy,
    gone, instead of the one kept in the output directory."""
    r, case = reframe(tmp_path, local_config(tmp_path / "site.py", tiny_base_dir), *TINY)
    assert case["result"] == "pass", r.stdout[-4000:]
    run_dir = Path(case["run_dir"])
    assert run_dir.is_relative_to(case["outputdir"]) and (run_dir / "run.json").is_file()
    [line] = (tmp_path / "perflogs" / "here" / "cpu" / "nanochat_bench.log").read_text().splitlines()[1:]
    assert f"|{run_dir}|" in line


def test_a_job_that_never_began_the_run_fails_sanity_saying_so_and_settles_the_run(tiny_base_dir, tmp_path):
    """A batch script that stops before the run begins (the partition's set-up fails, no Python on the node) left
    run.json pending: sanity said "status is 'pending': no message", and collect kept it pending for ever."""
    config = local_config(tmp_path / "site.py", tiny_base_dir, prepare_cmds=["echo no scratch here >&2; exit 3"])
    r, case = reframe(tmp_path, config, *TINY)
    assert (case["result"], case["fail_phase"]) == ("fail", "sanity"), r.stdout[-4000:]
    assert case["fail_reason"] == ("sanity error: run.json status is 'failed': the trainer never started "
                                   "(ReFrame's job exit code 3)")
    assert "no scratch here" in r.stdout  # ReFrame's own tail of the job's stderr says why
    run_json = json.loads((Path(case["run_dir"]) / "run.json").read_text())
    assert run_json["status"] == "failed" and run_json["evidence"][-1]["exit_code"] == 3


def test_a_references_file_that_cannot_be_read_stops_the_case_before_its_run(tiny_base_dir, tmp_path):
    """A mistyped references path was met in the performance stage, after the whole run, and its error named
    `check`'s --references; now setup refuses it, naming where the check took it from."""
    r, case = reframe(tmp_path, local_config(tmp_path / "site.py", tiny_base_dir), *TINY,
                      "-S", f"references={tmp_path / 'refs.tmol'}")
    assert (case["result"], case["fail_phase"]) == ("fail", "setup"), r.stdout[-4000:]
    assert case["fail_reason"] == (f"config error: -S references (or $NANOCHAT_BENCH_REFERENCES) "
                                   f"{tmp_path / 'refs.tmol'}: no such file")
    config = local_config(tmp_path / "site.py", tiny_base_dir)
    text = config.read_text().replace("'numa_binding': 'none'", "'numa_binding': 'none', 'references': '/nowhere.toml'")
    config.write_text(text)
    r, case = reframe(tmp_path, config, *TINY)
    assert case["fail_reason"] == "config error: extras['nanochat_bench'].references /nowhere.toml: no such file"
    assert not list((tmp_path / "stage").rglob("train.log"))  # nothing ran


def test_a_bad_value_of_a_checks_variable_is_refused_naming_the_variable(tiny_base_dir, tmp_path):
    """-S train_args=... and -S depth=... reach the shared planner, whose errors named submit's --train-arg and
    the trainer's --depth: a ReFrame user was told of flags they never gave."""
    config = local_config(tmp_path / "site.py", tiny_base_dir)
    r, case = reframe(tmp_path, config, "-n", "%scaling=strong", "-S", "train_args=max_seq_len=64,warmdown")
    assert (case["result"], case["fail_phase"]) == ("fail", "setup"), r.stdout[-4000:]
    assert case["fail_reason"] == ("config error: -S train_args='warmdown' is not KEY=VALUE "
                                   "(e.g. -S train_args=eval_every=100)")
    r, case = reframe(tmp_path, config, "-n", "%scaling=strong", "-S", "depth=0")
    assert case["fail_reason"] == "config error: depth=0: must be at least 1 (-S depth=N, or -P depth=N,M for several)"


def test_a_rerun_into_the_same_output_directory_keeps_the_run_directories_the_first_kept(tiny_base_dir, tmp_path):
    """ReFrame empties a case's output directory at its setup: a second run with the same -o replaced the run
    directory the first kept. Each run now has its own time-stamped output directory."""
    config = local_config(tmp_path / "site.py", tiny_base_dir)
    kept = []
    for _ in range(2):
        r, case = reframe(tmp_path, config, *TINY, "-o", str(tmp_path / "out"))
        assert case["result"] == "pass", r.stdout[-4000:]
        kept.append(Path(case["run_dir"]))
    assert kept[0] != kept[1] and all((d / "run.json").is_file() for d in kept)
    assert sorted(p.parent for p in (tmp_path / "out").rglob("run.json")) == sorted(kept)


def test_an_evaluation_runs_once_not_under_each_scaling_mode(tiny_base_dir, tmp_path):
    """An evaluation trains no batch, so its weak and strong cases planned the same run and -P workload=base_eval
    ran CORE twice at full cost; its weak case is skipped, a training stage's both run."""
    r, cases = reframe_cases(tmp_path, local_config(tmp_path / "site.py", tiny_base_dir), "-P",
                             "workload=base_eval,mid_train", action="--dry-run")
    results = {(c["workload"], c["scaling"]): c["result"] for c in cases}
    assert results == {("base_eval", "weak"): "skip", ("base_eval", "strong"): "pass",
                       ("mid_train", "weak"): "pass", ("mid_train", "strong"): "pass"}, r.stdout[-4000:]
