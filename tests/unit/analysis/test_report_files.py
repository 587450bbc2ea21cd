"""report: Markdown + self-contained HTML with figures; failed/running/skipped runs listed with causes.

python -m pytest tests/unit/analysis/test_report_files.py -q
"""

import errno
import json
import os
import re

import pandas as pd
import pytest

from bench import contract
from bench.analysis import summarize_runs
from bench.analysis.collect import load_table
from bench.cli import main
from tests.support.synthetic import SweepSpec, generate_sweep


def test_sweep_report(tmp_path, make_run):
    root = tmp_path / "runs"
    generate_sweep(root, SweepSpec(world_sizes=(8, 16), repeats=2, steps=14))
    make_run("oom1", root=root / "sweep0", status="oom", message="CUDA out of memory <script>x</script>")
    make_run("live1", root=root / "sweep0", status="running")
    future = make_run("future1", root=root / "sweep0", raw=True, schema_version=7)
    (future / contract.METRICS_JSONL).write_text('{"event": "start", "t": 1')  # half-written too

    html = summarize_runs(root, tmp_path / "report")
    out = tmp_path / "report"
    assert html == out / "report.html"
    assert {p.name for p in out.iterdir()} >= {"report.md", "report.html", "runs.parquet", "runs.csv", "figures"}
    pngs = sorted((out / "figures").glob("*.png"))
    names = {re.sub(r"^\d+-.*-(\w+)\.png$", r"\1", p.name) for p in pngs}
    assert names == {"speedup", "throughput", "efficiency", "mfu", "startup", "step", "busbw", "ratio"}  # strong
    assert all(p.with_suffix(".svg").stat().st_size > 1000 for p in pngs)

    md = (out / "report.md").read_text()
    assert "15 run(s), 12 in the figures, 1 not ok (1 oom), 1 not finished, 1 skipped" in md
    assert "## nanochat-base d20 · seq 2048 · strong scaling, batch 524,288 · zero2 · NVIDIA H200" in md
    for section in ("### Steady-state throughput relative to bare", "### Start-up phases",
                    "### Steady step split", "### Pre-flight bus bandwidth beside throughput"):
        assert section in md
    assert "Not recorded by these runs: the network path" in md  # no NCCL facts in this sweep
    assert "Welch t-interval" in md and "steps 0..10 are warm-up" in md
    for p in pngs:
        assert f"](figures/{p.name})" in md
    cells = re.sub(r" {2,}", " ", md)  # table columns are padded to their width
    assert "| oom1 | sweep0/oom1 | bare | 8 | oom | CUDA out of memory" in cells  # where it is under the root
    assert "| live1 | sweep0/live1 | bare | 8 | running | run running: not finished |" in cells  # `ranks` column
    assert "schema_version 7 is of major 7" in md

    text = html.read_text()
    assert text.count('src="data:image/png;base64,') == len(pngs)
    assert "<script>x</script>" not in text and "&lt;script&gt;" in text  # messages are escaped


def test_single_cpu_run(tmp_path, make_run):
    d = make_run("smoke", world_size=2, peak=None, t0=None, steps=8, gpus_per_node=0)
    (tmp_path / "out" / "figures").mkdir(parents=True)
    (tmp_path / "out" / "figures" / "01-old-config-mfu.png").write_bytes(b"stale")  # from an earlier report
    html = summarize_runs(d, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    figures = {p.name.rsplit("-", 1)[1] for p in (tmp_path / "out" / "figures").glob("*.png")}
    assert figures == {"startup.png"}  # one point: no scaling; CPU: no MFU; no ratio
    assert "1 run(s), 1 in the figures" in md and "· CPU" in md
    assert "| runtime | ranks | nodes | runs | tok/s | tok/s/rank |" in re.sub(r" {2,}", " ", md)
    svg = next((tmp_path / "out" / "figures").glob("*-startup.svg")).read_text()
    assert "bare · 2 ranks (1 node)" in svg and "GPU" not in svg  # SVG text is text (svg.fonttype none)
    assert "from its first milestone (no launch time)" in svg  # no NANOCHAT_BENCH_T0: no phase before the start
    assert html.exists()


def test_a_figures_folder_holding_what_no_report_wrote_is_refused_and_kept(tmp_path, capsys):
    """The report swapped in its own figures/ folder whole, so files put there by hand were lost; an earlier
    report's figures are still replaced."""
    from bench.analysis.report import REPORT_FIGURE

    generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8, 16), repeats=1, steps=12))
    assert main(["collect", str(tmp_path / "runs"), "--out", str(tmp_path / "table")]) == 0
    rep = tmp_path / "rep"
    for _ in range(2):  # the second replaces the first one's figures
        assert main(["report", str(tmp_path / "table"), "--out", str(rep)]) == 0
    written = sorted(p.name for p in (rep / "figures").iterdir())
    assert written and all(REPORT_FIGURE.fullmatch(name) for name in written)
    (rep / "figures" / "mine.png").write_text("keep")
    (rep / "figures" / "notes").mkdir()
    before = (rep / "report.md").read_text()
    capsys.readouterr()
    assert main(["report", str(tmp_path / "table"), "--out", str(rep)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {rep / 'figures'} holds what no report wrote (mine.png, notes)"), err
    assert "--out" in err and "\n" not in err
    assert (rep / "figures" / "mine.png").read_text() == "keep" and (rep / "report.md").read_text() == before
    assert sorted(p.name for p in (rep / "figures").iterdir()) == sorted([*written, "mine.png", "notes"])

    mine = tmp_path / "myout"  # a folder of the user's own, a root to collect: nothing is written into it
    (mine / "figures").mkdir(parents=True)
    (mine / "figures" / "mine.png").write_text("keep")
    assert main(["report", str(tmp_path / "runs"), "--out", str(mine)]) == 1
    assert "mine.png" in capsys.readouterr().err
    assert sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*")) == ["figures", "figures/mine.png"]


def test_nothing_usable(tmp_path):
    (tmp_path / "runs").mkdir()
    summarize_runs(tmp_path / "runs", tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "0 run(s)" in md and "No run has usable figures yet" in md


def test_commands(tmp_path, capsys):
    generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8,), repeats=2, steps=12))
    assert main(["collect", str(tmp_path / "runs"), "--out", str(tmp_path / "table")]) == 0
    out = capsys.readouterr().out
    assert "6 run(s) in the table (6 read, 0 unchanged, 0 removed); 6 usable" in out and "no run directory" not in out
    (tmp_path / "empty").mkdir()  # a root one level off: what was looked for is said
    assert main(["collect", str(tmp_path / "empty"), "--out", str(tmp_path / "t0")]) == 0
    assert f"no run directory under {tmp_path / 'empty'} (one holds run.json" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "table"), "--out", str(tmp_path / "rep"), "--baseline", "ce"]) == 0
    assert "relative to ce" in (tmp_path / "rep" / "report.md").read_text()
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep2")]) == 0  # a root: collected
    assert (tmp_path / "rep2" / "runs.parquet").exists()
    assert main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "rep3")]) == 1
    assert "no such table or directory" in capsys.readouterr().err
    # a baseline no usable run has (a typo) is one error line naming the runtimes there, not a report without ratios
    assert main(["report", str(tmp_path / "table"), "--out", str(tmp_path / "rep4"), "--baseline", "bare-metal"]) == 1
    err = capsys.readouterr().err
    assert "--baseline bare-metal: no usable run of that runtime" in err and "bare, ce" in err
    assert not (tmp_path / "rep4" / "report.md").exists()
    row = json.loads((tmp_path / "runs" / "sweep0" / "bare-n8-r0" / "run.json").read_text())
    assert row["schema_version"] == contract.SCHEMA_VERSION


def test_an_out_that_cannot_be_written_is_one_line_naming_it(tmp_path, capsys):
    """--out naming a file (or a place that cannot be made) is an error line, not an OSError's traceback."""
    generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8,), repeats=1, steps=12))
    assert main(["collect", str(tmp_path / "runs"), "--out", str(tmp_path / "table")]) == 0
    capsys.readouterr()
    (tmp_path / "file").write_text("kept")
    for argv in (["collect", str(tmp_path / "runs"), "--out", str(tmp_path / "file")],
                 ["report", str(tmp_path / "table"), "--out", str(tmp_path / "file")],
                 ["report", str(tmp_path / "runs"), "--out", str(tmp_path / "file" / "sub")]):
        assert main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {tmp_path / 'file'}") and "cannot be written" in err and "\n" not in err
    assert (tmp_path / "file").read_text() == "kept"


def test_collect_of_an_unchanged_table_says_it_is_up_to_date_and_claims_no_write(tmp_path, capsys, monkeypatch):
    """Collect again with nothing new leaves the table's files as they were, yet it said `wrote` for each: in a
    read-only --out, writes that never happened, exit 0. It says the table is up to date; where the table has to be
    written, a read-only --out is still one error line."""
    from bench.analysis import collect as collect_mod

    generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8,), repeats=1, steps=12))
    table, argv = tmp_path / "table", ["collect", str(tmp_path / "runs"), "--out", str(tmp_path / "table")]
    assert main(argv) == 0
    assert f"wrote {table / 'runs.parquet'}\nwrote {table / 'runs.csv'}\n" in capsys.readouterr().out

    def read_only(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
    monkeypatch.setattr(collect_mod, "atomic_target", read_only)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"{table / 'runs.parquet'}: up to date\n{table / 'runs.csv'}: up to date\n" in out and "wrote" not in out
    generate_sweep(tmp_path / "runs", SweepSpec(runtimes={"podman": 0.9}, world_sizes=(8,), repeats=1, steps=12,
                                               sweep_id="sweep1"))  # a new run: the table is to be written
    assert main(argv) == 1
    assert capsys.readouterr().err == f"error: {table}: the table cannot be written there: Read-only file system\n"


def test_report_of_a_root_without_runs_keeps_the_earlier_report(tmp_path, capsys):
    """A root one level off (no run directory in it) wrote an empty report over the good one in --out, exit 0."""
    generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8,), repeats=1, steps=12))
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    good = (tmp_path / "rep" / "report.md").read_text()
    (tmp_path / "empty").mkdir()
    capsys.readouterr()
    assert main(["report", str(tmp_path / "empty"), "--out", str(tmp_path / "rep")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {tmp_path / 'empty'}: no run directory in it (one holds run.json")
    assert "\n" not in err
    assert (tmp_path / "rep" / "report.md").read_text() == good


def test_report_of_a_root_without_runs_into_a_new_out_leaves_it_absent(tmp_path, capsys):
    """It wrote an empty runs.parquet and runs.csv into the new --out, then said no report was written."""
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "--out", str(tmp_path / "new")]) == 1
    assert "no report written" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    assert main(["collect", str(tmp_path / "empty"), "--out", str(tmp_path / "table")]) == 0  # nor a table of none
    assert "wrote" not in capsys.readouterr().out and not (tmp_path / "table").exists()


def test_a_run_whose_run_json_cannot_be_read_is_not_counted_ok_by_collect(tmp_path, capsys):
    """A run.json cut short beside events that end: collect counted the run under ok (the status taken from the end
    event) while the report listed it as skipped, unreadable. It has no status now: collect counts it as unknown."""
    generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8,), repeats=2, steps=12))
    manifest = sorted((tmp_path / "runs").rglob(contract.RUN_JSON))[0]
    manifest.write_text('{"schema_version": 1, "sta')
    assert main(["collect", str(tmp_path / "runs"), "--out", str(tmp_path / "table")]) == 0
    out = capsys.readouterr().out
    assert "5 usable, 1 left out of figures" in out and re.search(r"^  ok +5$", out, re.M), out
    assert re.search(r"^  unknown +1$", out, re.M), out  # as the report's one run skipped
    row = load_table(tmp_path / "table").set_index("source").loc[str(manifest.parent.relative_to(tmp_path / "runs"))]
    assert pd.isna(row["status"]) and "status unknown (an end event" in row["notes"]


@pytest.mark.parametrize("workers", ["0", "-3", "65", "100000"])
def test_collect_refuses_a_worker_count_out_of_range(tmp_path, capsys, workers):
    """--workers 0 was taken for the default and a negative count for one process, silently; --workers 100000
    started that many processes on a large collection."""
    assert main(["collect", str(tmp_path), "--out", str(tmp_path / "t"), "--workers", workers]) == 1
    assert capsys.readouterr().err.strip() == (f"error: --workers {workers}: give 1 to 64 processes "
                                               f"(default: CPU count, at most 8)")
    assert not (tmp_path / "t").exists()


def test_a_report_of_a_root_is_of_that_root_alone(tmp_path, capsys):
    """`report ROOT --out DIR` collects into DIR's table, which may hold another root's runs from an earlier
    report: those stay in the table but are not in this report."""
    generate_sweep(tmp_path / "a", SweepSpec(world_sizes=(8,), repeats=2, steps=12))
    generate_sweep(tmp_path / "b", SweepSpec(world_sizes=(8,), repeats=1, steps=12))
    assert main(["report", str(tmp_path / "a"), "--out", str(tmp_path / "rep")]) == 0
    assert main(["report", str(tmp_path / "b"), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "3 run(s), 3 in the figures" in md, md[:400]
    table = load_table(tmp_path / "rep")
    assert len(table) == 9 and set(table["root"]) == {str(tmp_path / "a"), str(tmp_path / "b")}


def test_a_failed_run_found_twice_is_one_failure(tmp_path, make_run):
    """ReFrame keeps a failed case's run directory in its stage directory and copies it to its output directory:
    the report counted two failed runs and listed the failure twice. The copy is now a skipped copy that names
    the run it copies, and the failure is counted once."""
    import shutil

    from bench.analysis.collect import collect
    from bench.analysis.report import write_report

    make_run("n8-bare-r1", root=tmp_path / "runs", tok_s=1000.0)
    failed = make_run("n8-ce-r1", root=tmp_path / "stage" / "sweep", status="failed", message="NCCL timeout",
                      slurm={"job_id": "42"})
    shutil.copytree(failed, tmp_path / "output" / "sweep" / failed.name)
    write_report(collect([tmp_path]).table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "3 run(s), 1 in the figures, 1 failed, 0 not finished, 1 skipped" in md
    failures = md.split("## Failed runs")[1].split("##")[0]
    assert failures.count("NCCL timeout") == 1
    assert "/output/sweep/n8-ce-r1 (a copy of its directory)" in md.split("## Runs skipped")[1]


def test_a_run_whose_run_json_is_empty_and_has_no_events_is_unreadable_not_unfinished(tmp_path, make_run):
    """An empty run.json beside no events read as status `running`, so the report listed the run under "Runs not
    finished" however long ago its writer died. run.json is replaced whole, so it says nothing of a live run: the
    run's status is unknown and the report lists it as skipped, naming run.json."""
    from bench.analysis.collect import collect
    from bench.analysis.report import write_report
    from bench.analysis.rundir import read_run_dir

    make_run("n8-bare-r1", root=tmp_path / "runs", tok_s=1000.0)
    broken = make_run("n8-ce-r1", root=tmp_path / "runs")
    (broken / contract.RUN_JSON).write_text("")
    (broken / contract.METRICS_JSONL).unlink()
    row = read_run_dir(broken)
    assert (row["status"], row["skip_reason"]) == (
        None, "run.json is empty (nanochat-bench replaces it whole: a copy or another tool emptied it)")
    write_report(collect([tmp_path / "runs"]).table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "2 run(s), 1 in the figures, 0 failed, 0 not finished, 1 skipped" in md
    assert "run.json is empty" in md.split("## Runs skipped")[1]


def test_the_header_names_runs_stopped_by_scancel_apart_from_failed_ones(tmp_path, make_run):
    """Regression: the report's header counted every run that did not end ok as failed, so a sweep with two
    runs cancelled by scancel and one error read '3 failed'; it reads '3 not ok (2 cancelled, 1 failed)' now."""
    from bench.analysis.collect import collect
    from bench.analysis.report import write_report

    make_run("n8-bare-r1", root=tmp_path / "runs", tok_s=1000.0)
    make_run("n8-ce-r1", root=tmp_path / "runs", status="failed", message="NCCL error")
    for name in ("n8-ce-r2", "n8-ce-r3"):
        make_run(name, root=tmp_path / "runs", status="cancelled", message="cancelled by SIGTERM")
    write_report(collect([tmp_path / "runs"]).table, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "4 run(s), 1 in the figures, 3 not ok (2 cancelled, 1 failed), 0 not finished" in md
    assert "3 not ok (2 cancelled, 1 failed)" in (tmp_path / "report" / "report.html").read_text()


def test_a_baseline_of_runs_that_name_no_runtime_is_refused_saying_why(tmp_path, capsys):
    """Runs that name no runtime (this trainer's console log) are 'unknown' in the report, so --baseline unknown was
    tried, and refused as 'no usable run of that runtime', though the report showed such runs; the runtime is not
    recorded, so a ratio to it compares with nothing known: it is refused saying so, and no ratio is taken to it."""
    generate_sweep(tmp_path / "runs", SweepSpec(world_sizes=(8,), repeats=2, steps=12, runtimes={"bare": 1.0}))
    assert main(["collect", str(tmp_path / "runs"), "--out", str(tmp_path / "table")]) == 0
    table = load_table(tmp_path / "table")
    table.loc[table["run_id"] == table["run_id"].iloc[0], "runtime"] = None
    (tmp_path / "unnamed").mkdir()
    table.to_parquet(tmp_path / "unnamed" / "runs.parquet")
    capsys.readouterr()
    assert main(["report", str(tmp_path / "unnamed"), "--out", str(tmp_path / "rep"), "--baseline", "unknown"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no usable run of that runtime" not in err
    assert ("--baseline unknown: the report's name for runs that name no runtime (this trainer's console log), so no "
            "ratio is taken to them; runtimes there: bare") in err
    assert not (tmp_path / "rep" / "report.md").exists()
