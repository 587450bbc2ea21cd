"""mid_train's plan: the total batch per rank count (weak grows it, strong keeps it), upstream's divisibility
before any job exists, and a multi-node point only on a base directory the nodes share.

    python -m pytest tests/unit/workloads/test_mid_train_plan.py -q
"""

from bench import cli, sites
from bench.launch.job import LaunchOptions, assemble
from bench.launch.plan import Sweep, format_table
from bench.launch.render import render_sbatch

CPU = {"device_type": "cpu", "max_seq_len": 64, "device_batch_size": 4}


def sweep(tmp_path, nodes, scaling="weak", site="test-cluster", **train):
    return Sweep(nodes, 2, ["bare"], train={**CPU, **train}, workload="mid_train", scaling=scaling,
                 site=sites.load(site) if site else None, base_dir=str(tmp_path / "base"))


def test_weak_scaling_grows_the_total_with_the_ranks(tmp_path):
    s = sweep(tmp_path, [1, 2])
    one, two = s.points()
    assert [p.plan.column("total_batch_size") for p in (one, two)] == [4 * 64 * 2, 4 * 64 * 4]
    assert two.train_argv == ("--device_batch_size=4", "--device_type=cpu", "--max_seq_len=64",
                              "--num_iterations=200", "--total_batch_size=1024")  # the sweep's short horizon
    text = format_table(s)
    assert text.splitlines()[0].split()[4:8] == ["device_bs", "grad_accum", "total_batch", "steps"]
    assert "200 batches (199 steps)" in text


def test_the_plan_counts_the_horizon_in_the_steps_status_counts(tmp_path):
    """The plan's mid_train column read `batches` 200 (--num_iterations counts batches, the first the prefetch)
    while `status` read the same run `at step 12 of 199`: two numbers for one horizon, in two units. Both count
    optimizer steps; one epoch of the mixture, whose steps are known only at its end, reads so."""
    [row] = format_table(sweep(tmp_path, [1])).splitlines()[1:2]
    assert row.split()[4:8] == ["4", "1", "512", "199"]
    [row] = format_table(sweep(tmp_path, [1], num_iterations=-1)).splitlines()[1:2]
    assert row.split()[7] == "epoch"


def test_strong_scaling_keeps_the_total_or_says_why_not(tmp_path):
    s = sweep(tmp_path, [1, 2], scaling="strong", total_batch_size=1024)
    one, two = s.points()
    assert [(p.plan.column("device_batch_size"), p.plan.column("grad_accum")) for p in (one, two)] == [(4, 2), (4, 1)]
    lowered = sweep(tmp_path, [2], scaling="strong", total_batch_size=768).points()[0]  # 768 = 3 x 64 x 4
    assert (lowered.plan.column("device_batch_size"), lowered.plan.column("grad_accum")) == (3, 1)
    assert "device batch lowered from 4 to 3" in lowered.note
    bad = sweep(tmp_path, [2], scaling="strong", total_batch_size=1000).points()[0]
    assert not bad.possible and "not a multiple of max_seq_len x ranks = 64 x 4" in bad.reason
    assert "impossible: total_batch_size 1,000" in format_table(sweep(tmp_path, [2], scaling="strong",
                                                                      total_batch_size=1000))


def test_a_multi_node_point_needs_a_shared_base_directory(tmp_path):
    (tmp_path / "base").mkdir()  # here, on this host's local disk
    one, two = sweep(tmp_path, [1, 2], site=None).points()
    assert one.possible and not two.possible
    assert f"NANOCHAT_BASE_DIR {tmp_path / 'base'} is on" in two.reason and "not a filesystem all 2 nodes" in \
        two.reason  # this host's disk is local; the test cluster's profile declares its one host shared
    assert sweep(tmp_path, [2]).points()[0].possible


def test_two_nodes_render_the_stage_under_torchrun(tmp_path):
    s = sweep(tmp_path, [2])
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), python="/usr/bin/python3", check_images=False,
                         site=sites.load("test-cluster"))
    [job] = assemble(s, opts, tmp_path / "sweep", note=lambda _: None)
    text = render_sbatch(job)
    assert "-m bench.nanochat.mid_train -- --device_batch_size=4" in text and "--total_batch_size=1024" in text
    assert "--deadline=" in text and "--nnodes=2" in text.replace("--nnodes ", "--nnodes=")
    assert job.runs[0].manifest["workload"] == "nanochat-mid"
    assert job.runs[0].manifest["config"]["total_batch_size"] == 1024


def test_the_cli_plans_it_and_refuses_what_weak_scaling_sets(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    argv = ["plan", "--workload", "mid_train", "--nodes", "1,2", "--gpus-per-node", "2", "--site", "test-cluster",
            "--device_type", "cpu", "--max_seq_len", "64", "--device_batch_size", "4"]
    assert cli.main(argv) == 0
    assert "1,024" in capsys.readouterr().out
    assert cli.main([*argv, "--total_batch_size", "1024"]) == 1
    assert "--total_batch_size is what weak scaling grows" in capsys.readouterr().err
    assert cli.main([*argv, "--depth", "4"]) == 1
    err = capsys.readouterr().err  # the base checkpoint has the depth
    assert "error: mid_train: unknown argument(s): depth=4; valid keys (--train-arg KEY=VALUE): " in err


def test_the_sites_device_batch_limit_holds_for_mid_training_as_for_pre_training(tmp_path):
    """Alps' profile records d20 at device batch 32 out of memory from 128 ranks: a flow's pre-training was lowered
    to 16 x accumulation 2 there, while mid-training, the same model at the same context, kept 32 and would run out
    of memory after pre-training's hours. A CPU point, which no GPU limit concerns, is left as it was."""
    from dataclasses import replace

    from bench.launch.flow import FlowSweep
    from bench.launch.plan import DataShape

    site = replace(sites.load("test-cluster"), device_batch_limits={8: 16})
    fs = FlowSweep.build("speedrun", "base_train,mid_train", {}, [], nodes=[1, 2], gpus_per_node=4,
                         runtimes=["bare"], data=DataShape.from_counts(52, 250), site=site,
                         base_dir=str(tmp_path / "base"))
    [(_, (_, mid_one)), (_, (base_two, mid_two))] = fs.points()
    batch = ("device_batch_size", "grad_accum", "total_batch_size")
    assert [mid_one.plan.column(c) for c in batch] == [32, 1, 32 * 2048 * 4]
    assert [mid_two.plan.column(c) for c in batch] == [base_two.plan.column(c) for c in batch] == [16, 2, 32 * 2048 * 8]
    assert "--device_batch_size=16" in mid_two.train_argv and "--total_batch_size=524288" in mid_two.train_argv
    assert "device batch 32 -> 16 x accumulation 2 (the site's limit at 8 ranks)" in mid_two.note
    cpu = Sweep([2], 4, ["bare"], train={**CPU, "device_batch_size": 32}, workload="mid_train", site=site,
                base_dir=str(tmp_path / "base")).points()[0]
    assert (cpu.plan.column("device_batch_size"), cpu.plan.column("grad_accum")) == (32, 1)
