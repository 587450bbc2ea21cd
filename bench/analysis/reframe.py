"""ReFrame's records of nanochat-bench checks -> table rows: its perflog and its JSON run report.

The checks (bench/reframe_checks/checks.py) log the run they made as ReFrame variables (run_id,
short_name = the sweep, runtime, world_size, depth, batch sizes, run_status, gpu_name) next to the
performance variables, which carry the table's own column names (tok_per_sec_per_gpu, mfu, ...).
Both records hold them under the same names:

- the perflog (`perflogs/<system>/<partition>/nanochat_bench.log`): a header line naming the fields,
  then one line per test case, fields split by `|` (ReFrame's default format, `%(check_#ALL)s`);
- the run report (`--report-file`, default ~/.reframe/reports/run-report-*.json): runs[].testcases[],
  with the variables as keys and `perfvalues` as {"system:partition:name": [value, ref, lower, upper,
  unit, result]}.

Records of other checks are left out. A test case that several sources describe (its run directory,
kept in ReFrame's output directory, the report and the perflog) is one run: `one_row_per_run` keeps the
richest row (the run directory's) for the figures and marks the others as the same run.
"""

import json
import math
from pathlib import Path

import pandas as pd

from bench import schema

PERFLOG = "reframe_perflog"
REPORT = "reframe_report"
KINDS = (PERFLOG, REPORT)
JOB_SCRIPT = "rfm_job.sh"  # a ReFrame test's stage or output folder: its rfm_job.out repeats the run's output
OURS = ("run_id", "runtime", "world_size")  # variables only nanochat-bench's checks log
DELIM = "|"
# ReFrame variable -> table column
VARIABLES = {"run_id": "run_id", "short_name": "sweep_id", "runtime": "runtime", "num_nodes": "nodes",
             "gpus_per_node": "gpus_per_node", "world_size": "world_size", "depth": "depth",
             "max_seq_len": "max_seq_len", "device_batch_size": "device_batch_size",
             "total_batch_size": "total_batch_size", "num_iterations": "num_iterations", "gpu_name": "gpu_name",
             "workload": "workload", "jobid": "slurm_job_id", "job_nodelist": "nodelist"}
NULLS = ("", "null", "None", "nan")
# Which row of one run the figures use: the run directory's (it has every column), then the report's.
RANK = {"run_dir": 0, REPORT: 1, PERFLOG: 2}


def _value(v):
    """A record's value as a cell: ReFrame writes a missing value as null/None, a list as a, b, c."""
    if isinstance(v, list):
        v = ",".join(str(x) for x in v)
    if isinstance(v, str) and v.strip() in NULLS:
        return None
    return v


def row_of(record: dict, perf: dict[str, float], kind: str) -> dict | None:
    """One table row from a test case's record (variables) and its performance values; None for a
    record of another check or a case ReFrame skipped."""
    if any(_value(record.get(k)) is None for k in OURS) or record.get("result") == "skip":
        return None
    from bench.analysis.collect import COLUMNS  # collect imports this module

    row = {col: _value(record.get(var)) for var, col in VARIABLES.items()}
    row.update({name: value for name, value in perf.items() if COLUMNS.get(name) == "float"})
    where = f"{record.get('system')}:{record.get('partition')}"
    result, phase = record.get("result"), _value(record.get("fail_phase"))
    row.update(source_kind=kind, reframe_partition=where, repeat=1)
    row["status"] = _value(record.get("run_status")) or ("ok" if result == "pass" or phase == "performance"
                                                         else "failed")
    reason = _value(record.get("fail_reason"))
    if result != "pass" and phase != "performance":
        row["message"] = reason
    row["notes"] = f"ReFrame {where}: {result}" + (f" in {phase}: {reason}" if phase else "")
    row["skip_reason"] = usability(row)
    return row


def usability(row: dict) -> str | None:
    if row["status"] not in schema.STATUSES:
        return f"unknown status {row['status']!r} (known: {', '.join(schema.STATUSES)})"
    if row["status"] != "ok":
        return f"run {row['status']}"
    tps = pd.to_numeric(row.get("tok_per_sec"), errors="coerce")
    if pd.isna(tps) or not math.isfinite(tps):
        return "no tok_per_sec in the ReFrame record"
    return None


# -- the perflog --------------------------------------------------------------------------------------

def _header(path: Path) -> list[str] | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline(65536).rstrip("\n")
    except OSError:
        return None
    names = first.split(DELIM)
    return names if all(k in names for k in OURS) and any(n.endswith("_value") for n in names) else None


def is_perflog(path: Path) -> bool:
    """Whether this .log file is a ReFrame perflog of nanochat-bench's checks (by its header line)."""
    return _header(path) is not None


def read_perflog(path: Path) -> list[dict]:
    """A row per test-case line; a line whose field count differs from the header's is left out."""
    header = _header(path)
    if header is None:
        return []
    perf_names = [n[: -len("_value")] for n in header if n.endswith("_value")]
    rows, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        next(f)
        for line in f:
            fields = line.rstrip("\n").split(DELIM)
            if fields == [""]:
                continue
            if len(fields) != len(header):
                bad += 1
                continue
            record = dict(zip(header, fields))
            perf = {n: pd.to_numeric(_value(record.get(f"{n}_value")), errors="coerce") for n in perf_names}
            row = row_of(record, perf, PERFLOG)
            if row is not None:
                rows.append(row)
    if bad and rows:
        rows[0]["notes"] += f"; {bad} perflog line(s) whose fields do not match the header left out"
    return rows


# -- the JSON run report ------------------------------------------------------------------------------

def is_report(path: Path) -> bool:
    """Whether this .json file is a ReFrame run report (it opens with session_info)."""
    try:
        with open(path, "rb") as f:
            return b'"session_info"' in f.read(512)
    except OSError:
        return False


def read_report(path: Path) -> list[dict]:
    """A row per test case of every run of the report (a retried case is one row per attempt)."""
    if not is_report(path):
        return []
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    rows = []
    for run in report.get("runs", []) if isinstance(report, dict) else []:
        for case in run.get("testcases", []):
            perf = {key.rsplit(":", 1)[-1]: v[0] for key, v in (case.get("perfvalues") or {}).items()
                    if isinstance(v, list) and v}
            row = row_of(case, {k: (v if isinstance(v, (int, float)) else math.nan) for k, v in perf.items()}, REPORT)
            if row is not None:
                rows.append(row)
    return rows


# -- one row per run ----------------------------------------------------------------------------------

def one_row_per_run(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of one run (same sweep_id, run_id and Slurm job) from several sources: the best-ranked keeps
    its figures, gains ReFrame's verdict in its notes, and the others are left out of the figures with a
    skip_reason naming it. The table on disk keeps every source's row; readers see each run once."""
    kinds = table["source_kind"].astype(object)
    candidates = kinds.isin(list(RANK)) & table["sweep_id"].notna() & table["run_id"].notna() & \
        table["slurm_job_id"].notna()
    if not (candidates & kinds.isin(list(KINDS))).any():
        return table
    table = table.copy()
    sub = table[candidates].assign(_rank=kinds[candidates].map(RANK))
    for _, group in sub.groupby(["sweep_id", "run_id", "slurm_job_id"], sort=False):
        if len(group) < 2:
            continue
        group = group.sort_values("_rank", kind="stable")
        best, others = group.index[0], group.index[1:]
        verdicts = [n for n in group.loc[others, "notes"].dropna() if str(n).startswith("ReFrame ")]
        if verdicts and table.at[best, "source_kind"] == "run_dir":
            notes = table.at[best, "notes"]
            table.at[best, "notes"] = verdicts[0] if pd.isna(notes) else f"{notes}; {verdicts[0]}"
        partitions = group["reframe_partition"].dropna()
        if pd.isna(table.at[best, "reframe_partition"]) and not partitions.empty:
            table.at[best, "reframe_partition"] = partitions.iloc[0]
        name = f"{table.at[best, 'root']}/{table.at[best, 'source']}"
        table.loc[others, "skip_reason"] = f"the same run as {name} ({table.at[best, 'source_kind']})"
    return table
