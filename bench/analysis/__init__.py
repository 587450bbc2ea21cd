"""Analysis: run directories -> table (collect) -> scaling maths -> figures and reports; references check.

Pure steps, one module each: rundir/upstream read one run into a flat row, figures holds the
steady-state rule, collect builds the table, scaling does the maths, plots draws, report writes.
"""


def summarize_runs(root, out_dir):
    """Collect the runs under root into out_dir and write the report there; returns report.html's path."""
    from bench.analysis.report import summarize_runs as _summarize  # matplotlib loads only when used

    return _summarize(root, out_dir)
