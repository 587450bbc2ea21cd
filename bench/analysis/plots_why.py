"""Figures of where one config's time goes: start-up phases, the steady step split, pre-flight busbw.

One horizontal bar per runtime x rank count (the median over its repeats), read left to right as the
run lived it. A phase that a run did not measure is not drawn as zero: a cross in that phase's colour
marks where it would be, and its time is inside the next measured phase (bench/breakdown.py); a run
without a launch time starts at its first milestone, with crosses at 0 for the phases before it. Names are
bench/breakdown.py's LABELS. Each function returns a Figure or None when there is nothing to draw.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.collections import PolyCollection
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter
from matplotlib.transforms import offset_copy

from bench.analysis.columns import COLLECTIVES, SPLIT, SPLIT_LABELS
from bench.analysis.plots import NO_BARS, _human, by_runtime, rank_axis, wrap_label
from bench.analysis.scaling import STARTUP_PHASES, count, nodes_text, phase_label

PHASE_COLORS = plt.get_cmap("tab10").colors
COLLECTIVE_STYLES = {"all_reduce": "-", "reduce_scatter": "--", "all_gather": ":"}
BAR_HEIGHT = 0.6
ROW_INCHES = 0.4  # per bar: room for a 13-point label
CROSS_STEP_PT = 9  # crosses of phases missing in a row sit this far apart


def point_label(row, unit: str) -> str:
    """'bare · 8 GPUs (2 nodes)': a runtime at one rank count, as the y axis of a bar chart names it."""
    where = "" if pd.isna(row["nodes"]) else f" ({nodes_text(row['nodes'])})"
    return f"{row['runtime']} · {count(row['world_size'], unit)}{where}"


def _bar_figure(rows: int):
    """A figure tall enough for `rows` bars, and its axes."""
    fig, ax = plt.subplots(figsize=(10, max(3.6, 2.2 + ROW_INCHES * rows)))
    ax.grid(axis="y", visible=False)
    return fig, ax


def _stack(ax, values: pd.DataFrame, colors: dict, mark_missing: bool) -> np.ndarray:
    """Horizontal bars stacked column by column (one collection per column: fast for many rows); a
    missing value is no segment, and with mark_missing a cross in its colour where it would be, crosses
    at one place set side by side. Returns the right end of every bar."""
    y = np.arange(len(values))
    left = np.zeros(len(values))
    crossed = np.zeros(len(values), int)  # crosses since the last segment drawn, per row
    for col in values.columns:
        v = values[col].to_numpy(float)
        absent = np.isnan(v)
        width = np.where(absent, 0.0, np.clip(v, 0.0, None))  # clocks of two hosts can disagree by a few ms
        # one collection per column draws in one call: many times faster than a rectangle per bar
        boxes = [[(x0, yi - BAR_HEIGHT / 2), (x0 + w, yi - BAR_HEIGHT / 2), (x0 + w, yi + BAR_HEIGHT / 2),
                  (x0, yi + BAR_HEIGHT / 2)] for x0, w, yi in zip(left, width, y) if w > 0]
        ax.add_collection(PolyCollection(boxes, facecolors=colors[col], edgecolors="white", linewidths=0.5))
        if mark_missing and absent.any():
            for k in np.unique(crossed[absent]):
                rows = absent & (crossed == k)
                shift = offset_copy(ax.transData, fig=ax.figure, x=CROSS_STEP_PT * k, units="points")
                ax.plot(left[rows], y[rows], ls="", marker="X", ms=11, color=colors[col], mec="black", mew=0.6,
                        zorder=3, clip_on=False, transform=shift)
        crossed = np.where(absent, crossed + 1, np.where(width > 0, 0, crossed))
        left = left + width
    return left


def _rows(ax, p_all: pd.DataFrame, ends: np.ndarray, texts: list[str], unit: str, room: float) -> None:
    """Each bar's text after its end, the rows named on the y axis (first on top), room for the texts."""
    for y, (end, text) in enumerate(zip(ends, texts)):  # an offset, not leading spaces: SVG collapses those
        ax.annotate(text, (end, y), xytext=(5, 0), textcoords="offset points", va="center", fontsize=10)
    ax.set_yticks(range(len(p_all)), [point_label(r, unit) for _, r in p_all.iterrows()])
    ax.set_ylim(len(p_all) - 0.5, -0.5)  # collections do not autoscale the axes
    ax.set_xlim(0, float(ends.max()) * room or 1.0)


def startup_phases(points: pd.DataFrame, config: str, unit: str):
    """Launch -> first step per runtime x rank count, stacked by phase; unmeasured phases crossed."""
    cols = list(STARTUP_PHASES)
    p_all = points[points[cols].notna().any(axis=1)].reset_index(drop=True)
    if p_all.empty:
        return None
    fig, ax = _bar_figure(len(p_all))
    colors = {c: PHASE_COLORS[i % len(PHASE_COLORS)] for i, c in enumerate(cols)}
    ends = _stack(ax, p_all[cols], colors, mark_missing=True)
    # without a launch time (NANOCHAT_BENCH_T0) a bar starts at the run's first milestone
    no_launch = p_all["startup_overhead_s"].isna().to_numpy()
    texts = [f"{end:.1f} s" + (" from its first milestone (no launch time)" if late else "")
             for end, late in zip(ends, no_launch)]
    _rows(ax, p_all, ends, texts, unit, 1.8 if no_launch.any() else 1.18)
    # each phase's median, stacked: their sum is not the median of each run's launch to 1st step (the table's)
    ax.set_xlabel(("seconds from launch" if not no_launch.any() else "seconds from launch, or from the first "
                   "milestone") + "\nthe phases' medians stacked: their sum, not the median launch to 1st step")
    # a phase some run measured is a box; one no run measured is its cross, so every cross has its name
    handles = [Patch(color=colors[c], label=phase_label(c)) if p_all[c].notna().any() else
               Line2D([], [], marker="X", ls="", ms=10, color=colors[c], mec="black", mew=0.6,
                      label=f"{phase_label(c)}: not measured") for c in cols]
    if p_all[cols].isna().any().any():
        handles.append(Line2D([], [], marker="X", ls="", ms=10, color="lightgrey", mec="black", mew=0.6,
                              label="not measured: inside the next phase"))
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=10, frameon=False)
    fig.suptitle(f"Start-up: launch to first step, by phase\n{wrap_label(config)}", fontsize=15)
    return fig


def step_split(points: pd.DataFrame, config: str, unit: str):
    """The steady step per runtime x rank count: the parts besides forward+backward stacked (they are
    where runtimes and networks differ; forward+backward would hide them), the whole step written beside."""
    cols = [f"step_{k}" for k in SPLIT]
    p_all = points[points[cols].notna().any(axis=1)].reset_index(drop=True)
    if p_all.empty:
        return None
    fig, ax = _bar_figure(len(p_all))
    colors = {c: PHASE_COLORS[i] for i, c in enumerate(cols)}
    ends = _stack(ax, p_all[cols[1:]], colors, mark_missing=False)
    _rows(ax, p_all, ends, [f"{end:,.1f} of a {step:,.1f} ms step" for end, step in zip(ends, p_all["step_time_ms"])],
          unit, 1.9)
    ax.set_xlabel("ms per step besides forward+backward, of the whole step (medians)")
    handles = [Patch(color=colors[c], label=SPLIT_LABELS[c[len("step_"):]]) for c in cols[1:]]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=10, frameon=False)
    fig.suptitle(f"Steady step: what it spends besides forward+backward\n{wrap_label(config)}", fontsize=15)
    return fig


def busbw(points: pd.DataFrame, colors: dict, config: str, unit: str):
    """Pre-flight busbw per collective beside steady tok/s per rank, both against ranks: where the
    network slows the collectives, the throughput per rank should show it."""
    cols = [f"busbw_{c}_gbps" for c in COLLECTIVES]
    measured = points[list(cols)].fillna(0).gt(0).any(axis=1)
    if not measured.any():
        return None  # one rank only (busbw is 0 there by definition), or no pre-flight
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 5.2))
    per = unit[:-1]
    for runtime, p, x in by_runtime(points):
        for col, style in zip(cols, COLLECTIVE_STYLES.values()):
            left.plot(x, p[col], ls=style, marker="o", lw=2, color=colors[runtime])
        right.plot(x, p["tok_per_sec"] / p["world_size"], marker="o", lw=2, color=colors[runtime])
    for ax in (left, right):
        rank_axis(ax, points["world_size"], unit)
    left.set_ylim(bottom=0)
    left.set_ylabel("busbw at the largest buffer (GB/s)")
    left.set_title("pre-flight bus bandwidth", fontsize=12)
    right.yaxis.set_major_formatter(FuncFormatter(_human))
    right.set_ylabel(f"steady tokens/s per {per} (axis zoomed)")
    right.set_title(f"throughput per {per}", fontsize=12)
    handles = [Line2D([], [], color=colors[r], lw=2, label=r) for r in dict.fromkeys(points["runtime"])]
    handles += [Line2D([], [], color="black", ls=s, lw=1.5, label=c.replace("_", "-"))
                for c, s in COLLECTIVE_STYLES.items()]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=10, frameon=False,
               title=NO_BARS, title_fontsize=10)
    fig.suptitle(f"Pre-flight bandwidth beside throughput\n{wrap_label(config)}", fontsize=15)
    return fig


def why_figures(points: pd.DataFrame, colors: dict, config: str, unit: str) -> list[tuple[str, str, object]]:
    """(name, caption, figure) of one config's time figures, None where there is nothing to draw."""
    return [("startup", "Start-up phases", startup_phases(points, config, unit)),
            ("step", "Steady step split", step_split(points, config, unit)),
            ("busbw", "Pre-flight busbw beside throughput", busbw(points, colors, config, unit))]

