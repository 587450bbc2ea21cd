"""The report: per workload config a summary table, runtime ratios and figures; then the runs left out.

`write_report(table, out_dir)` writes `report.md` (images linked from figures/) and `report.html`
(the same, self-contained: images embedded as data URIs, so one file can be mailed or attached).
`summarize_runs(root, out_dir)` is collect + report in one call (the end of `nanochat-bench smoke`).
"""

import base64
import datetime as dt
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pandas as pd
from tabulate import tabulate

from bench.analysis import plots, scaling, templates
from bench.analysis.collect import collect, load_table
from bench.analysis.figures import STEADY_STATE_RULE
from bench.schema import FINAL_STATUSES, write_text_atomic

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
FIGURES_DIR = "figures"
MAX_TABLE_ROWS = 100  # per table of runs; the table file has them all
METHODS = [
    STEADY_STATE_RULE,
    "MFU = FLOPs per token × steady tok/s / (GPUs × peak dense bf16 FLOP/s of the GPU recorded in run.json); "
    "none on CPU or an unknown GPU.",
    "Start-up overhead = the trainer's start event − the launcher's NANOCHAT_BENCH_T0 (taken before srun); "
    "time to first step = first_step event − start event.",
    "Speedup and parallel efficiency are relative to each runtime's smallest GPU count in the same config; "
    "repeats of a point are summarised by their median.",
    scaling.CI_METHOD,
    "Runs are compared only within one workload config (" + ", ".join(scaling.GROUP_KEYS) + ").",
]


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    more: int = 0
    text_cols: tuple[int, ...] = ()


def _fmt(v, kind: str = "g") -> str:
    """A cell: '–' for missing values; numbers by kind (int, thousands, 1..3 decimals, percent)."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if kind == "int":
        return f"{int(v):,}"
    if kind in ("1", "2", "3"):
        return f"{float(v):.{kind}f}"
    if kind == "pct":
        return f"{100 * float(v):.1f}%"
    return str(v)


def summary_table(points: pd.DataFrame) -> Table:
    cols = [("runtime", "runtime", "s"), ("GPUs", "world_size", "int"), ("nodes", "nodes", "s"),
            ("runs", "runs", "int"), ("tok/s", "tok_per_sec", "int"), ("tok/s/GPU", "tok_per_sec_per_gpu", "int"),
            ("speedup", "speedup", "2"), ("efficiency", "efficiency", "pct"), ("MFU %", "mfu", "1"),
            ("step ms", "step_time_ms", "1"), ("step CV", "step_time_cv", "3"),
            ("step p90 ms", "step_time_p90_ms", "1"),
            ("start-up s", "startup_overhead_s", "1"), ("1st step s", "time_to_first_step_s", "1"),
            ("peak mem MiB", "peak_mem_mib", "int"), ("min val bpb", "min_val_bpb", "3")]
    rows = [[_fmt(r[c], k) for _, c, k in cols] for r in points.to_dict("records")]
    return Table([h for h, _, _ in cols], rows, text_cols=(0,))


def ratio_table(ratios: pd.DataFrame) -> Table:
    rows = [[r["runtime"], _fmt(r["world_size"], "int"), _fmt(r["runs"], "int"), _fmt(r["baseline_runs"], "int"),
             _fmt(r["ratio"], "3"),
             "–" if math.isnan(r["ci_low"]) else f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"]
            for r in ratios.to_dict("records")]
    return Table(["runtime", "GPUs", "runs", "baseline runs", "ratio", "95% CI"], rows, text_cols=(0,))


def runs_table(df: pd.DataFrame, reason_col: str) -> Table:
    """Runs left out of the figures, with what happened to them (capped at MAX_TABLE_ROWS)."""
    cols = ["run", "sweep", "runtime", "GPUs", "status", "cause"]
    rows = []
    for r in df.head(MAX_TABLE_ROWS).to_dict("records"):
        cause = r[reason_col] if reason_col != "message" else (r["message"] or r["skip_reason"])
        rows.append([_fmt(r["run_id"]), _fmt(r["sweep_id"]), _fmt(r["runtime"]), _fmt(r["world_size"], "int"),
                     _fmt(r["status"]), _fmt(cause)])
    return Table(cols, rows, more=max(0, len(df) - MAX_TABLE_ROWS), text_cols=(0, 1, 2, 4, 5))


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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "config"


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def write_report(table: pd.DataFrame, out_dir: str | os.PathLike, baseline: str = scaling.BASELINE_RUNTIME,
                 title: str = "nanochat-bench report", source: str = "") -> Path:
    """Write report.md, report.html and figures/ under out_dir; returns the HTML report's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Figures are drawn into a fresh folder that then replaces figures/, so none of an older report stays.
    fig_dir = Path(tempfile.mkdtemp(dir=out_dir, prefix=f".{FIGURES_DIR}."))
    fig_dir.chmod(0o755)  # mkdtemp makes it private; a report folder is meant to be shared
    order = lambda col: col.map(lambda r: (r != baseline, r)) if col.name == "runtime" else col  # noqa: E731
    points = scaling.scaling_table(table).sort_values(["config", "runtime", "world_size"], key=order)
    ratios = scaling.runtime_ratios(table, baseline).sort_values(["config", "runtime", "world_size"])
    groups = []
    for i, (config, p) in enumerate(points.groupby("config", sort=True)):
        r = ratios[ratios["config"] == config]
        figs = plots.config_figures(p, r, baseline, config, fig_dir, f"{i + 1:02d}-{_slug(config)}")
        groups.append({"config": config, "summary": summary_table(p), "ratios": ratio_table(r), "figures": [
            {"title": f.title, "png": f"{FIGURES_DIR}/{f.png.name}", "svg": f"{FIGURES_DIR}/{f.svg.name}",
             "data_uri": _data_uri(f.png)} for f in figs]})

    used = table["skip_reason"].isna()
    live = table["status"].isin(["pending", "running"])
    failed = ~used & ~live & table["status"].isin([s for s in FINAL_STATUSES if s != "ok"])
    skipped = ~used & ~live & ~failed
    run_tables = [{"title": "Failed runs", "table": runs_table(table[failed], "message")},
                  {"title": "Runs not finished", "table": runs_table(table[live], "skip_reason")},
                  {"title": "Runs skipped (unreadable or incomplete)",
                   "table": runs_table(table[skipped], "skip_reason")}]
    counts = {"total": len(table), "usable": int(used.sum()), "failed": int(failed.sum()), "live": int(live.sum()),
              "skipped": int(skipped.sum())}
    context = {"title": title, "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "source": source, "counts": counts, "methods": METHODS, "groups": groups, "baseline": baseline,
               "run_tables": run_tables}
    shutil.rmtree(out_dir / FIGURES_DIR, ignore_errors=True)
    os.replace(fig_dir, out_dir / FIGURES_DIR)
    md_env = jinja2.Environment(autoescape=False, keep_trailing_newline=True)
    md_env.filters["md_table"] = md_table
    html_env = jinja2.Environment(autoescape=True)
    write_text_atomic(out_dir / REPORT_MD, md_env.from_string(templates.MARKDOWN).render(**context))
    write_text_atomic(out_dir / REPORT_HTML, html_env.from_string(templates.HTML).render(**context))
    return out_dir / REPORT_HTML


def load_or_collect(table_or_root: str | os.PathLike, out_dir: str | os.PathLike) -> pd.DataFrame:
    """A table file (or a directory holding one) as is; a directory of runs is collected into out_dir."""
    path = Path(table_or_root)
    if path.is_file() or (path.is_dir() and any((path / n).exists() for n in ("runs.parquet", "runs.csv"))):
        return load_table(path)
    return collect([path], out_dir).table


def summarize_runs(root: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Collect the runs under root into out_dir (runs.parquet, runs.csv) and report them; the HTML path."""
    table = collect([root], out_dir).table
    return write_report(table, out_dir, source=str(Path(root).resolve()))
