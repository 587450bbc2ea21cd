"""check: figures against references with ReFrame-style fractional tolerances; regressions exit 1.

python -m pytest tests/unit/analysis/test_check_references.py -q
"""

from pathlib import Path

import pytest

from bench.analysis.check import Bound, check, load_references
from bench.analysis.collect import ROW_VERSION, collect
from bench.cli import main
from bench.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[3] / "results" / "references.example.toml"


@pytest.fixture
def table_dir(tmp_path, make_run):
    for i, tps in enumerate((1000.0, 1010.0, 990.0)):
        make_run(f"bare{i}", tok_s=tps, world_size=8, root=tmp_path / "runs")
    make_run("ce0", tok_s=900.0, world_size=8, runtime="ce", root=tmp_path / "runs")
    make_run("bad", tok_s=5.0, world_size=8, status="failed", root=tmp_path / "runs")  # never counted
    collect([tmp_path / "runs"], tmp_path / "table")
    return tmp_path / "table"


def refs(tmp_path, body: str) -> Path:
    p = tmp_path / "refs.toml"
    p.write_text(body)
    return p


def test_bounds_are_fractions_like_reframe():
    assert Bound(100, -0.01, 0.02).limits() == pytest.approx((99, 102))
    assert Bound(100, lower=-0.05).limits() == (pytest.approx(95), float("inf"))
    assert Bound(0, upper=0.5).limits() == (float("-inf"), 0.5)  # value 0: absolute


def test_pass_fail_and_missing(tmp_path, table_dir, capsys):
    path = refs(tmp_path, """
[[reference]]
name = "bare"
where = { runtime = "bare", world_size = 8, gpu_name = "*H200*" }
figures.tok_per_sec = { value = 1000, lower = -0.02, upper = 0.02, unit = "tok/s" }
[[reference]]
name = "ce"
where = { runtime = "ce" }
figures.tok_per_sec = { value = 1000, lower = -0.05 }
[[reference]]
name = "pyxis"
where = { runtime = "pyxis" }
figures.tok_per_sec = { value = 1000, lower = -0.05 }
""")
    from bench.analysis.collect import load_table
    out = {o.reference: o for o in check(load_table(table_dir), load_references(path))}
    assert out["bare"].verdict == "pass" and out["bare"].runs == 3  # the failed run is not among them
    assert out["ce"].verdict == "fail" and out["ce"].measured == pytest.approx(900, rel=5e-3)
    assert out["pyxis"].verdict == "missing"
    assert main(["check", str(table_dir), "--references", str(path)]) == 1
    printed = capsys.readouterr().out
    assert "FAIL    ce: tok_per_sec" in printed and "below the allowed range" in printed
    # a reference no run matches is missing, not a regression
    assert "; regressions: ce/tok_per_sec;" in printed
    assert "MISSING pyxis: tok_per_sec: no usable run matches" in printed
    assert "missing (no usable run matches, or none recorded the figure): pyxis/tok_per_sec" in printed


@pytest.mark.parametrize("table_file", ["runs.parquet", "runs.csv"])
def test_where_reads_a_run_from_before_a_field_as_the_report_does(tmp_path, table_dir, table_file):
    """These runs recorded no scaling, strategy or fused kernels: the report reads them as strong, zero2, none
    (scaling.LEGACY). `where` on those values matched none of them (MISSING), and `fused_kernels = ""` matched
    from runs.parquet but not from runs.csv, which reads an empty text back as null."""
    from bench.analysis.collect import load_table
    path = refs(tmp_path, """
[[reference]]
name = "legacy"
where = { runtime = "bare", scaling = "strong", strategy = "zero2", fused_kernels = "" }
figures.tok_per_sec = { value = 1000, lower = -0.02, upper = 0.02 }
[[reference]]
name = "fused"
where = { runtime = "bare", fused_kernels = "rotary_norm" }
figures.tok_per_sec = { value = 1000 }
""")
    out = {o.reference: o for o in check(load_table(table_dir / table_file), load_references(path))}
    assert out["legacy"].verdict == "pass" and out["legacy"].runs == 3
    assert out["fused"].verdict == "missing"


@pytest.mark.parametrize("table_file", ["runs.parquet", "runs.csv"])
def test_where_matches_a_flag_however_it_is_spelt(tmp_path, make_run, table_file):
    """force_flash_sdpa is stored as Python spells a bool ("False"): `where` with "false" or "0" matched no run."""
    from bench.analysis.collect import load_table
    config = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "device_batch_size": 32,
              "num_iterations": 30}
    for i, forced in enumerate((False, True)):
        make_run(f"r{i}", tok_s=1000.0 * (i + 1), root=tmp_path / "runs", config={**config, "force_flash_sdpa": forced})
    collect([tmp_path / "runs"], tmp_path / "table")
    table = load_table(tmp_path / "table" / table_file)
    for spelt, tok_s in (('"false"', 1000), ("false", 1000), ('"0"', 1000), ('"TRUE"', 2000), ('"yes"', 2000)):
        path = refs(tmp_path, f"[[reference]]\nwhere = {{ force_flash_sdpa = {spelt} }}\n"
                              f"figures.tok_per_sec = {{ value = {tok_s}, lower = -0.01, upper = 0.01 }}\n")
        [outcome] = check(table, load_references(path))
        assert (outcome.verdict, outcome.runs) == ("pass", 1), spelt


def test_a_median_over_runs_of_different_settings_fails_naming_what_differs(tmp_path, table_dir, capsys):
    """A `where` matching bare and ce runs printed PASS on their pooled median, with only a warning: a reference
    checked no one setup, and exited 0. It now fails, naming the columns that differ, and exits 1."""
    path = refs(tmp_path, '[[reference]]\nname = "loose"\nwhere = { world_size = 8 }\n'
                          'figures.tok_per_sec = { value = 1000, lower = -0.5 }\n'
                          '[[reference]]\nname = "bare"\nwhere = { runtime = "bare" }\n'
                          'figures.tok_per_sec = { value = 1000, lower = -0.5 }\n')
    assert main(["check", str(table_dir), "--references", str(path), "--allow-missing"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("FAIL    loose: tok_per_sec: the 4 run(s) matched differ in runtime, so no one setup is "
                        "checked (narrow `where` to one of each; ref 1,000)")
    assert lines[1].startswith("PASS    bare:") and lines[1].endswith("median of 3 run(s))")  # repeats of one setting
    assert lines[2] == f"{path}: 1 of 2 check(s) passed; runs of different setups (narrow `where`): loose/tok_per_sec"


def test_a_median_over_runs_of_different_device_batches_fails(tmp_path, make_run):
    """A strong curve keeps only its total batch, so a reference matching bare runs at device batch 32 and 16 (the
    same total, twice the accumulation) passed on their pooled median. It fails now, naming device_batch_size."""
    config = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "num_iterations": 30}
    for name, tok_s, dbs in (("a", 1000.0, 32), ("b", 1010.0, 32), ("c", 700.0, 16)):
        make_run(name, tok_s=tok_s, config={**config, "device_batch_size": dbs})
    table = collect([tmp_path / "runs"]).table
    path = refs(tmp_path, '[[reference]]\nwhere = { runtime = "bare" }\n'
                          'figures.tok_per_sec = { value = 1000, lower = -0.5 }\n')
    [outcome] = check(table, load_references(path))
    assert (outcome.verdict, outcome.pooled) == ("fail", ("device_batch_size",))


def test_a_figure_the_matching_runs_did_not_record_is_not_said_to_match_no_run(tmp_path, make_run, capsys):
    """MFU of runs without a known GPU peak (CPU runs) read "no usable run matches": the `where` was right and the
    figure was what the runs lacked. The line now says how many runs matched and that none recorded it."""
    for i in range(2):
        make_run(f"cpu{i}", tok_s=1000.0, world_size=2, peak=None, root=tmp_path / "runs")
    collect([tmp_path / "runs"], tmp_path / "table")
    path = refs(tmp_path, '[[reference]]\nname = "cpu"\nwhere = { world_size = 2 }\n'
                          'figures.mfu = { value = 40, lower = -0.1, unit = "%" }\n')
    assert main(["check", str(tmp_path / "table"), "--references", str(path)]) == 1
    assert "MISSING cpu: mfu: 2 usable run(s) match but none recorded it (ref 40 %)" in capsys.readouterr().out


def test_a_figure_missed_by_a_hair_is_printed_apart_from_its_limit():
    """A step time a hair above its limit read 'step_time_ms = 468.1 (above the allowed range; ..., allowed [-inf,
    468.1]' and a tok/s a hair below '140,016 (below ...; allowed [140,016, inf]': the digits that tell them apart
    are printed; a pass reads as before."""
    from bench.analysis.check import Outcome
    above = Outcome("d20", "step_time_ms", "fail", 468.0607, Bound(468.0606 / 1.05, upper=0.05), 1)
    assert "= 468.0607 (above the allowed range; ref 445.8, allowed [-inf, 468.0606]," in above.line()
    below = Outcome("d20", "tok_per_sec", "fail", 140016.018, Bound(140016.019 / 0.95, lower=-0.05), 1)
    assert "= 140016.018 (below the allowed range; ref 147,385, allowed [140016.019, inf]," in below.line()
    ok = Outcome("d20", "tok_per_sec", "pass", 140016.02, Bound(140016.019 / 0.95, lower=-0.05), 1)
    assert "= 140,016 (ok; ref 147,385, allowed [140,016, inf]," in ok.line()


def test_a_figure_an_older_table_lacks_says_to_collect_again(tmp_path, table_dir, capsys):
    """A table collected by an older release has the columns added since empty: its runs read 'none recorded it',
    as if they had not measured it, and rows of two versions 'differ in' such a column, as if in two setups."""
    import pandas as pd
    table = pd.read_parquet(table_dir / "runs.parquet")
    table.loc[table["source"] != "bare0", "row_version"] = 20
    table.loc[table["source"] != "bare0", "flops_per_token"] = None
    table.drop(columns=["step_time_p90_ms"]).to_parquet(table_dir / "runs.parquet")
    path = refs(tmp_path, '[[reference]]\nname = "bare"\nwhere = { runtime = "bare" }\n'
                          'figures.step_time_p90_ms = { value = 100, upper = 0.1 }\n'
                          'figures.tok_per_sec = { value = 1000, lower = -0.05 }\n')
    assert main(["check", str(table_dir), "--references", str(path)]) == 1
    older = (f"the runs matched are rows of row version 20, older than this release's {ROW_VERSION} (columns added "
             "since are empty for them): collect them again")
    out = capsys.readouterr().out
    assert f"MISSING bare: step_time_p90_ms: 3 usable run(s) match but none recorded it; {older} (ref 100)" in out
    assert f"differ in flops_per_token, so no one setup is checked (narrow `where` to one of each; ref 1,000); " \
        f"{older}" in out


def test_a_where_no_run_matches_names_the_values_the_runs_have(tmp_path, table_dir, capsys):
    """stage = "chat_eval" (a flow's are chat_eval_mid and chat_eval_sft) read 'no usable run matches' and no more:
    the values of the table's runs had to be looked up by hand. Each `where` value no usable run has is named with
    the values they have."""
    path = refs(tmp_path, '[[reference]]\nname = "chat"\nwhere = { stage = "chat_eval" }\n'
                          'figures.stage_time_s = { value = 40, lower = -0.05 }\n')
    assert main(["check", str(EXAMPLE.parent / "h200-d20" / "speedrun" / "table"), "--references", str(path)]) == 1
    assert capsys.readouterr().out.splitlines()[0] == (
        "MISSING chat: stage_time_s: no usable run matches (stage = 'chat_eval' matches none; the usable runs' "
        "stage: base_eval, base_loss, base_train, chat_eval_mid, chat_eval_sft, chat_sft, mid_train) (ref 40)")
    path = refs(tmp_path, '[[reference]]\nname = "pyxis"\nwhere = { runtime = "pyxis", world_size = 4 }\n'
                          'figures.tok_per_sec = { value = 1000 }\n'
                          '[[reference]]\nname = "both"\nwhere = { runtime = "ce", run_id = "bare0" }\n'
                          'figures.tok_per_sec = { value = 1000 }\n')
    assert main(["check", str(table_dir), "--references", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("MISSING pyxis: tok_per_sec: no usable run matches (runtime = 'pyxis' matches none; the "
                        "usable runs' runtime: bare, ce; world_size = 4 matches none; the usable runs' world_size: 8) "
                        "(ref 1,000)")
    assert "(each value of `where` is some usable run's, but no run has them all)" in lines[1]


def test_all_pass_exits_zero(tmp_path, table_dir):
    path = refs(tmp_path, '[[reference]]\nwhere = { runtime = "bare" }\n'
                          'figures.tok_per_sec = { value = 1000, lower = -0.05 }\n'
                          'figures.startup_overhead_s = { value = 5, upper = 0.1 }\n')
    assert main(["check", str(table_dir), "--references", str(path)]) == 0


def test_the_summary_names_the_references_file(tmp_path, table_dir, capsys):
    """Two references files checked one after the other printed verdicts alike: none of the lines named the file."""
    strict, loose = tmp_path / "strict.toml", tmp_path / "loose.toml"
    for path, value in ((strict, 2000), (loose, 1000)):
        path.write_text(f'[[reference]]\nwhere = {{ runtime = "bare" }}\n'
                        f'figures.tok_per_sec = {{ value = {value}, lower = -0.05 }}\n')
    assert main(["check", str(table_dir), "--references", str(strict)]) == 1
    assert main(["check", str(table_dir), "--references", str(loose)]) == 0
    summaries = [line for line in capsys.readouterr().out.splitlines() if "check(s) passed" in line]
    assert summaries[0].startswith(f"{strict}: 0 of 1 check(s) passed; regressions: ")
    assert summaries[1] == f"{loose}: 1 of 1 check(s) passed"


def test_allowed_missing_references_are_not_counted_as_passed(tmp_path, table_dir, capsys):
    path = refs(tmp_path, '[[reference]]\nname = "gone"\nwhere = { runtime = "sarus" }\n'
                          'figures.tok_per_sec = { value = 1000 }\n')
    assert main(["check", str(table_dir), "--references", str(path), "--allow-missing"]) == 0
    assert "0 of 1 check(s) passed, 1 missing (allowed)" in capsys.readouterr().out
    assert main(["check", str(table_dir), "--references", str(path)]) == 1


def test_a_lower_bound_of_zero_or_an_absolute_one_is_taken(tmp_path):
    """lower = -1 bounds at 0, upper = 1 at twice the value; with value 0 the tolerances are absolute, so a lower
    below -1 or an upper above 1 is a bound."""
    bounds = [b for r in load_references(refs(tmp_path, """
[[reference]]
name = "a"
figures.step_time_cv = { value = 0.5, lower = -1 }
[[reference]]
name = "b"
figures.step_time_cv = { value = 0, lower = -5 }
[[reference]]
name = "c"
figures.startup_overhead_s = { value = 10, upper = 1 }
[[reference]]
name = "d"
figures.startup_overhead_s = { value = 0, upper = 30 }
""")) for b in r.figures.values()]
    assert [b.limits()[0] for b in bounds[:2]] == [0, -5]
    assert [b.limits()[1] for b in bounds[2:]] == [20, 30]  # upper = 1: twice the value; value 0: absolute


def test_example_file_is_valid():
    assert len(load_references(EXAMPLE)) >= 1


@pytest.mark.parametrize("body,message", [
    ("x = 1", "no [[reference]] entries"),
    ("[[reference]]\nwhere = { color = 'red' }\nfigures.tok_per_sec = { value = 1 }",
     "unknown column(s) in where: color"),
    ("[[reference]]\nfigures.speed = { value = 1 }", "unknown figure 'speed'"),
    ("[[reference]]\nfigures.mfu = { value = 'high' }", "needs a numeric value"),
    ("[[reference]]\nfigures.mfu = { value = 40, lower = 0.1 }", "lower must be <= 0"),
    # -5 for 5%: the range reached -160, so a run of 0 tok/s passed
    ("[[reference]]\nfigures.tok_per_sec = { value = 40, lower = -5 }",
     "figures.tok_per_sec: lower = -5 is below -1, so the allowed range reaches below 0 and no measurement fails it"),
    # 5 for 5%: a step time six times the reference's passed
    ("[[reference]]\nname = \"d20\"\nfigures.step_time_ms = { value = 400, upper = 5 }",
     "d20: figures.step_time_ms: upper = 5 is above 1, a bound 500% above the value; upper is a fraction of the "
     "value (0.05 for 5% above), at most 1 (100% above)"),
    ("[[reference]]\nfigures.mfu = { value = 40, tolerance = 0.1 }", "unknown key(s) ['tolerance']"),
    ("[[reference]]\nwhere = { world_size = 'eight' }\nfigures.mfu = { value = 40 }", "must be number(s)"),
    # a list or table for a text column matched no run: reported missing, a pass under --allow-missing
    ("[[reference]]\nwhere = { runtime = ['bare', 'ce'] }\nfigures.mfu = { value = 40 }",
     "where runtime must be text (a value, or a shell pattern), a number or true/false; got ['bare', 'ce']"),
    ("[[reference]]\nwhere = { gpu_name = { like = 'H200' } }\nfigures.mfu = { value = 40 }",
     "where gpu_name must be text"),
    # an integer past a float's range (TOML's integers have no bound) is no number: once an OverflowError
    pytest.param("[[reference]]\nfigures.mfu = { value = 1" + "0" * 400 + " }", "needs a numeric value",
                 id="huge-value"),
    pytest.param("[[reference]]\nfigures.mfu = { value = 40, upper = 1" + "0" * 400 + " }", "is not a number",
                 id="huge-upper"),
    pytest.param("[[reference]]\nwhere = { depth = 1" + "0" * 400 + " }\nfigures.mfu = { value = 40 }",
                 "must be number(s)", id="huge-where"),
    ("[[reference", "not valid TOML"),
    ("[[reference]]\nfigures.mfu = { value = 40, lower = '-5%' }", "lower = '-5%' is not a number"),
    ("[[reference]]\nfigures.mfu = { value = 40, upper = true }", "upper = True is not a number"),
    ("[[reference]]\nfigures.mfu = { value = 40, unit = 3 }", "unit = 3 must be a string"),
    # a value in another unit would be compared as if in the column's: 3,301 ms is no tok/s
    ("[[reference]]\nfigures.tok_per_sec_per_gpu = { value = 3301, unit = 'ms' }",
     "unit = 'ms', but tok_per_sec_per_gpu is in tok/s"),
    ("[[reference]]\nwhere = 'bare'\nfigures.mfu = { value = 40 }", "where must be a table"),
    ("reference = [1, 2]", "no [[reference]] entries"),
    # a misspelt second table was dropped unsaid: the gate passed with one reference fewer
    ("[[reference]]\nfigures.mfu = { value = 40 }\n[[refrence]]\nfigures.mfu = { value = 41 }",
     "unknown key(s) ['refrence'] beside [[reference]]; a references file holds only [[reference]] entries"),
    # a misspelt `where` would select every run: the median of all of them would be checked
    ("[[reference]]\nwher = { depth = 20 }\nfigures.mfu = { value = 40 }", "unknown key(s) ['wher']"),
    ("[[reference]]\nname = \"d20\"\nfigures.mfu = { value = 40 }\n[[reference]]\nname = \"d20\"\n"
     "figures.mfu = { value = 41 }", "more than one reference named 'd20'; give each its own name"),
])
def test_bad_references_are_clear_errors(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        load_references(refs(tmp_path, body))


def test_a_binary_references_file_is_one_line_naming_it(tmp_path, table_dir, capsys):
    path = tmp_path / "refs.toml"
    path.write_bytes(b"[[reference]]\nname = \"\xff\xfe\x00\"\n")
    assert main(["check", str(table_dir), "--references", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --references {path}: not UTF-8 text") and "\n" not in err


def test_cli_reports_a_bad_file_in_one_line(tmp_path, table_dir, capsys):
    assert main(["check", str(table_dir), "--references", str(tmp_path / "none.toml")]) == 1
    assert capsys.readouterr().err.strip() == f"error: --references {tmp_path / 'none.toml'}: no such file"


def test_committed_h200_references_hold_for_the_committed_runs(capsys):
    """results/h200-d20/references.toml describes its own table: every reference matches runs and passes."""
    results = EXAMPLE.parent / "h200-d20"
    assert main(["check", str(results / "table-stacked"), "--references", str(results / "references.toml")]) == 0
    out = capsys.readouterr().out
    assert "9 of 9 check(s) passed" in out and "MISSING" not in out


@pytest.mark.parametrize("path", ["h200-d20/references.toml", "references.example.toml"])
def test_shipped_h200_references_leave_a_gh200_alone(path):
    """Regression: the shipped references selected gpu_name "*H200*", which "NVIDIA GH200 480GB" (Alps' nodes) matches
    too, so a GH200 run of the same shape was judged against H200 figures."""
    from bench.analysis.check import _matches

    for ref in load_references(EXAMPLE.parent / path):
        pattern = ref.where["gpu_name"]
        assert _matches("NVIDIA H200", pattern) and not _matches("NVIDIA GH200 480GB", pattern), (ref.name, pattern)


def test_an_evaluations_time_and_rate_are_checked(tmp_path, capsys):
    """An evaluation (base_eval, chat_eval) takes no training step, so it has no tok/s, and check and ReFrame's
    references took only runs with one: a reference on its time or problems/s (its performance variables) was
    MISSING, 'no usable run matches', beside a run that ended ok. Now its figures are checked."""
    from bench.analysis.rundir import read_run_dir
    from bench.reframe_checks.references import matching

    speedrun = EXAMPLE.parent / "h200-d20" / "speedrun"
    path = refs(tmp_path, """
[[reference]]
name = "base_eval"
where = { stage = "base_eval", world_size = 1 }
figures.stage_time_s = { value = 41.1, lower = -0.05, upper = 0.05, unit = "s" }
figures.problems_per_sec = { value = 21.3, lower = -0.05 }
[[reference]]
name = "base_train"
where = { stage = "base_train" }
figures.tok_per_sec = { value = 147000, lower = -0.05 }
""")
    assert main(["check", str(speedrun / "table"), "--references", str(path)]) == 0
    out = capsys.readouterr().out
    assert "PASS    base_eval: stage_time_s = 41.11 s" in out and "PASS    base_eval: problems_per_sec = 21.35" in out
    assert [r.name for r in matching(read_run_dir(speedrun / "runs" / "base_eval"), load_references(path))] == \
        ["base_eval"]


def test_each_figure_is_aggregated_as_the_report_aggregates_it(tmp_path, make_run, capsys):
    """check took the median of every figure, where the report shows a point's peak memory as the largest of its
    repeats and its min val bpb as the lowest (the column catalogue's aggregation): a reference bounding peak memory
    passed on the median while the report's figure was above the bound. Each figure is now the catalogue's."""
    import json

    from bench.analysis import scaling

    for name, peak, bpb in (("a", 70_000.0, 1.10), ("b", 72_000.0, 0.90), ("c", 76_000.0, 1.00)):
        run_dir = make_run(name, tok_s=1000.0)
        events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        for e in events:
            e.update({"peak_mem_mib": peak, "min_val_bpb": bpb} if e["event"] == "end" else
                     {"val_bpb": bpb} if e["event"] == "val" else {})
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    collect([tmp_path / "runs"], tmp_path / "table")
    path = refs(tmp_path, '[[reference]]\nname = "bare"\nwhere = { runtime = "bare" }\n'
                          'figures.peak_mem_mib = { value = 73000, upper = 0.02, unit = "MiB" }\n'
                          'figures.min_val_bpb = { value = 0.9, lower = -0.01, upper = 0.01 }\n'
                          'figures.tok_per_sec = { value = 1000, lower = -0.02, upper = 0.02 }\n')
    assert main(["check", str(tmp_path / "table"), "--references", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("FAIL    bare: peak_mem_mib = 76,000 MiB (above the allowed range; ref 73,000, allowed "
                        "[-inf, 74,460], max of 3 run(s))")
    assert lines[1] == "PASS    bare: min_val_bpb = 0.9 (ok; ref 0.9, allowed [0.891, 0.909], min of 3 run(s))"
    assert lines[2].startswith("PASS    bare: tok_per_sec") and lines[2].endswith("median of 3 run(s))")
    [point] = scaling.scaling_table(collect([tmp_path / "runs"]).table).to_dict("records")
    assert (point["peak_mem_mib"], point["min_val_bpb"]) == (76_000.0, 0.9)  # the report's figures: the same


def test_a_stages_scores_are_checked(tmp_path, capsys):
    """The evaluations' scores (CORE, ChatCORE, val/train bpb, each task's accuracy) live in the table's JSON `scores`
    cell, and a reference naming one was refused as an unknown figure: a speedrun's result could not be gated, only its
    speed. `score:<name>` reads it from the runs' scores, aggregated as the stage tables show them (the median)."""
    speedrun = EXAMPLE.parent / "h200-d20" / "speedrun"
    path = refs(tmp_path, """
[[reference]]
name = "base_eval"
where = { stage = "base_eval" }
figures."score:CORE" = { value = 0.34, lower = -0.05, unit = "score" }
figures."score:ARC-Easy" = { value = 0.25, lower = -0.1 }
[[reference]]
name = "base_loss"
where = { stage = "base_loss" }
figures."score:val_bpb" = { value = 1.2, upper = 0.02 }
figures."score:train_bpb" = { value = 1.2, upper = 0.02 }
[[reference]]
name = "chat_eval_sft"
where = { stage = "chat_eval_sft" }
figures."score:ChatCORE" = { value = 0.2, lower = -0.1 }
""")
    assert main(["check", str(speedrun / "table"), "--references", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("PASS    base_eval: score:CORE = 0.3409 score (ok; ref 0.34, allowed [0.323, inf], "
                        "median of 1 run(s))")
    # a task's name is the bundle's (arc_easy in base_eval, ARC-Easy in chat_eval): the line lists those recorded
    assert lines[1].startswith("MISSING base_eval: score:ARC-Easy: 1 usable run(s) match but none recorded it "
                               "(the scores they recorded: CORE, agi_eval_lsat_ar, arc_challenge, arc_easy, ")
    assert lines[1].endswith(", winogrande) (ref 0.25)")
    # bpb: lower is better, so a ceiling; a val bpb above it fails, a train bpb below the value passes
    assert lines[2].startswith("FAIL    base_loss: score:val_bpb = 1.241 (above the allowed range; ref 1.2, "
                               "allowed [-inf, 1.224]")
    assert lines[3].startswith("PASS    base_loss: score:train_bpb = 1.131 (ok;")
    assert lines[4].startswith("FAIL    chat_eval_sft: score:ChatCORE = 0.08333 (below the allowed range;")
    assert "; regressions: base_loss/score:val_bpb, chat_eval_sft/score:ChatCORE;" in lines[5]


def test_a_score_no_matching_run_recorded_lists_none(tmp_path, table_dir, capsys):
    path = refs(tmp_path, '[[reference]]\nname = "bare"\nwhere = { runtime = "bare" }\n'
                          'figures."score:CORE" = { value = 0.2, lower = -0.05 }\n')
    assert main(["check", str(table_dir), "--references", str(path)]) == 1
    assert "MISSING bare: score:CORE: 3 usable run(s) match but none recorded it (they recorded no scores) (ref 0.2)" \
        in capsys.readouterr().out


@pytest.mark.parametrize("figure,unit,message", [
    ("score:", "", 'figures.score: names no score; give score:<name>, e.g. score:CORE, score:ChatCORE'),
    ("score: ", "", "figures.score:  names no score"),
    # a CORE of 0.25 written as 25 % would be compared as 25
    ("score:CORE", "%", "unit = '%', but scores are as run.json records them (CORE and accuracies as fractions"),
    ("CORE", "", "unknown figure 'CORE'; valid: .*, or score:<name> (score:CORE, score:val_bpb, ...)"),
])
def test_a_bad_score_figure_is_one_clear_line(tmp_path, figure, unit, message):
    unit_kv = f', unit = "{unit}"' if unit else ""
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")) as e:
        load_references(refs(tmp_path, f'[[reference]]\nname = "x"\nfigures."{figure}" = {{ value = 0.2{unit_kv} }}\n'))
    assert "\n" not in str(e.value)
    # a name no run has is no mistake at load: score names depend on the bundle and the tasks
    assert load_references(refs(tmp_path, '[[reference]]\nfigures."score:MyTask" = { value = 0.2 }\n'))
