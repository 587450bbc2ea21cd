"""The report per stage of a flow: a section per stage with its throughput, MFU, time, peak memory and scores
side by side across runtimes and rank counts; the time per stage and in total; a stage's runs never compared
with another stage's (chat_eval after mid-training and after SFT are one workload, told apart by run.json
`stage`). An evaluation that ended ok is a usable run, not a skipped one (it has no steps by design), and its
rates are labelled by what its scores counted; SFT's MFU counts every position it ran, not its supervised tokens.

    python -m pytest tests/unit/analysis/test_report_stages.py -q
"""

import json
import random
import statistics

import pandas as pd
import pytest

from bench.analysis import scaling
from bench.analysis.collect import collect
from bench.analysis.report import write_report
from bench.analysis.stages import stage_sections
from bench.metrics import mfu_percent
from tests.support.synthetic import D20_FLOPS_PER_TOKEN, H200_PEAK, run_events, write_run

T0 = 1_700_000_000.0


def stage_run(root, runtime, ranks, stage, workload, *, time_s, scores=None, steps=False, status="ok",
              problems=None, tokens=None, peak=None, config=None, repeat=1, val_files_k=None):
    """A stage's run: training steps (at `peak`, recorded in run.json), or a score event per score, each with
    `problems` and `tokens` (a dict by score name) over 2 s when given."""
    run_dir = root / f"n{ranks}-{runtime}-r{repeat}" / stage
    manifest = {"run_id": f"n{ranks}-{runtime}-r{repeat}", "sweep_id": "flow", "repeat": repeat,
                "val_files_k": val_files_k, "workload": workload, "stage": stage,
                "runtime": runtime, "nodes": 1, "gpus_per_node": ranks, "world_size": ranks, "status": status,
                "scores": scores or {}, "launch": {"t0": T0, "finished_at": T0 + time_s},
                "peak_flops_per_gpu": peak, "config": config or {}}
    if steps:
        events = run_events(1000.0 * ranks, 30, 8192, ranks, T0, 5.0, random.Random(1), peak=peak)
    else:
        events = [{"event": "start", "t": T0 + 1}, {"event": "dist_init", "t": T0 + 2, "world_size": ranks, "backend": "gloo"}]
        for i, (name, value) in enumerate((scores or {}).items()):
            counted = {"tokens": tokens[name]} if tokens and name in tokens else {}
            events.append({"event": "score", "t": T0 + 3 + i, "name": name, "value": value,
                           **({"problems": problems, "seconds": 2.0, **counted} if problems else {})})
        events.append({"event": "end", "t": T0 + 9, "peak_mem_mib": 4000.0 + ranks, "total_training_time_s": 6.0,
                       "min_val_bpb": None})
    write_run(run_dir, manifest, events)
    return run_dir


def section(part: dict, name: str):
    return next(s for s in part["sections"] if s["name"] == name)["table"]


def cells(table, row: int = 0) -> dict:
    return dict(zip(table.columns, table.rows[row]))


def flow_runs(root):
    for runtime, ranks in (("bare", 2), ("bare", 4), ("ce", 2)):
        stage_run(root, runtime, ranks, "base_train", "nanochat-base", time_s=100, steps=True)
        stage_run(root, runtime, ranks, "base_loss", "nanochat-base-loss", time_s=20,
                  scores={"val_bpb": 1.10 if runtime == "bare" else 1.25, "train_bpb": 1.05})
        stage_run(root, runtime, ranks, "chat_eval_mid", "nanochat-chat-eval", time_s=30, problems=40,
                  scores={"ARC-Easy": 0.30, "ChatCORE": 0.10})
        stage_run(root, runtime, ranks, "chat_eval_sft", "nanochat-chat-eval", time_s=40, problems=40,
                  scores={"ARC-Easy": 0.35, "ChatCORE": 0.12})


def test_a_section_per_stage_with_throughput_time_and_scores_side_by_side(tmp_path):
    flow_runs(tmp_path / "runs")
    table = collect([tmp_path / "runs"]).table
    part = stage_sections(table)
    assert [s["name"] for s in part["sections"]] == ["base_train", "base_loss", "chat_eval_mid", "chat_eval_sft"]
    loss = next(s for s in part["sections"] if s["name"] == "base_loss")["table"]
    assert loss.columns[:4] == ["runtime", "ranks", "nodes", "runs"] and "val_bpb" in loss.columns
    val = loss.columns.index("val_bpb")
    assert {(r[0], r[1]): r[val] for r in loss.rows} == {("bare", "2"): "1.100", ("bare", "4"): "1.100",
                                                          ("ce", "2"): "1.250"}  # a runtime changing a result shows
    chat = next(s for s in part["sections"] if s["name"] == "chat_eval_mid")["table"]
    assert chat.rows[0][chat.columns.index("problems/s")] == "20.00"  # 40 problems over their 2 s
    train = next(s for s in part["sections"] if s["name"] == "base_train")["table"]
    assert "tok/s" in train.columns
    ttc = part["time_to_chat"]
    assert ttc.columns[-1] == "total s" and ttc.rows[0][-1] == "190.0"  # 100 + 20 + 30 + 40


def test_the_same_workload_at_two_stages_is_never_one_comparison(tmp_path):
    flow_runs(tmp_path / "runs")
    table = collect([tmp_path / "runs"]).table
    assert "stage" in scaling.GROUP_KEYS
    chat = scaling.with_config(table[table["workload"] == "nanochat-chat-eval"])
    by_stage = chat.groupby("config")["stage"].nunique()
    assert (by_stage == 1).all() and chat["config"].nunique() >= 2


def test_the_report_writes_the_stage_sections_and_leaves_out_failed_runs(tmp_path):
    flow_runs(tmp_path / "runs")
    stage_run(tmp_path / "runs", "pyxis", 2, "base_loss", "nanochat-base-loss", time_s=5, status="failed",
              scores={"val_bpb": 9.0})
    table = collect([tmp_path / "runs"]).table
    write_report(table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## The flow, stage by stage" in md and "### Stage chat_eval_sft (nanochat-chat-eval)" in md
    assert "### Time to a chat model" in md
    section = md.split("### Stage base_loss")[1].split("###")[0]
    assert "pyxis" not in section and "9.000" not in section  # only runs that ended ok enter


def test_a_damaged_scores_cell_of_a_hand_edited_table_is_no_scores_not_a_traceback(tmp_path):
    """Regression: stage_rows json-decoded each `scores` cell unguarded, so a runs.csv cell cut short by hand ended
    `report` in a JSONDecodeError; that run's scores are left out, the other runs' shown."""
    flow_runs(tmp_path / "runs")
    table = collect([tmp_path / "runs"]).table
    damaged = table.index[(table["stage"] == "base_loss") & (table["runtime"] == "ce")]
    table.loc[damaged, "scores"] = '{"val_bpb": 1.2'
    loss = section(stage_sections(table), "base_loss")
    val = loss.columns.index("val_bpb")
    assert {(r[0], r[1]): r[val] for r in loss.rows} == {("bare", "2"): "1.100", ("bare", "4"): "1.100",
                                                          ("ce", "2"): "–"}


def test_no_flow_runs_no_stage_part(tmp_path):
    stage_run(tmp_path / "runs", "bare", 2, "base_train", "nanochat-base", time_s=10, steps=True)
    table = collect([tmp_path / "runs"]).table
    assert stage_sections(table.assign(stage=None)) is None


def test_evaluations_that_ended_ok_are_usable_runs_not_skipped_ones(tmp_path):
    flow_runs(tmp_path / "runs")
    # a training stage that ended ok without a step: still left out, and said why
    stage_run(tmp_path / "runs", "bare", 8, "mid_train", "nanochat-mid", time_s=10)
    table = collect([tmp_path / "runs"]).table
    evaluations = table[table["stage"].isin(["base_loss", "chat_eval_mid", "chat_eval_sft"])]
    assert len(evaluations) == 9 and evaluations["skip_reason"].isna().all()
    assert table.loc[table["stage"] == "mid_train", "skip_reason"].tolist() == ["status ok but no step records"]
    assert scaling.usable(table)["stage"].eq("base_train").all()  # no steady tok/s: out of the scaling figures
    write_report(table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    skipped = md.split("## Runs skipped (unreadable or incomplete)")[1]
    assert skipped.count("status ok but no step records") == 1 and "n8-bare-r1" in skipped
    assert skipped.count("| ok ") == 1  # the evaluations are not there
    assert "1 skipped (unreadable or incomplete)" in md


def test_an_evaluations_rates_are_labelled_by_what_its_scores_counted(tmp_path):
    runs = tmp_path / "runs"
    stage_run(runs, "bare", 2, "base_loss", "nanochat-base-loss", time_s=20, problems=32,
              scores={"train_bpb": 1.0, "val_bpb": 1.1}, tokens={"train_bpb": 65536, "val_bpb": 65536})
    stage_run(runs, "ce", 2, "base_loss", "nanochat-base-loss", time_s=20, problems=32,  # before it recorded tokens
              scores={"train_bpb": 1.0, "val_bpb": 1.1}, config={"split_tokens": 32768})
    stage_run(runs, "bare", 2, "base_eval", "nanochat-base-eval", time_s=20, problems=24, scores={"copa": 0.5})
    stage_run(runs, "bare", 2, "chat_eval_sft", "nanochat-chat-eval", time_s=30, problems=8,
              scores={"ARC-Easy": 0.3, "GSM8K": 0.1}, tokens={"GSM8K": 40})
    part = stage_sections(collect([runs]).table)
    loss = section(part, "base_loss")
    # 2 x 32 sequences and 2 x 65,536 tokens over 2 x 2 s; the older run's tokens are its split_tokens
    assert [cells(loss, i)["sequences/s"] for i in (0, 1)] == ["16.00", "16.00"]
    assert [cells(loss, i)["tok/s (forward)"] for i in (0, 1)] == ["32,768", "16,384"]
    assert "problems/s" not in loss.columns and "MFU %" not in loss.columns
    assert cells(loss)["peak mem MiB"] == "4,002"
    assert cells(section(part, "base_eval"))["examples/s"] == "12.00"
    chat = cells(section(part, "chat_eval_sft"))
    assert chat["problems/s"] == "4.00" and chat["generated tok/s"] == "20"  # 40 tokens over GSM8K's 2 s


def test_training_stages_show_mfu_and_peak_memory_and_sft_counts_every_position(tmp_path):
    runs = tmp_path / "runs"
    stage_run(runs, "bare", 2, "base_train", "nanochat-base", time_s=100, steps=True, peak=H200_PEAK)
    sft = stage_run(runs, "bare", 2, "chat_sft", "nanochat-sft", time_s=50, steps=True, peak=H200_PEAK)
    # SFT's step events: tok/s counts the supervised tokens, a quarter of the positions its MFU counted
    events = (sft / "metrics.jsonl").read_text().splitlines()
    positions = {}
    with open(sft / "metrics.jsonl", "w") as f:
        for line in events:
            ev = json.loads(line)
            if ev["event"] == "step":
                positions[ev["step"]] = ev["tok_per_sec"]
                ev["tok_per_sec"] /= 4
            f.write(json.dumps(ev) + "\n")
    table = collect([runs]).table
    train = cells(section(stage_sections(table), "base_train"))
    assert set(train) >= {"tok/s", "MFU %", "peak mem MiB"} and train["peak mem MiB"] == "70,000"
    row = table[table["stage"] == "chat_sft"].iloc[0]
    steady = statistics.median(v for k, v in positions.items() if k > 10)  # the positions run a second
    expected = mfu_percent(D20_FLOPS_PER_TOKEN, steady, 2, H200_PEAK)
    assert row["mfu"] == pytest.approx(expected) and row["mfu_source"] == "recorded"
    assert row["mfu"] == pytest.approx(4 * mfu_percent(D20_FLOPS_PER_TOKEN, row["tok_per_sec"], 2, H200_PEAK))
    chat = cells(section(stage_sections(table), "chat_sft"))
    assert chat["supervised tok/s"] == f"{row['tok_per_sec']:,.0f}" and chat["MFU % (all positions)"] == f"{expected:.1f}"
    write_report(table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    summary = md.split("## nanochat-sft")[1].split("###")[0]
    assert "supervised tok/s" in summary and "MFU % (all positions)" in summary


def test_core_and_chatcore_count_no_problems_of_their_own(tmp_path):
    """Regression: base_eval's CORE event carried the count of every task again, so the table said twice the
    examples the stage scored. A mean of other scores counts nothing, whatever its event carries."""
    runs = tmp_path / "runs"
    stage_run(runs, "bare", 2, "base_eval", "nanochat-base-eval", time_s=20, problems=24,
              scores={"copa": 0.5, "boolq": 0.4, "CORE": 0.45})
    stage_run(runs, "bare", 2, "chat_eval_sft", "nanochat-chat-eval", time_s=30, problems=8,
              scores={"ARC-Easy": 0.3, "ChatCORE": 0.1})
    table = collect([runs]).table.set_index("stage")
    assert table.at["base_eval", "problems"] == 48 and table.at["base_eval", "problems_per_sec"] == 12.0
    assert table.at["chat_eval_sft", "problems"] == 8


def test_a_training_stage_without_steps_is_skipped_though_it_recorded_scores(tmp_path):
    """What a run is comes from its workload's kind, not from its events: mid_train records val_bpb scores too,
    and without step records it has no figures."""
    runs = tmp_path / "runs"
    stage_run(runs, "bare", 2, "mid_train", "nanochat-mid", time_s=20, scores={"val_bpb": 1.2})
    stage_run(runs, "bare", 2, "base_loss", "nanochat-base-loss", time_s=20, scores={"val_bpb": 1.2})
    table = collect([runs]).table.set_index("stage")
    assert table.at["mid_train", "skip_reason"] == "status ok but no step records"
    assert pd.isna(table.at["base_loss", "skip_reason"])


def test_the_stages_of_flows_that_trained_different_models_are_never_pooled(tmp_path):
    """A d12 and a d20 flow collected together were summarised as two repeats of one point: the median of their
    times and scores, which neither model had. Each stage's row is now of one model, named by its flow's training
    stage, and the time to a chat model adds up one model's stages."""
    for depth, time_s, score in ((12, 50, 0.12), (20, 200, 0.20)):
        root = tmp_path / "runs" / f"d{depth}"
        config = {"depth": depth, "max_seq_len": 2048, "total_batch_size": 8192, "device_batch_size": 2}
        for run_dir in (stage_run(root, "bare", 2, "base_train", "nanochat-base", time_s=time_s, steps=True,
                                  config=config),
                        stage_run(root, "bare", 2, "chat_eval_sft", "nanochat-chat-eval", time_s=time_s / 10,
                                  problems=10, scores={"GSM8K": score})):
            manifest = json.loads((run_dir / "run.json").read_text())
            (run_dir / "run.json").write_text(json.dumps({**manifest, "run_id": f"d{depth}"}))
    part = stage_sections(collect([tmp_path / "runs"]).table)
    chat = section(part, "chat_eval_sft")
    assert chat.columns[:2] == ["model", "runtime"]
    assert [(r[0].split(" · ")[0], r[chat.columns.index("runs")], r[chat.columns.index("GSM8K")]) for r in chat.rows] \
        == [("nanochat-base d12", "1", "0.120"), ("nanochat-base d20", "1", "0.200")]
    assert [r[-1] for r in part["time_to_chat"].rows] == ["55.0", "220.0"]
    assert section(flow_part := stage_sections(collect([tmp_path / "runs" / "d12"]).table), "base_train").columns[0] \
        == "runtime" and flow_part["time_to_chat"].columns[0] == "runtime"  # one model: no column for it


def test_the_stage_tables_count_gpus_where_the_runs_ran_on_gpus(tmp_path):
    """The stage tables' header said "ranks" for runs on GPUs, where every other table of the report says "GPUs"; they
    now follow the same rule (scaling.rank_unit), and runs without a GPU keep "ranks"."""
    flow_runs(tmp_path / "runs")
    table = collect([tmp_path / "runs"]).table
    on_gpus = stage_sections(table.assign(gpu_name="NVIDIA H200"))
    assert section(on_gpus, "base_loss").columns[:3] == ["runtime", "GPUs", "nodes"]
    assert on_gpus["time_to_chat"].columns[:3] == ["runtime", "GPUs", "nodes"]
    assert section(stage_sections(table), "base_loss").columns[:3] == ["runtime", "ranks", "nodes"]


def two_flows(root, stage_flags: dict, other: dict):
    """Two repeats of a flow at bare x 2 whose stages ran `stage_flags`, the second's `other` stage otherwise (its
    dict of flags), beside two ce x 2 repeats run alike. The point's tag and a batch job's deadline differ in each
    repeat, as in a sweep: no setting."""
    for runtime in ("bare", "ce"):
        for repeat in (1, 2):
            for stage, (workload, flags) in stage_flags.items():
                changed = dict(other.get(stage, {}) if runtime == "bare" and repeat == 2 else {})
                k = changed.pop("NANOCHAT_VAL_FILES_K", 1)
                config = {**flags, **changed, "model_tag": f"flow-{runtime}-{repeat}", "deadline": T0 + repeat}
                training = stage in ("base_train", "mid_train", "chat_sft")
                stage_run(root, runtime, 2, stage, workload, time_s=10.0 * repeat, steps=training, repeat=repeat,
                          problems=None if training else 8, scores=None if training else {"ARC-Easy": 0.1 * repeat},
                          config=config, val_files_k=k)


SPEEDRUN = {"base_train": ("nanochat-base", {"depth": 4, "device_batch_size": 32, "total_batch_size": 65536}),
            "mid_train": ("nanochat-mid", {"num_iterations": 40, "max_seq_len": 2048, "device_batch_size": 32}),
            "chat_eval_mid": ("nanochat-chat-eval", {"max_problems": 8, "source": "mid"}),
            "chat_eval_sft": ("nanochat-chat-eval", {"max_problems": 8, "source": "sft"})}


@pytest.mark.parametrize("other, left_out, said", [
    # another mid-training: its own throughput, and another model for the chat evaluations to score
    ({"mid_train": {"num_iterations": 80}}, ["mid_train", "chat_eval_mid", "chat_eval_sft"],
     "mid_train num_iterations 40, 80"),
    ({"mid_train": {"max_seq_len": 1024}}, ["mid_train", "chat_eval_mid", "chat_eval_sft"],
     "mid_train max_seq_len 2048, 1024"),
    # an evaluation of other problems: its scores alone, the stages before it still repeats
    ({"chat_eval_mid": {"max_problems": 16}}, ["chat_eval_mid"], "chat_eval_mid max_problems 8, 16"),
    # the same total batch in another gradient accumulation: pre-training's tok/s, and every stage after it
    ({"base_train": {"device_batch_size": 16}}, ["base_train", "mid_train", "chat_eval_mid", "chat_eval_sft"],
     "base_train device_batch_size 32, 16"),
    # other validation shards: another val bpb, and other training shards for every stage after it
    ({"base_train": {"NANOCHAT_VAL_FILES_K": 2}}, ["base_train", "mid_train", "chat_eval_mid", "chat_eval_sft"],
     "base_train NANOCHAT_VAL_FILES_K 1, 2"),
])
def test_a_flows_stages_run_with_other_flags_are_no_repeats(tmp_path, other, left_out, said):
    """Regression: the stage tables pooled a stage's runs by runtime, ranks and nodes alone, so repeats whose stage
    (or a training stage before it) ran other flags were averaged as one point in tok/s, scores and time."""
    two_flows(tmp_path / "runs", SPEEDRUN, other)
    table = collect([tmp_path / "runs"]).table
    part = stage_sections(table)
    for s in part["sections"]:
        kept = [(r[0], r[3]) for r in s["table"].rows]  # (runtime, runs)
        if s["name"] in left_out:
            assert kept == [("ce", "2")], s["name"]
            assert s["note"] == (f"bare at 2 ranks, 1 node ran {said}: not repeats of one point (another way of "
                                 "running the stage or one before it), so that point is left out of this table.")
        else:
            assert kept == [("bare", "2"), ("ce", "2")] and s["note"] is None, s["name"]
    assert [r[0] for r in part["time_to_chat"].rows] == ["ce"] and said in part["time_note"]
    write_report(table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"bare at 2 ranks, 1 node ran {said}" in md.split(f"### Stage {left_out[0]} ")[1].split("###")[0]
    assert "left out of the time to a chat model" in md.split("### Time to a chat model")[1]


@pytest.mark.parametrize("other, stage, said", [
    ({"chat_eval_mid": {"max_problems": 16}}, "chat_eval_mid", "chat_eval_mid max_problems 8, 16"),
    # the evaluation's own flags agree, but it scored another mid-training
    ({"mid_train": {"num_iterations": 80}}, "chat_eval_mid", "mid_train num_iterations 40, 80"),
])
def test_check_fails_a_reference_over_evaluations_run_with_other_flags(tmp_path, other, stage, said):
    """Regression: check pooled a stage's runs by the report's point alone (config, runtime, ranks, nodes, device
    batch), so a reference on chat_eval runs of --max_problems 8 and 16 passed on the median of their times, where
    the stage table leaves that point out. It fails now as pooled, naming the flags as the stage table's note does."""
    from bench.analysis.check import Bound, Reference, check

    two_flows(tmp_path / "runs", SPEEDRUN, other)
    table = collect([tmp_path / "runs"]).table
    bounds = {"stage_time_s": Bound(15.0, -0.5, 0.5), "problems_per_sec": Bound(4.0, -0.5, 0.5)}
    refs = [Reference(runtime, {"stage": stage, "runtime": runtime}, bounds) for runtime in ("bare", "ce")]
    out = {(o.reference, o.figure): o for o in check(table, refs)}
    for fig in bounds:
        bare, ce = out[("bare", fig)], out[("ce", fig)]
        assert (bare.verdict, bare.pooled, bare.runs) == ("fail", (said,), 2), fig
        assert (ce.verdict, ce.pooled, ce.runs) == ("pass", (), 2), fig  # its repeats ran alike: 10 s and 20 s
    assert out[("ce", "stage_time_s")].measured == statistics.median([10.0, 20.0])
    assert out[("ce", "problems_per_sec")].measured == 8 / 2.0
