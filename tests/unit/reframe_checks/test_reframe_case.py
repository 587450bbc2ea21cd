"""A ReFrame test case -> the nanochat-bench job it runs, through the launch layer.

    python -m pytest tests/unit/reframe_checks/test_reframe_case.py -q
"""

import dataclasses
import runpy

import pytest

from bench import cli, runtimes
from bench.errors import ConfigError, RuntimeConfigError
from bench.launch.job import job_minutes
from bench.launch.plan import slurm_time
from bench.reframe_checks import CONFIG_DIR
from bench.reframe_checks.case import Case, Site, build
from bench.reframe_checks.checks import runtime_feature

CPU = {"gpus_per_node": 2, "train": ["device_type=cpu"], "exclusive": False, "numa_binding": "none"}


def case(site: dict, nodes: int = 2, scaling: str = "weak", train_args=(), runtime: str = "bare",
         workload: str = "nanochat") -> Case:
    return Case(runtime, nodes, scaling, 2, list(train_args), Site.from_extras({"nanochat_bench": site}, "sys:part"),
                "nanochat_bench_1a2b3c4d", workload)


@pytest.mark.parametrize("extras, message", [
    ({}, r"partition sys:part: extras\['nanochat_bench'\] is missing; it needs at least gpus_per_node"),
    ({"nanochat_bench": {"gpus_per_node": 4, "image": "x"}}, "unknown key.s. image; valid: gpus_per_node, base_dir"),
    ({"nanochat_bench": {"base_dir": "/x"}}, "gpus_per_node is required"),
    ({"nanochat_bench": {"gpus_per_node": "4"}}, "gpus_per_node must be a int, got '4'"),
    ({"nanochat_bench": {"gpus_per_node": 4, "exclusive": "no"}}, "exclusive must be a bool"),
    ({"nanochat_bench": {"gpus_per_node": 0}}, "gpus_per_node must be at least 1, got 0"),
    ({"nanochat_bench": {"gpus_per_node": 4, "exclusive": False, "site": "alps", "cpus_per_gpu": 0}},
     r"cpus_per_gpu must be at least 1 \(CPUs each GPU's rank gets\), got 0; leave it out for the site profile's"),
])
def test_partition_settings_are_checked_with_one_clear_line(extras, message):
    with pytest.raises(ConfigError, match=message):
        Site.from_extras(extras, "sys:part")


def test_the_checks_references_win_over_the_partitions_and_the_partitions_are_used_alone():
    site = Site.from_extras({"nanochat_bench": {"gpus_per_node": 4, "references": "/site/refs.toml"}}, "sys:part")
    assert site.references_file("") == "/site/refs.toml"
    assert site.references_file("/mine.toml") == "/mine.toml"
    assert Site(gpus_per_node=4).references_file("") == ""


def test_the_partitions_references_path_has_its_variables_expanded(monkeypatch):
    """base_dir, images and mounts expand $SCRATCH; references was read as the literal '$SCRATCH/refs.toml', and
    setup failed saying there was no such file."""
    monkeypatch.setenv("SCRATCH", "/scratch/me")
    site = Site.from_extras({"nanochat_bench": {"gpus_per_node": 4, "references": "$SCRATCH/refs.toml"}}, "s:p")
    assert site.references_file("") == "/scratch/me/refs.toml"
    unset = r"references '\$SCRATCH/refs.toml' names the unset or empty variable\(s\) SCRATCH; set them where"
    monkeypatch.setenv("SCRATCH", "")  # was read as /refs.toml, a path nobody meant, not naming the variable
    with pytest.raises(ConfigError, match=unset):
        site.references_file("")
    monkeypatch.delenv("SCRATCH")
    with pytest.raises(ConfigError, match=unset):
        site.references_file("")


def test_the_job_is_the_one_render_sbatch_writes(tiny_base_dir, tmp_path):
    """Same sweep point, same options: ReFrame's job.sbatch and `nanochat-bench render sbatch`'s differ only
    in names and paths, so the srun/torchrun line has one source."""
    built = build(case({**CPU, "base_dir": str(tiny_base_dir)}), tmp_path / "stage")
    assert built.job.script == tmp_path / "stage" / "nanochat_bench_1a2b3c4d" / "n2-bare-r1" / "job.sbatch"
    assert (built.run_dir / "run.json").is_file() and (built.sweep_dir / ".lib" / "jobrecord.py").is_file()
    assert built.directives == ["--no-requeue", "--nodes=2"]  # CPU: no --gpus-per-node; the rest is ReFrame's own
    assert built.minutes == built.point.time_minutes + 1
    assert built.point.val_files_k == 1  # planned from the shards of the base directory

    out = tmp_path / "render"
    assert cli.main(["render", "sbatch", "--nodes=2", "--runtimes=bare", "--gpus-per-node=2", "--depth=2",
                     "--device_type=cpu", "--numa-binding=none", "--no-exclusive", f"--base-dir={tiny_base_dir}",
                     f"--out={out}"]) == 0
    rendered = (out / "n2-bare-r1" / "job.sbatch").read_text()

    def body(text: str, sweep_dir) -> list[str]:
        text = text.replace(str(sweep_dir), "SWEEP")
        return text[text.index("set -euo pipefail"):].splitlines()

    assert body(built.text, built.sweep_dir) == body(rendered, out)


def test_strong_scaling_keeps_the_total_and_the_train_args_reach_the_trainer(tmp_path):
    built = build(case({**CPU, "base_dir": str(tmp_path / "base")}, nodes=1, scaling="strong",
                       train_args=["max_seq_len=64", "device_batch_size=2", "total_batch_size=512"]), tmp_path)
    p = built.point
    assert (p.ranks, p.device_batch_size, p.grad_accum, p.total_batch_size) == (2, 2, 2, 512)
    assert "--max_seq_len=64" in p.train_argv and "--depth=2" in p.train_argv and "--device_type=cpu" in p.train_argv


@pytest.mark.parametrize("workload, module, run_workload", [("mid_train", "bench.nanochat.mid_train", "nanochat-mid"),
                                                           ("chat_sft", "bench.nanochat.chat_sft", "nanochat-sft")])
def test_a_stage_case_renders_its_trainer_without_depth(workload, module, run_workload, tmp_path):
    """A later stage loads the checkpoint of the stage before: the case's depth (2 here) is not its flag, and the
    srun line runs the stage's own module on every rank, planned by the stage (its batch per rank count)."""
    built = build(case({**CPU, "base_dir": str(tmp_path / "base")}, nodes=1, workload=workload), tmp_path / "stage")
    run = built.job.runs[0]
    assert run.manifest["workload"] == run_workload and "depth" not in run.manifest["config"]
    command = list(run.spec.command)
    assert command[command.index("bench.launch.elastic") + 1:command.index("--")][-2:] == ["-m", module]
    assert not any(str(t).startswith("--depth") for t in command) and "--depth" not in built.text
    [torchrun] = [line for line in built.text.splitlines() if "-m bench.launch.elastic" in line]
    assert f"-m {module} -- " in torchrun and "--device_type=cpu" in torchrun
    assert built.point.device_batch_size > 0 and f"--device_batch_size={built.point.device_batch_size}" in torchrun
    assert (built.run_dir / "run.json").is_file()


def test_a_stage_refuses_depth_in_its_train_args_naming_the_key_and_the_valid_ones(tmp_path):
    refused = r"^mid_train: unknown argument\(s\): depth=4; valid keys \(-S train_args=KEY"
    with pytest.raises(ConfigError, match=refused):
        build(case(CPU, nodes=1, train_args=["depth=4"], workload="mid_train"), tmp_path)
    with pytest.raises(ConfigError, match="unknown workload 'mid'; valid: nanochat, nntile, base_loss"):
        build(case(CPU, nodes=1, workload="mid"), tmp_path)
    assert not any(tmp_path.iterdir())


def test_case_mistakes_fail_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match="depth is the check's own variable"):
        build(case(CPU, train_args=["depth=4"]), tmp_path)
    with pytest.raises(ConfigError, match=r"^depth=1000000: at most 10000 \(a GPT of ~5e16 parameters already\)$"):
        build(dataclasses.replace(case(CPU), depth=1_000_000), tmp_path)  # -S depth=1000000, named as the check's
    with pytest.raises(ConfigError, match="total_batch_size 500 is not a multiple"):
        build(case(CPU, scaling="strong", train_args=["total_batch_size=500"]), tmp_path)
    unset = r"base_dir '\$NANOCHAT_BENCH_UNSET_VAR/x' names the unset or empty variable\(s\) NANOCHAT_BENCH_UNSET_VAR"
    with pytest.raises(ConfigError, match=unset):
        build(case({**CPU, "base_dir": "$NANOCHAT_BENCH_UNSET_VAR/x"}), tmp_path)
    with pytest.raises(ConfigError, match=r"^num_nodes=0: must be at least 1"):
        build(case(CPU, nodes=0), tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_planners_hints_name_the_checks_variables_not_submits_flags(tmp_path):
    """chat_sft's hints said --train-arg and --scaling, a partition's bad train item was blamed on --train-arg."""
    hint = r"targets that work: 2, 4 \(-S train_args=target_examples_per_step=N\), or -n %scaling=weak"
    with pytest.raises(ConfigError, match=hint):
        build(case(CPU, nodes=1, scaling="strong", train_args=["target_examples_per_step=3"], workload="chat_sft"),
              tmp_path, dry_run=True)
    with pytest.raises(ConfigError, match="fix it with -n %scaling=strong, or leave it out$"):
        build(case(CPU, nodes=1, train_args=["target_examples_per_step=3"], workload="chat_sft"), tmp_path)
    with pytest.raises(ConfigError, match=r"^partition sys:part: extras\['nanochat_bench'\]: train item 'cpu' is not "
                                          r"KEY=VALUE \(e.g. train item eval_every=100\)$"):
        Site.from_extras({"nanochat_bench": {**CPU, "train": ["cpu"]}}, "sys:part")
    assert not any(tmp_path.iterdir())


def test_a_dry_run_renders_a_container_job_without_its_image(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    site = {"gpus_per_node": 4, "base_dir": "$SCRATCH/nanochat"}
    built = build(case(site, runtime="ce"), tmp_path / "stage", dry_run=True)
    assert built.directives == ["--gpus-per-node=4", "--no-requeue", "--nodes=2"]
    assert (built.run_dir / "environment.toml").is_file() and not (built.run_dir / "run.json").exists()
    with pytest.raises(RuntimeConfigError, match=r"does not exist.*for ReFrame: the partition.s extras"):
        build(case(site, runtime="ce"), tmp_path / "stage2")


def test_reframes_job_is_never_requeued_into_the_run_directory(tmp_path):
    """ReFrame's job runs job.sbatch with bash, so its #SBATCH --no-requeue was not Slurm's to see: a job that lost
    a node was requeued by Slurm and ran the batch script again into the first attempt's run directory."""
    built = build(case({**CPU, "base_dir": str(tmp_path / "base")}), tmp_path / "stage", dry_run=True)
    assert "--no-requeue" in built.job.directives and "--no-requeue" in built.directives


def test_reframe_asks_for_the_time_of_the_jobs_image_step_too(tmp_path, monkeypatch):
    """podman's image step runs before the run's srun, outside its limit: the job's #SBATCH --time counts it
    (bench/launch/job.py job_minutes), and ReFrame's allocation, which runs that script, must be as long."""
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    built = build(case({"gpus_per_node": 4, "base_dir": "$SCRATCH/nanochat"}, runtime="podman"),
                  tmp_path / "stage", dry_run=True)
    assert built.job.runs[0].image_step is not None
    [sbatch_time] = [d for d in built.job.directives if d.startswith("--time=")]
    assert built.minutes == job_minutes(built.job.runs) > built.point.time_minutes + 1
    assert sbatch_time == f"--time={slurm_time(built.minutes)}"


@pytest.mark.parametrize("key, value, valid", [("numa_binding", "nodes", "node, socket, exclusive, none"),
                                               ("numa_binding", "", "node, socket, exclusive, none"),
                                               ("ofi_hook", "yes", "default, on, off")])
def test_a_partitions_choice_outside_its_values_is_refused_naming_the_key(key, value, valid):
    """numa_binding 'nodes' reached torchrun's --numa-binding on every node (and '' bound nothing, silently),
    where submit's flag takes only its choices."""
    with pytest.raises(ConfigError, match=rf"extras\['nanochat_bench'\]: {key} {value!r} is not one of: {valid}$"):
        Site.from_extras({"nanochat_bench": {"gpus_per_node": 4, key: value}}, "sys:part")


@pytest.mark.parametrize("key, value, message", [
    ("train", ["device_type=cpu", 3], r"train must be a list of text, got \['device_type=cpu', 3\]"),
    ("mounts", [3], r"mounts must be a list of text, got \[3\]"),
    ("env", {"A": 1}, r"env must be a dict of text, got \{'A': 1\}"),
    ("images", {"ce": 3}, r"images must be a dict of text"),
    ("images", {"apptainr": "/x.sif"}, "images names no runtime apptainr; valid: bare, ce"),
    ("time", "abc", r"time 'abc' is not a Slurm time"),
])
def test_partition_settings_of_the_wrong_kind_inside_are_one_line_not_a_traceback(key, value, message):
    """A number among train's KEY=VALUE items (or env's values) reached the parsers as a TypeError traceback; an
    image for a misspelt runtime was left unused; a bad time was blamed on submit's --time."""
    with pytest.raises(ConfigError, match=rf"^partition sys:part: extras\['nanochat_bench'\]: {message}"):
        Site.from_extras({"nanochat_bench": {"gpus_per_node": 4, key: value}}, "sys:part")


@pytest.mark.parametrize("key, what", [
    ("time", r"a Slurm time \(MM, HH:MM:SS or D-HH:MM:SS\), or leave it out for the planner's estimate"),
    ("base_dir", r"a directory, or leave it out for \$NANOCHAT_BASE_DIR, else "),
    ("site", r"a site profile \(alps, .*, or FILE\.toml\), or leave it out for none"),
])
def test_a_partitions_empty_time_base_dir_or_site_is_refused_not_taken_for_left_out(key, what):
    """time '' (an unset variable's, as os.environ.get('RUN_TIME', '') gives) silently planned the estimate's limit,
    base_dir '' put the checkpoints under ~/.cache/nanochat, site '' ran without the site's network set-up, where
    submit refuses an empty --time, --base-dir and --site."""
    with pytest.raises(ConfigError, match=rf"^partition sys:part: extras\['nanochat_bench'\]: {key} '' is empty "
                                          rf"\(an unset variable\?\); give {what}"):
        Site.from_extras({"nanochat_bench": {"gpus_per_node": 4, key: ""}}, "sys:part")
    assert Site.from_extras({"nanochat_bench": {"gpus_per_node": 4, "references": ""}}, "sys:part").references == ""


@pytest.mark.parametrize("env, message", [
    ({"BAD NAME": "x"}, r"env BAD NAME='x': 'BAD NAME' is no variable name"),
    ({"X": "a\nb"}, r"env X='a\\nb': a value of one line"),
    ({"NANOCHAT_BASE_DIR": "/x"}, r"env NANOCHAT_BASE_DIR='/x': .*; give extras\['nanochat_bench'\]\.base_dir /x "),
])
def test_a_partitions_env_refused_by_the_launch_layer_is_named_as_the_partitions_key(env, message, tmp_path):
    """A variable name or value the job cannot export was blamed on submit's --env, a flag a ReFrame user never
    gave; it is the partition's extras' env."""
    with pytest.raises(ConfigError, match=rf"^extras\['nanochat_bench'\]\.{message}"):
        build(case({**CPU, "base_dir": str(tmp_path / "base"), "env": env}, nodes=1), tmp_path / "stage", dry_run=True)
    assert not (tmp_path / "stage").exists()


def test_a_partitions_site_profile_gives_its_runs_the_sites_network_set_up(tmp_path, monkeypatch):
    """A partition had no way to name its site profile: a multi-node pyxis case on Alps got neither NCCL_NET nor the
    netstack bind, so NCCL fell back to TCP sockets unseen, where `submit --site alps` sets both and arms the gate."""
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    site = {"gpus_per_node": 4, "base_dir": "$SCRATCH/nanochat", "site": "alps"}
    built = build(case(site, nodes=2, runtime="pyxis"), tmp_path / "stage", dry_run=True)
    spec = built.job.runs[0].spec
    assert spec.env["NCCL_NET"] == "AWS Libfabric" and spec.env["NANOCHAT_BENCH_EXPECT_NET"] == "AWS Libfabric"
    assert any("netstack" in m.src for m in spec.mounts)
    assert built.job.runs[0].manifest["site"]["name"] == "alps"
    with pytest.raises(ConfigError, match=r"extras\['nanochat_bench'\]\.site 'alsp': not a shipped site \(alps, "):
        build(case({**site, "site": "alsp"}), tmp_path / "stage2", dry_run=True)


def test_a_partition_can_let_the_site_gate_through_a_network_on_purpose(tmp_path, monkeypatch):
    """A partition of site alps that sets NCCL_NET=Socket (to measure TCP against Slingshot) was refused with advice
    to add submit's --allow-network, which a partition had no way to give; it is the extras' allow_network now."""
    from bench import netgate

    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    site = {"gpus_per_node": 4, "base_dir": "$SCRATCH/nanochat", "site": "alps", "env": {"NCCL_NET": "Socket"}}
    with pytest.raises(ConfigError, match=r"add extras\['nanochat_bench'\]\.allow_network Socket"):
        build(case(site, nodes=2, runtime="pyxis"), tmp_path / "stage", dry_run=True)
    built = build(case({**site, "allow_network": "Socket"}, nodes=2, runtime="pyxis"), tmp_path / "stage2",
                  dry_run=True)
    assert built.job.runs[0].spec.env[netgate.ENV_ALLOW] == "Socket"


def test_a_partitions_site_profile_plans_its_points_as_submit_does(tmp_path, monkeypatch):
    """The site profile reached the launch options but not the plan: a d24 case on Alps was planned for an H200's
    141 GiB at device batch 32 (~99 GiB, over a GH200's 96) with an H200's time limit, where `submit --site alps`
    plans 16 x accumulation 2 and a longer limit."""
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    site = {"gpus_per_node": 4, "base_dir": "$SCRATCH/nanochat", "site": "alps"}
    built = build(dataclasses.replace(case(site, nodes=1, train_args=["num_iterations=2000"]), depth=24),
                  tmp_path / "stage", dry_run=True)
    assert (built.point.device_batch_size, built.point.grad_accum) == (16, 2)
    assert "of 96 GiB" in built.point.note
    out = tmp_path / "render"
    assert cli.main(["render", "sbatch", "--nodes=1", "--runtimes=bare", "--gpus-per-node=4", "--depth=24",
                     "--num_iterations=2000", "--site=alps", f"--base-dir={tmp_path / 'scratch' / 'nanochat'}",
                     f"--out={out}"]) == 0
    rendered = (out / "n1-bare-r1" / "job.sbatch").read_text()
    assert [line for line in rendered.splitlines() if line.startswith("#SBATCH --time=")] == \
        [f"#SBATCH {d}" for d in built.job.directives if d.startswith("--time=")]
    assert "--device_batch_size=16" in rendered and "--device_batch_size=16" in built.text


def test_every_partition_of_the_alps_example_keeps_nccls_info_lines(tmp_path, monkeypatch):
    """The example set NCCL_DEBUG=WARN for every run: NCCL then never says which network it took, so the network
    gate had nothing to judge and run.json no network.net, and the example's own nccl_net sanity could only fail."""
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    config = runpy.run_path(str(CONFIG_DIR / "alps_example.py"))["site_configuration"]
    for partition in config["systems"][0]["partitions"]:
        site = Site.from_extras(partition["extras"], partition["name"])
        for feature in partition["features"]:
            # a partition's features name runtimes as ReFrame allows (podman_hpc for podman-hpc)
            runtime = {runtime_feature(r): r for r in runtimes.names()}[feature]
            c = Case(runtime, 2, "weak", 2, [], site, f"example_{partition['name']}_{runtime}")
            spec = build(c, tmp_path / "stage", dry_run=True).job.runs[0].spec
            assert spec.env["NCCL_DEBUG"] == "INFO", (partition["name"], runtime)


def test_a_gpu_partition_sharing_its_nodes_binds_no_worker_to_a_numa_node_unless_its_extras_ask(tmp_path):
    """exclusive False kept --numa-binding=node, though the job's share of CPUs need not lie on its GPUs' NUMA
    nodes (numactl then fails every worker): as submit --no-exclusive, no binding unless numa_binding asks."""
    base = {"gpus_per_node": 4, "base_dir": str(tmp_path / "base"), "site": "alps"}

    def binding(site: dict) -> list[str]:
        built = build(case(site), tmp_path / str(len(list(tmp_path.iterdir()))), dry_run=True)
        return [t for t in built.job.runs[0].spec.command if str(t).startswith("--numa-binding")]

    assert binding(base) == ["--numa-binding=node"]
    assert binding({**base, "exclusive": False}) == []
    assert binding({**base, "exclusive": False, "numa_binding": "node"}) == ["--numa-binding=node"]
    assert binding({**base, "numa_binding": "none"}) == []


def test_a_cpu_partitions_numa_binding_is_refused_naming_the_key(tmp_path):
    """numa_binding node on a CPU partition bound nothing, without a word (only GPU workers are bound); now it is
    refused as cpus_per_gpu there is, naming the key; none still passes."""
    site = {**CPU, "base_dir": str(tmp_path / "base")}
    with pytest.raises(ConfigError, match=r"extras\['nanochat_bench'\]\.numa_binding node: it has no effect on CPU"):
        build(case({**site, "numa_binding": "node"}), tmp_path / "a", dry_run=True)
    build(case(site), tmp_path / "b", dry_run=True)


def test_a_gpu_partition_sharing_its_nodes_asks_reframes_job_for_its_gpus_share_of_the_cpus(tmp_path):
    """A GPU partition with exclusive False rendered a job asking for no CPUs, and ReFrame's job (which runs it)
    was passed only --nodes and --gpus-per-node: on a shared node torchrun, every rank's loader and NCCL's
    threads shared one CPU. Now it asks what `submit --no-exclusive` asks (the site's share, or the partition's
    cpus_per_gpu), and without either it is refused naming the key."""
    shared = {"gpus_per_node": 4, "exclusive": False, "base_dir": str(tmp_path / "base")}

    def passed(site: dict) -> list[str]:
        return build(case(site), tmp_path / str(len(list(tmp_path.iterdir()))), dry_run=True).directives

    assert "--cpus-per-task=288" in passed({**shared, "site": "alps"})
    assert "--cpus-per-task=32" in passed({**shared, "site": "alps", "cpus_per_gpu": 8})
    assert not [d for d in passed({**CPU, "base_dir": str(tmp_path / "base")}) if d.startswith("--cpus")]
    with pytest.raises(ConfigError, match=r"extras\['nanochat_bench'\]\.exclusive False: .* give "
                                          r"extras\['nanochat_bench'\]\.cpus_per_gpu N"):
        passed(shared)
