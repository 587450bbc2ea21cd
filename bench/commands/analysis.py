"""`nanochat-bench collect|report|check`: run directories -> table -> report; figures against references."""

from pathlib import Path

from bench.analysis import DEFAULT_WORKERS, MAX_WORKERS
from bench.commands import nonempty
from bench.errors import AnalysisError, ConfigError

# What collect looks for, said when a root holds none of it (a path one level off, runs not written yet).
RUNS_LOOKED_FOR = "one holds run.json or metrics.jsonl; upstream base_train logs are read from *.log"


def register(subparsers) -> None:
    c = subparsers.add_parser("collect", help="collect run directories (and upstream nanochat logs) into a table")
    c.add_argument("roots", nargs="+", metavar="ROOT", type=nonempty("ROOT", "a directory", required=True),
                   help="results root(s), sweep or run directories")
    c.add_argument("--out", default="results/table", type=nonempty("--out", "the table's directory"),
                   help="directory of the table: runs.parquet and runs.csv, updated incrementally "
                        "(default: results/table)")
    c.add_argument("--workers", type=int, default=None, help=f"processes reading runs, 1 to {MAX_WORKERS}, never more "
                   f"than the runs to read (default: CPU count, at most {DEFAULT_WORKERS})")
    c.set_defaults(func=cmd_collect)

    r = subparsers.add_parser("report", help="Markdown + self-contained HTML report with scaling figures")
    r.add_argument("source", metavar="TABLE_OR_ROOT",
                   type=nonempty("TABLE_OR_ROOT", "a table or a directory", required=True),
                   help="a table from collect (runs.parquet/.csv or its directory), or a directory of runs")
    r.add_argument("--out", required=True, type=nonempty("--out", "the report's directory", required=True),
                   help="directory for report.md, report.html and figures/")
    r.add_argument("--baseline", default=None, help="runtime the others are compared with (default: bare)")
    r.add_argument("--title", default="nanochat-bench report", type=nonempty("--title", "the report's heading"),
                   help="report title")
    r.set_defaults(func=cmd_report)

    k = subparsers.add_parser("check", help="compare figures with stored references; exit 1 on a regression "
                                            "or a missing one")
    k.add_argument("table", metavar="TABLE", type=nonempty("TABLE", "a table", required=True),
                   help="a table from collect (runs.parquet/.csv or its directory)")
    k.add_argument("--references", required=True, metavar="FILE",
                   type=nonempty("--references", "a TOML file", required=True),
                   help="references TOML (see results/references.example.toml)")
    k.add_argument("--allow-missing", action="store_true",
                   help="a reference that no usable run matches is reported but does not fail")
    k.set_defaults(func=cmd_check)


def cmd_collect(args) -> int:
    from bench.analysis.collect import collect, is_copy

    # 0 was taken for the default, a negative for 1; a huge count started that many processes
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise ConfigError(f"--workers {args.workers}: give 1 to {MAX_WORKERS} processes "
                          f"(default: CPU count, at most {DEFAULT_WORKERS})")
    result = collect(args.roots, args.out, workers=args.workers)
    t = result.table
    usable = int(t["skip_reason"].isna().sum())
    print(f"{len(t)} run(s) in the table ({result.read} read, {result.reused} unchanged, "
          f"{result.removed} removed); {usable} usable, {len(t) - usable} left out of figures")
    copy = is_copy(t)  # a run read twice is one run: its copy or log is no second failure (as the report)
    # a run whose run.json cannot be read has no status (the report's skipped): counted as unknown, never left out
    for status, n in t.loc[~copy, "status"].fillna("unknown").value_counts().sort_index().items():
        print(f"  {status:12s} {n}")
    if copy.any():
        print(f"  {'copy':12s} {int(copy.sum())} (a run directory found twice, or a run's console log, counted once)")
    if t.empty:  # a path one level off, or runs not written yet: say what was looked for
        print(f"no run directory under {', '.join(map(str, args.roots))} ({RUNS_LOOKED_FOR})")
    for p in result.paths:  # an unchanged table is left as it was: no write claimed (a read-only --out takes none)
        print(f"wrote {p}" if result.written else f"{p}: up to date")
    return 0


def cmd_report(args) -> int:
    from bench.analysis.report import load_or_collect, refuse_foreign_figures, write_report
    from bench.analysis.scaling import BASELINE_RUNTIME, UNKNOWN_RUNTIME

    source = Path(args.source)
    if not source.exists():
        raise AnalysisError(f"{source}: no such table or directory")
    refuse_foreign_figures(args.out)  # before a root is collected into --out: a refusal leaves it as it was
    table = load_or_collect(source, args.out)
    if table.empty:  # a path one level off: a report of nothing would replace a good one in --out
        raise AnalysisError(f"{source}: no run directory in it ({RUNS_LOOKED_FOR}); no report written, "
                            f"what {args.out} holds is kept")
    runtimes = sorted(set(table.loc[table["skip_reason"].isna(), "runtime"].dropna()))
    if args.baseline == UNKNOWN_RUNTIME:  # the runtime of such runs is not known: a ratio to it compares with nothing
        raise AnalysisError(f"--baseline {UNKNOWN_RUNTIME}: the report's name for runs that name no runtime (this "
                            f"trainer's console log), so no ratio is taken to them; runtimes there: "
                            f"{', '.join(runtimes) or 'none'}")
    if args.baseline is not None and args.baseline not in runtimes:  # a typo would drop every ratio unsaid
        raise AnalysisError(f"--baseline {args.baseline}: no usable run of that runtime in {source}; "
                            f"runtimes there: {', '.join(runtimes) or 'none'}")
    html = write_report(table, args.out, baseline=args.baseline or BASELINE_RUNTIME, title=args.title,
                        source=str(source))
    print(f"wrote {html.with_name('report.md')}\nwrote {html}")
    return 0


def cmd_check(args) -> int:
    from bench.analysis.check import check, load_references
    from bench.analysis.collect import load_table

    references = load_references(args.references)
    outcomes = check(load_table(args.table), references)
    for o in outcomes:
        print(o.line())
    regressions = [f"{o.reference}/{o.figure}" for o in outcomes if o.verdict == "fail" and not o.pooled]
    mixed = [f"{o.reference}/{o.figure}" for o in outcomes if o.pooled]  # failed: runs of several setups matched
    missing = [f"{o.reference}/{o.figure}" for o in outcomes if o.verdict == "missing"]
    passed = sum(o.verdict == "pass" for o in outcomes)
    # named: the verdicts of two references files run one after the other are told apart by it
    print(f"{args.references}: {passed} of {len(outcomes)} check(s) passed"
          + (f", {len(missing)} missing" + (" (allowed)" if args.allow_missing else "") if missing else "")
          + (f"; regressions: {', '.join(regressions)}" if regressions else "")
          + (f"; runs of different setups (narrow `where`): {', '.join(mixed)}" if mixed else "")
          + (f"; missing (no usable run matches, or none recorded the figure): {', '.join(missing)}"
             if missing else ""))
    return 1 if regressions or mixed or (missing and not args.allow_missing) else 0
