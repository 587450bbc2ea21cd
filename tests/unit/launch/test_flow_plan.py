"""A flow's planning: its stages chosen (`--stages`, errors naming the valid ones), every stage planned by its
own workload, the plan table with a row per stage and the job's time limit covering them all, the chained
flags of each point (its own model tag; pre-training saving at its end), and the job's run directories.

    python -m pytest tests/unit/launch/test_flow_plan.py -q
"""

import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench import cli, sites, workloads
from bench.errors import ConfigError, DataError
from bench.launch import flow
from bench.launch.flow import FLOWS, FlowSweep, Stage, rechain, select
from bench.launch.job import LaunchOptions

TINY = {"device_type": "cpu", "depth": 2, "max_seq_len": 64, "device_batch_size": 2, "num_iterations": 6}
TINY_FLAGS = [f"--{k}={v}" for k, v in TINY.items()]  # the same on a command line
# Two pre-training stages chained by the point's tag: a flow whose every stage is registered in any build
TWICE = (Stage("base_train", "nanochat", (("model_tag", "{tag}"), ("save_every", "{num_iterations}"))),
         Stage("again", "nanochat", (("model_tag", "{tag}-again"),)))


@pytest.fixture
def twice(monkeypatch):
    monkeypatch.setitem(FLOWS, "twice", TWICE)
    return "twice"


def sweep(name="speedrun", stages="base_train", nodes=(1,), **kw) -> FlowSweep:
    return FlowSweep.build(name, stages, dict(TINY), kw.pop("stage_args", []), nodes=list(nodes), gpus_per_node=2,
                           runtimes=["bare"], **kw)


def stand_in_stages(monkeypatch, run=None) -> None:
    """The local flow with a tokenizer already there and `run` for each stage's local run (default: one that
    completes, as `completed` records it)."""
    from bench.launch import local

    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: None)
    monkeypatch.setattr(local, "run_local", run or (lambda argv, nproc, run_dir, **kw: completed(run_dir)))


def completed(run_dir: Path) -> int:
    """A stage's run directory as a trainer that ended ok leaves it; its exit code."""
    from bench import contract

    run_dir.mkdir(parents=True)
    contract.record_evidence(run_dir, contract.Evidence(source="trainer", kind="completed"))
    return 0


def test_the_speedrun_is_upstreams_order_of_stages():
    assert [s.name for s in FLOWS["speedrun"]] == ["base_train", "base_loss", "base_eval", "mid_train",
                                                    "chat_eval_mid", "chat_sft", "chat_eval_sft"]
    mid, sft = FLOWS["speedrun"][4], FLOWS["speedrun"][6]
    assert dict(mid.chain)["source"] == "mid" and dict(sft.chain)["source"] == "sft"


def test_stages_come_in_the_flows_order_whatever_order_they_are_named(twice):
    assert [s.name for s in select(twice, "again,base_train")] == ["base_train", "again"]
    assert [s.name for s in select(twice, None)] == ["base_train", "again"]


def test_an_unknown_stage_is_one_error_listing_the_valid_ones(twice):
    with pytest.raises(ConfigError, match=r"'mid' is not a stage of the flow twice; valid: base_train, again"):
        select(twice, "base_train,mid")
    with pytest.raises(ConfigError, match="name each stage once"):
        select(twice, "again,again")
    with pytest.raises(ConfigError, match="unknown flow; valid: speedrun"):
        select("nope", None)


def test_an_empty_stage_name_is_refused_not_read_as_the_whole_flow_or_dropped(twice):
    # `--stages "$STAGES"` with the variable unset ran every stage; `a,,b` dropped the empty name unsaid
    for given in ("", "base_train,,again", " , "):
        with pytest.raises(ConfigError, match=rf"--stages '{re.escape(given)}': an empty stage name; "
                                              r"give stage names, comma-separated; valid: base_train, again"):
            select(twice, given)


def test_an_empty_stages_flag_without_a_flow_is_refused_as_a_given_one_is(capsys):
    assert cli.main(["plan", "--stages", "", "--row-groups", "8", "--shards", "4"]) == 1
    assert "--stages goes with --flow" in capsys.readouterr().err


def test_a_stage_whose_workload_is_not_registered_is_refused_naming_it(monkeypatch):
    monkeypatch.setitem(FLOWS, "partial", (TWICE[0], Stage("later", "no_such_stage_workload")))
    with pytest.raises(ConfigError, match=r"later needs the workload 'no_such_stage_workload'.*valid: base_train"):
        select("partial", "base_train,later")
    assert [s.name for s in select("partial", "base_train")] == ["base_train"]
    fs = sweep("partial", None)  # the whole flow: what this installation cannot run is left out, and said so
    assert [s.name for s in fs.stages] == ["base_train"] and fs.left_out == ["later"]
    assert "left out: later (later not registered in this installation)" in flow.format_table(fs)


def test_a_stage_arg_of_an_unknown_or_unregistered_stage_names_the_valid_ones_not_stages(monkeypatch):
    """The first was told to write STAGE:KEY=VALUE, as if malformed; the second to add it to --stages, which refuses
    a stage whose workload is not registered."""
    with pytest.raises(ConfigError, match=r"^--stage-arg 'nope:num_iterations=2': unknown stage 'nope', not one of "
                                          r"the flow speedrun; valid: base_train$"):
        sweep(stage_args=["nope:num_iterations=2"])
    monkeypatch.setitem(FLOWS, "partial", (TWICE[0], Stage("later", "no_such_stage_workload")))
    with pytest.raises(ConfigError, match=r"^--stage-arg 'later:num_iterations=2': later needs the workload "
                                          r"'no_such_stage_workload', which this installation does not register; "
                                          r"valid: base_train$"):
        sweep("partial", None, stage_args=["later:num_iterations=2"])


def test_a_missing_checkpoint_whose_saving_stage_is_not_registered_is_not_sent_to_stages(monkeypatch, tmp_path):
    """The advice was to add the saving stage to --stages, which refuses a stage whose workload is not registered."""
    saver = Stage("base_train", "no_such_stage_workload", saves="base")
    monkeypatch.setitem(FLOWS, "partial", (saver, Stage("base_loss", "base_loss", (("model_tag", "{tag}"),))))
    fs = sweep("partial", "base_loss")
    assert flow.missing_checkpoints(fs, str(tmp_path), set(), "t") == [
        f"base_loss loads the base checkpoint, which {tmp_path}/base_checkpoints/t does not hold (base_train saves "
        f"it, but needs the workload 'no_such_stage_workload', which this installation does not register)"]
    monkeypatch.setitem(FLOWS, "partial", (replace(saver, workload="nanochat"), FLOWS["partial"][1]))
    assert flow.missing_checkpoints(fs, str(tmp_path), set(), "t")[0].endswith(
        "(base_train saves it: add it to --stages)")


def test_every_registered_speedrun_stage_can_be_planned():
    registered = [s.name for s in FLOWS["speedrun"] if s.workload in workloads.names()]
    fs = sweep(stages=",".join(registered))
    assert [s.name for s in fs.stages] == registered
    [(_, stage_points)] = fs.points()
    assert all(p.possible for p in stage_points), [p.reason for p in stage_points]


def test_each_point_chains_its_stages_through_its_own_model_tag(twice):
    fs = sweep(twice, None, nodes=(1, 2))
    (p1, s1), (p2, s2) = fs.points()
    tag1, tag2 = (flow.model_tag(Path("/runs/sw") / p.run_id) for p in (p1, p2))
    assert re.fullmatch(r"sw-n1-bare-r1-[0-9a-f]{8}", tag1) and tag2.startswith("sw-n2-bare-r1-")
    first = fs.stage_argv(fs.stages[0], s1[0], tag1)
    assert f"--model_tag={tag1}" in first and "--save_every=6" in first  # saves at its last step
    assert f"--model_tag={tag2}-again" in fs.stage_argv(fs.stages[1], s2[1], tag2)
    assert rechain(("--a=1", "--b=2"), {"b": "x", "c": "y"}) == ("--a=1", "--b=x", "--c=y")


def test_stage_args_reach_their_stage_only_and_the_device_type_every_stage(twice):
    fs = sweep(twice, None, stage_args=["again:num_iterations=3"])
    [(_, (first, again))] = fs.points()
    assert "--num_iterations=6" in first.train_argv and "--num_iterations=3" in again.train_argv
    assert all("--device_type=cpu" in p.train_argv for p in (first, again))
    with pytest.raises(ConfigError, match=r"unknown stage 'mid_train', not one of the flow twice; valid: base_train, "
                                          r"again$"):
        sweep(twice, None, stage_args=["mid_train:num_iterations=3"])


def test_a_stage_arg_of_a_stage_left_out_of_stages_says_so_and_one_without_a_key_is_named_whole():
    # the first was told to give STAGE one of base_train, "e.g. mid_train:num_iterations=20"; the second was
    # named as '' alone
    with pytest.raises(ConfigError, match=r"^--stage-arg 'mid_train:num_iterations=2': mid_train is not among the "
                                          r"stages run \(base_train\); add it to --stages or leave this"):
        sweep(stage_args=["mid_train:num_iterations=2"])
    for given in ("base_train:", "base_train:=3", "base_train:depth"):
        with pytest.raises(ConfigError, match=rf"^--stage-arg '{given}': give STAGE:KEY=VALUE with STAGE one of "
                                              r"base_train"):
            sweep(stage_args=[given])


def test_a_stage_arg_without_its_stage_name_says_the_name_is_missing_not_that_a_stage_is_unknown():
    # 'key=a:b' was read as the stage 'key=a', unknown to the flow
    for given, example in (("num_iterations=a:b", "num_iterations=a:b"), (":num_iterations=2", "num_iterations=2"),
                           ("num_iterations=2", "num_iterations=2")):
        with pytest.raises(ConfigError, match=rf"^--stage-arg '{given}': no stage name before the key; give "
                                              rf"STAGE:KEY=VALUE with STAGE one of base_train, e.g. "
                                              rf"base_train:{example}$"):
            sweep(stage_args=[given])


def test_a_stage_arg_value_its_stage_cannot_read_is_named_as_written(twice, tmp_path, capsys):
    # the stage's parser named only its own flag ("bench.nanochat.base_loss: argument --split_tokens: invalid int
    # value"), not the --stage-arg given; refused before the tokenizer or the point's directory
    assert cli.main(["speedrun", "--device_type=cpu", "--depth=2", "--stages", "base_loss", "--stage-arg",
                     "base_loss:split_tokens=abc", "--run-dir", str(tmp_path / "r")]) == 1
    assert capsys.readouterr().err.strip() == ("error: --stage-arg base_loss:split_tokens=abc: base_loss's "
                                               "--split_tokens takes a whole number")
    assert not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match=r"^--stage-arg again:warmdown_ratio=half: again's --warmdown_ratio takes "
                                          r"a number$"):
        sweep(twice, None, stage_args=["again:warmdown_ratio=half"])
    with pytest.raises(ConfigError, match=r"^--train-arg num_iterations=six: base_train's --num_iterations takes a "
                                          r"whole number$"):
        FlowSweep.build(twice, None, {**TINY, "num_iterations": "six"}, [], nodes=[1], gpus_per_node=2,
                        runtimes=["bare"])
    assert cli.main(["plan", "--train-arg", "num_iterations=six"]) == 1
    assert "error: --train-arg num_iterations=six: nanochat's --num_iterations takes a whole number" in \
        capsys.readouterr().err
    # a key pre-training does not take, met where the flow reads the model the later stages load
    assert cli.main(["plan", "--flow", "speedrun", "--train-arg", "bogus=1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: base_train: unknown argument(s): bogus=1; valid keys (--train-arg")
    # a stage's own key is named as given: --train-arg would give it to pre-training
    for stage in ("base_train", "chat_sft"):
        assert cli.main(["plan", "--flow", "speedrun", "--stage-arg", f"{stage}:bogus=1"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {stage}: unknown argument(s): bogus=1; valid keys (--stage-arg {stage}:KEY=")


def test_the_valid_keys_offered_for_an_unknown_key_leave_out_those_the_flow_sets_itself(capsys):
    # model_tag was offered, and given, refused: 'the flow sets base_loss's --model_tag itself ...; leave it out'
    for stage, chained in (("base_train", ("model_tag", "save_every")), ("base_loss", ("model_tag",)),
                           ("chat_eval_mid", ("model_tag", "source"))):
        assert cli.main(["plan", "--flow", "speedrun", "--stage-arg", f"{stage}:bogus=1"]) == 1
        valid = capsys.readouterr().err.strip().partition("KEY=VALUE): ")[2].split(", ")
        assert "run" in valid and not set(chained) & set(valid), (stage, valid)
    assert cli.main(["plan", "--flow", "speedrun", "--train-arg", "bogus=1"]) == 1
    valid = capsys.readouterr().err.strip().partition("KEY=VALUE): ")[2].split(", ")
    assert "depth" in valid and "model_tag" not in valid and "save_every" not in valid
    # nor is one of them the hint (it would be refused in turn), a key the stage takes is
    assert cli.main(["plan", "--flow", "speedrun", "--stage-arg", "base_loss:model_tagg=x"]) == 1
    assert "(did you mean model_step?)" in capsys.readouterr().err


def test_a_pre_training_stage_arg_that_disagrees_with_a_trainer_flag_is_refused_not_taken_without_a_word():
    # `--depth 2 --stage-arg base_train:depth=3` trained a d3 model, the --depth given left unused unsaid
    with pytest.raises(ConfigError, match=r"^--stage-arg base_train:depth=3 and the trainer flags' depth=2 \(--depth "
                                          r"or --train-arg depth=\) disagree; give depth once$"):
        sweep(stage_args=["base_train:depth=3"])
    [(_, [point])] = sweep(stage_args=["base_train:depth=2", "base_train:aspect_ratio=32"]).points()
    assert "--depth=2" in point.train_argv and "--aspect_ratio=32" in point.train_argv


def test_a_stage_value_its_checks_refuse_is_named_with_its_stage():
    # 'error: --device_batch_size=0: must be a positive integer' after `--device_batch_size 2`: whose, unsaid
    with pytest.raises(ConfigError, match=r"^base_loss: --device_batch_size=0: must be a positive integer$"):
        sweep(stages="base_train,base_loss", stage_args=["base_loss:device_batch_size=0"])
    with pytest.raises(ConfigError, match=r"^chat_eval_sft: -m/--max-new-tokens=0: must be at least 1$"):
        sweep(stages="chat_eval_sft", stage_args=["chat_eval_sft:max_new_tokens=0"])
    with pytest.raises(ConfigError, match=r"^base_train: --total_batch_size=0: must be"):
        sweep(stage_args=["base_train:total_batch_size=0"])
    with pytest.raises(ConfigError, match=r"^--gpus-per-node 0 must be"):  # the sweep's, no stage's
        FlowSweep.build("speedrun", "base_loss", dict(TINY), [], nodes=[1], gpus_per_node=0, runtimes=["bare"])


def test_a_chained_flag_given_is_refused_not_replaced_without_a_word(twice):
    # the flow's own value would replace it: the stage would save or load under a tag other than the one asked
    with pytest.raises(ConfigError, match=r"--stage-arg again:model_tag=mine: the flow sets again's --model_tag "
                                          r"itself \(<sweep>-<point>-<hash>-again\)"):
        sweep(twice, None, stage_args=["again:model_tag=mine"])
    with pytest.raises(ConfigError, match=r"--train-arg save_every=2: .* \(<num_iterations>\)"):
        FlowSweep.build(twice, None, {**TINY, "save_every": "2"}, [], nodes=[1], gpus_per_node=2, runtimes=["bare"])
    with pytest.raises(ConfigError, match=r"chat_eval_mid's --source itself \(mid\)"):
        flow.refuse_chained(FLOWS["speedrun"][4], {"source": "base"}, "--stage-arg chat_eval_mid:")


def test_the_plan_table_has_each_stage_and_a_job_limit_covering_them_all(twice, capsys):
    assert cli.main(["plan", "--flow", twice, "--nodes=1,2", "--gpus-per-node=2", *TINY_FLAGS,
                     "--stage-arg", "again:num_iterations=3"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    stage_rows = [r for r in rows if len(r) > 4 and r[4] in ("base_train", "again")]
    assert [(r[0], r[4]) for r in stage_rows] == [("1", "base_train"), ("1", "again"), ("2", "base_train"),
                                                  ("2", "again")]
    assert "steps=6" in " ".join(stage_rows[0]) and "steps=3" in " ".join(stage_rows[1])
    assert "total_batch=256" in " ".join(stage_rows[0]) and "total_batch=512" in " ".join(stage_rows[2])
    jobs = [r for r in rows if r[4:6] == ["=", "job"]]
    # two stages of 30 min, a minute each around them, and the tokenizer's 20 min: the 3 shards planned hold
    # 750M characters, at 2M/s 6.25 min, given time as the plan gives a run (x 1.25 + 10, in whole five minutes)
    assert [r[-1] for r in jobs] == ["01:22:00", "01:22:00"]
    assert "(each job's time has 20 min for it: one job trains it, the others wait for it)" in out
    assert "2 job(s), one per point" in out
    # est_h is a stage's hours in one job, not node-hours as the plan's est_node_h; total_batch is in tokens
    assert ("time: each stage's limit, the whole job's on its job row; est_h: a stage's estimated wall-clock hours in "
            "one job (not node-hours); total_batch: tokens per optimizer step, over all ranks") in out.splitlines()


def test_the_flow_plan_names_the_image_steps_minutes_its_job_limit_holds(twice, capsys):
    """With podman the job's limit held an image step before the tokenizer and before each stage, but the note gave
    only the tokenizer's minutes: the 20 minutes more in the job's limit went unexplained."""
    from bench.launch.job import IMAGE_STEP_MINUTES

    argv = ["plan", "--flow", twice, "--nodes=1", "--gpus-per-node=2", *TINY_FLAGS]
    assert cli.main([*argv, "--runtimes=bare"]) == 0
    assert "image step" not in capsys.readouterr().out
    assert cli.main([*argv, "--runtimes=podman"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[-1] for line in out.splitlines() if "= job" in line] == ["01:52:00"]  # 82 min + 3 x 10
    assert f"under podman, + {IMAGE_STEP_MINUTES} min image step before the tokenizer and before each stage" in out


def test_flow_flags_without_a_flow_and_a_flow_with_a_workload_are_refused(capsys):
    assert cli.main(["plan", "--stages", "base_train"]) == 1
    assert "--stages goes with --flow" in capsys.readouterr().err
    assert cli.main(["plan", "--flow", "speedrun", "--stages", "base_train", "--workload", "nntile"]) == 1
    assert "leave out --workload" in capsys.readouterr().err


def test_a_flow_over_the_partitions_limit_is_refused_naming_it(twice, tmp_path):
    site = sites.load("alps")
    fs = sweep(twice, None, time="07:00:00")  # each stage alone fits normal's 12 h; the two together do not
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), site=site, partition="normal", check_images=False)
    with pytest.raises(ConfigError, match=r"n1-bare-r1 \(its 2 stages in one job\): its time limit 14:22:00 is "
                                          r"over partition normal's 12:00:00; run part of its stages per sweep "
                                          r"\(--stages\)"):
        flow.assemble(fs, opts, tmp_path / "sw", note=lambda _: None)


def test_the_plan_says_which_flow_jobs_the_sites_default_partition_would_refuse(twice, capsys):
    """The plan shows what render and submit then refuse: a job over the default partition's limit."""
    argv = ["plan", "--flow", twice, "--site", "alps", "--nodes=1,2", "--gpus-per-node=2", *TINY_FLAGS,
            "--time", "07:00:00"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    jobs = [line for line in out.splitlines() if "= job" in line]
    assert len(jobs) == 2 and all("not submitted: its time limit 14:22:00 is over partition normal's 12:00:00" in j
                                  for j in jobs)
    assert "run part of its stages per sweep (--stages)" in out and "0 job(s), one per point" in out
    assert cli.main(argv[:-2] + ["--time", "05:00:00"]) == 0  # two stages of 5 h fit
    out = capsys.readouterr().out
    assert "not submitted" not in out and "2 job(s), one per point" in out


def test_the_job_puts_each_stage_in_its_own_run_directory_below_the_point(twice, tmp_path):
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), check_images=False)
    [fj] = flow.assemble(sweep(twice, None), opts, tmp_path / "sw", note=lambda _: None)
    assert [r.run_id for r in fj.job.runs] == ["n1-bare-r1/base_train", "n1-bare-r1/again"]
    assert [r.run_dir for r in fj.job.runs] == [tmp_path / "sw" / "n1-bare-r1" / s for s in ("base_train", "again")]
    assert fj.job.job_dir == tmp_path / "sw" / "n1-bare-r1"
    assert fj.job.runs[0].manifest["stage"] == "base_train" and fj.job.runs[0].manifest["run_id"] == "n1-bare-r1"
    from bench.launch.flowrender import render_flow

    flow.write_flow_job(fj, render_flow(fj))
    record = json.loads((fj.point_dir / flow.FLOW_JSON).read_text())
    assert record["model_tag"] == fj.tag == flow.model_tag(tmp_path / "sw" / "n1-bare-r1")
    assert [s["name"] for s in record["stages"]] == ["base_train", "again"]


def test_a_run_dir_that_cannot_be_made_is_refused_in_one_line_before_the_tokenizer(tmp_path, monkeypatch):
    from bench.errors import RunDirError

    trained = []
    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: trained.append(a))
    (tmp_path / "file").write_text("kept")
    # a file in the way of a parent is named, not said to be "of that name" (the run directory's)
    for point, reason in ((tmp_path / "file", "a file of that name is in the way, not a directory"),
                          (tmp_path / "file" / "point" / "deeper", f"{tmp_path / 'file'} is a file in the way, not "
                                                                   f"a directory")):
        with pytest.raises(RunDirError, match=rf"^the run directory {point} cannot be written: {reason}$"):
            flow.run_local_flow(sweep(), 2, point)
    assert not trained and (tmp_path / "file").read_text() == "kept"  # no tokenizer trained for a flow refused


def test_a_run_dir_of_a_run_or_a_stage_is_refused_before_the_tokenizer(tmp_path, monkeypatch):
    # `--run-dir runs/speedrun/x/base_train` (or a `train` run's directory) ran the flow inside it
    trained = []
    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: trained.append(a))
    point = tmp_path / "point" / "base_train"
    point.mkdir(parents=True)
    (point / "run.json").write_text("{}")
    with pytest.raises(ConfigError, match=rf"^--run-dir {point} holds a run \(run.json\), not a flow's stages; give a "
                                          r"new directory, or the point directory of a flow \(the one above"):
        flow.run_local_flow(sweep(), 2, point)
    assert not trained and sorted(p.name for p in point.iterdir()) == ["run.json"]


@pytest.mark.parametrize("value", ["0", "-2", "abc"])
def test_a_bad_val_files_k_is_refused_before_the_tokenizer_or_a_point_directory(tmp_path, monkeypatch, value):
    """`speedrun` with NANOCHAT_VAL_FILES_K=0 trained the tokenizer and started base_train's ranks, which refused
    it, the run ending `failed`: it is now refused before anything starts, in the ranks' words."""
    trained = []
    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: trained.append(a))
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", value)
    with pytest.raises(DataError, match=rf"^NANOCHAT_VAL_FILES_K={value!r} is not a number of validation files"):
        flow.run_local_flow(sweep(), 2, tmp_path / "point")
    assert not trained and not (tmp_path / "point").exists()


def test_a_python_that_is_not_there_is_refused_before_the_tokenizer_or_a_point_directory(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: trained.append(a))
    with pytest.raises(ConfigError, match=r"^--python=/nowhere/python: no such interpreter"):
        flow.run_local_flow(sweep(), 2, tmp_path / "point", python="/nowhere/python")
    assert not trained and not (tmp_path / "point").exists()


def test_a_second_flow_on_a_point_in_use_is_refused_and_leaves_the_running_stage_alone(tmp_path, monkeypatch,
                                                                                       no_tokenizer):
    """A second `speedrun` on the same --run-dir set the first's running stage aside and trained beside it."""
    import subprocess

    from bench.runside.runclaim import RunDirBusy

    point = tmp_path / "point"
    (point / "base_train").mkdir(parents=True)
    (point / "base_train" / "run.json").write_text(json.dumps({"status": "running"}))
    hold = "import sys, time; from bench.runside import runclaim; runclaim.claim(sys.argv[1]); print('held', " \
           "flush=True); time.sleep(60)"
    first = subprocess.Popen([sys.executable, "-c", hold, str(point)], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy, match=rf"{point} is in use by another run \(pid {first.pid} "):
            flow.run_local_flow(sweep(stages="base_train"), 2, point)
    finally:
        first.kill()
        first.wait()
    assert sorted(p.name for p in point.iterdir()) == [".lock", "base_train"]  # nothing set aside, no flow.json
    with pytest.raises(Reached):  # the first one gone, the point is free again
        flow.run_local_flow(sweep(stages="base_train"), 2, point)


def test_a_stage_failing_leaves_the_earlier_runs_of_the_stages_after_it_as_they_ended(twice, tmp_path, monkeypatch):
    """The not-run mark went into the run.json of an earlier run of a later stage: an ok one was called
    cancelled in the summary, with a not_run beside its figures; a failed one had its logs mixed with the mark."""
    from bench import contract

    def failing(argv, nproc, run_dir, **kw):
        run_dir.mkdir(parents=True)
        (run_dir / contract.TRAIN_LOG).write_text("boom\n")
        contract.record_evidence(run_dir, contract.Evidence(source="trainer", kind="error", message="boom"))
        return 1

    stand_in_stages(monkeypatch, failing)
    point = tmp_path / "point"
    (point / "again").mkdir(parents=True)
    (point / "again" / "run.json").write_text(json.dumps({"status": "ok", "scores": {"x": 1}}))
    result = flow.run_local_flow(sweep(twice, None), 2, point)
    assert result.statuses == {"base_train": "failed", "again": "ok"} and result.failed == "base_train"
    assert json.loads((point / "again" / "run.json").read_text()) == {"status": "ok", "scores": {"x": 1}}

    (point / "again" / "run.json").write_text(json.dumps({"status": "failed"}))  # an attempt of its own, failed
    (point / "again" / contract.TRAIN_LOG).write_text("its own log\n")
    assert flow.run_local_flow(sweep(twice, None), 2, point).statuses["again"] == "cancelled"
    [earlier] = point.glob("again.attempt-*")
    assert (earlier / contract.TRAIN_LOG).read_text() == "its own log\n"
    assert json.loads((earlier / "run.json").read_text()) == {"status": "failed"}
    assert contract.read_run_json(point / "again")["status"] == "cancelled"


def test_a_rerun_keeps_the_stages_that_ran_as_attempts_not_the_not_run_marks_of_those_that_never_started(
        twice, tmp_path, monkeypatch):
    """A rerun after a Ctrl-C set aside each later stage's not-run mark as <stage>.attempt-<time> too: 'collect' and
    the report listed each as a cancelled run, a failed run that never started."""
    from bench import contract

    def stopped(argv, nproc, run_dir, **kw):
        run_dir.mkdir(parents=True)
        (run_dir / contract.TRAIN_LOG).write_text("step 1\n")
        contract.record_evidence(run_dir, contract.Evidence(source="launcher", kind="stopped", signal="SIGINT"))
        return 130

    stand_in_stages(monkeypatch, stopped)
    point = tmp_path / "point"
    assert flow.run_local_flow(sweep(twice, None), 2, point, out=lambda _: None).statuses == {
        "base_train": "cancelled", "again": "cancelled"}
    assert [p.name for p in (point / "again").iterdir()] == ["run.json"]  # the mark alone
    stand_in_stages(monkeypatch)
    assert flow.run_local_flow(sweep(twice, None), 2, point, out=lambda _: None).statuses == {
        "base_train": "ok", "again": "ok"}
    [earlier] = point.glob("base_train.attempt-*")  # the attempt that ran, kept whole
    assert (earlier / contract.TRAIN_LOG).read_text() == "step 1\n"
    assert not list(point.glob("again.attempt-*"))
    assert contract.read_run_json(point / "again")["status"] == "ok"


def test_a_speedrun_killed_while_training_the_tokenizer_leaves_no_tokenizer_training_on(tmp_path):
    """SIGTERM (or the terminal closing) during the tokenizer left `tokenizer train` orphaned, minutes of it."""
    import os
    import signal
    import subprocess
    import time

    pid_file, fake = tmp_path / "child.pid", tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    fake.chmod(0o755)
    code = f"from bench.launch import flow; flow.ensure_tokenizer((), {str(fake)!r}, print)"
    parent = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "NANOCHAT_BASE_DIR": str(tmp_path)},
                              stdout=subprocess.DEVNULL)
    deadline = time.time() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.time() < deadline and parent.poll() is None
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parent.send_signal(signal.SIGTERM)
    parent.wait()

    def alive() -> bool:
        try:
            return Path(f"/proc/{child}/stat").read_text().split(") ")[1][0] != "Z"
        except OSError:
            return False
    deadline = time.time() + 5
    while alive() and time.time() < deadline:
        time.sleep(0.05)
    if alive():
        os.kill(child, signal.SIGKILL)
        pytest.fail("the tokenizer's process outlived the speedrun that started it")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_speedrun_stopped_while_training_the_tokenizer_says_so_and_records_its_stages_not_run(tmp_path, sig):
    """SIGTERM to `speedrun` outside a stage (the tokenizer's training: minutes) ended it silently, exit -15, with
    no stage recorded, and Ctrl-C said only "interrupted"; now the tokenizer gets the signal, one line names it,
    the stages are recorded not run (cancelled, naming it) and the exit status is 128+N."""
    import os
    import signal
    import subprocess
    import time

    pid_file, fake = tmp_path / "child.pid", tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    fake.chmod(0o755)
    argv = ["speedrun", "--nproc", "1", "--device_type", "cpu", "--depth", "2", "--max_seq_len", "64",
            "--device_batch_size", "2", "--num_iterations", "2", "--stages", "base_train,base_loss",
            "--python", str(fake), "--run-dir", str(tmp_path / "point")]
    parent = subprocess.Popen([sys.executable, "-m", "bench.cli", *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "NANOCHAT_BASE_DIR": str(tmp_path / "base")})
    deadline = time.time() + 60
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.time() < deadline and parent.poll() is None
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parent.send_signal(getattr(signal, sig))
    try:
        output, _ = parent.communicate(timeout=30)
    finally:
        if Path(f"/proc/{child}").exists() and parent.poll() is None:
            os.kill(child, signal.SIGKILL)
    assert parent.returncode == 128 + getattr(signal, sig), output
    assert f"== speedrun: stopped by {sig} at the tokenizer's training" in output
    for stage in ("base_train", "base_loss"):
        record = json.loads((tmp_path / "point" / stage / "run.json").read_text())
        assert record["status"] == "cancelled"
        assert f"received {sig} at the tokenizer's training" in record["message"]
    assert not Path(f"/proc/{child}").exists() or \
        Path(f"/proc/{child}/stat").read_text().split(") ")[1][0] == "Z", "the tokenizer outlived the speedrun"


def test_a_stage_kept_from_a_run_with_other_flags_says_which(tmp_path, monkeypatch):
    """A rerun with another --depth kept the model trained before under the same `ok, kept` as an identical one."""
    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: None)
    fs, point, lines = sweep(), tmp_path / "point", []
    [(_, [planned])] = fs.points()
    argv = list(fs.stage_argv(fs.stages[0], planned, flow.model_tag(point.resolve())))
    for ran, note in ((argv, ""), ([a.replace("--depth=2", "--depth=4") for a in argv],
                                   " (it ran with other flags, that run's -> this command's: --depth 4 -> 2; a new "
                                   "--run-dir runs it with this command's)")):
        (point / "base_train").mkdir(parents=True, exist_ok=True)
        (point / "base_train" / "run.json").write_text(json.dumps({"status": "ok", "launch": {
            "command": ["python", "-m", "bench.launch.elastic", "--", *ran]}}))
        assert flow.run_local_flow(fs, 2, point, out=lines.append).statuses == {"base_train": "ok"}
        assert lines[-1].startswith("== speedrun: base_train ok in an earlier run of this flow, kept" + note)
    assert lines[-2].endswith("kept")  # the same flags: nothing to say


def test_a_kept_base_train_of_another_shape_than_given_beside_later_stages_says_which(tmp_path, monkeypatch):
    """--stages base_loss with --depth 4 beside a base_train kept at --depth 2: base_loss loaded the depth-2 model,
    planned as a depth-4 one, and nothing said the shapes differ; a flag left out is the trainer's default."""
    stand_in_stages(monkeypatch)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path / "base"))
    point, lines = tmp_path / "point", []
    saved = tmp_path / "base" / "base_checkpoints" / flow.model_tag(point.resolve())
    saved.mkdir(parents=True)
    for name in ("model_000006.pt", "meta_000006.json"):
        (saved / name).write_text("the kept base_train's")
    (point / "base_train").mkdir(parents=True)
    trained = sweep().stage_argv(FLOWS["speedrun"][0], sweep().points()[0][1][0], "tag")
    (point / "base_train" / "run.json").write_text(json.dumps({"status": "ok", "launch": {
        "command": ["python", "-m", "bench.launch.elastic", "--", *trained, "--aspect_ratio=64"]}}))
    fs = FlowSweep.build("speedrun", "base_loss", {**TINY, "depth": 4}, [], nodes=[1], gpus_per_node=2,
                         runtimes=["bare"])
    assert flow.run_local_flow(fs, 2, point, out=lines.append).statuses == {"base_loss": "ok"}
    assert "== speedrun: base_train ok in an earlier run of this flow, kept (it ran with other flags, that run's -> " \
           "this command's: --depth 2 -> 4; the stages load its model, their estimates take this command's)" in lines
    lines.clear()
    assert flow.run_local_flow(sweep(stages="base_loss"), 2, point, out=lines.append).statuses == {"base_loss": "ok"}
    assert not any("base_train" in line for line in lines)  # the same shape: nothing to say


def test_a_stage_kept_from_a_run_with_other_flags_names_both_values_of_each(tmp_path, monkeypatch):
    """The note listed the earlier run's flags, then 'this command gives' others: a flag only the earlier run had
    (--eval_every) got no value of this command's, and the planner's device batch read as given by the user."""
    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: None)
    fs, point, lines = sweep(), tmp_path / "point", []
    [(_, [planned])] = fs.points()
    argv = list(fs.stage_argv(fs.stages[0], planned, flow.model_tag(point.resolve())))
    ran = [a.replace("--device_batch_size=2", "--device_batch_size=4") for a in argv if a != "--sample_every=-1"]
    (point / "base_train").mkdir(parents=True)
    (point / "base_train" / "run.json").write_text(json.dumps({"status": "ok", "launch": {
        "command": ["python", "-m", "bench.launch.elastic", "--", *ran, "--eval_every", "-1", "--fp8"]}}))
    assert flow.run_local_flow(fs, 2, point, out=lines.append).statuses == {"base_train": "ok"}
    assert lines[-1] == ("== speedrun: base_train ok in an earlier run of this flow, kept (it ran with other flags, "
                         "that run's -> this command's: --device_batch_size 4 -> 2, --eval_every -1 -> not given, "
                         "--fp8 given -> not given, --sample_every not given -> -1; a new --run-dir runs it with "
                         "this command's)")


def test_a_stage_kept_from_a_run_json_whose_launch_is_null_is_kept_without_a_word(tmp_path, monkeypatch):
    """A run.json whose launch section is null (the record admits one; written by hand or by another tool) stopped
    the rerun on an AttributeError."""
    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: None)
    fs, point, lines = sweep(), tmp_path / "point", []
    (point / "base_train").mkdir(parents=True)
    (point / "base_train" / "run.json").write_text(json.dumps({"status": "ok", "launch": None}))
    assert flow.run_local_flow(fs, 2, point, out=lines.append).statuses == {"base_train": "ok"}
    assert lines[-1].endswith("base_train ok in an earlier run of this flow, kept")


def test_a_training_stage_run_again_sets_aside_the_checkpoints_of_its_earlier_attempt(tmp_path, monkeypatch):
    """base_train run again with fewer steps saved step 4 beside an earlier attempt's step 6, and base_loss, loading
    the largest step, measured the old model without a word."""
    stand_in_stages(monkeypatch)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path / "base"))
    point, lines = tmp_path / "sw" / "point", []
    old = tmp_path / "base" / "base_checkpoints" / flow.model_tag(point.resolve())
    old.mkdir(parents=True)
    (old / "model_000006.pt").write_text("the earlier attempt's")
    assert flow.run_local_flow(sweep(), 2, point, out=lines.append).statuses == {"base_train": "ok"}
    assert not old.exists()
    [aside] = old.parent.glob(f"{old.name}.attempt-*")
    assert (aside / "model_000006.pt").read_text() == "the earlier attempt's"  # kept whole
    assert f"checkpoints of an earlier attempt in {old} moved to {aside}" in "\n".join(lines)


def test_two_points_of_one_name_in_different_places_never_share_checkpoints(tmp_path, monkeypatch):
    """.../a/speedrun/cpu-demo and .../b/speedrun/cpu-demo were both tagged speedrun-cpu-demo: the second's base_train
    set the first's model aside as an earlier attempt, and the first's later stages would have loaded the second's."""
    def saves(argv, nproc, run_dir, **kw):  # base_train saving its step under the tag the flow gives it
        tag = next(a.split("=", 1)[1] for a in argv if a.startswith("--model_tag="))
        (tmp_path / "base" / "base_checkpoints" / tag).mkdir(parents=True)
        (tmp_path / "base" / "base_checkpoints" / tag / "model_000006.pt").write_text(str(run_dir))
        return completed(run_dir)

    stand_in_stages(monkeypatch, saves)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path / "base"))
    first, second, lines = tmp_path / "a" / "speedrun" / "cpu-demo", tmp_path / "b" / "speedrun" / "cpu-demo", []
    for point in (first, second):
        assert flow.run_local_flow(sweep(), 2, point, out=lines.append).statuses == {"base_train": "ok"}
    tags = [json.loads((p / flow.FLOW_JSON).read_text())["model_tag"] for p in (first, second)]
    assert tags[0] != tags[1] and all(t.startswith("speedrun-cpu-demo-") for t in tags)
    assert not any("moved to" in line for line in lines)
    assert (tmp_path / "base" / "base_checkpoints" / tags[0] / "model_000006.pt").read_text().startswith(str(first))


def staged(base, *what: str) -> None:
    """`data generate` of each of `what` (--chat, --eval-bundle) under `base`: the offline stand-ins."""
    mp = pytest.MonkeyPatch()
    mp.setenv("NANOCHAT_BASE_DIR", str(base))
    try:
        for flag in what:
            assert cli.main(["data", "generate", flag]) == 0
    finally:
        mp.undo()


class Reached(Exception):
    """The tokenizer step was reached: every check before it passed."""


@pytest.fixture
def no_tokenizer(monkeypatch):
    def reached(*a):
        raise Reached()

    monkeypatch.setattr(flow, "ensure_tokenizer", reached)


@pytest.mark.parametrize("have,missing", [((), ("--eval-bundle", "--chat")), (("--chat",), ("--eval-bundle",)),
                                          (("--eval-bundle",), ("--chat",))])
def test_a_speedrun_without_its_staged_data_is_refused_before_anything_runs(have, missing, tmp_path, monkeypatch,
                                                                           no_tokenizer):
    """The eval bundle and the chat data were found missing only when base_eval (or mid_train) started, after
    base_train's hours: now the local flow names each one and its command before the tokenizer or any stage."""
    base = tmp_path / "base"
    staged(base, *have)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    with pytest.raises(DataError) as e:
        flow.run_local_flow(sweep(stages=None), 2, tmp_path / "sw" / "point")
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"data the stages need is not staged under {base}: ")
    for flag in ("--eval-bundle", "--chat"):
        assert (f"`nanochat-bench data download {flag}`" in message) == (flag in missing)
    assert ("base_eval: " in message) == ("--eval-bundle" in missing)
    assert ("mid_train, chat_eval_mid, chat_sft, chat_eval_sft: " in message) == ("--chat" in missing)
    assert not (tmp_path / "sw").exists()  # no point directory, no stage started, no tokenizer trained


def test_a_speedrun_with_its_data_generated_offline_passes_the_check(tmp_path, monkeypatch, no_tokenizer):
    base = tmp_path / "base"
    staged(base, "--chat", "--eval-bundle")
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    with pytest.raises(Reached):
        flow.run_local_flow(sweep(stages=None), 2, tmp_path / "point")


def test_stages_that_read_no_staged_data_need_none(tmp_path, monkeypatch, no_tokenizer):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path / "empty"))
    with pytest.raises(Reached):
        flow.run_local_flow(sweep(stages="base_train,base_loss"), 2, tmp_path / "point")


def test_a_stage_ok_in_an_earlier_run_needs_its_data_no_more(tmp_path, monkeypatch, no_tokenizer):
    """A rerun keeps the stages already ok: what they read is not asked for again."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path / "empty"))
    point = tmp_path / "point"
    (point / "base_eval").mkdir(parents=True)
    (point / "base_eval" / "run.json").write_text(json.dumps({"status": "ok"}))
    with pytest.raises(Reached):
        flow.run_local_flow(sweep(stages="base_train,base_eval"), 2, point)
    with pytest.raises(DataError, match="mid_train: .*data download --chat"):
        flow.run_local_flow(sweep(stages="base_eval,mid_train"), 2, point)


@pytest.mark.parametrize("text,reason", [("{", "is not valid JSON"), ("[]", "holds an array, not a run's record")])
def test_a_stage_whose_run_json_is_damaged_is_one_line_naming_it_not_a_traceback(text, reason, tmp_path, monkeypatch,
                                                                                  capsys, no_tokenizer):
    """Asking which stages were ok before read each run.json with json.load: `speedrun` and a flow's render and
    submit ended in a JSONDecodeError (or, of a JSON array, an AttributeError) traceback."""
    base = tmp_path / "base"
    base.mkdir()
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    tiny = ["--device_type", "cpu", "--depth", "2", "--stages", "base_train"]
    for command, stage in ((["speedrun", "--nproc", "1", "--run-dir", str(tmp_path / "point")], tmp_path / "point"),
                           (["render", "sbatch", "--flow", "speedrun", "--base-dir", str(base), "--out",
                             str(tmp_path / "sw")], tmp_path / "sw" / "n1-bare-r1")):
        (stage / "base_train").mkdir(parents=True)
        (stage / "base_train" / "run.json").write_text(text)
        assert cli.main([*command, *tiny]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {stage / 'base_train' / 'run.json'} {reason}") and err.count("\n") == 1, err
        assert f"move it aside, or delete its directory {stage / 'base_train'}," in err
        assert (stage / "base_train" / "run.json").read_text() == text


def test_a_stage_whose_run_json_cannot_be_read_is_one_line_naming_it_not_a_traceback(tmp_path, monkeypatch, capsys,
                                                                                     no_tokenizer):
    """A stage's run.json that could not be read (a directory, EACCES, EIO) ended `speedrun` and a flow's render and
    submit in an OSError traceback while they asked which stages were ok before."""
    base = tmp_path / "base"
    base.mkdir()
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    tiny = ["--device_type", "cpu", "--depth", "2", "--stages", "base_train"]
    for command, stage in ((["speedrun", "--nproc", "1", "--run-dir", str(tmp_path / "point")], tmp_path / "point"),
                           (["render", "sbatch", "--flow", "speedrun", "--base-dir", str(base), "--out",
                             str(tmp_path / "sw")], tmp_path / "sw" / "n1-bare-r1")):
        (stage / "base_train" / "run.json").mkdir(parents=True)
        assert cli.main([*command, *tiny]) == 1
        err = capsys.readouterr().err
        assert err == (f"error: the run directory {stage / 'base_train'} cannot be written: Is a directory "
                       f"({stage / 'base_train' / 'run.json'})\n"), err


def test_the_readmes_speedrun_limit_on_one_alps_node_is_the_plans(tmp_path, monkeypatch, capsys):
    """README and results/h200-d20/decode/ quote the job limit this plan gives; it changed without them once."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    assert cli.main(["plan", "--flow", "speedrun", "--site", "alps", "--nodes", "1"]) == 0
    [job] = [line.split() for line in capsys.readouterr().out.splitlines() if "= job" in line]
    repo = Path(__file__).resolve().parents[3]
    for doc in ("README.md", "results/h200-d20/decode/README.md"):
        assert f" {job[-1]} " in (repo / doc).read_text(), f"{doc} should quote the plan's {job[-1]}"


def test_a_rerun_of_a_point_started_by_an_older_release_keeps_the_tag_its_flow_json_recorded(twice, tmp_path,
                                                                                             monkeypatch):
    """A point whose flow.json recorded base_train's tag without the path hash (as releases before it wrote it) was
    rerun under the new tag: base_train, ok, was kept, and the stages after it looked for its checkpoint in vain."""
    tags = []

    def run(argv, nproc, run_dir, **kw):
        tags.append(next(a.split("=", 1)[1] for a in argv if a.startswith("--model_tag=")))
        return completed(run_dir)

    stand_in_stages(monkeypatch, run)
    point, lines = tmp_path / "sw" / "point", []
    completed(point / "base_train")
    (point / flow.FLOW_JSON).write_text(json.dumps({**flow.flow_record("twice", "point", "sw-point", TWICE)}))
    assert flow.run_local_flow(sweep(twice, None), 2, point, out=lines.append).statuses == {"base_train": "ok",
                                                                                          "again": "ok"}
    assert tags == ["sw-point-again"]
    assert json.loads((point / flow.FLOW_JSON).read_text())["model_tag"] == "sw-point"
    assert "model tag sw-point, as its flow.json recorded" in "\n".join(lines)


@pytest.mark.parametrize("damage, why", [(b"", "is not valid JSON (Expecting value: line 1)"),
                                         (b'{"flow": "twice", "model_tag": "sw-po', "is not valid JSON (Unterminated "
                                                                                   "string starting at: line 1)"),
                                         (b"\xff\xfe", "is not UTF-8 text"), (b"[]", "does not hold a JSON object"),
                                         pytest.param(b"[" * 100_000, "is not a record (arrays or objects nested too "
                                                      "deep to read)", id="nested-too-deep")])
def test_a_damaged_flow_json_is_refused_not_overwritten_with_another_tag(twice, tmp_path, monkeypatch, damage, why):
    """An empty or cut-off flow.json was rewritten with the tag of a new point, the one it recorded lost: the
    stages kept ok had trained under it, and those after them looked for its checkpoints in vain."""
    stand_in_stages(monkeypatch)
    point = tmp_path / "sw" / "point"
    completed(point / "base_train")
    (point / flow.FLOW_JSON).write_bytes(damage)
    with pytest.raises(ConfigError) as e:
        flow.run_local_flow(sweep(twice, None), 2, point)
    assert str(e.value) == (f"{point / flow.FLOW_JSON} {why}; it records the model tag of the point's checkpoints: "
                            f"mend it (its stages' run.json give it after --model_tag=), or delete it for this flow "
                            f"to use {flow.model_tag(point)}")
    assert (point / flow.FLOW_JSON).read_bytes() == damage and not (point / "again").exists()


def test_plan_flow_gives_a_podman_flows_job_the_time_submit_asks_for(twice, tmp_path, capsys):
    """plan --flow left out each stage's image step, which the submitted job's time limit counts: the plan showed
    a shorter job, and checked that one against the partition."""
    argv = ["--nodes=1", "--gpus-per-node=2", "--runtimes=podman", *TINY_FLAGS]
    assert cli.main(["plan", "--flow", twice, *argv]) == 0
    [planned] = [line.split()[-1] for line in capsys.readouterr().out.splitlines() if "= job" in line]
    fs = FlowSweep.build(twice, None, dict(TINY), [], nodes=[1], gpus_per_node=2, runtimes=["podman"])
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), check_images=False)
    [fj] = flow.assemble(fs, opts, tmp_path / "sw", note=lambda _: None)
    assert f"--time={planned}" in fj.job.directives


def test_a_podman_flows_job_time_covers_the_image_step_before_its_tokenizer(twice, tmp_path):
    """The tokenizer's task runs in the run's image, so the image step runs before it; the job's time gave the
    tokenizer its own minutes but that step none, taking them from the last stage."""
    from bench.launch.job import IMAGE_STEP_MINUTES, job_minutes
    from bench.launch.plan import slurm_time

    fs = FlowSweep.build(twice, None, dict(TINY), [], nodes=[1], gpus_per_node=2, runtimes=["podman"])
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), check_images=False)
    [fj] = flow.assemble(fs, opts, tmp_path / "sw", note=lambda _: None)
    minutes = IMAGE_STEP_MINUTES + fs.tokenizer_minutes + job_minutes(fj.job.runs)
    assert f"--time={slurm_time(minutes)}" in fj.job.directives


def test_a_ctrl_c_as_a_stage_ends_ok_stops_the_flow_before_the_next_stage(twice, tmp_path, monkeypatch):
    """A Ctrl-C that came after a stage's workload had ended, while its launcher wrote run.json's last fields, was
    absorbed by the stage's launcher, so the flow never heard of it and went on to train the next stage."""
    import os
    import signal

    from bench import contract

    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: None)
    ran = tmp_path / "ran"
    stand_in = tmp_path / "python"  # a stage that ends ok, as its trainer records it
    stand_in.write_text(f"#!/bin/sh\necho x >> {ran}\nexec {sys.executable} -c 'import os; from bench import "
                        f"contract; contract.record_evidence(os.environ[\"NANOCHAT_BENCH_RUN_DIR\"], "
                        f"contract.Evidence(source=\"trainer\", kind=\"completed\"))'\n")
    stand_in.chmod(0o755)
    real = contract.update_run_json

    def then_ctrl_c(run_dir, **fields):
        result = real(run_dir, **fields)
        if "exit_code" in (fields.get("launch") or {}):  # the stage's launcher's first write of the end
            os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(contract, "update_run_json", then_ctrl_c)
    result = flow.run_local_flow(sweep(twice, None), 2, tmp_path / "point", python=str(stand_in))
    assert ran.read_text() == "x\n", "the stage after the Ctrl-C was run"
    assert result.statuses == {"base_train": "ok", "again": "cancelled"} and result.rc == 130


def test_the_stages_after_one_a_ctrl_c_cancelled_name_the_signal(twice, tmp_path, monkeypatch):
    """A Ctrl-C between stages was named in the stages after it, one in a stage left them 'not run: stage base_train
    of this point did not end ok', as if it had failed; the stage's run.json says who stopped it."""
    import signal

    from bench import contract

    def ctrl_c(argv, nproc, run_dir, **kw):
        run_dir.mkdir(parents=True)  # as run_local records a SIGINT it forwarded, then tells the flow's handler
        contract.record_evidence(run_dir, contract.Evidence(source="launcher", kind="stopped", signal="SIGINT",
                                                            exit_code=-2, message="nanochat-bench train received"))
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        return 130

    stand_in_stages(monkeypatch, ctrl_c)
    result = flow.run_local_flow(sweep(twice, None), 2, tmp_path / "point", out=lambda _: None)
    assert result.rc == 130 and result.statuses == {"base_train": "cancelled", "again": "cancelled"}
    record = contract.read_run_json(tmp_path / "point" / "again")
    assert record["message"] == "not run: stage base_train of this point was cancelled (SIGINT)"
    assert record["evidence"][-1]["signal"] == "SIGINT"
    # README said the signal was named only for one during the tokenizer's training or between stages
    readme = " ".join((Path(__file__).resolve().parents[3] / "README.md").read_text().split())
    assert f"`{record['message']}`" in readme


def test_a_stage_that_leaves_a_newer_majors_run_json_stops_the_flow_in_one_line(tmp_path, monkeypatch):
    """A stage whose run.json was rewritten by a newer release (schema major 3) as it ran ended `speedrun` in a
    SchemaError traceback when the flow recorded the stage's ids in it: the flow stops there, the file as it is."""
    def newer(argv, nproc, run_dir, **kw):
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"schema_version": "3.0", "status": "ok"}))
        return 0

    stand_in_stages(monkeypatch, newer)
    lines = []
    result = flow.run_local_flow(sweep(stages="base_train,base_loss"), 2, tmp_path / "point", out=lines.append)
    assert result.rc == 1 and result.failed == "base_train" and result.statuses["base_train"] == "unreadable"
    assert "stopped at base_train: unreadable: " in lines[-1] and "major 3" in lines[-1]
    assert json.loads((tmp_path / "point" / "base_train" / "run.json").read_text())["schema_version"] == "3.0"


def test_each_local_stage_gets_the_environment_its_job_would_get(tmp_path, monkeypatch):
    """`speedrun --data-dir` planned NANOCHAT_VAL_FILES_K for the ranks, as a job exports it, but the stages ran with
    the user's (or the trainer's 1): a validation split the plan did not choose, or a rank with no row group."""
    from bench.launch.plan import DataShape

    envs = {}

    def run(argv, nproc, run_dir, env=None, **kw):
        envs[run_dir.name] = env
        return completed(run_dir)

    stand_in_stages(monkeypatch, run)
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "1")
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path / "base"))
    fs = sweep(stages="base_train", data=DataShape.from_counts(1, 8))
    [(_, [planned])] = fs.points()
    assert dict(planned.env)["NANOCHAT_VAL_FILES_K"] == "2"  # a row group for each of 2 ranks
    assert flow.run_local_flow(fs, 2, tmp_path / "point").statuses == {"base_train": "ok"}
    assert envs["base_train"]["NANOCHAT_VAL_FILES_K"] == "2"
    assert envs["base_train"]["NANOCHAT_BASE_DIR"] == str(tmp_path / "base")  # the rest of this environment


@pytest.mark.parametrize("exported", ["1", "abc"])
def test_an_exported_val_files_k_the_plan_overrides_is_noted_in_one_line(tmp_path, monkeypatch, exported):
    """`speedrun --data-dir` ran its stages with the plan's NANOCHAT_VAL_FILES_K over the one the user exported,
    unsaid; a Slurm job's script exports the plan's too, so the stages keep it and one line names both."""
    from bench.launch.plan import DataShape

    envs, lines = {}, []

    def run(argv, nproc, run_dir, env=None, **kw):
        envs[run_dir.name] = env
        return completed(run_dir)

    stand_in_stages(monkeypatch, run)
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", exported)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path / "base"))
    fs = sweep(stages="base_train", data=DataShape.from_counts(1, 8))
    flow.run_local_flow(fs, 2, tmp_path / "point", out=lines.append)
    assert envs["base_train"]["NANOCHAT_VAL_FILES_K"] == "2"
    assert [line for line in lines if "NANOCHAT_VAL_FILES_K" in line] == [
        f"note: NANOCHAT_VAL_FILES_K={exported} of this environment is not used: the stages run with the plan's "
        f"NANOCHAT_VAL_FILES_K=2, chosen for 2 rank(s) from 8 shard(s) of 1 row groups (given), as a Slurm job of "
        f"this flow exports it"]
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "2")  # the plan's own: nothing to say
    lines.clear()
    flow.run_local_flow(fs, 2, tmp_path / "again", out=lines.append)
    assert not [line for line in lines if "NANOCHAT_VAL_FILES_K" in line]


@pytest.mark.parametrize("given", [{"train": {"data_bin_dir": "bins"}},
                                   {"stage_args": ["base_train:data_bin_dir=bins"]}, {"data": "planned"}])
def test_a_bad_val_files_k_no_stage_reads_is_not_refused(tmp_path, monkeypatch, no_tokenizer, given):
    """`speedrun --stages base_train` reading a .bin directory was refused for the user's NANOCHAT_VAL_FILES_K,
    which it never reads; so was a flow whose K the plan chose (the stages run with the planned one)."""
    from bench.launch.plan import DataShape

    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "abc")
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path / "base"))
    train = {**TINY, **given.get("train", {})}
    data = DataShape.from_counts(1, 8) if given.get("data") else None
    fs = FlowSweep.build("speedrun", "base_train", train, given.get("stage_args", []), nodes=[1], gpus_per_node=2,
                         runtimes=["bare"], data=data)
    with pytest.raises(Reached):
        flow.run_local_flow(fs, 2, tmp_path / "point")


@pytest.mark.parametrize("command", ["python -m bench.launch.elastic -- --depth=4", ["python", "--", 4, None]])
def test_a_stage_kept_from_a_run_json_whose_command_is_not_a_list_of_words_gets_no_flags_note(tmp_path, monkeypatch,
                                                                                             command):
    """A damaged run.json with its launch command as one string had its characters read as flags (a garbled note of
    'other flags'); one holding a number stopped the rerun on an AttributeError."""
    monkeypatch.setattr(flow, "ensure_tokenizer", lambda *a: None)
    fs, point, lines = sweep(), tmp_path / "point", []
    (point / "base_train").mkdir(parents=True)
    (point / "base_train" / "run.json").write_text(json.dumps({"status": "ok", "launch": {"command": command}}))
    assert flow.run_local_flow(fs, 2, point, out=lines.append).statuses == {"base_train": "ok"}
    assert lines[-1].endswith("base_train ok in an earlier run of this flow, kept")


def test_a_stage_time_limit_under_its_estimate_is_said_with_the_stages_it_stops():
    """--time 00:05:00 for the speedrun gave every stage five minutes, chat_eval's estimated hour among them, and the
    plan said nothing: a stage that ends as timeout ends its point's flow."""
    fs = FlowSweep.build("speedrun", "base_train,base_loss", {}, [], nodes=[1], gpus_per_node=4, runtimes=["bare"],
                         time="00:01:00")
    text = flow.format_table(fs)
    assert "--time 00:01:00 is under the stage's estimate of" in text
    assert "it ends as timeout before its last step, and the stages after it do not run" in text


def test_a_stage_without_a_deadline_has_its_whole_time_limit_for_its_estimate():
    """base_loss takes no --deadline: Slurm's limit, not a trainer's margin before it, is what its estimate must fit,
    while base_train stops its margin before the limit to save a checkpoint."""
    fs = FlowSweep.build("speedrun", "base_train,base_loss", {}, [], nodes=[1], gpus_per_node=2, runtimes=["bare"],
                         time="00:06:00")
    train, loss = fs.points()[0][1]
    assert 6 * 60 - 36 < loss.est_hours * 3600 <= 6 * 60 and loss.short_time_note("stage") is None
    assert train.short_time_note("stage").startswith("--time 00:06:00 is under the stage's estimate of ")


def test_a_kept_tokenizer_says_its_vocabulary_and_the_one_the_flow_would_train(base_dir_env):
    """A tokenizer left in the base directory (the README's tour trains 8,192 tokens) was kept in one line that gave
    no size: a speedrun of upstream's 65,536 ran on it unawares."""
    from bench.nanochat.tokenizer import get_tokenizer

    have = get_tokenizer().get_vocab_size()
    said: list[str] = []
    flow.ensure_tokenizer((), sys.executable, said.append)  # upstream's 65,536, the default
    assert said == [f"tokenizer: {base_dir_env / 'tokenizer'} exists, kept ({have:,} tokens, where this flow's "
                    f"`tokenizer train` would make 65,536: move it away, or point NANOCHAT_BASE_DIR elsewhere, to "
                    f"train that one)"]
    said.clear()
    flow.ensure_tokenizer((f"--vocab_size={have}",), sys.executable, said.append)
    assert said == [f"tokenizer: {base_dir_env / 'tokenizer'} exists, kept ({have:,} tokens)"]
