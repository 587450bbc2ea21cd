"""The report per stage of a flow: a section per stage with its throughput, time and scores side by side across
runtimes and rank counts; the time per stage and in total; a stage's runs never compared with another
stage's (chat_eval after mid-training and after SFT are one workload, told apart by run.json `stage`).

    python -m pytest tests/unit/analysis/test_report_stages.py -q
"""

import random

from bench.analysis import scaling
from bench.analysis.collect import collect
from bench.analysis.report import write_report
from bench.analysis.stages import stage_sections
from tests.support.synthetic import run_events, write_run

T0 = 1_700_000_000.0


def stage_run(root, runtime, ranks, stage, workload, *, time_s, scores=None, steps=False, status="ok",
              problems=None):
    run_dir = root / f"n{ranks}-{runtime}-r1" / stage
    manifest = {"run_id": f"n{ranks}-{runtime}-r1", "sweep_id": "flow", "workload": workload, "stage": stage,
                "runtime": runtime, "nodes": 1, "gpus_per_node": ranks, "world_size": ranks, "status": status,
                "scores": scores or {}, "launch": {"t0": T0, "finished_at": T0 + time_s}}
    if steps:
        events = run_events(1000.0 * ranks, 30, 8192, ranks, T0, 5.0, random.Random(1), peak=None)
    else:
        events = [{"event": "start", "t": T0 + 1}, {"event": "dist_init", "t": T0 + 2, "world_size": ranks, "backend": "gloo"}]
        for i, (name, value) in enumerate((scores or {}).items()):
            events.append({"event": "score", "t": T0 + 3 + i, "name": name, "value": value,
                           **({"problems": problems, "seconds": 2.0} if problems else {})})
    write_run(run_dir, manifest, events)


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


def test_no_flow_runs_no_stage_part(tmp_path):
    stage_run(tmp_path / "runs", "bare", 2, "base_train", "nanochat-base", time_s=10, steps=True)
    table = collect([tmp_path / "runs"]).table
    assert stage_sections(table.assign(stage=None)) is None
