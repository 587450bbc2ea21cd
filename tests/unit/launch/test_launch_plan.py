"""Sweep plans: parameters expanded as a product, trainer flags checked by the trainer's own parser,
bad input refused with the flag and the valid form.

    python -m pytest tests/unit/launch -q
"""

import pytest

from bench.errors import ConfigError, RuntimeConfigError
from bench.launch.plan import Sweep, format_table, parse_minutes, parse_nodes, parse_train_args
from bench.runtimes import parse_names


@pytest.mark.parametrize("text", ["", "0", "1,0", "-1", "1.5", "a", "1,,2", "2,2", "1, x"])
def test_nodes_must_be_distinct_positive_integers(text):
    with pytest.raises(ConfigError, match="--nodes"):
        parse_nodes(text)


def test_nodes_parse():
    assert parse_nodes("1,2, 4,8") == [1, 2, 4, 8]


def test_points_are_the_product_with_run_ids():
    s = Sweep(parse_nodes("1,2"), 4, parse_names("bare,ce"), repeats=2)
    ids = [p.run_id for p in s.points()]
    assert ids == ["n1-bare-r1", "n1-bare-r2", "n1-ce-r1", "n1-ce-r2",
                   "n2-bare-r1", "n2-bare-r2", "n2-ce-r1", "n2-ce-r2"]
    assert {p.ranks for p in s.points()} == {4, 8}


def test_unknown_runtime_refused():
    with pytest.raises(RuntimeConfigError, match="valid runtimes"):
        Sweep(parse_nodes("1"), 4, parse_names("bare,docker"))


@pytest.mark.parametrize("kw,flag", [({"gpus_per_node": 0}, "--gpus-per-node"), ({"repeats": 0}, "--repeats"),
                                     ({"assume_mfu": 1.5}, "--assume-mfu")])
def test_bad_counts_refused(kw, flag):
    args = {"gpus_per_node": 4, "repeats": 1, **kw}
    with pytest.raises(ConfigError, match=flag):
        Sweep([1], args.pop("gpus_per_node"), ["bare"], **args)


def test_trainer_flags_checked_by_the_trainer_parser():
    with pytest.raises(ConfigError, match="depht"):
        Sweep([1], 4, ["bare"], train={"depht": 20})
    with pytest.raises(ConfigError, match="device_batch_size"):
        Sweep([1], 4, ["bare"], train={"device_batch_size": 0})


def test_train_argv_has_nanochat_names_and_disables_core_and_samples():
    s = Sweep([1], 4, ["bare"], train={"depth": 12, "eval_every": None, "device_batch_size": 8})
    assert s.points()[0].train_argv == ("--core_metric_every=-1", "--depth=12", "--device_batch_size=8",
                                        "--num_iterations=200", "--sample_every=-1", "--total_batch_size=65536")


def test_weak_scaling_keeps_each_ranks_work_and_strong_the_total():
    weak = Sweep([1, 2, 4], 4, ["bare"], train={"device_batch_size": 16})
    assert [(p.device_batch_size, p.grad_accum, p.total_batch_size) for p in weak.points()] == \
        [(16, 1, 16 * 2048 * 4), (16, 1, 16 * 2048 * 8), (16, 1, 16 * 2048 * 16)]
    strong = Sweep([1, 2, 4], 4, ["bare"], scaling="strong")
    assert [(p.device_batch_size, p.grad_accum, p.total_batch_size) for p in strong.points()] == \
        [(32, 2, 524288), (32, 1, 524288), (16, 1, 524288)]
    with pytest.raises(ConfigError, match="--total_batch_size is what weak scaling grows"):
        Sweep([1], 4, ["bare"], train={"total_batch_size": 524288})
    with pytest.raises(ConfigError, match="--scaling 'both'"):
        Sweep([1], 4, ["bare"], scaling="both")


@pytest.mark.parametrize("text,minutes", [("90", 90), ("01:30:00", 90), ("1-00:00:00", 1440), ("00:00:30", 1),
                                          ("2-12", 3600), ("5:30", 6), ("1-02:03", 1563)])
def test_time_limits_in_slurms_forms(text, minutes):
    assert parse_minutes(text) == minutes
    assert Sweep([1], 2, ["bare"], train={"device_type": "cpu"}, time=text).points()[0].time_minutes == minutes


def test_a_time_limit_slurm_cannot_hold_is_refused_before_anything_is_written():
    """--time 99999999999999 was planned and written into every job, which sbatch then refused."""
    with pytest.raises(ConfigError, match=r"--time '99999999999999' is more than Slurm can take \(at most 4,294,96"):
        parse_minutes("99999999999999")
    assert parse_minutes("365-00:00:00") == 365 * 1440


def test_time_limit_covers_the_estimate_with_margin():
    p = Sweep([1], 4, ["bare"], train={"num_iterations": 2000}).points()[0]
    assert p.time_minutes >= p.est_hours * 60 * 1.25 and p.time_minutes % 5 == 0


def test_a_time_limit_under_the_estimate_is_said_in_the_plan():
    """--time 00:01:00 for a run estimated at minutes was shown like any limit, and the run ended as timeout before
    its training started; the row's note says so. The default limit, the estimate with time to spare, says nothing."""
    short = Sweep([1], 4, ["bare"], time="00:01:00")
    minutes = -(-short.points()[0].est_hours * 60 // 1)
    assert f"--time 00:01:00 is under the run's estimate of {minutes:.0f} min: it ends as timeout before its last " \
           f"step" in format_table(short)
    assert "under the run's estimate" not in format_table(Sweep([1], 4, ["bare"]))
    assert "under the run's estimate" not in format_table(Sweep([1], 4, ["bare"], time="12:00:00"))


def test_a_time_limit_whose_deadline_margin_leaves_less_than_the_estimate_is_said_in_the_plan():
    """The trainer stops its deadline margin before the limit to save a checkpoint: --time 00:28:00 for a run
    estimated at 27 minutes got no note, yet the trainer had 25.2 of them and the run ended as timeout."""
    sweep = Sweep([1], 4, ["bare"], train={"num_iterations": 2000}, time="00:28:00")
    p = sweep.points()[0]
    assert 26 < p.est_hours * 60 <= 27
    assert p.short_time_note() == ("--time 00:28:00 gives the trainer 25.2 min, under the run's estimate of 27 min: "
                                   "it stops 168 s before the limit to save its checkpoint, and ends as timeout "
                                   "before its last step")
    assert "--time 00:28:00 gives the trainer 25.2 min" in format_table(sweep)
    assert Sweep([1], 4, ["bare"], train={"num_iterations": 2000}, time="00:30:00").points()[0].short_time_note() \
        is None


def test_train_arg_pairs():
    assert parse_train_args(["warmdown_ratio=0.1", "--run=x"]) == {"warmdown_ratio": "0.1", "run": "x"}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_train_args(["warmdown_ratio"])


def test_table_shows_batches_impossible_points_and_node_hours():
    text = format_table(Sweep(parse_nodes("1,2,3,8"), 4, parse_names("bare,ce,pyxis"), repeats=3, scaling="strong"))
    lines = text.splitlines()
    assert lines[0].split() == ["nodes", "runtime", "repeats", "ranks", "device_bs", "grad_accum", "total_batch",
                                "steps", "val_K", "time", "est_node_h", "note"]
    row8 = next(ln for ln in lines if ln.startswith("8 ") and "bare" in ln).split()
    assert row8[:8] == ["8", "bare", "3", "32", "8", "1", "524,288", "200"]
    assert "impossible: total_batch_size 524,288 is not a multiple" in text
    assert "27 runs" in text and "node-hours estimated" in text


def test_the_table_says_what_its_time_and_batch_columns_count():
    """total_batch is in tokens, time is one run's limit while est_node_h covers all repeats; the headers (read as
    they are by scripts) said none of it, so a line under the table does."""
    lines = format_table(Sweep(parse_nodes("1"), 4, parse_names("bare"), repeats=3)).splitlines()
    assert lines[2] == ("time: each run's limit; est_node_h: estimated node-hours of all its repeats; "
                        "total_batch: tokens per optimizer step, over all ranks")


def test_node_hours_grow_with_nodes_and_are_unknown_on_cpu():
    s = Sweep([1, 2], 4, ["bare"], scaling="strong")
    one, two = (p.node_hours for p in s.points())
    assert 0 < one < two < 2 * one  # compute is shared, the start-up allowance is paid on every node
    cpu = Sweep([1], 2, ["bare"], train={"device_type": "cpu"})
    assert cpu.points()[0].node_hours is None and "no estimate on CPU" in format_table(cpu)


def test_node_hours_count_the_image_step_the_jobs_time_limit_gives_it():
    """podman's per-node image step runs before srun, in the job's time (job_minutes): node-hours left it out."""
    from bench.launch.job import IMAGE_STEP_MINUTES

    bare, podman = Sweep([2], 4, ["bare", "podman"]).points()
    assert podman.node_hours - bare.node_hours == pytest.approx(2 * IMAGE_STEP_MINUTES / 60)
    assert f"+ {IMAGE_STEP_MINUTES} min image step" in format_table(Sweep([2], 4, ["podman"]))
    assert "image step" not in format_table(Sweep([2], 4, ["bare"]))


@pytest.mark.parametrize("row_groups,nodes", [((2,) * 8, [1]), ((2,) * 8, [1, 2]), ((1,) * 4 + (4,) * 4, [1])])
def test_the_shards_a_small_run_needs_give_every_rank_a_row_group_of_each_split(row_groups, nodes):
    """A few steps' tokens fit one shard, so the plan asked for it plus K: 8 shards of 2 row groups at 4 ranks (K=2)
    got `data download -n 3`, whose 2 training row groups could not serve the 4 ranks and the runs stopped at
    start-up. Now the count holds enough row groups for the largest point in both splits, as the loader requires."""
    from bench.launch.plan import DataShape
    from bench.nanochat.dataset import split_of

    sweep = Sweep(nodes, 4, ["bare"], data=DataShape(row_groups, "given"),
                  train={"depth": 2, "max_seq_len": 64, "device_batch_size": 1, "num_iterations": 5})
    point = max(sweep.points(), key=lambda p: p.ranks)

    def loader_starts(n: int) -> bool:  # the first n shards downloaded, split by the loader's rule, K = the plan's
        shards = list(range(n))
        return all(sum(row_groups[i] for i in split_of(shards, split, point.val_files_k)) >= point.ranks
                   for split in ("train", "val"))

    expected = next(n for n in range(point.val_files_k + 1, len(row_groups) + 1) if loader_starts(n))
    assert sweep.shards_needed() == expected > point.val_files_k + 1


@pytest.mark.parametrize("data,split_tokens,expected", [
    (((1,) * 16), 1_048_576, 16),  # 8 ranks: K=8, and 8 training shards of 1 row group
    (((52,) * 250), 1_048_576, 2),  # FineWeb-Edu's: K=1, and a training shard
    (None, 1_048_576_000, 24)])  # ~1e9 tokens: 23 training shards (52M a shard, +10%), + K=1
def test_the_shards_base_loss_needs_hold_its_train_split_tokens_and_serve_every_rank(data, split_tokens, expected):
    """base_loss trains no tokens, so the plan counted no shards it needs and the interactive guide downloaded 8:
    at 8 ranks of shards of 1 row group (K=8) none was left for its train split, and the run stopped at start-up.
    It reads the train split's first split_tokens and needs a row group a rank in both splits, as training does."""
    from bench.launch.plan import DataShape

    sweep = Sweep([1], 8, ["bare"], workload="base_loss", data=data and DataShape(data, "given"),
                  train={"split_tokens": split_tokens, "device_batch_size": 1, "max_seq_len": 128})
    [point] = sweep.points()
    assert point.possible, point.reason
    assert sweep.shards_needed() == expected
