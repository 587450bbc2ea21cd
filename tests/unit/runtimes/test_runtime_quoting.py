"""Hostile values (spaces, quotes, `$(...)`, backticks, newlines) stay literal: through bash, in every
runtime's rendered srun line, in #SBATCH lines and comments, and in the EDF's TOML.

The rendered script is executed by real bash with stand-ins for srun and scontrol on PATH that record
their arguments (Slurm itself is exercised in tests/integration/slurm); nothing hostile may run.

    python -m pytest tests/unit/runtimes -q
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import tomllib

import bench.runtimes as runtimes
from bench.errors import RuntimeConfigError
from bench.launch.job import LaunchOptions, Naming, assemble, write_job
from bench.launch.plan import Sweep
from bench.launch.render import render_sbatch
from bench.runtimes import LaunchSpec, Mount, Var, shell_join
from tests.support.stubs import write_stubs

HOSTILE = ["a b", "it's", 'say "hi"', "$(touch PWNED)", "`touch PWNED`", "x\ny", "${HOME}", "; touch PWNED #", "",
           "a\\b $'\\x41' \\n"]


def bash_words(text: str, env=None) -> list[str]:
    out = subprocess.run(["bash", "-c", f"printf '%s\\0' {text}"], capture_output=True, env=env, check=True)
    return out.stdout.decode().split("\0")[:-1]


def test_shell_join_round_trips_through_bash(tmp_path):
    assert bash_words(shell_join(HOSTILE)) == HOSTILE
    assert not (Path.cwd() / "PWNED").exists()


def test_a_command_shown_in_a_comment_pastes_as_it_runs():
    """A guide's comments show commands to paste (the salloc line, a shell on a node); their escaping doubled the
    backslashes of a $'...' token, and bash refused the pasted line. Control characters alone are escaped."""
    from bench.launch.render import comment_safe

    tokens = [t for t in HOSTILE if "\n" not in t] + ["caf\u00e9 $HOME"]
    assert bash_words(comment_safe(shell_join(tokens))) == tokens
    assert "\n" not in comment_safe(shell_join(HOSTILE))  # a newline does not end the comment


def test_var_tokens_expand_as_one_word():
    env = {**os.environ, "V": "two words; $(touch PWNED)"}
    assert bash_words(shell_join(["--x", Var("V", "--id="), Var("V")]), env) == \
        ["--x", "--id=two words; $(touch PWNED)", "two words; $(touch PWNED)"]


@pytest.mark.parametrize("name", [n for n in runtimes.names() if n not in ("bare",)])
def test_every_runtime_keeps_hostile_paths_literal(tmp_path, name):
    odd = tmp_path / "my runs" / "it's $(touch PWNED) `x`"
    image = {"ce": "/img/a b.sqsh", "pyxis": "/img/a b.sqsh", "apptainer": "/img/a b.sif"}.get(name, "localhost/nb:1")
    s = LaunchSpec(command=("python", "-c", "print('$(x)')", str(odd)), image=image, mounts=(Mount(str(odd)),),
                   env={"NANOCHAT_BENCH_RUN_DIR": str(odd)}, workdir=str(odd), run_dir=str(odd))
    rt = runtimes.get(name)
    rt.check(s)
    tokens = [*rt.srun_options(s), *rt.wrap(s)]
    assert bash_words(shell_join(tokens)) == tokens
    if name in ("ce", "sarus-suite"):
        [path] = rt.write_files(s)
        edf = tomllib.loads(path.read_text())
        assert edf["mounts"] == [f"{odd}:{odd}"] and edf["workdir"] == str(odd)


def test_edf_escapes_variable_syntax_in_paths(tmp_path):
    odd = tmp_path / "${HOME}"
    s = LaunchSpec(command=("true",), image="/img/a.sqsh", mounts=(Mount(str(odd)),), run_dir=str(tmp_path))
    [path] = runtimes.get("ce").write_files(s)
    escaped = str(odd).replace("${", "$${")  # CE's escape for a literal ${
    assert tomllib.loads(path.read_text())["mounts"] == [f"{escaped}:{escaped}"]


@pytest.mark.parametrize("name,bad", [("ce", "a:b"), ("pyxis", "a,b"), ("apptainer", "a:b"), ("sarus", "a,b"),
                                      ("podman", "a:b")])
def test_mount_separators_in_paths_are_refused(tmp_path, name, bad):
    s = LaunchSpec(command=("true",), image="x", mounts=(Mount(str(tmp_path / bad)),), run_dir=str(tmp_path))
    with pytest.raises(RuntimeConfigError, match="cannot mount"):
        runtimes.get(name).check(s)


# -- a whole rendered script, run by bash ------------------------------------------------------------

STUBS = {
    "scontrol": """#!/bin/bash
if [ "$2" = hostnames ]; then echo n1; echo n2; else echo "NodeName=n1 Arch=x86_64"; \
echo "   NodeAddr=10.9.8.7 NodeHostName=h1 Port=0"; fi
""",
    "srun": """#!/bin/bash
printf '%s\\0' "$@" > "$STUB_LOG"
env -0 > "$STUB_LOG.env"
""",
}


def run_rendered(tmp_path, runtime: str, sweep_dir: Path, job_name: str) -> tuple[Path, list[str], str]:
    stubs = write_stubs(tmp_path / "stubs", STUBS)
    sweep = Sweep([2], 2, [runtime], train={"depth": 2, "max_seq_len": 64, "device_batch_size": 2,
                                            "total_batch_size": 512, "device_type": "cpu"}, scaling="strong")
    opts = LaunchOptions(base_dir=str(sweep_dir / "base"), python="/opt/py thon/bin/python",
                         images={"podman": "localhost/nb:1"}, check_images=False)
    naming = Naming(job_name.replace("{", "{{").replace("}", "}}"), "title {run_id}")
    [job] = assemble(sweep, opts, sweep_dir, naming=naming)
    run = job.runs[0]
    text = render_sbatch(job)
    write_job(job, text)
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_CPUS_ON_NODE": "8", "STUB_LOG": str(tmp_path / "srun.args"), "HOME": str(tmp_path),
           "SLURMD_NODENAME": "n1"}  # the batch host, as slurmd sets it: the first node
    r = subprocess.run(["bash", str(job.script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return run.run_dir, (tmp_path / "srun.args").read_text().split("\0")[:-1], text


@pytest.mark.parametrize("runtime", ["bare", "podman"])
def test_rendered_script_with_hostile_paths_and_name_runs_the_intended_command(tmp_path, runtime):
    sweep_dir = tmp_path / "sw eep" / "it's $(touch PWNED)"
    if runtime == "bare":
        sweep_dir = sweep_dir / "new\nline `touch PWNED`"
    name = "job\n#SBATCH --wrap=touch PWNED $(id) 'q'"
    run_dir, argv, text = run_rendered(tmp_path, runtime, sweep_dir, name)
    assert not list(tmp_path.rglob("PWNED"))
    # The directives hold the name only in a cleaned form, and no line of the script was injected.
    assert [ln for ln in text.splitlines() if ln.startswith("#SBATCH")][1].startswith("#SBATCH --job-name=job__SBATCH")
    assert sum(ln.startswith("#SBATCH") for ln in text.splitlines()) == 7
    assert argv[:7] == ["-l", "-u", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--time=30",
                        "--cpus-per-task=8"]
    assert f"--rdzv_endpoint=10.9.8.7:{20000 + 4242 % 100 * 100}" in argv and "--rdzv_id=4242" in argv
    deadline = next(int(a.split("=")[1]) for a in argv if a.startswith("--deadline="))
    assert 0 < deadline - time.time() <= 30 * 60  # the run's own limit, less the margin to checkpoint
    if runtime == "bare":
        assert argv[7] == "/opt/py thon/bin/python"
    else:
        assert f"--volume={sweep_dir}:{sweep_dir}" in argv
    exported = dict(item.split("=", 1) for item in (tmp_path / "srun.args.env").read_text().split("\0") if item)
    assert exported["NANOCHAT_BENCH_RUNTIME"] == runtime
    assert exported["NANOCHAT_BENCH_RUN_DIR"] == str(run_dir)
    # run.json sits in the hostile directory, and the stand-in srun never started a trainer.
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "failed" and "never started" in manifest["message"]
    assert manifest["launch"]["t0"] > 0
    assert manifest["slurm"]["job_id"] == "4242" and manifest["launch"]["exit_code"] == 0
