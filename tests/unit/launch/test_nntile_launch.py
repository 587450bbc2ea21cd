"""The nntile workload under Slurm: every runtime's batch script runs NNTile's runner (no torchrun),
with StarPU's variables passed the runtime's way, and a manifest of the NNTile run. Checked as text
(and by shellcheck): no GPU here, and the NNTile image cannot be pulled.

    python -m pytest tests/unit/launch/test_nntile_launch.py -q
"""

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import bench.runtimes as runtimes
from bench.errors import ConfigError
from bench.launch.job import LaunchOptions, build_run, make_job
from bench.launch.plan import Sweep
from bench.launch.render import render_interactive, render_sbatch
from bench.workloads import nntile

SWEEP_DIR = Path("/scratch/nb/sweeps/nntile")
OPTS = LaunchOptions(base_dir="/scratch/nb/cache", python="/scratch/nb/nntile-venv/bin/python",
                     images={"ce": "/scratch/nb/images/nntile.sqsh", "pyxis": "/scratch/nb/images/nntile.sqsh",
                             "apptainer": "/scratch/nb/images/nntile.sif"}, check_images=False)


@pytest.fixture
def train(tmp_path):
    config = tmp_path / "gpt2.json"
    config.write_text(json.dumps({"n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
                                  "vocab_size": 50257}))
    return {"config-path": str(config), "batch": "32", "minibatch": "8", "seq-tile": "256", "restrict": "cuda"}


def staged_base(tmp_path) -> Path:
    """A base directory holding the token file the runs read (submit refuses a sweep without it)."""
    base = tmp_path / "base"
    (base / "base_data_bin").mkdir(parents=True, exist_ok=True)
    (base / "base_data_bin" / "train.bin").write_bytes(bytes(2 * 40_000))
    return base


def job_for(names, train, nodes=1):
    sweep = Sweep([nodes], 4, names, train=train, workload="nntile")
    runs = [build_run(sweep, p, SWEEP_DIR / p.run_id, OPTS, SWEEP_DIR.name) for p in sweep.points()]
    return make_job("nntile", runs[0].run_dir, sweep, runs, OPTS, "nntile")


@pytest.mark.parametrize("name", runtimes.names())
def test_every_runtime_runs_the_nntile_runner(name, train):
    job = job_for([name], train)
    text = render_sbatch(job)
    run = job.runs[0]
    assert "torch.distributed.run" not in text
    flags = "--batch=32 --config-path=" + train["config-path"] + " --minibatch=8 --restrict=cuda --seq-tile=256"
    if run.runtime.python is None:  # bare: the host's NNTile interpreter runs the runner by its path
        assert f"{OPTS.python} {nntile.RUNNER} {flags}" in text
    else:  # in the image nanochat-bench is installed in the NNTile Python
        assert f"{run.runtime.python} -m bench.workloads.nntile.runner {flags}" in text
    assert "export STARPU_HOME=/scratch/nb/cache/starpu" in text and "export STARPU_NCUDA=4" in text
    assert run.spec.env["STARPU_SILENT"] == "1"  # reaches containers by the runtime's own mechanism
    assert run.manifest["workload"] == "nntile-gpt2" and run.manifest["config"]["seq_tile"] == 256
    assert run.manifest["config"]["total_batch_size"] == 32 * 1024


def test_its_files_are_named_as_the_job_reads_them_and_bound_into_its_container(train, tmp_path, monkeypatch):
    """A relative --config-path was passed on as written and read by the job from its run directory; a container saw
    neither the config's folder nor --dataset-path's unless the user mounted them."""
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    given = {**train, "config-path": "gpt2.json", "dataset-path": "data"}
    for name in ("bare", "podman", "ce"):
        run = job_for([name], given).runs[0]
        assert f"--config-path={tmp_path / 'gpt2.json'}" in run.spec.command
        assert f"--dataset-path={tmp_path / 'data'}" in run.spec.command
        bound = [(m.src, m.target, m.readonly) for m in run.spec.mounts if m.src.startswith(str(tmp_path))]
        assert bound == ([] if name == "bare" else [(str(tmp_path), str(tmp_path), True),
                                                    (str(tmp_path / "data"), str(tmp_path / "data"), True)])
    # a file under a folder the job binds anyway is not bound twice
    sweep = Sweep([1], 4, ["podman"], train=train, workload="nntile")
    [point] = sweep.points()
    opts = replace(OPTS, base_dir=str(tmp_path))
    assert [m.src for m in build_run(sweep, point, SWEEP_DIR / point.run_id, opts, "s").spec.mounts] == \
        [str(SWEEP_DIR), str(tmp_path)]


def test_pyxis_passes_starpus_variables_into_the_container(train):
    text = render_sbatch(job_for(["pyxis"], train))
    env_line = next(line for line in text.splitlines() if "--container-env=" in line)
    assert all(v in env_line for v in ("STARPU_HOME", "STARPU_SILENT", "STARPU_NCUDA", "OPENBLAS_NUM_THREADS"))


def test_a_cpu_run_is_planned_as_one_process_without_gpus(train, capsys):
    """--restrict=cpu with --gpus-per-node 4 was planned as 4 ranks and run with STARPU_NCUDA=4, while the runner used
    no GPU and recorded world_size 1: plan, script and run.json now agree on one CPU process."""
    from bench.cli import main

    job = job_for(["bare"], {**train, "restrict": "cpu"})
    run, text = job.runs[0], render_sbatch(job)
    assert "export STARPU_NCUDA=0" in text and "--gpus-per-node" not in text
    assert (run.manifest["world_size"], run.manifest["gpus_per_node"]) == (1, 0)
    gpu = job_for(["bare"], train)
    assert "export STARPU_NCUDA=4" in render_sbatch(gpu) and "#SBATCH --gpus-per-node=4" in render_sbatch(gpu)
    assert (gpu.runs[0].manifest["world_size"], gpu.runs[0].manifest["gpus_per_node"]) == (4, 4)
    assert main(["plan", "--workload", "nntile", "--gpus-per-node", "4", "--train-arg", "restrict=cpu"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:4] == ["1", "bare", "1", "1"]  # nodes, runtime, repeats, ranks


def test_compare_and_interactive_render_for_nntile(train, tmp_path):
    job = job_for(["bare", "pyxis"], train)
    assert render_sbatch(job, "submit --compare").count("bench.workloads.nntile.runner") == 1  # pyxis; bare by path
    single = job_for(["ce"], train)
    single.script_name = "interactive.sh"
    assert "-m bench.workloads.nntile.runner" in render_interactive(single, OPTS.base_dir, 8)
    found = shutil.which("shellcheck")
    if found:
        script = tmp_path / "job.sbatch"
        script.write_text(render_sbatch(job))
        # no torchrun, so no rendezvous endpoint or port check in the script either
        assert "rdzv_endpoint" not in render_sbatch(job) and "rdzvport" not in render_sbatch(job)
        r = subprocess.run([found, "--severity=style", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout


def test_nntile_flags_are_checked_at_planning(train):
    with pytest.raises(ConfigError, match="--seq-tile=300 does not divide n_positions=1024"):
        Sweep([1], 4, ["bare"], train={**train, "seq-tile": "300"}, workload="nntile")
    with pytest.raises(ConfigError, match="unknown argument"):
        Sweep([1], 4, ["bare"], train={**train, "depth": "20"}, workload="nntile")


def test_an_unknown_train_arg_key_is_named_as_given_with_the_valid_keys(train, capsys):
    """`--train-arg bogus=1` was refused as "'--bogus=1' ...; see --help for the valid flags": a flag the user never
    wrote, and a help that lists train's flags, not the keys --train-arg takes. nanochat's workloads say the same."""
    from bench.cli import main

    assert main(["plan", "--workload", "nntile", "--train-arg", "bogus=1", "--train-arg", "batc=2"]) != 0
    err = capsys.readouterr().err
    assert "nntile: unknown argument(s): batc=2 (did you mean batch?); " in err
    assert "; bogus=1; valid keys (--train-arg KEY=VALUE): config_path, batch, minibatch, " in err
    assert "--help" not in err
    Sweep([1], 4, ["bare"], train={**train, "num_batches": "2"}, workload="nntile")  # a known key, either spelling
    assert main(["plan", "--train-arg", "bogus=1", "--train-arg", "num_iteration=3"]) != 0
    assert capsys.readouterr().err.startswith("error: nanochat: unknown argument(s): bogus=1; num_iteration=3 (did you "
                                              "mean num_iterations?); ")


def test_nanochats_depth_given_to_nntile_says_where_nntile_takes_the_model_shape(capsys):
    """`plan --workload nntile --depth 4` was answered 'depth=4 (did you mean dataset_path, nepochs?)': names half
    alike passed as close, and nothing said that NNTile's depth is n_layer in the JSON of config_path."""
    from bench.cli import main

    assert main(["plan", "--workload", "nntile", "--depth", "4"]) != 0
    err = capsys.readouterr().err
    assert "nntile: unknown argument(s): depth=4 (NNTile takes the model's shape from the GPT-2 JSON of " \
           "--train-arg config_path=FILE: depth is its n_layer); valid keys" in err
    assert "did you mean" not in err


def test_nntile_is_refused_on_two_nodes(train):
    with pytest.raises(ConfigError, match="one node"):
        job_for(["bare"], train, nodes=2)


def test_plan_shows_the_nntile_flags_not_nanochats_arithmetic(train):
    from bench.launch.plan import format_table

    text = format_table(Sweep([1], 4, ["bare"], train=train, workload="nntile"))
    assert "workload: nntile --batch=32" in text and "depth=" not in text
    assert "no estimate for nntile" in text


def test_the_plan_marks_an_nntile_point_on_two_nodes_impossible_as_submit_treats_it(train):
    """`plan --workload nntile --nodes 1,2` counted the 2-node point as a run and its node-hours, and submit then
    refused the whole sweep at its launch command: the plan must say what submit will do."""
    from bench.launch.job import assemble
    from bench.launch.plan import format_table

    sweep = Sweep([1, 2], 4, ["bare"], train=train, workload="nntile")
    one, two = sweep.points()
    assert one.possible and not two.possible and "one node" in two.reason
    assert "1 runs" in format_table(sweep)
    notes = []
    [job] = assemble(sweep, OPTS, SWEEP_DIR, note=notes.append)
    assert job.runs[0].run_id == "n1-bare-r1" and any("skipping n2-bare-r1" in n for n in notes)


def test_the_bare_runtime_runs_the_nntile_interpreter_when_no_python_is_given(train, tmp_path, monkeypatch):
    """submit and render without --python ran the runner with the planning Python, which has no torch-nntile:
    the job failed on the node. Now the bare runtime takes the interpreter `train` takes; the bookkeeping and
    the interactive guide's data steps keep this Python, and a given --python is kept as it is."""
    nntile_python = tmp_path / "nntile-venv" / "bin" / "python"
    nntile_python.parent.mkdir(parents=True)
    nntile_python.write_text("#!/bin/sh\n")
    nntile_python.chmod(0o755)
    monkeypatch.setenv(nntile.ENV_PYTHON, str(nntile_python))
    opts = replace(OPTS, python=None)
    sweep = Sweep([1], 4, ["bare"], train=train, workload="nntile")
    [point] = sweep.points()
    run = build_run(sweep, point, SWEEP_DIR / point.run_id, opts, SWEEP_DIR.name)
    assert run.spec.command[:2] == (str(nntile_python), str(nntile.RUNNER))
    job = make_job("nntile", run.run_dir, sweep, [run], opts, "nntile")
    assert job.python == sys.executable
    job.script_name = "interactive.sh"
    guide = render_interactive(job, opts.base_dir, 8)
    assert f"{sys.executable} -m bench.cli data download" in guide and f"{nntile_python} {nntile.RUNNER}" in guide
    given = build_run(sweep, point, SWEEP_DIR / point.run_id, OPTS, SWEEP_DIR.name)
    assert given.spec.command[0] == OPTS.python


def test_no_nntile_interpreter_for_the_bare_runtime_is_refused_naming_how_to_make_one(train, tmp_path, monkeypatch):
    monkeypatch.delenv(nntile.ENV_PYTHON, raising=False)
    monkeypatch.setenv(nntile.ENV_VENV, str(tmp_path / "no-venv"))
    sweep = Sweep([1], 4, ["bare"], train=train, workload="nntile")
    [point] = sweep.points()
    with pytest.raises(ConfigError, match=r"no NNTile environment at .*no-venv.*env\.sh.*--python"):
        build_run(sweep, point, SWEEP_DIR / point.run_id, replace(OPTS, python=None), SWEEP_DIR.name)


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["render", "compare"]])
def test_a_container_runtime_without_an_nntile_image_is_refused_before_anything_is_written(command, train, tmp_path,
                                                                                            capsys):
    """Without --image the runtimes' defaults are nanochat-bench's image, which has no torch-nntile: every run was
    submitted and failed on its node. Now each container runtime of --runtimes needs one; bare needs none."""
    from bench import cli

    out = tmp_path / "sweep"
    flags = [*command, "--workload", "nntile", "--nodes", "1", "--out", str(out), "--train-arg", "batch=32",
             "--train-arg", f"config-path={train['config-path']}", "--python", sys.executable,
             "--base-dir", str(staged_base(tmp_path))]
    sqsh = tmp_path / "nntile.sqsh"
    sqsh.write_bytes(b"hsqs")
    assert cli.main([*flags, "--runtimes", "bare,pyxis,sarus", "--image", f"pyxis={sqsh}"]) == 1
    err = capsys.readouterr().err
    assert "nanochat-bench's default images cannot run it (sarus: load/library/nanochat-bench:latest)" in err
    assert "containers/nntile.Containerfile" in err and "--image sarus=REF" in err and "pyxis=REF" not in err
    assert not out.exists()
    assert cli.main([*flags, "--runtimes", "bare,pyxis,sarus", "--image", f"pyxis={sqsh}",
                     "--image", "sarus=load/library/nanochat-bench-nntile:latest"]) == 0
    assert "nanochat-bench-nntile:latest" in "".join(p.read_text() for p in out.rglob("job.sbatch"))


def test_plan_notes_the_container_runtimes_render_and_submit_refuse_without_an_nntile_image(train, capsys):
    """`plan --workload nntile --runtimes ce` listed the CE runs without a word, which render and submit refuse."""
    from bench import cli

    flags = ["plan", "--site", "alps", "--workload", "nntile", "--nodes", "1", "--train-arg", "batch=32",
             "--train-arg", f"config-path={train['config-path']}"]
    assert cli.main([*flags, "--runtimes", "bare,ce"]) == 0
    note = "note: render and submit refuse this sweep without --image: --workload nntile under --runtimes 'bare,ce': " \
           "nanochat-bench's default images cannot run it (ce: "
    assert note in capsys.readouterr().out
    assert cli.main([*flags, "--runtimes", "bare"]) == 0
    assert "default images" not in capsys.readouterr().out


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["render", "sbatch"]])
def test_a_missing_token_file_is_refused_before_anything_is_written(command, train, tmp_path, capsys):
    """No train.bin under --base-dir (or at --dataset-path) was found only on the node, each run ending no_data;
    now submit and render refuse it, naming the file and the command that makes it, as for nanochat's stages."""
    from bench import cli

    empty = tmp_path / "empty"
    empty.mkdir()
    flags = ["--workload", "nntile", "--nodes", "1", "--runtimes", "bare",
             "--train-arg", "batch=32", "--train-arg", f"config-path={train['config-path']}"]
    command = [*command, "--python", sys.executable]  # a launch flag: plan takes none
    out = tmp_path / "sweep"
    assert cli.main([*command, *flags, "--base-dir", str(empty), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"nntile: no token file at {empty / 'base_data_bin' / 'train.bin'}; make it with `nanochat-bench data " \
           "bin`" in err and not out.exists()
    assert cli.main(["plan", *flags, "--base-dir", str(empty)]) == 0
    assert "(submit refuses the jobs until it is): nntile: no token file at" in capsys.readouterr().out
    elsewhere = tmp_path / "bins"
    assert cli.main([*command, *flags, "--train-arg", f"dataset-path={elsewhere}", "--base-dir",
                     str(staged_base(tmp_path)), "--out", str(out)]) == 1
    assert f"no token file at {elsewhere / 'train.bin'}; make it with `nanochat-bench data bin --out {elsewhere}`" \
        in capsys.readouterr().err and not out.exists()
    assert cli.main([*command, *flags, "--base-dir", str(empty), "--no-data-check", "--out", str(out)]) == 0
    assert cli.main([*command, *flags, "--base-dir", str(staged_base(tmp_path)), "--out", str(tmp_path / "t")]) == 0


def test_the_interactive_guide_makes_the_token_file_the_runs_train_from(train, tmp_path):
    """The guide downloaded shards and trained a tokenizer but made no train.bin, so its run stopped with no_data;
    now it runs the workload's own staging command after the tokenizer, into --dataset-path where one is given."""
    guide = job_for(["bare"], train)
    guide.script_name = "interactive.sh"
    text = render_interactive(guide, OPTS.base_dir, 8)
    tokenizer, made, runner = (text.index(s) for s in ("bench.cli tokenizer train", "-m bench.cli data bin\n",
                                                        str(nntile.RUNNER)))
    assert tokenizer < made < runner
    elsewhere = job_for(["bare"], {**train, "dataset-path": str(tmp_path / "bins")})
    elsewhere.script_name = "interactive.sh"
    assert f"-m bench.cli data bin --out {tmp_path / 'bins'}\n" in render_interactive(elsewhere, OPTS.base_dir, 8)


@pytest.mark.parametrize("name", ["ce", "pyxis", "apptainer"])
def test_the_interactive_guide_runs_nanochat_bench_on_the_host_not_in_the_nntile_image(name, train):
    """The guide ran data download, tokenizer train and data bin in the run's image, where nntile's holds
    nanochat-bench without its dependencies (python -m bench.cli stops at its first import there); now they run
    with the host's Python, as the bare runtime's guide runs them, and the runs stay in the container."""
    opts = replace(OPTS, python=None)
    sweep = Sweep([1], 4, [name], train=train, workload="nntile")
    runs = [build_run(sweep, p, SWEEP_DIR / p.run_id, opts, SWEEP_DIR.name) for p in sweep.points()]
    job = make_job("nntile", runs[0].run_dir, sweep, runs, opts, "nntile")
    job.script_name = "interactive.sh"
    text = render_interactive(job, OPTS.base_dir, 8)
    lines = text.splitlines()
    for step in ("data download -n 8", "tokenizer train", "data bin"):
        line = next(line.strip() for line in lines if f"-m bench.cli {step}" in line)
        assert line == f'srun --nodes=1 --ntasks=1 --cpus-per-task="${{cpus_per_node}}" {sys.executable} ' \
                       f"-m bench.cli {step}", line
    container = {"ce": "--environment=", "pyxis": "--container-image=", "apptainer": "apptainer exec"}[name]
    assert container in text and any("-m bench.workloads.nntile.runner" in line for line in lines)  # the run: in it
    assert "the run's image holds nanochat-bench\n#      without its dependencies" in text
    # nanochat's own guide keeps its steps in the image, which has every dependency
    nano = Sweep([1], 4, [name])
    runs = [build_run(nano, p, SWEEP_DIR / p.run_id, opts, SWEEP_DIR.name) for p in nano.points()]
    job = make_job("nano", runs[0].run_dir, nano, runs, opts, "nano")
    job.script_name = "interactive.sh"
    text = render_interactive(job, OPTS.base_dir, 8)
    line = next(line for line in text.splitlines() if "-m bench.cli data download" in line)
    assert f"{sys.executable} -m bench.cli" not in line and "python -m bench.cli data download" in line
    assert "without its dependencies" not in text
