"""collect: generated sweeps at scale, incremental and idempotent updates, table files round trip.

python -m pytest tests/unit/analysis/test_collect_table.py -q
"""

import json
import math
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from bench import contract
from bench.analysis import collect as collect_mod
from bench.analysis.collect import TABLE_CSV, TABLE_PARQUET, collect, load_table
from bench.analysis.scaling import scaling_table
from bench.errors import AnalysisError
from tests.support.synthetic import SweepSpec, efficiency, generate_sweep

REPO = Path(__file__).resolve().parents[3]


def test_thousands_of_generated_runs(tmp_path):
    spec = SweepSpec(runtimes={"bare": 1.0, "ce": 0.98, "pyxis": 0.99, "apptainer": 0.97},
                     world_sizes=(1, 2, 4, 8, 16, 32), repeats=50, steps=14, noise=0.01)
    dirs = generate_sweep(tmp_path / "root", spec)
    assert len(dirs) == 1200
    result = collect([tmp_path / "root"], tmp_path / "table", workers=2)
    t = result.table
    assert (len(t), result.read, int(t["skip_reason"].isna().sum())) == (1200, 1200, 1200)
    pts = scaling_table(t).set_index(["runtime", "world_size"])
    for runtime, factor in spec.runtimes.items():
        for n in spec.world_sizes:
            # the median of 50 repeats lands within a fraction of the 1% noise of the generating model
            expected = spec.per_gpu_tok_s * n * efficiency(spec, n) * factor
            assert pts.loc[(runtime, n), "tok_per_sec"] == pytest.approx(expected, rel=6e-3)
            assert pts.loc[(runtime, n), "efficiency"] == pytest.approx(efficiency(spec, n), rel=1e-2)


@pytest.mark.parametrize("asked, maximum, started", [(100000, 64, 64), (None, 64, 8), (3, 64, 3), (5000, 9999, 600)])
def test_the_reading_processes_are_bounded(monkeypatch, asked, maximum, started):
    """A worker count beyond the maximum, or beyond the runs to read, started that many processes."""
    seen = []

    class Pool:
        def __init__(self, workers):
            seen.append(workers)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, fn, it, chunksize=1):
            return map(fn, it)

    monkeypatch.setattr(collect_mod, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(collect_mod, "_read_one", lambda item: [{"n": item}])
    monkeypatch.setattr(collect_mod.os, "cpu_count", lambda: 200)
    monkeypatch.setattr(collect_mod, "MAX_WORKERS", maximum)
    assert len(collect_mod.read_rows(list(range(600)), asked)) == 600
    assert seen == [started]


def test_incremental_and_idempotent(tmp_path):
    root, out = tmp_path / "root", tmp_path / "table"
    dirs = generate_sweep(root, SweepSpec(world_sizes=(8, 16), repeats=2, steps=12))
    first = collect([root], out)
    csv1, pq1 = (out / TABLE_CSV).read_bytes(), load_table(out / TABLE_PARQUET)
    again = collect([root], out)
    assert (first.read, again.read, again.reused) == (12, 0, 12)
    assert (out / TABLE_CSV).read_bytes() == csv1  # same files, same table
    assert again.table.equals(pq1)

    with open(dirs[0] / contract.METRICS_JSONL, "a") as f:  # one run changes
        f.write(json.dumps({"event": "error", "t": 1.0, "kind": "failed", "message": "late"}) + "\n")
    shutil.rmtree(dirs[1])  # one goes
    generate_sweep(root, SweepSpec(runtimes={"podman": 0.9}, world_sizes=(8,), repeats=1, steps=12,
                                   sweep_id="sweep1"))  # one arrives
    third = collect([root], out)
    assert (third.read, third.reused, third.removed, len(third.table)) == (2, 10, 1, 12)
    assert "error event" in third.table.set_index("source").loc[str(dirs[0].relative_to(root)), "notes"]


def test_tables_name_runs_relative_to_the_root(tmp_path, monkeypatch):
    """A table says the same wherever it is copied: no path of the machine that collected it."""
    monkeypatch.chdir(tmp_path)
    generate_sweep(tmp_path / "results" / "runs", SweepSpec(world_sizes=(8,), repeats=1, steps=12))
    table = collect(["results/runs"], tmp_path / "table").table
    assert set(table["root"]) == {"results/runs"}
    assert sorted(table["source"]) == ["sweep0/apptainer-n8-r0", "sweep0/bare-n8-r0", "sweep0/ce-n8-r0"]
    assert str(tmp_path) not in (tmp_path / "table" / TABLE_CSV).read_text()


def test_other_roots_in_the_same_table_are_kept(tmp_path):
    out = tmp_path / "table"
    generate_sweep(tmp_path / "a", SweepSpec(world_sizes=(8,), repeats=1, steps=12))
    generate_sweep(tmp_path / "b", SweepSpec(runtimes={"ce": 1.0}, world_sizes=(8,), repeats=1, steps=12))
    collect([tmp_path / "a"], out)
    both = collect([tmp_path / "b"], out)
    assert len(both.table) == 4 and both.removed == 0


def test_a_table_kept_as_csv_alone_keeps_its_rows(tmp_path):
    """An --out holding runs.csv without runs.parquet (a table kept or copied as CSV) is the table to update,
    not one to replace: the rows of its other roots stay."""
    out = tmp_path / "table"
    generate_sweep(tmp_path / "a", SweepSpec(world_sizes=(8,), repeats=1, steps=12))
    generate_sweep(tmp_path / "b", SweepSpec(runtimes={"ce": 1.0}, world_sizes=(8,), repeats=1, steps=12))
    collect([tmp_path / "a"], out)
    (out / TABLE_PARQUET).unlink()
    both = collect([tmp_path / "b"], out)
    assert len(both.table) == 4 and len(load_table(out / TABLE_CSV)) == 4


def test_two_collects_into_one_table_at_once_keep_each_others_rows(tmp_path, monkeypatch, capsys):
    """`collect a --out t &` and `collect b --out t` each read the table as it was, and the files of the later one to
    write held none of the other's rows, though both said they wrote it. The second waits for the first now, saying
    so once, then reads the table the first wrote and adds its rows."""
    out = tmp_path / "table"
    for name, runtime in (("a", "bare"), ("b", "ce"), ("c", "pyxis")):
        generate_sweep(tmp_path / name, SweepSpec(runtimes={runtime: 1.0}, world_sizes=(8,), repeats=1, steps=12))
    collect([tmp_path / "c"], out)  # a table there: each collect reads its runs between reading it and writing it
    read_rows, reading, go_on = collect_mod.read_rows, threading.Event(), threading.Event()

    def first_stops_while_reading(items, workers=None):
        if not reading.is_set():
            reading.set()
            assert go_on.wait(30)
        return read_rows(items, workers)
    monkeypatch.setattr(collect_mod, "read_rows", first_stops_while_reading)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(collect, [tmp_path / "a"], out)
        assert reading.wait(30)
        second = pool.submit(collect, [tmp_path / "b"], out)
        said, deadline = "", time.monotonic() + 30
        while not second.done() and "waiting" not in said and time.monotonic() < deadline:
            time.sleep(0.05)
            said += capsys.readouterr().out
        go_on.set()
        first.result(30), second.result(30)
    said += capsys.readouterr().out
    assert sorted(Path(root).name for root in load_table(out)["root"]) == ["a", "b", "c"]
    assert said.count(f"waiting for another collect writing {out} to end (pid {os.getpid()} on ") == 1


def test_row_version_change_rereads_everything(tmp_path, monkeypatch):
    generate_sweep(tmp_path / "r", SweepSpec(world_sizes=(8,), repeats=2, steps=12))
    collect([tmp_path / "r"], tmp_path / "t")
    monkeypatch.setattr(collect_mod, "ROW_VERSION", collect_mod.ROW_VERSION + 1)
    assert collect([tmp_path / "r"], tmp_path / "t").read == 6


def test_parquet_and_csv_read_back_the_same(tmp_path, make_run):
    make_run("a", root=tmp_path / "r")
    make_run("b", root=tmp_path / "r", status="failed", message="boom | with a pipe, and a comma")
    result = collect([tmp_path / "r"], tmp_path / "t")
    from_pq, from_csv = load_table(tmp_path / "t" / TABLE_PARQUET), load_table(tmp_path / "t" / TABLE_CSV)
    assert from_pq.equals(result.table)
    assert from_csv.drop(columns=["tok_per_sec", "step_time_cv"]).equals(
        from_pq.drop(columns=["tok_per_sec", "step_time_cv"]))
    assert from_csv["tok_per_sec"].tolist() == pytest.approx(from_pq["tok_per_sec"].tolist())  # CSV rounds floats
    assert list(from_pq.columns) == list(collect_mod.COLUMNS)


def test_a_run_directory_itself_can_be_the_root(make_run):
    d = make_run("single", world_size=2, peak=None)
    t = collect([d]).table
    assert len(t) == 1 and t.loc[0, "run_id"] == "single" and math.isnan(t.loc[0, "mfu"])


def test_bad_inputs_are_clear_errors(tmp_path):
    with pytest.raises(AnalysisError, match="nope: no such directory"):
        collect([tmp_path / "nope"])
    (tmp_path / "file").write_text("")
    with pytest.raises(AnalysisError, match="file: not a directory"):
        collect([tmp_path / "file"])
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(AnalysisError, match="not a table written by collect"):
        load_table(tmp_path / "x.parquet")
    with pytest.raises(AnalysisError, match="no runs.parquet or runs.csv"):
        load_table(tmp_path)
    empty = collect([tmp_path])
    assert len(empty.table) == 0 and list(empty.table.columns) == list(collect_mod.COLUMNS)


def test_a_table_that_cannot_be_written_whole_leaves_both_files_as_they_were(tmp_path, make_run, monkeypatch):
    """A disk that fills while runs.csv is written: runs.parquet was already replaced by the new table, so the two
    files held different runs while the error said the old table was left whole."""
    import errno

    make_run("a", root=tmp_path / "runs")
    collect([tmp_path / "runs"], tmp_path / "table")
    before = {n: (tmp_path / "table" / n).read_bytes() for n in (TABLE_PARQUET, TABLE_CSV)}
    make_run("b", root=tmp_path / "runs")

    def full(*_args, **_kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(collect_mod.pa_csv, "write_csv", full)
    with pytest.raises(AnalysisError, match="the table cannot be written there"):
        collect([tmp_path / "runs"], tmp_path / "table")
    assert {n: (tmp_path / "table" / n).read_bytes() for n in (TABLE_PARQUET, TABLE_CSV)} == before
    # no temporaries: the table and its lock
    assert sorted(p.name for p in (tmp_path / "table").iterdir()) == [collect_mod.TABLE_LOCK, TABLE_CSV, TABLE_PARQUET]


@pytest.mark.parametrize("cut", ["mid_row", "mid_field"])
def test_a_torn_csv_is_refused_by_report_and_check_with_one_line(tmp_path, capsys, cut):
    """A runs.csv cut mid-row (a copy that stopped) is never read with its torn row (issue 23)."""
    from bench.cli import main

    generate_sweep(tmp_path / "root", SweepSpec(world_sizes=(8,), repeats=2, steps=12))
    collect([tmp_path / "root"], tmp_path / "table")
    text = (tmp_path / "table" / TABLE_CSV).read_text()
    torn = tmp_path / "torn.csv"
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    keep = len(text.rstrip("\n")) - len(last) + (len(last) // 2 if cut == "mid_row" else last.index(",") + 3)
    torn.write_text(text[:keep])
    with pytest.raises(AnalysisError, match="a torn table: its last row ends without a newline"):
        load_table(torn)
    refs = tmp_path / "refs.toml"
    refs.write_text('[[reference]]\nwhere = { runtime = "bare" }\nfigures.tok_per_sec = { value = 1 }\n')
    for argv in (["report", str(torn), "--out", str(tmp_path / "report")],
                 ["check", str(torn), "--references", str(refs)]):
        assert main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {torn}: a torn table") and "\n" not in err
    assert not (tmp_path / "report" / "report.md").exists()


@pytest.mark.parametrize("damaged", [TABLE_CSV, TABLE_PARQUET])
def test_a_damaged_table_says_the_way_out_that_works(tmp_path, damaged):
    """A torn runs.csv said "re-run collect to write it again", but collect refuses the same table each time:
    moving it aside is the way out, and it works."""
    generate_sweep(tmp_path / "root", SweepSpec(world_sizes=(8,), repeats=1, steps=12))
    (tmp_path / "table").mkdir()
    (tmp_path / "table" / damaged).write_text("root,source\nx,")
    with pytest.raises(AnalysisError, match="move it aside and run `nanochat-bench collect` again") as e:
        collect([tmp_path / "root"], tmp_path / "table")
    assert "re-run" not in str(e.value)
    (tmp_path / "table" / damaged).rename(tmp_path / "aside")
    assert len(collect([tmp_path / "root"], tmp_path / "table").table) == 3


def test_a_file_that_is_no_table_is_not_called_torn(tmp_path, capsys):
    """`check refs.toml --references ...` (the arguments swapped) said the TOML was "a torn table" to collect again."""
    from bench.cli import main
    refs = tmp_path / "refs.toml"
    refs.write_text('[[reference]]\nwhere = { runtime = "bare" }\nfigures.tok_per_sec = { value = 1 }\n')
    assert main(["check", str(refs), "--references", str(refs)]) == 1
    assert capsys.readouterr().err.strip() == (f"error: {refs}: not a table written by collect "
                                               "(give its runs.parquet or runs.csv, or the directory holding them)")


def test_a_row_with_fields_missing_is_refused_naming_it(tmp_path):
    generate_sweep(tmp_path / "root", SweepSpec(world_sizes=(8,), repeats=2, steps=12))
    collect([tmp_path / "root"], tmp_path / "table")
    lines = (tmp_path / "table" / TABLE_CSV).read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 3)[0]  # three fields short, yet whole lines
    torn = tmp_path / "short.csv"
    torn.write_text("\n".join(lines) + "\n")
    with pytest.raises(AnalysisError, match=r"row 1 \(line 2\) has \d+ fields, the header \d+"):
        load_table(torn)


def test_a_table_of_an_older_row_version_is_read(tmp_path):
    """Tables collected by an older release keep working: columns added since are empty (unknown)."""
    table = load_table(REPO / "results" / "h200-d20" / "table-stacked")
    assert len(table) and (table["row_version"] < collect_mod.ROW_VERSION).all()
    assert table["vocab_size"].isna().all() and list(table.columns) == list(collect_mod.COLUMNS)
    assert len(scaling_table(table)) > 0


def test_the_stages_of_one_flow_point_are_not_copies_of_each_other(make_run, tmp_path):
    """Regression: a flow's stages share the point's sweep, run id and Slurm job; collect took all but one of
    them for copies of one run directory and left them out of the report."""
    point = tmp_path / "speedrun" / "n2-bare-r1"
    for stage in ("base_train", "mid_train"):
        run = make_run(stage, root=point, slurm={"job_id": "42"}, stage=stage)
        run_json = run / "run.json"
        run_json.write_text(run_json.read_text().replace(f'"run_id": "{stage}"', '"run_id": "n2-bare-r1"'))
    table = collect([point], tmp_path / "table").table
    assert sorted(table["stage"]) == ["base_train", "mid_train"] and table["skip_reason"].isna().all()


def test_a_run_directory_found_twice_is_one_run(make_run, tmp_path):
    """ReFrame keeps a failed case's run directory in its stage directory and copies it to its output
    directory: both are read, the figures count the run once, and the copy names the one they use."""
    run = make_run("n1-bare-r1", root=tmp_path / "stage" / "sweep", slurm={"job_id": "42"})
    shutil.copytree(run, tmp_path / "output" / "sweep" / run.name)
    table = collect([tmp_path], tmp_path / "table").table
    assert len(table) == 2 and table["skip_reason"].isna().sum() == 1
    copy = table[table["skip_reason"].notna()].iloc[0]
    assert copy["skip_reason"].startswith("the same run as ")
    assert copy["skip_reason"].endswith("(a copy of its directory)")
    assert load_table(tmp_path / "table")["skip_reason"].isna().sum() == 1
    assert scaling_table(table)["runs"].tolist() == [1]


def test_collect_counts_a_failed_runs_copy_once(make_run, tmp_path, capsys):
    """A failed run kept in ReFrame's stage and output directories was listed as `failed 2` by collect, the
    report saying 1 failed; the copy is now a line of its own."""
    from bench.cli import main
    run = make_run("n1-bare-r1", root=tmp_path / "runs" / "stage", slurm={"job_id": "42"}, status="failed")
    shutil.copytree(run, tmp_path / "runs" / "output" / run.name)
    make_run("n1-bare-r2", root=tmp_path / "runs" / "output", slurm={"job_id": "43"})
    assert main(["collect", str(tmp_path / "runs"), "--out", str(tmp_path / "table")]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert [line[:2] for line in lines] == [["failed", "1"], ["ok", "1"], ["copy", "1"]]


def test_a_copy_taken_while_the_run_went_on_does_not_hide_its_failure(make_run, tmp_path):
    """A run copied while running (a/) and kept after it failed (b/): the stale copy sorted first and kept the
    run, so the report said `not finished` and hid the failure and its cause behind "the same run as a/..."."""
    run = make_run("n1-bare-r1", root=tmp_path / "b", slurm={"job_id": "42"}, status="failed",
                   message="NCCL timeout")
    stale = shutil.copytree(run, tmp_path / "a" / run.name)
    run_json = json.loads((stale / "run.json").read_text())
    (stale / "run.json").write_text(json.dumps({**run_json, "status": "running", "message": None}))
    table = collect([tmp_path], tmp_path / "table").table.set_index("source")
    kept, copy = f"b/{run.name}", f"a/{run.name}"
    assert (table.at[kept, "status"], table.at[kept, "skip_reason"]) == ("failed", "run failed")
    assert table.at[copy, "skip_reason"].startswith("the same run as ") and kept in table.at[copy, "skip_reason"]


def test_a_run_collected_again_from_a_moved_folder_keeps_its_new_row_not_the_older_ones(make_run, tmp_path):
    """A results folder moved (a/ -> b/) and collected again into the table that held its rows of an older row
    version: the stale rows sorted first and kept the run, the fresh ones left out as their copies, and the
    report still said to collect again to recompute them."""
    from bench.analysis.report import row_versions
    make_run("n1-bare-r1", root=tmp_path / "a", slurm={"job_id": "42"})
    collect([tmp_path / "a"], tmp_path / "table")
    old = load_table(tmp_path / "table").assign(row_version=collect_mod.ROW_VERSION - 1)
    collect_mod.write_table(old, tmp_path / "table")
    shutil.move(tmp_path / "a", tmp_path / "b")
    table = collect([tmp_path / "b"], tmp_path / "table").table
    kept = table[table["skip_reason"].isna()]
    assert kept["root"].tolist() == [str(tmp_path / "b")] and kept["row_version"].tolist() == [collect_mod.ROW_VERSION]
    assert "older one" not in row_versions(table)


def test_a_copied_run_outside_slurm_is_one_run_and_two_runs_of_one_name_are_two(make_run, tmp_path):
    """Regression: copies of a run made outside Slurm (no job id) each counted as a repeat, narrowing its CI.
    Outside Slurm a run is the same run when its id and its start time are."""
    run = make_run("20261204-032415", root=tmp_path / "a")
    shutil.copytree(run, tmp_path / "b" / run.name)
    make_run("20261204-032415", root=tmp_path / "c", t0=2000.0)  # another run, the same second's id
    table = collect([tmp_path], tmp_path / "table").table
    assert len(table) == 3 and table["skip_reason"].isna().sum() == 2
    assert table[table["skip_reason"].notna()].iloc[0]["skip_reason"].endswith("(a copy of its directory)")


def test_a_table_of_a_newer_row_version_is_refused_not_rewritten_without_its_columns(make_run, tmp_path):
    """A table written by a newer release (a later row version, a column this one lacks): report said its rows
    were of this release's version, and collect into it dropped the newer columns when it rewrote the table."""
    make_run("n1-bare-r1", root=tmp_path / "a")
    collect([tmp_path / "a"], tmp_path / "table")
    newer = pd.read_csv(tmp_path / "table" / TABLE_CSV).assign(row_version=collect_mod.ROW_VERSION + 1, later=1)
    (tmp_path / "table" / TABLE_PARQUET).unlink()
    newer.to_csv(tmp_path / "table" / TABLE_CSV, index=False)
    before = (tmp_path / "table" / TABLE_CSV).read_bytes()
    make_run("n1-bare-r2", root=tmp_path / "b")
    for read in (lambda: load_table(tmp_path / "table"), lambda: collect([tmp_path / "b"], tmp_path / "table")):
        with pytest.raises(AnalysisError, match=f"row version {collect_mod.ROW_VERSION + 1}, newer than this "
                                                f"release's {collect_mod.ROW_VERSION}"):
            read()
    assert (tmp_path / "table" / TABLE_CSV).read_bytes() == before


def test_the_readme_names_the_current_row_version():
    """README said row_version 16 three versions after it was 19: a user comparing tables read the wrong one."""
    assert f"`row_version` ({collect_mod.ROW_VERSION} now)" in (REPO / "README.md").read_text()


def test_a_runs_console_log_beside_its_run_directory_is_one_run(tmp_path):
    """benchmarks/gpu_bench.py saves each run's console output beside the run directory it wrote: collect read
    both, and the report showed d26's bf16 run twice (82,697 tok/s from each). A log whose run directory is not
    there (fp8's, here) is still a run of its own."""
    d26 = REPO / "results" / "h200-d20" / "fp8" / "runs" / "d26"
    shutil.copytree(d26 / "bf16-1gpu", tmp_path / "runs" / "bf16-1gpu")
    for name in ("gpu_bench-bf16.log", "gpu_bench-fp8.log"):
        shutil.copy(d26 / name, tmp_path / "runs" / name)
    table = collect([tmp_path / "runs"], tmp_path / "table").table.set_index("source")
    assert table["skip_reason"].isna().sum() == 2
    assert table.at["gpu_bench-bf16.log", "skip_reason"] == \
        f"the same run as {tmp_path / 'runs' / 'bf16-1gpu'} (its console log)"
    assert pd.isna(table.at["gpu_bench-fp8.log", "skip_reason"])
    assert scaling_table(table.reset_index())["runs"].tolist() == [1, 1]  # bf16's directory, fp8's log
    assert load_table(tmp_path / "table")["skip_reason"].isna().sum() == 2


def test_a_flow_stage_that_never_started_is_no_run(tmp_path):
    """An earlier release's rerun of `speedrun` after a Ctrl-C kept each not-run mark aside as
    <stage>.attempt-<time>, and collect and the report's failed runs listed every one as a cancelled run: one Ctrl-C
    read as 4 cancelled stages that never started. A mark alone (run.json, its evidence all not_run) is no row, and
    stays on disk; a stage that ran, or a mark beside a log, is a run as before."""
    from bench.launch import jobrecord

    point = tmp_path / "runs" / "s0" / "p0"
    marks = ["base_loss.attempt-20260101-000000", "base_eval.attempt-20260101-000000", "base_loss", "base_eval"]
    for name in [*marks, "mid_train"]:
        contract.update_run_json(point / name, run_id="p0", sweep_id="s0", stage=name.split(".")[0], runtime="bare")
        jobrecord.not_run(str(point / name), "base_train", source="launcher", cancelled_by="SIGINT")
    (point / "mid_train" / contract.TRAIN_LOG).write_text("an earlier attempt's output\n")
    contract.update_run_json(point / "base_train", run_id="p0", sweep_id="s0", stage="base_train", runtime="bare")
    contract.record_evidence(point / "base_train", contract.Evidence(source="launcher", kind="stopped",
                                                                     signal="SIGINT", message="stopped by SIGINT"))
    table = collect([tmp_path / "runs"], tmp_path / "table").table
    assert sorted(zip(table["source"], table["status"])) == [("s0/p0/base_train", "cancelled"),
                                                             ("s0/p0/mid_train", "cancelled")]
    assert all((point / name / contract.RUN_JSON).is_file() for name in marks)
