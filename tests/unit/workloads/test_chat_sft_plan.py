"""The chat_sft stage plans its examples per step per rank count (weak: grown with the ranks; strong: kept, the
device batch lowered, accumulation added, or refused naming the targets that work), and renders like any stage.
python -m pytest tests/unit/workloads/test_chat_sft_plan.py -q"""

import pytest

from bench import sites, workloads
from bench.errors import ConfigError
from bench.launch.job import LaunchOptions, assemble
from bench.launch.plan import Sweep, format_table
from bench.launch.render import render_sbatch

SHARED = sites.load("test-cluster")  # its shared_paths: every path is seen alike by its nodes


def test_weak_scaling_keeps_each_ranks_examples_and_grows_the_target():
    sweep = Sweep([1, 2, 16], 4, ["bare"], workload="chat_sft", site=SHARED)
    rows = [(p.plan.column("device_batch_size"), p.plan.column("grad_accum"),
             p.plan.column("target_examples_per_step"), p.plan.column("num_iterations")) for p in sweep.points()]
    assert rows == [(4, 1, 16, 22_439 // 16), (4, 1, 32, 701), (4, 1, 256, 87)]
    two = sweep.points()[1]
    assert two.train_argv == ("--device_batch_size=4", "--target_examples_per_step=32")
    text = format_table(sweep)
    assert text.splitlines()[0].split()[4:8] == ["device_bs", "grad_accum", "examples/step", "steps"]
    with pytest.raises(ConfigError, match="--target_examples_per_step is what weak scaling grows"):
        Sweep([1], 4, ["bare"], workload="chat_sft", train={"target_examples_per_step": 64})


def test_strong_scaling_keeps_the_target_and_refuses_ranks_it_cannot_serve():
    sweep = Sweep([1, 2, 4, 16], 4, ["bare"], workload="chat_sft", scaling="strong", site=SHARED,
                  train={"device_batch_size": 4, "num_iterations": 50})
    one, two, four, many = sweep.points()
    assert [(p.plan.column("device_batch_size"), p.plan.column("grad_accum")) for p in (one, two, four)] == \
        [(4, 2), (4, 1), (2, 1)]
    assert "device batch lowered from 4 to 2" in four.plan.note and two.plan.column("num_iterations") == 50
    assert not many.possible
    assert "target_examples_per_step 32 is not a multiple of device batch x 64 ranks" in many.reason
    assert "targets that work: 64, 128, 256" in many.reason
    assert "impossible: target_examples_per_step 32" in format_table(sweep)


def test_several_nodes_need_a_base_directory_they_share(tmp_path):
    """The runner's /tmp is a node-local disk (not a network filesystem): two nodes could not read one checkpoint."""
    from bench.workloads.sharedfs import mount_of

    if mount_of(tmp_path)[1] in ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cephfs", "wekafs"):
        pytest.skip(f"{tmp_path} is on a network filesystem here")
    one, two = Sweep([1, 2], 4, ["bare"], workload="chat_sft", base_dir=str(tmp_path)).points()
    assert one.possible and not two.possible
    assert f"NANOCHAT_BASE_DIR {tmp_path.resolve()} is on" in two.reason and "not a filesystem all 2" in two.reason


def test_the_stage_checks_its_arithmetic_before_any_process_starts():
    stage = workloads.get("chat_sft")
    stage.check(["--target_examples_per_step=8"], 2)
    with pytest.raises(ConfigError, match=r"--target_examples_per_step=6 is not a multiple of device_batch_size x "
                                          r"world_size = 4 x 2 = 8; for 2 rank\(s\) use --device_batch_size=3 \| 1 "
                                          r"or --target_examples_per_step=8"):
        stage.check(["--target_examples_per_step=6"], 2)


def test_two_nodes_render_the_sft_module_with_the_planned_batch(tmp_path):
    sweep = Sweep([2], 4, ["bare"], workload="chat_sft", train={"device_type": "cpu"}, site=SHARED)
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), python="/usr/bin/python3", check_images=False)
    [job] = assemble(sweep, opts, tmp_path / "sweep", note=lambda _: None)
    text = render_sbatch(job)
    assert "-m bench.nanochat.chat_sft -- --device_batch_size=4 --device_type=cpu --target_examples_per_step=32" \
        in text
    assert "--deadline=" in text  # a batch job stops SFT before its time limit
    assert job.runs[0].manifest["workload"] == "nanochat-sft"
    assert job.runs[0].manifest["config"]["target_examples_per_step"] == 32


def test_the_steps_column_counts_the_updates_the_run_makes_as_status_does():
    """The plan's steps column showed num_iterations (701 at 2 ranks), while the run makes num_iterations - 1
    updates, its last pass only evaluating: its estimate's note and status said 700."""
    from bench.launch import flow

    sweep = Sweep([2], 4, ["bare"], workload="chat_sft", site=SHARED)
    head, row = (line.split() for line in format_table(sweep).splitlines()[:2])
    assert sweep.points()[0].plan.column("num_iterations") == 701 and row[head.index("steps")] == "700"
    fs = flow.FlowSweep.build("speedrun", "base_train,chat_sft", {}, [], nodes=[1], gpus_per_node=8,
                              runtimes=["bare"])
    assert "examples/step=32 steps=700 " in flow.format_table(fs) and "est: 700 updates x 32" in flow.format_table(fs)
    given = Sweep([1], 4, ["bare"], workload="chat_sft", site=SHARED, train={"num_iterations": 4}).points()[0]
    assert given.plan.column("steps") == 3 == given.plan.column("num_iterations") - workloads.get("chat_sft") \
        .passes_without_step
