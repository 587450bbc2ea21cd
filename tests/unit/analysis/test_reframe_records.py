"""ReFrame's perflog and run report as table rows (bench/analysis/reframe.py); the real files come from
tests/integration/slurm/test_reframe.py, these are the cases a real run rarely makes.

    python -m pytest tests/unit/analysis/test_reframe_records.py -q
"""

import json

import pandas as pd

from bench.analysis.collect import collect

HEADER = ("result|job_completion_time|jobid|job_nodelist|partition|runtime|run_id|run_status|short_name|system|"
          "world_size|tok_per_sec_value|tok_per_sec_unit|tok_per_sec_ref|tok_per_sec_lower_thres|"
          "tok_per_sec_upper_thres")


def line(jobid: str, tok_s: str, result: str = "pass", runtime: str = "bare") -> str:
    return (f"{result}|2026-12-01T11:40:33|{jobid}|n1|cpu|{runtime}|n1-{runtime}-r1|ok|nb_1|sys|2|{tok_s}|tok/s|0|"
            "None|None")


def test_perflog_lines_become_rows_and_a_broken_line_is_left_out_with_a_note(tmp_path):
    log = tmp_path / "perflogs" / "sys" / "cpu" / "nanochat_bench.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join([HEADER, line("7", "2190.5"), line("8", "100|0"), line("9", "2000", result="fail")])
                   + "\n")
    table = collect([tmp_path]).table
    assert list(table["slurm_job_id"]) == ["7", "9"] and list(table["tok_per_sec"]) == [2190.5, 2000.0]
    assert set(table["source_kind"]) == {"reframe_perflog"} and (table["reframe_partition"] == "sys:cpu").all()
    assert "1 perflog line(s) whose fields do not match the header left out" in table["notes"][0]
    assert table["skip_reason"].isna().all()  # a performance failure is still a run that trained


def test_records_of_other_checks_are_no_rows(tmp_path):
    (tmp_path / "stream.log").write_text("result|job_completion_time|system|triad_value|triad_unit\n"
                                         "pass|2026-12-01T11:40:33|sys|1000|MB/s\n")
    (tmp_path / "report.json").write_text(json.dumps({"session_info": {"version": "4.10.4"}, "runs": [
        {"testcases": [{"name": "stream", "result": "pass", "system": "sys", "partition": "cpu",
                        "perfvalues": {"sys:cpu:triad": [1000, 0, None, None, "MB/s", "pass"]}}]}]}))
    (tmp_path / "sweep.json").write_text(json.dumps({"jobs": []}))
    assert collect([tmp_path]).table.empty


def test_a_report_and_a_perflog_of_one_run_count_once(tmp_path):
    (tmp_path / "nanochat_bench.log").write_text(HEADER + "\n" + line("7", "2190.5") + "\n")
    case = {"result": "pass", "fail_phase": None, "fail_reason": None, "system": "sys", "partition": "cpu",
            "jobid": "7", "job_nodelist": ["n1"], "runtime": "bare", "run_id": "n1-bare-r1", "run_status": "ok",
            "short_name": "nb_1", "world_size": 2, "perfvalues": {"sys:cpu:tok_per_sec": [2190.5, 0, None, None,
                                                                                           "tok/s", "pass"]}}
    (tmp_path / "run-report-0.json").write_text(json.dumps({"session_info": {}, "runs": [{"testcases": [case]}]},
                                                           indent=2))
    table = collect([tmp_path], tmp_path / "table").table.set_index("source_kind")
    assert pd.isna(table.loc["reframe_report", "skip_reason"])
    assert table.loc["reframe_perflog", "skip_reason"].endswith("run-report-0.json (reframe_report)")
    # the table on disk keeps both rows; a second collect reads nothing again
    again = collect([tmp_path], tmp_path / "table")
    assert (again.read, again.reused) == (0, 2)
