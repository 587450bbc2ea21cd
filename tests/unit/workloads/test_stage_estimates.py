"""Every stage of the speedrun estimates its time from what its plan knows: the stages after pre-training from the
FLOPs of the model the flow's pre-training flags train (forward only a third of them), chat_eval from the tokens
its busiest rank decodes at the assumed rate; a stage whose horizon or model the plan cannot know says "?" in
its note and gets the default limit; the flow's job limit covers every stage's.

    python -m pytest tests/unit/workloads/test_stage_estimates.py -q

The expected hours are written out from the formula, with the d20 model's numbers (`nanochat-bench model
--depth 20`: 3.491758e+09 FLOPs per token), not taken from the code under test.
"""

import math
from pathlib import Path

import pytest

from bench import cli, sites, workloads
from bench.errors import ConfigError
from bench.launch import flow
from bench.launch.plan import DECODE_TOK_PER_S, DEFAULT_RUN_MINUTES, Sweep, allowance_minutes

SITE = sites.load("test-cluster")  # its paths count as shared, so the later stages plan on any node count
D20_FLOPS = 3_491_758_080  # training FLOPs per token of d20 at sequence 2048 (6N + attention)
H200 = 989e12  # its dense bf16 peak (bench.metrics)
MFU, HALF, START = 0.40, 4, 300.0  # the sweep's defaults: --assume-mfu, MFU_HALF_BATCH, start-up allowance


def hours(flops: float, ranks: int, batch: float) -> float:
    """The plan's MFU model, written out: assume-mfu x B / (B + 4) of the peak, plus the start-up allowance."""
    return (flops / (ranks * H200 * MFU * batch / (batch + HALF)) + START) / 3600


def d20() -> dict:
    return {"model": workloads.get("nanochat").model_of({"depth": 20})}


def plan(workload: str, ranks: int = 8, model=True, **train):
    """One point of one stage at `ranks` GPUs on one node, planned knowing the d20 model (as inside a flow)."""
    sweep = Sweep([1], ranks, ["bare"], workload=workload, site=SITE, train=train, **(d20() if model else {}))
    return sweep.points()[0]


def test_the_flow_knows_the_model_pre_training_trains():
    model = d20()["model"]
    assert (model.depth, model.sequence_len, model.flops_per_token) == (20, 2048, D20_FLOPS)
    fs = flow.FlowSweep.build("speedrun", None, {"depth": 12, "max_seq_len": 1024}, [], nodes=[1], gpus_per_node=8,
                              runtimes=["bare"], site=SITE)
    assert {(s.model.depth, s.model.sequence_len) for s in fs.sweeps} == {(12, 1024)}
    # pre-training's own --stage-arg sets the model too (regression: the later stages were timed as d20)
    fs = flow.FlowSweep.build("speedrun", None, {}, ["base_train:depth=32"], nodes=[1], gpus_per_node=8,
                              runtimes=["bare"], site=SITE)
    assert {s.model.depth for s in fs.sweeps} == {32}


def test_base_loss_runs_both_splits_forward_a_third_of_training_flops():
    p = plan("base_loss", device_batch_size=32, split_tokens=20 * 524288)
    assert p.est_hours == pytest.approx(hours(D20_FLOPS / 3 * 2 * 20 * 524288, 8, 32))
    assert "est: 2 splits x 10,485,760 tokens forward, d20" in p.note
    assert p.time_minutes == allowance_minutes(p.est_hours)


def test_base_eval_runs_each_examples_prompts_forward_at_most_the_context_long():
    p = plan("base_eval", max_per_task=500)
    # prompts of one example of each CORE task: its choices (100 / random baseline %), 1 for language modelling
    prompts = sum((4, 1, 1, 4, 4, 2, 5, 2, 4, 1, 4, 2, 2, 1, 5, 1, 1, 1, 1, 1, 2, 11))
    assert p.est_hours == pytest.approx(hours(D20_FLOPS / 3 * 500 * prompts * 2048, 8, prompts / 22))
    assert "est: 500 examples x 22 tasks, 2.7 prompts each (one per choice) of at most 2,048 tokens" in p.note


def test_base_eval_over_the_whole_bundle_has_no_estimate_and_says_why():
    p = plan("base_eval")  # --max_per_task=-1: the bundle's size is known once it is read
    assert p.est_hours is None and p.time_minutes == DEFAULT_RUN_MINUTES
    assert "est ?: --max_per_task=-1 scores the whole bundle" in p.note


def test_a_crop_smaller_than_cores_shots_is_impossible_in_the_plan_not_after_pre_training():
    """base_eval refuses --max_per_task <= 10 when it starts (jeopardy takes 10 shots from its other examples): in a
    flow that was after pre-training's hours. The plan marks the point impossible, so submit and speedrun refuse it."""
    assert not plan("base_eval", max_per_task=10).possible
    assert "--max_per_task=10: CORE's tasks take up to 10 shots" in plan("base_eval", max_per_task=10).reason
    assert plan("base_eval", max_per_task=11).possible
    fs = flow.FlowSweep.build("speedrun", None, {}, ["base_eval:max_per_task=5"], nodes=[1], gpus_per_node=8,
                              runtimes=["bare"], site=SITE)
    with pytest.raises(ConfigError, match="cannot run with 8 rank.*--max_per_task=5"):
        flow.run_local_flow(fs, 8, Path("/nonexistent/point"))


def test_mid_train_trains_its_batches_less_the_prefetch_as_pre_training():
    p = plan("mid_train", num_iterations=200)
    total = 32 * 2048 * 8  # weak scaling: device batch x sequence x ranks
    assert p.est_hours == pytest.approx(hours(D20_FLOPS * 199 * total, 8, 32))
    assert "est: 199 steps x 524,288 tokens, d20" in p.note


def test_mid_train_over_one_epoch_has_no_estimate_and_says_why():
    p = plan("mid_train", num_iterations=-1)
    assert p.est_hours is None and p.time_minutes == DEFAULT_RUN_MINUTES
    assert "est ?: one epoch of the mid mixture" in p.note


def test_chat_sft_bounds_each_conversation_by_the_rendering_cut():
    p = plan("chat_sft", num_iterations=701)
    # 700 updates of 32 conversations (4 a rank at 8 ranks), each at most 2,047 positions (MAX_TOKENS - 1)
    assert p.est_hours == pytest.approx(hours(D20_FLOPS * 700 * 32 * 2047, 8, 4))
    assert "est: 700 updates x 32 conversations x at most 2,047 positions, d20" in p.note
    one_epoch = plan("chat_sft")  # -1: one epoch of the real mixture's documented rows
    assert one_epoch.plan.column("num_iterations") == 22_439 // 32 and one_epoch.est_hours is not None
    assert "steps from the real data's 22,439 rows" in one_epoch.note


def test_chat_eval_decodes_the_busiest_ranks_problems_at_the_assumed_rate():
    p = plan("chat_eval", ranks=8, model=False, source="sft", max_problems=20, max_new_tokens=256)
    # GSM8K, HumanEval and SpellingBee 20 problems each, problem i on rank i mod 8: 3 on the busiest rank
    assert p.est_hours == pytest.approx((3 * 3 * 256 / DECODE_TOK_PER_S + START) / 3600)
    assert (f"est: 60 generative problems x at most 256 new tokens, 2,304 on the busiest rank at {DECODE_TOK_PER_S:g} "
            f"tok/s") in p.note
    every = plan("chat_eval", ranks=8, model=False, source="sft", max_new_tokens=100)  # -1: the real data's
    busiest = math.ceil(1319 / 8) + math.ceil(164 / 8) + math.ceil(256 / 8)
    assert every.est_hours == pytest.approx((busiest * 100 / DECODE_TOK_PER_S + START) / 3600)
    faster = Sweep([1], 8, ["bare"], workload="chat_eval", site=SITE, assume_decode_tok_s=28.0,
                   train={"source": "sft", "max_new_tokens": 100}).points()[0]
    assert faster.est_hours == pytest.approx((busiest * 100 / 28.0 + START) / 3600)
    categorical = plan("chat_eval", model=False, source="sft", task_name="MMLU")
    assert categorical.est_hours == pytest.approx(START / 3600)  # no generation: the start-up allowance


def test_a_stage_planned_alone_knows_no_model_and_gets_the_default_limit():
    for workload in ("base_loss", "mid_train", "chat_sft"):
        p = plan(workload, model=False)
        assert p.est_hours is None and p.time_minutes == DEFAULT_RUN_MINUTES, workload
        assert "est ?: the model is its checkpoint's" in p.note
    assert plan("base_loss", device_type="cpu").est_hours is None  # on a CPU, as pre-training: no estimate


def test_the_flows_job_limit_covers_every_stages_estimate(capsys):
    fs = flow.FlowSweep.build("speedrun", None, {"num_iterations": 100}, ["base_eval:max_per_task=100",
                              "chat_eval_mid:max_problems=50", "chat_eval_sft:max_problems=50"],
                              nodes=[1], gpus_per_node=8, runtimes=["bare"], site=SITE)
    [(_, stage_points)] = fs.points()
    estimated = [p for p in stage_points if p.est_hours is not None]
    assert len(estimated) == len(stage_points) == 7  # every stage has an estimate here
    assert all(p.time_minutes == allowance_minutes(p.est_hours) for p in stage_points)
    assert fs.job_minutes(stage_points) >= sum(p.est_hours * 60 for p in stage_points)
    assert fs.job_minutes(stage_points) == fs.tokenizer_minutes + sum(p.time_minutes + 1 for p in stage_points)
    assert cli.main(["plan", "--flow", "speedrun", "--nodes=1", "--gpus-per-node=8", "--site=test-cluster",
                     "--num_iterations=100", "--assume-decode-tok-s=20"]) == 0
    out = capsys.readouterr().out
    assert "generation at 20 tok/s per rank" in out and "est ?: --max_per_task=-1" in out


def test_a_decoding_rate_that_is_no_rate_is_refused_naming_the_flag():
    with pytest.raises(ConfigError, match=r"--assume-decode-tok-s 0.0 must be a positive number"):
        Sweep([1], 8, ["bare"], workload="chat_eval", train={"source": "sft"}, assume_decode_tok_s=0.0)
