"""The report: per workload config its findings, a summary table, runtime ratios, scaling figures and
where the time went (start-up phases, the steady step, pre-flight bandwidth, the network path); then
nanochat and NNTile side by side, and the runs left out.

`write_report(table, out_dir)` writes `report.md` (images linked from figures/) and `report.html`
(the same, self-contained: images embedded as data URIs, so one file can be mailed or attached).
`summarize_runs(root, out_dir)` is collect + report in one call (the end of `nanochat-bench smoke`).
"""

import base64
import datetime as dt
import os
import re
import shutil
import tempfile
from pathlib import Path

import jinja2
import matplotlib.pyplot as plt
import pandas as pd

from bench.analysis import findings, plots, plots_why, scaling, sidebyside, stages, tables, templates, upstream
from bench.analysis.collect import ROW_VERSION, collect, display_root, is_copy, load_table, one_row_per_run
from bench.analysis.columns import COLLECTIVES, SPLIT
from bench.analysis.figures import STEADY_STATE_RULE
from bench.analysis.rundir import LIVE_STATUSES
from bench.analysis.tables import md_table, runs_table
from bench.contract import FINAL_STATUSES, atomic_target, write_synced
from bench.errors import AnalysisError, os_reason

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
FIGURES_DIR = "figures"
# What a report writes into figures/ (`<config no.>-<config slug>-<figure>.png|svg`, config_group and plots.save),
# whatever the figure: a figures/ folder holding nothing else is an earlier report's and is replaced whole; anything
# else there is not ours.
REPORT_FIGURE = re.compile(r"\d{2,}-[a-z0-9_-]+\.(png|svg)")
METHODS = [
    STEADY_STATE_RULE,
    "MFU = FLOPs per token × steady tok/s / (GPUs × peak dense bf16 FLOP/s of the GPU recorded in run.json); "
    "none on CPU or an unknown GPU, except in an upstream log that names no GPU: there it is upstream's own, "
    f"against the H100's {upstream.UPSTREAM_PEAK / 1e12:g} TFLOP/s that upstream assumes whatever the GPU. "
    "SFT counts supervised tokens in its tok/s (upstream's num_tokens), fewer than "
    "the positions it runs (padding, prompts): its MFU is its step events' own, from every position.",
    "Start-up phases run from one milestone to the next the run recorded (launch, runtime start, trainer "
    "start, imports, process group, pre-flight, model, data, first step; bench/breakdown.py), so a phase "
    "that was not measured (–, or a cross in the figure) is inside the next measured one; a run without a "
    "launch time has no phase before its first milestone. Start-up s = trainer start − launch; 1st step s = "
    "first step − trainer start (imports to the first step, not the first step's phase alone).",
    "Weak scaling keeps device batch × sequence per rank (the total batch grows with the ranks): "
    "efficiency = tok/s per rank / the smallest run's, ideal flat. Strong scaling keeps the total batch: "
    "speedup = tok/s / the smallest run's, efficiency = speedup / ideal. Both relative to the config's "
    "smallest rank count, so a runtime not run there has neither (–); repeats of a point are summarised by "
    "their median.",
    scaling.CI_METHOD,
    "Runs are compared only within one workload config (" + ", ".join(scaling.GROUP_KEYS) + "). "
    + scaling.LEGACY_METHOD,
    findings.THRESHOLDS,
]
KEPT_APART = ("These runs share a config label but differ in what was trained (the model, precision, data, tiling) "
              "or in the flow's stage, as each row names: each group is a config of its own below, never repeats "
              "of one point.")
# Sections of a config and what a run needs to fill them, said when none of its runs did.
SECTION_NEEDS = {"startup": "start-up phases (the run's milestones: launch time and events)",
                 "step": "the steady step split (--breakdown)",
                 "busbw": "pre-flight bandwidth (--preflight, more than one rank)",
                 "network": "the network path (NCCL_DEBUG=INFO on GPU runs)"}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "config"


def _figure(saved: plots.SavedFigure) -> dict:
    return {"title": saved.title, "png": f"{FIGURES_DIR}/{saved.png.name}", "svg": f"{FIGURES_DIR}/{saved.svg.name}",
            "data_uri": "data:image/png;base64," + base64.b64encode(saved.png.read_bytes()).decode("ascii")}


def _save_all(drawn, fig_dir: Path, prefix: str) -> dict[str, dict]:
    """name -> figure entry of the figures that were drawn (None: nothing to draw)."""
    return {name: _figure(plots.save(fig, fig_dir, f"{prefix}-{name}", caption))
            for name, caption, fig in drawn if fig is not None}


def config_group(config: str, p: pd.DataFrame, r: pd.DataFrame, runs: pd.DataFrame, baseline: str,
                 fig_dir: Path, prefix: str, failed: pd.DataFrame | None = None) -> dict:
    """Everything the templates show of one config: findings, then sections of tables and figures. A config whose
    every point was left out (mixed_batch_note) has no point: its section still says why, its findings with it.
    `failed`: the config's runs that ended without figures (failed_of_config)."""
    device, mode = runs["device"].iloc[0], runs["scaling"].iloc[0]  # keys of the config: one value over its runs
    unit = scaling.rank_unit(device)
    mode = mode if isinstance(mode, str) else "strong"  # one point of a run without a mode: drawn as strong
    colors = plots.runtime_colors(list(p["runtime"]) + list(r["runtime"]), baseline)
    # a runtime whose point at the smallest count was left out (mixed_batch_note, mixed_nodes_note) ran there, ok
    shown = runs.drop(scaling.mixed_batches(runs).index.union(scaling.mixed_nodes(runs).index))
    dropped = runs.drop(shown.index)
    left_out = set(dropped.loc[dropped["world_size"] == p["world_size"].min(), "runtime"]) if not p.empty else set()
    with plt.rc_context(plots.STYLE):
        figs = {} if p.empty else _save_all(plots.scaling_figures(p, r, colors, baseline, config, unit, mode,
                                                                  left_out) +
                                            plots_why.why_figures(p, colors, config, unit), fig_dir, prefix)
    pick = lambda *names: [figs[n] for n in names if n in figs]  # noqa: E731
    has = lambda frame, cols: frame[list(cols)].notna().any().any()  # noqa: E731
    wants = {"startup": scaling.STARTUP_PHASES, "step": [f"step_{k}" for k in SPLIT],
             "busbw": [f"busbw_{c}_gbps" for c in COLLECTIVES]}
    measured = {**{name: has(p, cols) for name, cols in wants.items()},
                "network": has(runs, ["net", "nccl_transports", "net_over_sockets", "net_unverified"])}
    # "Not recorded" means by no run: what only a left-out point (mixed_batch_note) recorded has no section, yet was
    recorded = {**measured, **{name: has(runs, cols) for name, cols in wants.items()}}
    mixed = mixed_batch_note(runs, unit) + mixed_nodes_note(runs, unit)
    # no point left: the note says why, and neither what a table's cells are nor a "None." in its place
    summary = (tables.summary_note(p, unit, mode) + rebased_note(p, runs, failed, unit, mode) + mixed
               + mixed_val_files_note(shown, unit) + mixed_horizons_note(shown, unit)
               + weak_accumulation_note(shown, unit, mode))
    sections = [{"title": None, "note": mixed.strip() if p.empty else summary,
                 "table": None if p.empty else tables.summary_table(p, unit, mode),
                 "figures": pick("per_gpu", "speedup", "throughput", "efficiency", "mfu")}]
    notes = [n for n in (no_baseline_note(p, baseline, unit, runs, failed), unlike_batch_note(runs, baseline, unit),
                         unlike_nodes_note(runs, baseline, unit), no_ci_note(r, baseline, unit)) if n]
    unpaired = " ".join(notes) or None
    if not r.empty or unpaired:  # runtimes with no baseline beside them say so, never a silent lack of ratios
        sections.append({"title": f"Steady-state throughput relative to {baseline}",
                         "note": tables.ratio_note(unpaired) if not r.empty else unpaired,
                         # no ratio at all: the note says why, and a "None." under it would say it again
                         "table": tables.ratio_table(r, unit) if not r.empty else None, "figures": pick("ratio")})
    if measured["startup"]:
        sections.append({"title": "Start-up phases (seconds, median over repeats)",
                         "note": f"{tables.NOT_MEASURED}: not measured; its time is in the next measured phase."
                                 + skew_note(runs),
                         "table": tables.phase_table(p, unit), "figures": pick("startup")})
    if measured["step"]:
        sections.append({"title": "Steady step split (ms per step, median over repeats; share of the step)",
                         "table": tables.split_table(p, unit), "figures": pick("step")})
    if measured["busbw"]:
        one_rank = "busbw is 0 on one rank by nccl-tests' definition (nothing crosses a link). " \
            if (p["world_size"] == 1).any() else ""
        sections.append({"title": "Pre-flight bus bandwidth beside throughput (medians over repeats)",
                         "note": one_rank + "busbw at the largest buffer of the pre-flight, as nccl-tests defines it "
                                            "(algbw x 2(n-1)/n for all-reduce, x (n-1)/n for the others).",
                         "table": tables.busbw_table(p, unit), "figures": pick("busbw")})
    if measured["network"]:
        sections.append({"title": "Network path of each run", "table": tables.network_table(runs, unit),
                         "figures": []})
    missing = [SECTION_NEEDS[name] for name, found in recorded.items() if not found]
    return {"config": config, "sections": sections, "not_recorded": missing,
            "findings": findings.config_findings(runs, p, r, baseline, unit, mode),
            "not_compared": bool(unpaired or mixed)}  # so "no gap" is never said of comparisons not made


def no_baseline_note(points: pd.DataFrame, baseline: str, unit: str,
                     runs: pd.DataFrame | None = None, failed: pd.DataFrame | None = None) -> str | None:
    """Where other runtimes ran at rank counts the baseline did not: no ratio is taken there, and the note says so
    (None where every other runtime's point has the baseline's beside it). Runs that name no runtime are left out,
    as from the ratios (scaling.compared): they were run under none that --baseline could name. `runs`: the
    config's runs, where a baseline point left out of `points` (mixed_batch_note, mixed_nodes_note) still ran;
    `failed`: its runs that ended without figures (failed_of_config), so a baseline that ran there and failed is
    said to have failed, not to have no run."""
    named = scaling.compared(points, baseline)
    # a left-out baseline point did run: "no run" would contradict the unlike notes, which say why no ratio is taken
    base = named if runs is None else scaling.compared(runs, baseline)
    ran = lambda frame, is_base: set(frame.loc[(frame["runtime"] == baseline) == is_base, "world_size"])  # noqa: E731
    missing = sorted(ran(named, False) - ran(base, True))
    if not missing:
        return None
    tried = failed[failed["runtime"] == baseline] if failed is not None else points.iloc[:0]
    said = []
    if never := [n for n in missing if n not in set(tried["world_size"])]:
        said.append(f"No {baseline} run at {_counts(never, unit)}: no ratio there (--baseline names another runtime to "
                    "compare with).")
    for n in [n for n in missing if n not in never]:
        ended = tried.loc[tried["world_size"] == n, "status"].value_counts().sort_index()
        said.append(f"{baseline} ran at {scaling.count(n, unit)}, but none of its runs there ended ok "
                    f"({', '.join(f'{k} {status}' for status, k in ended.items())}; see Failed runs): no ratio there.")
    return " ".join(said)


def rebased_note(points: pd.DataFrame, runs: pd.DataFrame, failed: pd.DataFrame | None, unit: str,
                 mode: str) -> str:
    """Where no point is left at the config's smallest rank counts, every run there failed or its point was left out
    (mixed_batch_note, mixed_nodes_note): speedup and efficiency are relative to the next count (scaling_table's n0),
    whose efficiency then reads 100%, and the note says so, naming how those runs ended or whose points were left out
    ("" where no count below n0 ran). `runs`: the config's usable runs, those below n0 being of left-out points."""
    if points.empty:
        return ""
    failed = runs.iloc[:0] if failed is None else failed
    n0 = points["world_size"].min()
    below = lambda frame: set(frame.loc[frame["world_size"] < n0, "world_size"])  # noqa: E731
    counts = sorted(below(failed) | below(runs))
    if not counts:
        return ""
    failed_only, said = [], []
    for n in counts:
        left = sorted(set(runs.loc[runs["world_size"] == n, "runtime"]))
        at = failed[(failed["world_size"] == n) & ~failed["runtime"].isin(left)]  # a left-out point's runtime ran ok
        by = [(runtime, r["status"].value_counts().sort_index()) for runtime, r in at.groupby("runtime")]
        ended = "; ".join(f"{runtime} " + ", ".join(f"{k} {status}" for status, k in c.items()) for runtime, c in by)
        failed_only.append(f"{scaling.count(n, unit)} ({ended})")
        parts = [f"the points of {', '.join(left)} are left out (below)" if len(left) > 1 else
                 f"the point of {left[0]} is left out (below)"] if left else []
        if by:
            parts.append(f"no run of {', '.join(runtime for runtime, _ in by)} ended ok ({ended}; see Failed runs)")
        said.append(f"at {scaling.count(n, unit)} {' and '.join(parts)}")
    what = "Efficiency is" if mode == "weak" else "Speedup and efficiency are"
    if runs["world_size"].lt(n0).any():  # a left-out point's runs ended ok: n0 is the smallest count with a point
        return f" {what} relative to {scaling.count(n0, unit)}, the smallest count with a point in the table: " \
               f"{'; '.join(said)}."
    return (f" {what} relative to {scaling.count(n0, unit)}, the smallest count with a run that ended ok: no run at "
            f"{' or '.join(failed_only)} did; see Failed runs.")


def failed_of_config(failed: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of `failed` (with_config's rows of runs that ended without figures) of the config of `runs`: those of
    one of its comparison keys, compared as with_config compares them, not by label (labels depend on the rows)."""
    keys = lambda df: [tuple(k) for k in df[list(scaling.GROUP_KEYS)].astype(object)  # noqa: E731
                       .where(df[list(scaling.GROUP_KEYS)].notna(), None).itertuples(index=False)]
    mine = set(keys(runs))
    return failed[pd.Series([k in mine for k in keys(failed)], index=failed.index, dtype=bool)]


def no_ci_note(ratios: pd.DataFrame, baseline: str, unit: str) -> str | None:
    """Where a runtime's ratio to the baseline is a gap findings would weigh (RATIO_GAP or more) but has no CI:
    no finding can be drawn from it, and the note says so, lest Findings read as the runtimes found alike."""
    gaps = ratios[(ratios["ratio"] - 1).abs() >= findings.RATIO_GAP]
    why = [scaling.no_ci(r["runs"], r["baseline_runs"], r["ci_low"]) for r in gaps.to_dict("records")]
    said = [f"{runtime} at {', '.join(map(str, g['world_size']))} {unit} is {100 * findings.RATIO_GAP:g}% or more "
            f"from {baseline} with no 95% CI ({reason})"
            for (runtime, reason), g in gaps.assign(_why=why).dropna(subset=["_why"]).groupby(
                ["runtime", "_why"], sort=False)]
    return f"{'; '.join(said)}: no finding is drawn from that gap." if said else None


def _unlike(runs: pd.DataFrame, baseline: str, differ, said_of) -> list[str]:
    """`said_of(world, runtime, mine, theirs)` for each runtime's point where `differ` finds its runs and the
    baseline's at that rank count unlike (no ratio is taken there)."""
    named = scaling.compared(runs, baseline)
    base = named[named["runtime"] == baseline]
    said = []
    for (world, runtime), r in named[named["runtime"] != baseline].groupby(["world_size", "runtime"]):
        at = base[base["world_size"] == world]
        if not at.empty and (unlike := differ(r, at)):
            said.append(said_of(world, runtime, *unlike))
    return said


def unlike_batch_note(runs: pd.DataFrame, baseline: str, unit: str) -> str | None:
    """Where a runtime ran another device batch than the baseline at one rank count: no ratio is taken there
    (scaling.device_batches), and the note says so (None where every such point agrees)."""
    said = _unlike(runs, baseline, scaling.device_batches, lambda world, runtime, mine, theirs: (
        f"{runtime} at {scaling.count(world, unit)} ran device batch {', '.join(map(str, mine))}, "
        f"{baseline} {', '.join(map(str, theirs))}"))
    return (f"{'; '.join(said)}: no ratio there (another gradient accumulation, so a ratio would time that, "
            "not the runtime).") if said else None


def _not_ok(ended: pd.DataFrame) -> str:
    """'3 failed', or '3 not ok (2 cancelled, 1 failed)' where a cancelled, hung or timed-out run is among them: a
    run stopped by scancel or the time limit did not fail."""
    by = ended["status"].value_counts().sort_index()
    if set(by.index) <= {"failed"}:
        return f"{len(ended)} failed"
    return f"{len(ended)} not ok ({', '.join(f'{n} {status}' for status, n in by.items())})"


def _counts(counts: list, unit: str) -> str:
    """'1 node', '2 nodes', '1, 2 nodes', '2, unknown nodes', '8, 16 GPUs': counts in `unit` (given in the plural),
    e.g. the node counts of scaling.recorded(runs, "nodes")."""
    one = len(counts) == 1 and counts != ["unknown"]
    return scaling.count(counts[0], unit) if one else f"{', '.join(map(str, counts))} {unit}"


def unlike_nodes_note(runs: pd.DataFrame, baseline: str, unit: str) -> str | None:
    """Where a runtime's runs or the baseline's at one rank count ran on other node counts: no ratio is taken there
    (scaling.unlike_nodes), and the note says so (None where every such point agrees)."""
    said = _unlike(runs, baseline, scaling.unlike_nodes, lambda world, runtime, mine, theirs: (
        f"{runtime} at {scaling.count(world, unit)} ran on {_counts(mine, 'nodes')}, "
        f"{baseline} on {_counts(theirs, 'nodes')}"))
    return (f"{'; '.join(said)}: no ratio there (within a node against across nodes, so a ratio would time the "
            "network between them, not the runtime).") if said else None


def _mixed_note(runs: pd.DataFrame, unit: str, column: str, ran, consequence: str) -> str:
    """' bare at 8 GPUs ran device batch 16, 32: <consequence>' for each runtime and rank count whose runs differ in
    `column` (scaling.mixed), `ran` saying the values of one; "" where there is none."""
    said = [f"{runtime} at {scaling.count(world, unit)} {ran(scaling.recorded(r, column))}"
            for (runtime, world), r in scaling.mixed(runs, column).groupby(["runtime", "world_size"])]
    return f" {'; '.join(said)}: {consequence}" if said else ""


def _listed(what: str):
    return lambda values: f"{what} {', '.join(map(str, values))}"


def mixed_nodes_note(runs: pd.DataFrame, unit: str) -> str:
    """Where one runtime's runs at one rank count ran on different node counts: that point is left out of the table
    and figures (scaling.mixed_nodes), and the note says so ("" where there is none)."""
    return _mixed_note(runs, unit, "nodes", lambda counts: f"ran on {_counts(counts, 'nodes')}",
                       "not repeats of one point (within a node and across nodes), so that point is left out of the "
                       "table and figures.")


def mixed_batch_note(runs: pd.DataFrame, unit: str) -> str:
    """Where one runtime's runs at one rank count ran different device batches: that point is left out of the table
    and figures (scaling.mixed_batches), and the note says so ("" where there is none)."""
    return _mixed_note(runs, unit, "device_batch_size", _listed("ran device batch"),
                       "not repeats of one point (another gradient accumulation each), so that point is left out of "
                       "the table and figures.")


def mixed_val_files_note(runs: pd.DataFrame, unit: str) -> str:
    """Where one runtime's runs at one rank count validated on different NANOCHAT_VAL_FILES_K: that point has no min
    val bpb (scaling_table's val_sets), and the note says so ("" where there is none)."""
    return _mixed_note(runs, unit, "val_files_k", _listed("validated on NANOCHAT_VAL_FILES_K"),
                       "val bpb of other validation shards, so that point has no min val bpb.")


def mixed_horizons_note(runs: pd.DataFrame, unit: str) -> str:
    """Where one runtime's runs at one rank count were set to train for different step counts: that point has no min
    val bpb (scaling_table's horizons), and the note says so ("" where there is none)."""
    return _mixed_note(runs, unit, "num_iterations", _listed("trained for num_iterations"),
                       "val bpb after other training horizons, so that point has no min val bpb.")


def weak_accumulation_note(runs: pd.DataFrame, unit: str, mode: str) -> str:
    """Where a weak curve's points ran another device batch x gradient accumulation than most of its rank counts (the
    plan lowers the device batch for a site's limit or the memory model, scaling.batch_key keeps the point on its
    curve): the note names them against the usual split ("" where there is none, or in strong scaling)."""
    if mode != "weak" or runs.empty:
        return ""
    rows = []
    for world, batch, total, seq in zip(runs["world_size"], runs["device_batch_size"], runs["total_batch_size"],
                                        runs["max_seq_len"]):
        sequences = scaling.rank_step_sequences(total, seq, world)  # what batch_key keeps the point's curve by
        if sequences and pd.notna(batch) and int(batch) > 0 and sequences % int(batch) == 0:
            rows.append((int(world), int(batch), sequences // int(batch)))
    splits = pd.DataFrame(rows, columns=["world_size", "batch", "accum"]).drop_duplicates()
    if splits.empty:
        return ""
    # the split of the most rank counts; at a tie the larger device batch, the one the plan lowers from
    usual = max(splits.groupby(["batch", "accum"]).size().items(), key=lambda kv: (kv[1], kv[0]))[0]
    other = splits[[(b, a) != usual for b, a in zip(splits["batch"], splits["accum"])]]
    said = []
    for (batch, acc), g in sorted(other.groupby(["batch", "accum"]), key=lambda kv: kv[1]["world_size"].min()):
        said.append(f"at {_counts(sorted(g['world_size']), unit)} the device batch was {batch} x accumulation {acc}")
    if not said:
        return ""
    why = ("smaller micro-batches can cost throughput, so part of an efficiency drop there may be that"
           if (other["batch"] < usual[0]).all() else "a micro-batch of another size changes throughput, so part of "
                                                      "an efficiency change there may be that")
    return (f" A{'; '.join(said)[1:]}, elsewhere {usual[0]} x {usual[1]} (the same sequences per rank and step): "
            f"{why}, not the network or the runtime.")


def skew_note(runs: pd.DataFrame) -> str:
    """What the phase table says of runs whose phases came out negative (clock_skew)."""
    skewed = runs[runs["clock_skew"].notna()]
    if skewed.empty:
        return ""
    first = skewed.iloc[0]
    return (f" Clock skew: in {len(skewed)} run(s) a phase measured from the batch host's clock to rank 0's node's "
            f"came out negative, so those phases, start-up s and launch to 1st step are unknown "
            f"({tables.NOT_MEASURED}) there (run {first['run_id']}: {first['clock_skew']}).")


def write_report(table: pd.DataFrame, out_dir: str | os.PathLike, baseline: str = scaling.BASELINE_RUNTIME,
                 title: str = "nanochat-bench report", source: str = "") -> Path:
    """Write report.md, report.html and figures/ under out_dir; returns the HTML report's path."""
    out_dir = Path(out_dir)
    refuse_foreign_figures(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        # Figures are drawn into a fresh folder that then replaces figures/, so none of an older report stays.
        fig_dir = Path(tempfile.mkdtemp(dir=out_dir, prefix=f".{FIGURES_DIR}."))
        fig_dir.chmod(0o755)  # mkdtemp makes it private; a report folder is meant to be shared
    except OSError as e:  # a file in the way, no permission: said before anything is drawn
        raise AnalysisError(f"{out_dir}: the report cannot be written there: {os_reason(e)}") from None
    try:
        context = report_context(table, baseline, title, source, fig_dir)
        md_env = jinja2.Environment(autoescape=False, keep_trailing_newline=True)
        md_env.filters["md_table"] = md_table
        md_env.filters["md_code"] = templates.md_code
        html_env = jinja2.Environment(autoescape=True)
        texts = {REPORT_MD: md_env.from_string(templates.MARKDOWN).render(**context),
                 REPORT_HTML: html_env.from_string(templates.HTML).render(**context)}
        publish(out_dir, fig_dir, texts)
    except OSError as e:  # a disk that fills: the older report stays whole
        raise AnalysisError(f"{out_dir}: the report could not be written ({os_reason(e)}); "
                            f"what was there is kept") from None
    finally:
        shutil.rmtree(fig_dir, ignore_errors=True)  # drawn, but an error came before it replaced figures/
    return out_dir / REPORT_HTML


def refuse_foreign_figures(out_dir: str | os.PathLike) -> None:
    """An AnalysisError naming what out_dir/figures/ holds that no report wrote (REPORT_FIGURE): the new figures
    replace the whole folder, so those files would be lost with it. Nothing where it holds only a report's."""
    figures = Path(out_dir) / FIGURES_DIR
    try:
        foreign = sorted(e.name for e in os.scandir(figures)
                         if not (REPORT_FIGURE.fullmatch(e.name) and e.is_file(follow_symlinks=False)))
    except (FileNotFoundError, NotADirectoryError):
        return  # no folder to replace; a file in the way is said where the report is written
    except OSError as e:
        raise AnalysisError(f"{figures}: cannot be read: {os_reason(e)}; the report would replace it") from None
    if foreign:
        listed = ", ".join(foreign) if len(foreign) <= 4 else f"{', '.join(foreign[:3])} … ({len(foreign)} entries)"
        raise AnalysisError(f"{figures} holds what no report wrote ({listed}), and a report replaces that folder "
                            f"whole: move them out of it, or give the report another --out")


def publish(out_dir: Path, fig_dir: Path, texts: dict[str, str]) -> None:
    """Both reports are written in full beside the old ones before figures/ and they are swapped in: a disk that
    fills on the way leaves the older report whole, its figures with it."""
    with atomic_target(out_dir / REPORT_MD) as md, atomic_target(out_dir / REPORT_HTML) as html:
        for tmp, name in ((md, REPORT_MD), (html, REPORT_HTML)):
            write_synced(tmp, texts[name])
        figures = out_dir / FIGURES_DIR
        older = fig_dir.with_name(fig_dir.name + ".older")  # set aside until the new figures are in place
        if figures.exists():
            os.replace(figures, older)
        try:
            os.replace(fig_dir, figures)
        except OSError:
            if older.exists():
                os.replace(older, figures)
            raise
        shutil.rmtree(older, ignore_errors=True)


def report_context(table: pd.DataFrame, baseline: str, title: str, source: str, fig_dir: Path) -> dict:
    """What the templates show, the figures drawn into fig_dir on the way."""
    order = lambda col: col.map(lambda r: (r != baseline, r)) if col.name == "runtime" else col  # noqa: E731
    points = scaling.scaling_table(table).sort_values(["config", "runtime", "world_size"], key=order)
    ratios = scaling.runtime_ratios(table, baseline).sort_values(["config", "runtime", "world_size"])
    runs = scaling.with_config(scaling.usable(table)).sort_values(["config", "runtime", "world_size", "run_id"],
                                                                   key=order)
    used = table["skip_reason"].isna()
    copy = is_copy(table)  # a second directory of one run: skipped as a copy, never a second failure
    live = table["status"].isin(LIVE_STATUSES) & ~copy
    failed = ~used & ~live & ~copy & table["status"].isin([s for s in FINAL_STATUSES if s != "ok"])
    ended = scaling.with_config(table[failed])  # a baseline that failed at a rank count did run there
    # Per config of the usable runs, not of the points: a config whose every point mixes device batches has none.
    groups = [config_group(config, points[points["config"] == config], ratios[ratios["config"] == config], g,
                           baseline, fig_dir, f"{i + 1:02d}-{_slug(config)}", failed_of_config(ended, g))
              for i, (config, g) in enumerate(runs.groupby("config", sort=True))]
    pairs = sidebyside.side_by_side(table)
    kept = scaling.kept_apart(table)

    skipped = ~used & ~live & ~failed
    run_tables = [{"title": "Failed runs", "table": runs_table(table[failed], "message")},
                  {"title": "Runs not finished", "table": runs_table(table[live], "skip_reason")},
                  {"title": "Runs skipped (unreadable or incomplete)",
                   "table": runs_table(table[skipped], "skip_reason")}]
    counts = {"total": len(table), "usable": int(used.sum()), "failed": _not_ok(table[failed]), "live": int(live.sum()),
              "skipped": int(skipped.sum())}
    return {"title": title, "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "source": source, "counts": counts, "methods": [*METHODS, row_versions(table)], "groups": groups,
            "baseline": baseline, "run_tables": run_tables, "not_measured": tables.NOT_MEASURED,
            "kept_apart": tables.kept_apart_table(kept) if not kept.empty else None, "kept_note": KEPT_APART,
            "side_by_side": sidebyside.side_by_side_table(pairs) if not pairs.empty else None,
            "stages": stages.stage_sections(table)}


def row_versions(table: pd.DataFrame) -> str:
    """Which row version the table's rows are, and what an older one means for the report; a copy of a run's row
    is not counted, as the report does not use it."""
    versions = table.loc[~is_copy(table), "row_version"].dropna().astype(int)
    older = versions[versions < ROW_VERSION]
    text = f"Table rows of row version {ROW_VERSION} (bench/analysis/collect.py ROW_VERSION)"
    if older.empty:
        return text + "."
    return (f"{text}, {len(older)} of an older one ({', '.join(map(str, sorted(older.unique())))}): those are read "
            "as they were collected, and columns added since (the model's identity among them) are unknown for "
            "them, so they are kept apart from newer runs of the same config; collect again to recompute them.")


def load_or_collect(table_or_root: str | os.PathLike, out_dir: str | os.PathLike) -> pd.DataFrame:
    """A table file (or a directory holding one) as is; a directory of runs is collected into out_dir."""
    path = Path(table_or_root)
    if path.is_file() or (path.is_dir() and any((path / n).exists() for n in ("runs.parquet", "runs.csv"))):
        return load_table(path)
    return collect_root(path, out_dir)


def collect_root(root: str | os.PathLike, out_dir: str | os.PathLike) -> pd.DataFrame:
    """The runs under root, collected into out_dir's table. That table keeps the rows of other roots collected
    into it before (collect is incremental); they are no runs of this root, nor copies of its runs."""
    rows = collect([root], out_dir).rows
    return one_row_per_run(rows[rows["root"] == display_root(Path(root))].reset_index(drop=True))


def summarize_runs(root: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Collect the runs under root into out_dir (runs.parquet, runs.csv) and report them; the HTML path."""
    return write_report(collect_root(root, out_dir), out_dir, source=str(Path(root).resolve()))
