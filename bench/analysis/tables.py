"""The report's tables: cells formatted once here, as strings, for both the Markdown and the HTML, and the
one Markdown table writer (md_table). Headers and formats of table columns come from bench/analysis/columns.py.

Each builder takes a table of bench/analysis/scaling.py (points: one row per runtime x rank count, or
runs) and returns a Table. A missing value is '–' everywhere: not measured, never zero. Headers say
GPUs where the config ran on GPUs and ranks otherwise (`unit`).
"""

import json
import math
from dataclasses import dataclass

import pandas as pd
from tabulate import tabulate

from bench import breakdown
from bench.analysis import scaling
from bench.analysis.columns import BY_NAME, COLLECTIVES, SPLIT, cell, header

MAX_TABLE_ROWS = 100  # per table of runs; the table file has them all
NOT_MEASURED = "–"
PHASES = tuple(f"phase_{m}_s" for m in breakdown.MILESTONES[1:])


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    more: int = 0
    text_cols: tuple[int, ...] = ()


def fmt(v, kind: str = "g") -> str:
    """A cell: '–' for missing values; numbers by kind (int, thousands, 1..3 decimals, percent)."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return NOT_MEASURED
    if kind == "int":
        return f"{int(round(float(v))):,}"
    # rounded first, then + 0.0: a small negative that rounds to zero reads 0.0, not -0.0
    if kind in ("1", "2", "3"):
        return f"{round(float(v), int(kind)) + 0.0:,.{kind}f}"
    if kind == "pct":
        return f"{round(100 * float(v), 1) + 0.0:.1f}%"
    return str(v)


def frame_table(points: pd.DataFrame, cols: list[tuple[str, str, str]], text_cols=(0,)) -> Table:
    """A Table of (header, column, format) cells of each row of a frame."""
    rows = [[fmt(r[c], k) for _, c, k in cols] for r in points.to_dict("records")]
    return Table([h for h, _, _ in cols], rows, text_cols=text_cols)


def _point_cols(unit: str) -> list[tuple[str, str, str]]:
    return [("runtime", "runtime", "s"), (unit, "world_size", "int"), ("nodes", "nodes", "s")]


def _workload(points: pd.DataFrame):
    """The config's run.json workload (one per config: part of its key), whose headers its figures take."""
    return next(iter(points["workload"].dropna()), None) if "workload" in points else None


def _summary_cols(points: pd.DataFrame, unit: str, mode: str) -> list[tuple[str, str, str]]:
    per, workload = unit[:-1], _workload(points)
    cols = [*_point_cols(unit), ("runs", "runs", "int"), cell("tok_per_sec", per, workload),
            cell("tok_per_sec_per_gpu", per, workload)]
    if mode == "weak":  # the total grows with the ranks; the speedup of a weak curve is no goal
        cols += [cell("total_batch_size")]
    else:
        cols += [("speedup", "speedup", "2")]
    return cols + [("efficiency", "efficiency", "pct"),
                   *(cell(c, per, workload) for c in ("mfu", "step_time_ms", "step_time_cv", "step_time_p90_ms",
                                                      "startup_overhead_s", "time_to_first_step_s", "peak_mem_mib",
                                                      "min_val_bpb"))]


def summary_table(points: pd.DataFrame, unit: str, mode: str) -> Table:
    return frame_table(points, _summary_cols(points, unit, mode))


def summary_note(points: pd.DataFrame, unit: str, mode: str) -> str:
    """What the summary table's cells are of a point's repeats: the median, or the column's own aggregate."""
    others = [f"{h}: the {BY_NAME[c].agg}" for h, c, _ in _summary_cols(points, unit, mode)
              if c in BY_NAME and BY_NAME[c].agg not in (None, "median")]
    but = f" ({', '.join(others)})" if others else ""
    return f"Each measure is the median over the point's repeats{but}; speedup and efficiency are of the median tok/s."


def ratio_note(unpaired: str | None) -> str:
    """What the ratio table shows, after a note of rank counts without the baseline (report.no_baseline_note)."""
    said = (f"Ratios of {scaling.RATIO_STAT}, 95% CI by {scaling.CI_STAT}: not the medians of the table above, "
            "so a quotient of two of its tok/s cells can differ.")
    return f"{unpaired} {said}" if unpaired else said


def ci_cell(r: dict) -> str:
    """A ratio's CI: '[low, high]', '–' under 2 runs a side, and said in words where the repeats are identical
    (no interval: a zero-width one would read as certainty)."""
    why = scaling.no_ci(r["runs"], r["baseline_runs"], r["ci_low"])
    if why is None:
        return f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
    return NOT_MEASURED if why == scaling.NO_CI_FEW else f"{why}: no interval"


def ratio_table(ratios: pd.DataFrame, unit: str) -> Table:
    rows = [[r["runtime"], fmt(r["world_size"], "int"), fmt(r["runs"], "int"), fmt(r["baseline_runs"], "int"),
             fmt(r["ratio"], "3"), ci_cell(r)]
            for r in ratios.to_dict("records")]
    return Table(["runtime", unit, "runs", "baseline runs", "ratio of geometric means", "95% CI (Welch t on logs)"],
                 rows, text_cols=(0,))


def runs_table(df: pd.DataFrame, reason_col: str) -> Table:
    """Runs left out of the figures, with what happened to them and where they are under their root (a run's
    id can be shared by its copies), capped at MAX_TABLE_ROWS."""
    cols = ["run", "directory", "runtime", "ranks", "status", "cause"]
    rows = []
    for r in df.head(MAX_TABLE_ROWS).to_dict("records"):
        cause = r[reason_col] if reason_col != "message" else (r["message"] or r["skip_reason"])
        rows.append([fmt(r["run_id"]), fmt(r["source"]), fmt(r["runtime"]), fmt(r["world_size"], "int"),
                     fmt(r["status"]), fmt(cause)])
    return Table(cols, rows, more=max(0, len(df) - MAX_TABLE_ROWS), text_cols=(0, 1, 2, 4, 5))


def phase_table(points: pd.DataFrame, unit: str) -> Table:
    """Seconds per phase (medians over repeats), launch to teardown, and launch to first step."""
    return frame_table(points, [*_point_cols(unit), *(cell(c) for c in (*PHASES, "launch_to_first_step_s"))])


def split_table(points: pd.DataFrame, unit: str) -> Table:
    """The steady step and its parts in ms, each with its share of the step."""
    head = frame_table(points, [*_point_cols(unit), cell("step_time_ms")])
    rows = []
    for cells, r in zip(head.rows, points.to_dict("records")):
        parts = []
        for key in SPLIT:
            v = r[f"step_{key}"]
            share = v / r["step_time_ms"] if not pd.isna(v) and r["step_time_ms"] else None
            parts.append(NOT_MEASURED if pd.isna(v) else f"{v:,.1f} ({fmt(share, 'pct')})")
        rows.append(cells + parts)
    return Table(head.columns + [header(f"step_{k}") for k in SPLIT], rows, text_cols=(0,))


def busbw_table(points: pd.DataFrame, unit: str) -> Table:
    per, workload = unit[:-1], _workload(points)
    cols = [*_point_cols(unit), ("buffer MiB", "preflight_mib", "int"),
            *[cell(f"busbw_{c}_gbps") for c in COLLECTIVES],
            cell("tok_per_sec", per, workload), cell("tok_per_sec_per_gpu", per, workload),
            ("efficiency", "efficiency", "pct")]
    return frame_table(points.assign(preflight_mib=points["preflight_bytes"] / 2 ** 20), cols)


def transports_text(value) -> str:
    """nccl_transports (JSON {"P2P": 24, "NET/Socket": 8}) as 'NET/Socket 8, P2P 24'."""
    try:
        counts = json.loads(value)
    except (TypeError, ValueError):  # not measured ('–'), or not JSON: as it is
        return fmt(value)
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none (one rank)"


def network_table(runs: pd.DataFrame, unit: str) -> Table:
    """The path each run's collectives took: NCCL's network, provider, transports, and the proof of TCP; each run
    named with its directory, as in runs_table (one run id recurs in every sweep)."""
    cols = ["run", "directory", "runtime", "nodes", unit, "network", "provider", "transports",
            "inter-node over sockets"]
    rows = []
    for r in runs.head(MAX_TABLE_ROWS).to_dict("records"):
        multi = not pd.isna(r["nodes"]) and int(r["nodes"]) > 1
        sockets = fmt(r["net_over_sockets"]) if multi else "one node" if not pd.isna(r["nodes"]) else NOT_MEASURED
        if multi and pd.isna(r["net_over_sockets"]) and not pd.isna(r["net_unverified"]):
            sockets = f"not verified: {r['net_unverified']}"
        rows.append([fmt(r["run_id"]), fmt(r["source"]), fmt(r["runtime"]), fmt(r["nodes"], "int"),
                     fmt(r["world_size"], "int"), fmt(r["net"]), fmt(r["net_provider"]),
                     transports_text(r["nccl_transports"]), sockets])
    return Table(cols, rows, more=max(0, len(runs) - MAX_TABLE_ROWS), text_cols=(0, 1, 2, 5, 6, 7, 8))


def md_table(t: Table) -> str:
    if not t.rows:
        return "None."
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    align = ["left" if i in t.text_cols else "right" for i in range(len(t.columns))]
    text = tabulate([[esc(c) for c in row] for row in t.rows], headers=[esc(c) for c in t.columns],
                    tablefmt="github", colalign=align, disable_numparse=True)
    if t.more:
        text += f"\n\n_… and {t.more} more rows (all of them are in the table file)._"
    return text


def kept_apart_table(kept: pd.DataFrame) -> Table:
    """Groups of runs that look alike but trained different models or data (scaling.kept_apart)."""
    rows = [[r["config_base"], r["values"], fmt(r["runs"], "int"), r["differs"]] for r in kept.to_dict("records")]
    return Table(["runs of", "group", "runs", "differ in"], rows, text_cols=(0, 1, 3))
