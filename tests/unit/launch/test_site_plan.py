"""What a site profile changes in the plan: the device batch where the site's observation or the memory model
says it does not fit (the tokens per rank and step kept), and a K that cannot be planned refused at scale."""

from bench import sites
from bench.launch.plan import DataShape, Sweep, format_table

DATA = DataShape.from_counts(52, 250)


def plan_of(nodes: int, **kw):
    [point] = Sweep([nodes], 4, ["bare"], **kw).points()
    return point


def test_alps_at_128_gpus_takes_device_batch_16_with_accumulation_2():
    alps = sites.load("alps")
    small, large = plan_of(8, site=alps, data=DATA), plan_of(32, site=alps, data=DATA)
    assert (small.device_batch_size, small.grad_accum) == (32, 1)
    assert (large.device_batch_size, large.grad_accum) == (16, 2)
    assert large.total_batch_size == 32 * 2048 * 128  # weak scaling: the same tokens per rank and step
    assert "--device_batch_size=16" in large.train_argv and "site's limit at 128 ranks" in large.note
    assert "device batch 32 -> 16 x accumulation 2" in format_table(Sweep([8, 32], 4, ["bare"], site=alps, data=DATA))


def test_a_lowered_batch_that_already_accumulated_says_so():
    # strong scaling at 128 ranks: 48 sequences a rank, 24 x 2, then the site's 16 x 3; the note read '24 -> 16 x
    # accumulation 3', which is 48 sequences, not 24
    point = plan_of(32, site=sites.load("alps"), data=DATA, scaling="strong",
                    train={"total_batch_size": 48 * 2048 * 128})
    assert (point.device_batch_size, point.grad_accum) == (16, 3)
    assert "device batch 24 x accumulation 2 -> 16 x accumulation 3" in point.note


def test_the_memory_model_lowers_the_batch_on_a_small_gpu(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text('name = "small"\nnetwork = "infiniband"\ngpu_memory_gib = 40\n')
    point = plan_of(1, site=sites.load(str(path)), data=DATA)
    assert point.device_batch_size < 32 and point.device_batch_size * point.grad_accum == 32
    assert "memory model" in point.note and "40 GiB" in point.note


def test_without_a_site_nothing_changes():
    point = plan_of(32, data=DATA)
    assert (point.device_batch_size, point.grad_accum) == (32, 1) and not point.note


def test_an_unplanned_k_is_refused_beyond_32_ranks():
    assert plan_of(8).possible  # 32 ranks: the trainer's K=1 is left to it
    point = plan_of(16)
    assert not point.possible and "--row-groups" in point.reason and "64 ranks" in point.reason
    assert plan_of(16, data=DATA).possible


def test_a_split_comparison_keeps_each_round_of_runtimes_in_one_allocation(tmp_path):
    """bare and ce, 3 repeats of 9 minutes in a 30-minute partition were packed run by run, bare r1, ce r1, bare r2 in
    one job and ce r2 with repeat 3 in the next: repeat 2 of the two runtimes ran on other nodes. A part holds whole
    rounds (every runtime once) where a round fits one job."""
    from bench.launch.job import LaunchOptions, assemble

    alps = sites.load("alps")
    opts = LaunchOptions(base_dir="/scratch/cache", images={"ce": "/img/x.sqsh"}, site=alps, partition="debug",
                         check_images=False)
    sweep = Sweep([2], 4, ["bare", "ce"], repeats=3, data=DATA, time="00:08:00", site=alps)
    jobs = assemble(sweep, opts, tmp_path / "s", compare=True, note=lambda line: None)
    assert [[r.run_id for r in j.runs] for j in jobs] == [
        ["n2-bare-r1", "n2-ce-r1"], ["n2-bare-r2", "n2-ce-r2"], ["n2-bare-r3", "n2-ce-r3"]]


def test_a_comparison_is_split_to_fit_the_partition_and_an_oversized_job_refused(tmp_path):
    from dataclasses import replace

    import pytest

    from bench.errors import ConfigError
    from bench.launch.job import LaunchOptions, assemble

    alps = sites.load("alps")
    opts = LaunchOptions(base_dir="/scratch/cache", images={"ce": "/img/x.sqsh"}, site=alps, partition="debug",
                         check_images=False)
    sweep = Sweep([2], 4, ["bare", "ce"], repeats=2, data=DATA, time="00:10:00", site=alps)
    notes: list[str] = []
    jobs = assemble(sweep, opts, tmp_path / "s", compare=True, note=notes.append)
    assert [len(j.runs) for j in jobs] == [2, 2]  # 4 x 11 min in a 30-minute partition: two jobs
    assert [r.run_id for j in jobs for r in j.runs] == ["n2-bare-r1", "n2-ce-r1", "n2-bare-r2", "n2-ce-r2"]
    assert all(j.directives.count("--time=00:22:00") == 1 for j in jobs)
    assert sum("split into 2 jobs" in n for n in notes) == 1  # said once, not once a part
    with pytest.raises(ConfigError, match="over partition debug's 00:30:00"):
        assemble(Sweep([1], 4, ["bare"], data=DATA, time="00:45:00", site=alps), opts, tmp_path / "t", note=notes.append)
    with pytest.raises(ConfigError, match="partition debug takes at most 2"):
        assemble(Sweep([4], 4, ["bare"], data=DATA, time="00:10:00", site=alps), opts, tmp_path / "u", note=notes.append)
    # a run with an image step (podman's load on every node) gets time for it in its job: 10 + 1 + 10 minutes
    podman = Sweep([2], 4, ["podman"], data=DATA, time="00:10:00", site=alps)
    [job] = assemble(podman, replace(opts, images={}, site=replace(alps, image_archives={})), tmp_path / "w",
                     compare=True, note=notes.append)
    assert "--time=00:21:00" in job.directives
    with pytest.raises(ConfigError, match="no partition 'gpu'"):
        assemble(sweep, replace(opts, partition="gpu"), tmp_path / "v", note=notes.append)


def test_more_gpus_per_node_than_the_site_has_are_refused():
    import pytest

    from bench.errors import ConfigError

    alps = sites.load("alps")
    with pytest.raises(ConfigError, match="--gpus-per-node 8: a node of site alps has 4 GPUs"):
        Sweep([32], 8, ["ce"], data=DATA, site=alps)
    assert Sweep([32], 2, ["ce"], data=DATA, site=alps).gpus_per_node == 2  # fewer is a smaller job, allowed
    assert Sweep([1], 8, ["bare"], site=alps, train={"device_type": "cpu"}).gpus_per_node == 8  # CPU ranks


def test_a_list_of_partitions_is_taken_as_sbatch_takes_it(tmp_path, capsys):
    """`--partition debug,normal` (sbatch starts the job in one that takes it) was refused with a site profile as an
    unknown partition 'debug,normal'; now each is looked up, and a job is checked against the most they allow."""
    import pytest

    from bench import cli
    from bench.errors import ConfigError
    from bench.launch.job import site_partition

    alps = sites.load("alps")
    both = site_partition(alps, "debug,normal")
    assert (both.name, both.max_time_s, both.max_nodes) == ("debug,normal", 12 * 3600, None)
    assert (site_partition(alps, "debug,xfer").max_nodes, site_partition(alps, "debug").max_nodes) == (2, 2)
    with pytest.raises(ConfigError, match="no partition 'gpu'"):
        site_partition(alps, "debug,gpu")
    argv = ["submit", "--dry-run", "--site=alps", "--nodes=4", "--runtimes=bare", "--time=01:00:00",
            "--row-groups=52", "--shards=250", "--base-dir=/scratch/cache"]
    assert cli.main([*argv, "--partition=debug,normal", "--out", str(tmp_path / "s")]) == 0, capsys.readouterr().err
    assert "#SBATCH --partition=debug,normal" in (tmp_path / "s" / "n4-bare-r1" / "job.sbatch").read_text()
    assert cli.main([*argv, "--partition=debug", "--out", str(tmp_path / "t")]) == 1  # 4 nodes: debug takes 2


def test_plan_shows_a_run_over_the_default_partition_as_submit_refuses_it():
    """`plan --time 99:00:00 --site alps` printed 4-03:00:00 as a plan like any other, while render and submit
    refused it for partition normal's 12 hours; the runs it cannot submit were counted in the totals too."""
    alps = sites.load("alps")
    lines = format_table(Sweep([1], 4, ["bare"], site=alps, time="99:00:00")).splitlines()
    assert lines[1].split()[-1].endswith("--partition") and "not submitted: its time limit 4-03:01:00 is over " \
        "partition normal's 12:00:00; pass a shorter --time" in lines[1]
    assert lines[-1].startswith("0 runs, 0.00 node-hours")
    fits = format_table(Sweep([1], 4, ["bare"], site=alps, time="11:00:00"))
    assert "not submitted" not in fits and fits.splitlines()[-1].startswith("1 runs")


def test_the_nodes_wait_for_each_other_less_than_a_short_run_lasts(tmp_path):
    """torchrun's rendezvous waited a fixed 15 minutes for a node, so in a run of --time 5 a stuck node read as the
    run's timeout (and a resubmission took it for one), never as a node that did not join."""
    from bench.launch.job import LaunchOptions, assemble
    from bench.runtimes import Var

    opts = LaunchOptions(base_dir=str(tmp_path / "base"), check_images=False)
    for time, wait in (("00:05:00", 270), ("01:00:00", 900)):  # 5 min less the trainer's 30 s margin; the default
        [job] = assemble(Sweep([2], 4, ["bare"], data=DATA, time=time), opts, tmp_path / time.replace(":", ""),
                         note=lambda _: None)
        command = [t for t in job.runs[0].spec.command if not isinstance(t, Var)]
        assert f"--rdzv_conf=join_timeout={wait}" in command
