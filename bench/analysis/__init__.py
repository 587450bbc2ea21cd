"""Analysis: run directories -> table (collect) -> scaling maths -> figures and reports; references check.

    columns.py        the column catalogue: every column once (type, source, aggregation, label, unit, format, key)
    rundir.py         one run directory -> one flat row (run.json through the catalogue, metrics.jsonl)
    upstream.py       one plain log of upstream nanochat's base_train -> one flat row
    figures.py        the steady-state rule and a run's figures from its step records
    why.py            start-up phases, step split, pre-flight busbw, network path, slowest rank of a run
    regular_files.py  opens regular files only (never a link, FIFO or device under a run's name)
    collect.py        run directories -> runs.parquet + runs.csv, incremental; torn tables refused
    scaling.py        comparison key, points, speedup, efficiency, runtime ratios with CIs, runs kept apart
    findings.py       what one config's figures say, in words, each with its evidence and threshold
    tables.py         the report's tables as formatted cells, and the one Markdown table writer
    plots.py          scaling figures (throughput, speedup, efficiency, MFU, ratios)
    plots_why.py      figures of where the time went (start-up phases, step split, busbw)
    sidebyside.py     nanochat and NNTile runs of the same shape side by side
    stages.py         a flow's stages: throughput, time and scores per stage, the time to a chat model
    templates.py      the text of report.md and report.html
    report.py         writes the report: report.md, report.html and figures/
    check.py          figures against a references file (ReFrame-style tolerances)
    capacity.py       the capacity search's report
"""

# Processes collect reads runs with: by default one a CPU up to DEFAULT_WORKERS, never more than MAX_WORKERS nor
# than the runs to read (reading is file I/O and JSON: more processes only add start-up and memory, and on Linux
# the pool forks all of them at once, so `--workers 100000` tried to start that many). Here, not in collect.py,
# so the command line's help says them without loading pandas.
DEFAULT_WORKERS = 8
MAX_WORKERS = 64


def summarize_runs(root, out_dir):
    """Collect the runs under root into out_dir and write the report there; returns report.html's path."""
    from bench.analysis.report import summarize_runs as _summarize  # matplotlib loads only when used

    return _summarize(root, out_dir)
