"""Run directory -> row, and every way a run directory can be broken: reported, never a crash.

python -m pytest tests/unit/analysis/test_rundir.py -q
"""

import json

import pytest

from bench import contract
from bench.analysis.rundir import read_run_dir
from bench.logline import format_step_line


def test_complete_run(make_run):
    row = read_run_dir(make_run("r1", tok_s=200_000.0, world_size=8, t0=1000.0, startup_s=7.0))
    assert row["status"] == "ok" and row["skip_reason"] is None and row["notes"] is None
    assert row["tok_per_sec"] == pytest.approx(200_000.0, rel=5e-3)
    assert row["tok_per_sec_per_gpu"] == pytest.approx(25_000.0, rel=5e-3)
    assert row["depth"] == 20 and row["total_batch_size"] == 524_288 and row["gpu_name"] == "NVIDIA H200"
    assert row["startup_overhead_s"] == pytest.approx(7.0)
    assert row["time_to_first_step_s"] > 3.0  # dist init + model build + the slow first step
    assert row["launch_to_first_step_s"] == pytest.approx(7.0 + row["time_to_first_step_s"])
    assert row["mfu_source"] == "recomputed"
    assert row["mfu"] == pytest.approx(100 * 3.491758e9 * row["tok_per_sec"] / (8 * 989e12))
    assert row["peak_mem_mib"] == 70_000.0 and row["min_val_bpb"] == 1.2


def test_t0_is_the_launch_sections(make_run):
    row = read_run_dir(make_run("a", t0=None, startup_s=5.0, launch={"kind": "local", "t0": 1000.5}))
    assert row["startup_overhead_s"] == pytest.approx(4.5)


@pytest.mark.parametrize("where", [{"launch_t0": 1000.5}, {"launcher": {"t0": 1000.5}}, {"env": {"NANOCHAT_BENCH_T0": "1000.5"}}])
def test_other_spellings_of_t0_are_noted_not_guessed(make_run, where):
    """The reader does not guess: a launch time anywhere but launch.t0 is none. The unknown field (as a
    newer minor release may write one) is named in the notes, and the run is still read."""
    row = read_run_dir(make_run("a", t0=None, raw=True, **where))
    assert repr(next(iter(where))) in row["notes"] and "kept, not checked" in row["notes"]
    assert row.get("startup_overhead_s") is None and row["skip_reason"] is None and row["tok_per_sec"] > 0


def test_missing_t0(make_run):
    row = read_run_dir(make_run("b", t0=None))
    assert row.get("startup_overhead_s") is None and row["skip_reason"] is None  # not measured, still usable


def test_cpu_run_has_no_mfu(make_run):
    row = read_run_dir(make_run("cpu", peak=None, world_size=2))
    assert row["skip_reason"] is None and row.get("mfu") is None and row.get("mfu_source") is None


def test_a_run_whose_loss_went_nan_is_no_repeat(make_run):
    """A run of a release before the trainer stopped on divergence (status `diverged`) says ok while its loss went
    NaN: its steps trained nothing, so it is left out of the figures with the step named, never pooled."""
    d = make_run("nan")
    path = d / contract.METRICS_JSONL
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for ev in events:
        if ev["event"] == "step" and ev["step"] >= 17:
            ev["loss"] = float("nan")
    path.write_text("".join(json.dumps(ev) + "\n" for ev in events))
    row = read_run_dir(d)
    assert row["status"] == "ok" and "loss" in row["skip_reason"] and "step 17" in row["skip_reason"]


def test_last_line_cut_mid_json(make_run):
    d = make_run("cut")
    path = d / contract.METRICS_JSONL
    path.write_text(path.read_text() + '{"event": "step", "t": 1.0, "ste')
    row = read_run_dir(d)
    assert row["skip_reason"] is None
    assert "last line cut mid-JSON" in row["notes"]


def test_malformed_and_unknown_lines_counted(make_run):
    d = make_run("bad")
    path = d / contract.METRICS_JSONL
    lines = path.read_text().splitlines()
    lines.insert(3, "not json at all")
    lines.insert(4, json.dumps({"event": "step", "t": 2.0}))  # lacks the step fields
    lines.insert(5, json.dumps({"event": "teleport", "t": 2.0}))
    lines.insert(6, "[" * 100_000 + "]" * 100_000)  # too deep for json's parser: was a RecursionError
    path.write_text("\n".join(lines) + "\n")
    row = read_run_dir(d)
    assert "2 malformed line(s)" in row["notes"] and "2 line(s) not in the run contract" in row["notes"]
    assert "missing field 'step'" in row["notes"]  # the first violation, named
    assert "not in the run contract left out (first: step event: missing field 'step')" in row["notes"]  # file once
    assert row["skip_reason"] is None


@pytest.mark.parametrize("content,reason", [
    ("", "run.json is empty"),
    ('{"schema_version": 1, "status": "o', "run.json is not valid JSON"),
    ("[1, 2]", "run.json: expected an object, got list"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe", "not UTF-8 text"),
    pytest.param("[" * 100_000 + "]" * 100_000, "nested too deep", id="deep"),  # was a RecursionError: no table
])
def test_broken_run_json_is_skipped(make_run, content, reason):
    d = make_run("broken")
    path = d / contract.RUN_JSON
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    row = read_run_dir(d)
    assert reason in row["skip_reason"]
    assert row.get("tok_per_sec") is None  # no figures from a run we cannot identify
    assert "no run.json" not in row["notes"] and reason in row["notes"]  # it is there: the note says what is wrong


def test_a_truncated_run_json_is_named_in_plain_words(make_run):
    """A run.json cut mid-string read "Unterminated string starting at at line 2": json's message ends in "at"."""
    d = make_run("cut")
    (d / contract.RUN_JSON).write_text('{"schema_version": 1,\n "status": "o')
    reason = read_run_dir(d)["skip_reason"]
    assert "run.json is not valid JSON (Unterminated string starting at: line 2)" in reason and "at at" not in reason


def test_unknown_schema_version_is_skipped_not_guessed(make_run):
    d = make_run("future", raw=True, schema_version=99)
    row = read_run_dir(d)
    assert "schema_version 99" in row["skip_reason"] and row.get("tok_per_sec") is None


def test_running_run_is_marked(make_run):
    d = make_run("live", status="running")
    path = d / contract.METRICS_JSONL
    path.write_text("".join(ln + "\n" for ln in path.read_text().splitlines() if '"end"' not in ln))
    row = read_run_dir(d)
    assert row["status"] == "running" and row["skip_reason"] == "run running: not finished"


def test_failed_run_keeps_its_cause(make_run):
    d = make_run("oom", status="oom", message="CUDA out of memory; try --device_batch_size=16")
    with open(d / contract.METRICS_JSONL, "a") as f:
        f.write(json.dumps({"event": "error", "t": 5.0, "kind": "oom", "message": "CUDA OOM"}) + "\n")
    row = read_run_dir(d)
    assert row["status"] == "oom" and row["skip_reason"] == "run oom"
    assert row["message"].startswith("CUDA out of memory")


def test_status_from_events_without_run_json(make_run):
    d = make_run("norj")
    (d / contract.RUN_JSON).unlink()
    with open(d / contract.METRICS_JSONL, "a") as f:
        f.write(json.dumps({"event": "error", "t": 5.0, "kind": "nccl_timeout", "message": "watchdog"}) + "\n")
    row = read_run_dir(d)
    assert row["status"] == "nccl_timeout" and row["message"] == "nccl_timeout: watchdog"
    assert "no run.json" in row["notes"] and row["run_id"] == "norj"


def test_unknown_status_and_nan_fields(make_run):
    row = read_run_dir(make_run("weird", raw=True, status="exploded"))  # a newer minor's status: read, not used
    assert row["status"] == "exploded" and row["skip_reason"].startswith("unknown status 'exploded' (known: ")
    assert "status: 'exploded' is not one of" in row["notes"]
    d = make_run("nan", peak_flops_per_gpu=float("nan"))  # written as NaN, which json accepts
    row = read_run_dir(d)
    assert row["skip_reason"] is None and row.get("mfu") is None


def test_ok_without_steps_is_not_usable(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    (d / contract.RUN_JSON).write_text(json.dumps({"schema_version": contract.SCHEMA_VERSION, "status": "ok", "world_size": 1}))
    (d / contract.METRICS_JSONL).write_text("")
    row = read_run_dir(d)
    assert row["skip_reason"] == "status ok but no step records"


def test_steps_from_the_log_when_no_events(tmp_path):
    d = tmp_path / "logonly"
    d.mkdir()
    (d / contract.RUN_JSON).write_text(json.dumps({"schema_version": contract.SCHEMA_VERSION, "status": "ok", "world_size": 2}))
    lines = [format_step_line(s, 20, 5.0, 1.0, 0.5, 4000.0, 0.0, s) for s in range(20)]
    (d / "train.log").write_text("banner\n" + "\n".join(lines) + "\n")
    row = read_run_dir(d)
    assert row["skip_reason"] is None and row["tok_per_sec"] == pytest.approx(4000.0)
    assert "steps parsed from train.log" in row["notes"]


def test_nan_milestone_time_gives_no_startup_figure(make_run):
    d = make_run("nant")
    path = d / contract.METRICS_JSONL
    lines = path.read_text().splitlines()
    lines[0] = '{"event": "start", "t": NaN}'
    path.write_text("\n".join(lines) + "\n")
    row = read_run_dir(d)
    assert row.get("startup_overhead_s") is None and row.get("time_to_first_step_s") is None
    assert row["skip_reason"] is None and row["tok_per_sec"] > 0  # the steady figures do not need it


def test_a_resumed_runs_start_up_is_its_last_attempts(make_run):
    """--resume_from_step appends the second attempt's milestones to metrics.jsonl and run.json's launch time
    becomes that attempt's: measured from the first attempt's milestones, its start-up was -95 s and its
    teardown held the whole second attempt."""
    d = make_run("resumed", t0=1000.0, startup_s=5.0)
    t0 = 2000.0
    again = [{"event": "start", "t": t0 + 3}, {"event": "runtime_start", "t": t0 + 1},
             {"event": "dist_init", "t": t0 + 6, "world_size": 8, "backend": "nccl"},
             {"event": "model_ready", "t": t0 + 8, "num_params": 560_988_160, "flops_per_token": 3.491758e9},
             {"event": "first_step", "t": t0 + 20},
             {"event": "step", "t": t0 + 20, "step": 30, "loss": 3.0, "lrm": 1.0, "dt_ms": 1000.0,
              "tok_per_sec": 1.0, "mfu": None, "total_time_s": 0.0},
             {"event": "end", "t": t0 + 30, "peak_mem_mib": 1.0, "total_training_time_s": 10.0, "min_val_bpb": None}]
    with open(d / contract.METRICS_JSONL, "a") as f:
        f.writelines(json.dumps(ev) + "\n" for ev in again)
    manifest = json.loads((d / contract.RUN_JSON).read_text())
    manifest["launch"] = {"kind": "local", "t0": t0, "finished_at": t0 + 31}
    (d / contract.RUN_JSON).write_text(json.dumps(manifest))
    row = read_run_dir(d)
    assert row["notes"] is None
    assert row["startup_overhead_s"] == pytest.approx(3.0) and row["time_to_first_step_s"] == pytest.approx(17.0)
    assert row["launch_to_first_step_s"] == pytest.approx(20.0)
    assert row["phase_runtime_start_s"] == pytest.approx(1.0) and row["phase_finished_s"] == pytest.approx(1.0)
    phases = {k: v for k, v in row.items() if k.startswith("phase_") and v is not None}
    assert min(phases.values()) >= 0 and sum(phases.values()) == pytest.approx(31.0)


def _skewed_run(make_run, behind_s: float):
    """A run whose rank 0 node's clock (its events) is `behind_s` behind the batch host's (launch.t0, finished_at),
    as a real run's record reads under that skew."""
    d = make_run("skewed", t0=1000.0, startup_s=2.0)
    events = [json.loads(line) for line in (d / contract.METRICS_JSONL).read_text().splitlines()]
    for ev in events:
        ev["t"] -= behind_s
    (d / contract.METRICS_JSONL).write_text("".join(json.dumps(ev) + "\n" for ev in events))
    manifest = json.loads((d / contract.RUN_JSON).read_text())
    end = max(ev["t"] for ev in events if ev["event"] == "end") + behind_s
    manifest["launch"] = {"kind": "slurm", "t0": 1000.0, "finished_at": end + 1.0}
    (d / contract.RUN_JSON).write_text(json.dumps(manifest))
    return d


def test_a_phase_across_two_skewed_clocks_is_unknown_not_negative(make_run):
    """Rank 0's node 5 s behind the batch host: the report's start-up table printed runtime start-up -5 s (and the
    teardown 5 s too long, start-up s negative) as facts."""
    row = read_run_dir(_skewed_run(make_run, 5.0))
    phases = {k: v for k, v in row.items() if k.startswith("phase_") and v is not None}
    assert min(phases.values()) >= 0
    assert "phase_finished_s" not in phases and row.get("startup_overhead_s") is None
    assert row.get("launch_to_first_step_s") is None and row["time_to_first_step_s"] > 0  # one clock: kept
    assert "phase_start_s" not in phases and phases["phase_dist_init_s"] > 0  # launch -> start: 2 s - 5 s
    assert row["clock_skew"] == ("torchrun and spawn came out -3.0 s: the batch host's and rank 0's node's "
                                 "clocks disagree")


def test_a_run_on_one_clock_has_no_skew(make_run):
    row = read_run_dir(_skewed_run(make_run, 0.0))
    assert row.get("clock_skew") is None and row["startup_overhead_s"] == pytest.approx(2.0)
    assert row["phase_finished_s"] == pytest.approx(1.0)
