"""Scaling figures of one workload config, drawn with matplotlib and saved as PNG and SVG.

Made to be read on a slide: 16:9, large type, a title that says what is compared (its first line
short, the config's label below it broken only between its ' · ' parts), units on the axes, rank
counts on a log2 axis labelled GPUs or ranks (CPU runs have no GPUs), one colour per runtime kept the
same in every figure, and runtimes nudged apart along the axis so that none hides another, except where
the curve rises with the ranks (speedup, strong throughput): there a shift along x reads as a gap to the
ideal line, so the points stay at their rank count and runtimes differ by marker shape as well.
The story is the gap to ideal, so it is drawn where it can be seen: weak scaling shows tok/s per GPU
against the flat ideal and its efficiency; strong scaling shows speedup against the diagonal with
each point's efficiency written beside it, the throughput itself against its ideal, and the efficiency on
an axis zoomed to the data. Error bars say what they are in the legend and the caption: min–max over
repeats on throughput, the 95% CI on ratios (a point of one run, or a ratio without a CI, is hollow and named
so); a figure of medians without bars says that in its legend.
Each function takes the tables of bench/analysis/scaling.py (already restricted to one config) and
returns a matplotlib Figure, or None when there is nothing to draw; `save` writes it. The figures of
a run's time (start-up phases, step split, pre-flight bandwidth) are in plots_why.py.
"""

import itertools
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on compute or CI nodes
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, Locator, MaxNLocator, NullLocator  # noqa: E402

from bench.analysis.scaling import CI_STAT, RATIO_STAT, count, no_ci  # noqa: E402

STYLE = {"figure.figsize": (10, 5.6), "font.size": 13, "axes.titlesize": 15, "axes.labelsize": 13,
         "legend.fontsize": 11, "axes.grid": True, "grid.alpha": 0.3,
         "figure.constrained_layout.use": True,  # lays out during the draw: no extra pass as bbox="tight" needs
         # a browser sets SVG text a little wider than matplotlib measures it: pad the edges
         "figure.constrained_layout.w_pad": 0.08, "figure.constrained_layout.h_pad": 0.06,
         "svg.fonttype": "none"}  # SVG text stays text (searchable, and about twice as fast as glyph paths)
PNG_DPI = 130
TITLE_WIDTH = 78  # characters of the config label per title line at axes.titlesize 15 on a 10-inch figure
NUDGE = 0.05  # log2 units between runtimes at one rank count: apart, yet read as the same count
MARKERS = ("o", "s", "^", "D", "v", "P")  # where points are not nudged apart, shapes tell coinciding ones apart
ANNOTATE_MAX_RUNTIMES = 3  # more labelled points than this per figure stop being readable
SPREAD_BARS = "bars: min–max over repeats"  # what a throughput figure's error bars are
ONE_RUN = "one run, no spread"  # a throughput point without a bar
CI_BARS = "bars: 95% CI over repeats"
NO_BARS = "medians over repeats, no bars"  # a figure without error bars says so too


@dataclass
class SavedFigure:
    title: str
    png: Path
    svg: Path


def runtime_colors(runtimes, baseline: str) -> dict[str, str]:
    """A fixed colour per runtime, the baseline first, so figures agree with each other."""
    ordered = sorted(set(runtimes), key=lambda r: (r != baseline, r))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {r: cycle[i % len(cycle)] for i, r in enumerate(ordered)}


def wrap_label(config: str, width: int = TITLE_WIDTH) -> str:
    """The config label over as many lines as it needs, broken only between its ' · ' parts."""
    lines, line = [], ""
    for part in config.split(" · "):
        candidate = f"{line} · {part}" if line else part
        if line and len(candidate) > width:
            lines.append(line)
            candidate = part
        line = candidate
    return "\n".join([*lines, line])


def title(ax, what: str, config: str) -> None:
    ax.set_title(f"{what}\n{wrap_label(config)}")


def rank_axis(ax, counts, unit: str) -> None:
    """Rank counts on a log2 axis, one tick per count measured, labelled GPUs or ranks."""
    counts = sorted({int(c) for c in counts})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(round(v))}"))
    lo, hi = counts[0], counts[-1]
    ax.set_xlim(lo / 2 ** 0.4, hi * 2 ** 0.4)  # room for the nudged runtimes at both ends
    ax.set_xlabel(f"{unit} (log2 scale)")


def by_runtime(points: pd.DataFrame, nudge: float = NUDGE):
    """(runtime, its rows, their x positions) of each runtime in order; the x of the i-th of n runtimes is
    shifted along the log2 axis by `nudge` steps so that markers do not overlap."""
    runtimes = list(dict.fromkeys(points["runtime"]))
    for i, runtime in enumerate(runtimes):
        p = points[points["runtime"] == runtime]
        yield runtime, p, np.asarray(p["world_size"], float) * 2 ** ((i - (len(runtimes) - 1) / 2) * nudge)


def rising(points: pd.DataFrame):
    """by_runtime for a curve that rises with the ranks, plus each runtime's marker: no nudge, since on a
    log-log line of slope 1 a runtime shifted left sits above the ideal line (superlinear to the eye)."""
    for i, (runtime, p, x) in enumerate(by_runtime(points, nudge=0.0)):
        yield runtime, p, x, MARKERS[i % len(MARKERS)]


def label_points(ax, labels: list[tuple[int, float, float, str, str]], gap_pt: float = 14.0) -> None:
    """Write (rank count, x, y, text, colour) labels beside their points, those of one rank count in a
    column right of its rightmost point, spread apart vertically so none covers another. Call after the
    limits are set: positions are worked out in display space."""
    by_count: dict[int, list] = {}
    for n, x, y, text, color in labels:
        by_count.setdefault(n, []).append((x, y, text, color))
    to_pt = 72.0 / ax.figure.dpi
    for group in by_count.values():
        right = ax.transData.transform((max(x for x, *_ in group), 1.0))[0] * to_pt
        placed: list[float] = []
        for x, y, text, color in sorted(group, key=lambda g: -g[1]):  # top to bottom, gap_pt apart at least
            px, py = ax.transData.transform((x, y)) * to_pt
            target = min(py, placed[-1] - gap_pt) if placed else py
            placed.append(target)
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(right - px + 8, target - py),
                        fontsize=10, color=color, va="center")


def _human(v, _=None) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


class RoundLogLocator(Locator):
    """Ticks of a log axis at round numbers, 3 to 8 in view where a span allows (1-2-5 a decade; every decade where
    that gives too many, every n-th past eight decades; 1-2-3-5, every digit or every half digit where too few; evenly
    spaced ones in a span under a digit): a log2 axis's own ticks, powers of two, read '524.288k' or '1.04858M', and
    the tok/s of no point can be read off them; 500k and 1M alone over 230k to 1M left the smallest points as far
    from a label as that."""

    def __call__(self):
        return self.tick_values(*self.axis.get_view_interval())

    def tick_values(self, vmin, vmax):
        vmin, vmax = sorted((max(float(vmin), 1e-300), float(vmax)))
        decades = range(int(np.floor(np.log10(vmin))), int(np.ceil(np.log10(vmax))) + 1)
        at = lambda subs: [s * 10.0 ** k for k in decades for s in subs if vmin <= s * 10.0 ** k <= vmax]  # noqa: E731
        if len(at((1, 2, 5))) > 8:
            # past eight decades every one crowds the axis: every n-th, on multiples of n so that they stay evenly apart
            powers = [k for k in decades if vmin <= 10.0 ** k <= vmax]
            step = next(n for n in itertools.count(1) if sum(k % n == 0 for k in powers) <= 8)
            return [10.0 ** k for k in powers if k % step == 0]
        # where 1-2-3-5 gives under 3, nine digits cannot be in view, so every digit gives 8 at most, halves 5 at most
        for subs in ((1, 2, 5), (1, 2, 3, 5), range(1, 10), [h / 2 for h in range(2, 20)]):
            if len(ticks := at(subs)) >= 3:
                return ticks
        return ticks if len(ticks) >= 2 else MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin, vmax)


def round_log_axis(ax, which: str, base: float = 10) -> None:
    """A log axis of `ax` ("x" or "y") ticked at round numbers (RoundLogLocator), without minor ticks."""
    getattr(ax, f"set_{which}scale")("log", base=base)
    axis = getattr(ax, f"{which}axis")
    axis.set_major_locator(RoundLogLocator())
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(_human))


def _ideal_source(points: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The points of the runtime the ideal is drawn from: one run at the config's smallest rank count, as speedup
    and efficiency are (a runtime not run there has no ideal), the baseline where it was."""
    at_n0 = points.loc[points["world_size"] == points["world_size"].min(), "runtime"]
    runtime = baseline if baseline in set(at_n0) else at_n0.iloc[0]
    return points[points["runtime"] == runtime]


def _throughput_bars(points: pd.DataFrame, colors: dict, per_rank: bool):
    """A figure of each runtime's median tok/s (per rank, or in all) against ranks, bars min–max over repeats. A
    point of one run has no spread: a hollow marker named so in the legend, never a bar that looks zero-wide (so
    where the curve rises and shapes coincide, a point with a bar is filled see-through rather than hollow)."""
    fig, ax = plt.subplots()
    # per rank the curve is flat and the runtimes are nudged apart; in all it rises with the ranks
    drawn = ((r, p, x, "o") for r, p, x in by_runtime(points)) if per_rank else rising(points)
    for runtime, p, x, marker in drawn:
        n = p["world_size"].to_numpy(float) if per_rank else 1
        y = p["tok_per_sec"].to_numpy(float) / n
        one = p["runs"].to_numpy() < 2
        yerr = np.vstack([y - p["tok_per_sec_min"] / n, p["tok_per_sec_max"] / n - y])
        yerr[:, one] = np.nan  # no bar, no caps
        fill = None if per_rank else to_rgba(colors[runtime], 0.35)
        ax.errorbar(x, y, yerr=yerr, marker=marker, markevery=list(np.flatnonzero(~one)), mfc=fill, ms=8, mew=2,
                    capsize=4, lw=2, color=colors[runtime], label=f"_{runtime}" if one.all() else runtime)
        if one.any():
            ax.plot(x[one], y[one], ls="none", marker=marker, mfc="none", ms=8, mew=2, color=colors[runtime],
                    label=f"{runtime}: {ONE_RUN}")
    return fig, ax


def per_gpu(points: pd.DataFrame, colors: dict, baseline: str, config: str, unit: str):
    """Weak scaling: steady tok/s per GPU (rank) against ranks, each runtime with its spread over
    repeats, and the ideal: flat at the smallest point's value."""
    if points.empty or points["world_size"].nunique() < 2:
        return None
    per = unit[:-1]  # "GPU" or "rank"
    fig, ax = _throughput_bars(points, colors, per_rank=True)
    src = _ideal_source(points, baseline)
    first = src.iloc[0]
    ax.axhline(first["tok_per_sec"] / first["world_size"], ls="--", color="grey", lw=1.5,
               label=f"ideal: flat at {first['runtime']}'s {count(first['world_size'], unit)}")
    rank_axis(ax, points["world_size"], unit)
    ax.yaxis.set_major_formatter(FuncFormatter(_human))
    ax.set_ylabel(f"tokens/s per {per} (axis zoomed)")
    title(ax, f"Weak scaling: throughput per {per} vs {unit}", config)
    ax.legend(loc="best", title=SPREAD_BARS)
    return fig


def throughput(points: pd.DataFrame, colors: dict, baseline: str, config: str, unit: str):
    """Strong scaling: steady tok/s itself against ranks (the speedup hides how fast), each runtime with its
    spread over repeats, and the ideal: the smallest point's tok/s times the ranks."""
    if points.empty or points["world_size"].nunique() < 2:
        return None
    fig, ax = _throughput_bars(points, colors, per_rank=False)
    src = _ideal_source(points, baseline)
    ax.plot(src["world_size"], src["ideal_tok_per_sec"], ls="--", color="grey", lw=1.5,
            label=f"ideal: linear from {src['runtime'].iloc[0]}'s {count(src['world_size'].iloc[0], unit)}")
    rank_axis(ax, points["world_size"], unit)
    round_log_axis(ax, "y", base=2)
    ax.set_ylabel("tokens/s (log2)")
    title(ax, f"Strong scaling: throughput vs {unit}", config)
    ax.legend(loc="upper left", title=SPREAD_BARS)
    return fig


def speedup(points: pd.DataFrame, colors: dict, config: str, unit: str, left_out=()):
    """Strong scaling: speedup over the smallest point against ranks, with the ideal (linear) speedup; each
    point carries its efficiency, the part of the ideal it reached (a runtime not run there has no curve; `left_out`:
    the runtimes whose point there was left out, _relative_label)."""
    if points.empty or points["world_size"].nunique() < 2:
        return None
    fig, ax = plt.subplots()
    labels, n0 = [], points["world_size"].min()
    for runtime, p, x, marker in rising(points):
        ax.plot(x, p["speedup"], marker=marker, mfc="none", ms=8, mew=2, lw=2, color=colors[runtime],
                label=_relative_label(runtime, p, n0, unit, left_out))
        labels += [(n, xi, s, f"{s:.2f}x ({100 * e:.1f}%)", colors[runtime])  # 1x at n0 by definition
                   for n, xi, s, e in zip(p["world_size"], x, p["speedup"], p["efficiency"]) if pd.notna(s) and n != n0]
    counts = np.array(sorted(points["world_size"].unique()), float)
    ax.plot(counts, counts / n0, ls="--", color="grey", lw=1.5, label=f"ideal (linear from {count(n0, unit)})")
    rank_axis(ax, points["world_size"], unit)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.set_ylabel("speedup over the smallest run (log2)")
    if points["runtime"].nunique() <= ANNOTATE_MAX_RUNTIMES:
        label_points(ax, labels)
    title(ax, f"Strong scaling: speedup vs {unit} (efficiency in brackets)", config)
    ax.legend(loc="upper left", title=NO_BARS)
    return fig


def _relative_label(runtime: str, p: pd.DataFrame, n0: int, unit: str, left_out=()) -> str:
    """A runtime's legend entry on a figure relative to the smallest point, saying why it has no curve there: its
    point there was left out (`left_out`: its runs there ran on other node counts or device batches, as the report's
    note says), else no run of it there ended ok (it may have run there and failed: the notes and Failed runs say)."""
    if p["efficiency"].notna().any():
        return runtime
    if runtime in left_out:
        return f"{runtime}: its {count(n0, unit)} point left out (see the note)"
    return f"{runtime}: no run ended ok at {count(n0, unit)}"


def efficiency(points: pd.DataFrame, colors: dict, config: str, unit: str, scaling: str, left_out=()):
    """Parallel efficiency in percent against ranks, on an axis zoomed to the data so a 1% gap shows (`left_out`:
    as speedup's)."""
    if points.empty or points["world_size"].nunique() < 2:
        return None
    fig, ax = plt.subplots()
    labels, n0 = [], points["world_size"].min()
    for runtime, p, x in by_runtime(points):
        y = 100 * p["efficiency"].to_numpy(float)
        ax.plot(x, y, marker="o", lw=2, color=colors[runtime], label=_relative_label(runtime, p, n0, unit, left_out))
        labels += [(n, xi, yi, f"{yi:.1f}%", colors[runtime])  # 100% at n0 by definition
                   for n, xi, yi in zip(p["world_size"], x, y) if pd.notna(yi) and n != n0]
    ax.axhline(100, ls="--", color="grey", lw=1.5, label="ideal (100%)")
    rank_axis(ax, points["world_size"], unit)
    eff = 100 * points["efficiency"].astype(float).dropna()  # never empty: a runtime was run at the smallest
    span = max(100.0, float(eff.max())) - float(eff.min())
    ax.set_ylim(float(eff.min()) - max(1.0, 0.25 * span), max(100.0, float(eff.max())) + max(0.5, 0.1 * span))
    per = unit[:-1]
    if scaling == "weak":
        ax.set_ylabel(f"tok/s per {per} / smallest run's (%)")
        what = f"Weak-scaling efficiency vs {unit} (ideal: flat)"
    else:
        ax.set_ylabel("speedup / ideal speedup (%)")
        what = f"Strong-scaling efficiency vs {unit}"
    if points["runtime"].nunique() <= ANNOTATE_MAX_RUNTIMES:
        label_points(ax, labels)
    title(ax, what, config)
    ax.legend(loc="lower left", title=NO_BARS)
    return fig


def mfu(points: pd.DataFrame, colors: dict, config: str, unit: str):
    """Model FLOPs utilisation per runtime against GPUs (only where a GPU peak was known; one rank count
    is a table's worth, not a figure's)."""
    p_all = points.dropna(subset=["mfu"])
    if p_all.empty or p_all["world_size"].nunique() < 2:
        return None
    fig, ax = plt.subplots()
    for runtime, p, x in by_runtime(p_all):
        ax.plot(x, p["mfu"], marker="o", lw=2, color=colors[runtime], label=runtime)
    rank_axis(ax, p_all["world_size"], unit)
    ax.set_ylim(0, max(10.0, float(p_all["mfu"].max()) * 1.2))
    ax.set_ylabel("MFU (% of peak dense bf16)")
    title(ax, f"Model FLOPs utilisation vs {unit}", config)
    ax.legend(loc="lower left", title=NO_BARS)
    return fig


def ratios(ratio_table: pd.DataFrame, colors: dict, baseline: str, config: str, unit: str):
    """Steady-state tok/s of each runtime relative to the baseline, with 95% CIs, against ranks."""
    if ratio_table.empty:
        return None
    fig, ax = plt.subplots()
    for runtime, r, x in by_runtime(ratio_table):
        # a ratio without a CI (under 2 runs a side, identical repeats) is a hollow marker named with the reason,
        # never a point whose bar looks zero-wide
        why = np.array([no_ci(*k) for k in zip(r["runs"], r["baseline_runs"], r["ci_low"])], dtype=object)
        has_ci = np.array([w is None for w in why])
        if has_ci.any():
            ci = r[has_ci]
            low = (ci["ratio"] - ci["ci_low"]).clip(lower=0)
            high = (ci["ci_high"] - ci["ratio"]).clip(lower=0)
            ax.errorbar(x[has_ci], ci["ratio"], yerr=np.vstack([low, high]), marker="o", capsize=5, lw=0,
                        elinewidth=2, ms=8, color=colors[runtime], label=runtime)
        for reason in dict.fromkeys(why[~has_ci]):
            at = why == reason
            ax.plot(x[at], r["ratio"][at], ls="none", marker="o", ms=8, mfc="none", mew=2,
                    color=colors[runtime], label=f"{runtime}: no CI ({reason})")
    ax.axhline(1.0, ls="--", color="grey", lw=1.5, label=f"{baseline} (= 1)")
    rank_axis(ax, ratio_table["world_size"], unit)
    lo = min(0.95, float(ratio_table[["ratio", "ci_low"]].min().min()) - 0.01)
    hi = max(1.03, float(ratio_table[["ratio", "ci_high"]].max().max()) + 0.01)
    ax.set_ylim(lo, hi)
    ax.set_ylabel(f"tok/s relative to {baseline}")
    title(ax, f"Throughput relative to {baseline} (95% CI over repeats)", config)
    ax.legend(loc="lower left", title=CI_BARS)
    return fig


def save(fig, out_dir: Path, name: str, title: str) -> SavedFigure:
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    fig.savefig(png, dpi=PNG_DPI)
    # The layout is in figure fractions and type in points, so the PNG's holds for the SVG: not done twice.
    fig.set_layout_engine("none")
    fig.savefig(svg)
    plt.close(fig)
    return SavedFigure(title, png, svg)


def scaling_figures(points: pd.DataFrame, ratio_table: pd.DataFrame, colors: dict, baseline: str,
                    config: str, unit: str, scaling: str, left_out=()) -> list[tuple[str, str, object]]:
    """(name, caption, figure) of one config's scaling figures, None where there is nothing to draw; `left_out`: the
    runtimes whose point at the smallest rank count was left out (speedup)."""
    bars = SPREAD_BARS + (f"; hollow: {ONE_RUN}" if (points["runs"] < 2).any() else "")
    if scaling == "weak":
        first = [("per_gpu", f"Throughput per {unit[:-1]} (weak scaling; {bars})",
                  per_gpu(points, colors, baseline, config, unit))]
    else:
        first = [("speedup", "Speedup (strong scaling)", speedup(points, colors, config, unit, left_out)),
                 ("throughput", f"Throughput (strong scaling; {bars})",
                  throughput(points, colors, baseline, config, unit))]
    return [*first,
            ("efficiency", "Parallel efficiency", efficiency(points, colors, config, unit, scaling, left_out)),
            ("mfu", "MFU", mfu(points, colors, config, unit)),
            ("ratio", f"Ratio to {baseline} of {RATIO_STAT}, not of the tables' medians ({CI_BARS}, {CI_STAT})",
             ratios(ratio_table, colors, baseline, config, unit))]
