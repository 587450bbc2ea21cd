"""The speedrun flow on this machine: every registered stage in turn on 2 CPU ranks (tiny model, generated
shards, chat data and eval bundle), the tokenizer trained first because there is none, each stage in its own
run directory chained through the point's model tag, and the report with a section per stage. Then a flow
without its eval bundle is refused before anything runs; a stage made to fail (a bundle damaged inside) ends
the flow naming it, the later stages recorded as not run, and the same command after the bundle is staged
again starts at that stage, keeping the stages already ok.

    python -m pytest tests/integration/test_flow_local.py -q
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from bench import cli, workloads
from bench.analysis.collect import collect
from bench.analysis.report import write_report
from bench.contract import read_run_json
from bench.launch.flow import FLOW_JSON, FLOWS, model_tag

pytestmark = pytest.mark.slow

# pre-training's flags, then each stage's: a few steps, small batches, a few problems (--stage-arg)
TINY = ["--device_type=cpu", "--depth=2", "--max_seq_len=256", "--device_batch_size=2", "--num_iterations=6",
        "--eval_every=-1", "--tokenizer-arg", "vocab_size=512"]
STAGE_ARGS = {
    "base_loss": ["device_batch_size=2", "split_tokens=1024"],
    "base_eval": ["max_per_task=11"],  # the bundle's 10-shot tasks need 11 examples
    "mid_train": ["num_iterations=4", "max_seq_len=256", "device_batch_size=2", "eval_every=-1"],
    "chat_eval_mid": ["max_problems=2", "batch_size=2", "max_new_tokens=8"],
    "chat_sft": ["num_iterations=3", "device_batch_size=2", "eval_every=-1", "eval_metrics_every=-1"],
    "chat_eval_sft": ["max_problems=2", "batch_size=2", "max_new_tokens=8"],
}
STAGES = [s.name for s in FLOWS["speedrun"] if s.workload in workloads.names()]
CHECKPOINTS = {"base_train": "base_checkpoints", "mid_train": "mid_checkpoints", "chat_sft": "chatsft_checkpoints"}


def flow_argv(run_dir, stages=STAGES) -> list[str]:
    stage_args = [f"--stage-arg={s}:{a}" for s in stages for a in STAGE_ARGS.get(s, [])]
    return ["speedrun", "--nproc=2", f"--stages={','.join(stages)}", *TINY, *stage_args, f"--run-dir={run_dir}"]


def generate(base, *args: str) -> None:
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base))
    subprocess.run([sys.executable, "-m", "bench.cli", "data", "generate", *args], env=env, check=True,
                   capture_output=True)


@pytest.fixture(scope="module")
def flow_run(tmp_path_factory):
    """One run of the flow through every registered stage (the expensive part), on generated data."""
    base = tmp_path_factory.mktemp("flow_base")
    generate(base, "--shards=3", "--docs-per-shard=256", "--row-group-size=16")
    generate(base, "--chat")
    if "base_eval" in STAGES:
        generate(base, "--eval-bundle")
    point = tmp_path_factory.mktemp("runs") / "speedrun" / "p1"
    mp = pytest.MonkeyPatch()
    mp.setenv("NANOCHAT_BASE_DIR", str(base))
    mp.setenv("OMP_NUM_THREADS", "1")
    try:
        rc = cli.main(flow_argv(point))
    finally:
        mp.undo()
    return rc, base, point


def test_every_stage_runs_in_turn_chained_through_the_points_tag(flow_run):
    rc, base, point = flow_run
    runs = {s: read_run_json(point / s) for s in STAGES}
    assert rc == 0, {s: (r.get("status"), r.get("message")) for s, r in runs.items()}
    assert (base / "tokenizer" / "tokenizer.pkl").is_file()  # trained before the first stage, outside the runs
    assert all(r["status"] == "ok" for r in runs.values())
    assert all(r["stage"] == s and r["run_id"] == "p1" and r["sweep_id"] == "speedrun" for s, r in runs.items())
    record = json.loads((point / FLOW_JSON).read_text())
    tag = model_tag(point.resolve())  # <sweep>-<point>-<hash of the point's path>
    assert tag.startswith("speedrun-p1-")
    assert record["model_tag"] == tag and [s["name"] for s in record["stages"]] == STAGES
    for stage, folder in CHECKPOINTS.items():
        if stage in STAGES:
            assert any((base / folder / tag).glob("model_*.pt")), f"{stage} saved under the point's tag"
    assert runs["base_train"]["config"]["save_every"] == runs["base_train"]["config"]["num_iterations"] == 6


def test_the_report_has_a_section_per_stage_and_the_time_to_a_chat_model(flow_run, tmp_path):
    _, _, point = flow_run
    table = collect([point]).table
    assert set(table["stage"].dropna()) == set(STAGES)
    assert table["skip_reason"].isna().all(), table[["stage", "skip_reason"]]  # evaluations too: none skipped
    write_report(table, tmp_path)
    report = (tmp_path / "report.md").read_text()
    for stage in STAGES:
        assert f"### Stage {stage} (" in report
    assert "### Time to a chat model" in report
    ttc = report.split("### Time to a chat model")[1]
    assert all(f"{s} s" in ttc for s in STAGES) and f"({len(STAGES)} of" not in ttc  # every stage counted
    if "base_loss" in STAGES:
        section = report.split("### Stage base_loss")[1].split("###")[0]
        assert "val_bpb" in section and "sequences/s" in section and "tok/s (forward)" in section
    assert "Runs skipped (unreadable or incomplete)\n\nNone." in report


@pytest.mark.skipif("base_eval" not in STAGES or "mid_train" not in STAGES, reason="needs base_eval and mid_train")
def test_a_damaged_eval_bundle_ends_the_flow_at_base_eval_and_the_rerun_starts_there(flow_run, tmp_path, capsys):
    _, base, point = flow_run
    # the same point's checkpoints in a base directory without the eval bundle, under the tag of a point of the
    # same names in another place (its path's hash differs)
    copy = tmp_path / "base"
    shutil.copytree(base, copy, ignore=shutil.ignore_patterns("eval_bundle"))
    again = tmp_path / "speedrun" / "p1"
    checkpoints = copy / "base_checkpoints"
    (checkpoints / model_tag(point.resolve())).rename(checkpoints / model_tag(again.resolve()))
    stages = ["base_eval", "mid_train"]
    mp = pytest.MonkeyPatch()
    mp.setenv("NANOCHAT_BASE_DIR", str(copy))
    mp.setenv("OMP_NUM_THREADS", "1")
    try:
        capsys.readouterr()
        assert cli.main(flow_argv(again, stages)) != 0  # no bundle: refused before the tokenizer or any stage
        assert "`nanochat-bench data download --eval-bundle`" in capsys.readouterr().err and not again.exists()
        generate(copy, "--eval-bundle")
        task = next((copy / "eval_bundle" / "eval_data").rglob("*.jsonl"))
        task.write_text("not json\n")  # there by name (the check before the flow passes), damaged inside
        assert cli.main(flow_argv(again, stages)) != 0
        out = capsys.readouterr().out
        failed, later = read_run_json(again / "base_eval"), read_run_json(again / "mid_train")
        assert "stopped at base_eval" in out and failed["status"] != "ok" and "eval_bundle" in failed["message"]
        assert later["status"] == "cancelled" and "stage base_eval" in later["message"]
        assert [e["kind"] for e in later["evidence"]] == ["not_run"]

        generate(copy, "--eval-bundle", "--overwrite")
        assert cli.main(flow_argv(again, stages)) == 0, capsys.readouterr().out[-3000:]
        assert read_run_json(again / "base_eval")["status"] == read_run_json(again / "mid_train")["status"] == "ok"
        assert len(list(tmp_path.glob("speedrun/p1/base_eval.attempt-*"))) == 1  # the failed attempt, kept whole
        capsys.readouterr()
        assert cli.main(flow_argv(again, stages)) == 0  # everything ok: kept, nothing runs again
        assert capsys.readouterr().out.count("ok in an earlier run of this flow, kept") == 2
    finally:
        mp.undo()
