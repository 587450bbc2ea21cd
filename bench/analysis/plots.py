"""Figures of one workload config, drawn with matplotlib and saved as PNG and SVG.

Made to be read on a slide: 16:9, large type, a title that says what is compared, units on the axes,
GPU counts on a log2 axis, one colour per runtime kept the same in every figure.
Each function takes the tables of bench/analysis/scaling.py (already restricted to one config) and
returns a matplotlib Figure, or None when there is nothing to draw; `save` writes it.
"""

import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on compute or CI nodes
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator  # noqa: E402

STYLE = {"figure.figsize": (10, 5.6), "font.size": 13, "axes.titlesize": 15, "axes.labelsize": 13,
         "legend.fontsize": 11, "axes.grid": True, "grid.alpha": 0.3,
         "figure.constrained_layout.use": True}  # lays out during the draw: no extra pass as bbox="tight" needs
PNG_DPI = 130


@dataclass
class SavedFigure:
    name: str
    title: str
    png: Path
    svg: Path


def runtime_colors(runtimes, baseline: str) -> dict[str, str]:
    """A fixed colour per runtime, the baseline first, so figures agree with each other."""
    ordered = sorted(set(runtimes), key=lambda r: (r != baseline, r))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {r: cycle[i % len(cycle)] for i, r in enumerate(ordered)}


def _gpu_axis(ax, counts) -> None:
    counts = sorted({int(c) for c in counts})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(round(v))}"))
    if len(counts) == 1:
        ax.set_xlim(counts[0] / 1.5, counts[0] * 1.5)
    ax.set_xlabel("GPUs (log2 scale)")


def _human(v, _=None) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def throughput(points: pd.DataFrame, colors: dict, baseline: str, config: str):
    """Steady-state tok/s against GPUs per runtime (median, range of repeats), with ideal scaling."""
    if points.empty:
        return None
    fig, ax = plt.subplots()
    ideal_from = baseline if baseline in set(points["runtime"]) else points["runtime"].iloc[0]
    for runtime, p in points.groupby("runtime", sort=False):
        yerr = np.vstack([p["tok_per_sec"] - p["tok_per_sec_min"], p["tok_per_sec_max"] - p["tok_per_sec"]])
        ax.errorbar(p["world_size"], p["tok_per_sec"], yerr=yerr, marker="o", capsize=4, lw=2,
                    color=colors[runtime], label=runtime)
        if runtime == ideal_from and len(p) > 1:
            ax.plot(p["world_size"], p["ideal_tok_per_sec"], ls="--", color="grey", lw=1.5,
                    label=f"ideal (linear from {runtime} at {int(p['world_size'].min())} GPUs)")
    _gpu_axis(ax, points["world_size"])
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(_human))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("throughput (tokens/s, all GPUs)")
    ax.set_title(f"Training throughput vs GPUs\n{_wrap(config)}")
    ax.legend(loc="upper left")
    return fig


def efficiency(points: pd.DataFrame, colors: dict, config: str):
    """Parallel efficiency S(n) * n0 / n per runtime, in percent, against GPUs."""
    if points.empty or points["world_size"].nunique() < 2:
        return None
    fig, ax = plt.subplots()
    for runtime, p in points.groupby("runtime", sort=False):
        ax.plot(p["world_size"], 100 * p["efficiency"], marker="o", lw=2, color=colors[runtime], label=runtime)
    ax.axhline(100, ls="--", color="grey", lw=1.5, label="ideal")
    _gpu_axis(ax, points["world_size"])
    low = float(100 * points["efficiency"].min())
    ax.set_ylim(max(0.0, 10 * ((low - 10) // 10)), max(105.0, float(100 * points["efficiency"].max()) + 5))
    ax.set_ylabel("parallel efficiency (%)")
    ax.set_title(f"Parallel efficiency vs GPUs (relative to each runtime's smallest run)\n{_wrap(config)}")
    ax.legend(loc="lower left")
    return fig


def mfu(points: pd.DataFrame, colors: dict, config: str):
    """Model FLOPs utilisation per runtime against GPUs (only where a GPU peak was known)."""
    p_all = points.dropna(subset=["mfu"])
    if p_all.empty:
        return None
    fig, ax = plt.subplots()
    for runtime, p in p_all.groupby("runtime", sort=False):
        ax.plot(p["world_size"], p["mfu"], marker="o", lw=2, color=colors[runtime], label=runtime)
    _gpu_axis(ax, p_all["world_size"])
    ax.set_ylim(0, max(10.0, float(p_all["mfu"].max()) * 1.2))
    ax.set_ylabel("MFU (% of peak dense bf16)")
    ax.set_title(f"Model FLOPs utilisation vs GPUs\n{_wrap(config)}")
    ax.legend(loc="best")
    return fig


def startup(points: pd.DataFrame, colors: dict, config: str):
    """Launch to first step per runtime and GPU count: start-up overhead, then time to first step."""
    cols = ["startup_overhead_s", "time_to_first_step_s"]
    p_all = points.dropna(subset=cols, how="all")
    if p_all.empty:
        return None
    counts = sorted(p_all["world_size"].unique())
    runtimes = list(dict.fromkeys(p_all["runtime"]))
    width = 0.8 / len(runtimes)
    fig, ax = plt.subplots()
    for i, runtime in enumerate(runtimes):
        p = p_all[p_all["runtime"] == runtime].set_index("world_size").reindex(counts)
        x = np.arange(len(counts)) + (i - (len(runtimes) - 1) / 2) * width
        over = p["startup_overhead_s"].fillna(0).to_numpy(float)
        first = p["time_to_first_step_s"].fillna(0).to_numpy(float)
        ax.bar(x, over, width, color=colors[runtime], edgecolor="black", lw=0.5)
        ax.bar(x, first, width, bottom=over, color=colors[runtime], alpha=0.45, hatch="//",
               edgecolor="black", lw=0.5)
    ax.set_xticks(np.arange(len(counts)), [str(int(c)) for c in counts])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("seconds (median over repeats)")
    ax.set_title(f"Start-up: launch → trainer start (solid) → first step (hatched)\n{_wrap(config)}")
    handles = [Patch(color=colors[r], label=r) for r in runtimes]
    handles += [Patch(facecolor="white", edgecolor="black", label="start-up overhead (start − T0)"),
                Patch(facecolor="white", edgecolor="black", hatch="//", label="time to first step")]
    top = float((p_all["startup_overhead_s"].fillna(0) + p_all["time_to_first_step_s"].fillna(0)).max())
    ax.set_ylim(0, top * 1.45)  # headroom so the legend sits above the bars
    ax.legend(handles=handles, loc="upper center", ncol=3)
    ax.grid(axis="x", visible=False)
    return fig


def ratios(ratio_table: pd.DataFrame, colors: dict, baseline: str, config: str):
    """Steady-state tok/s of each runtime relative to the baseline, with 95% CIs, against GPUs."""
    if ratio_table.empty:
        return None
    fig, ax = plt.subplots()
    runtimes = list(dict.fromkeys(ratio_table["runtime"]))
    for i, runtime in enumerate(runtimes):
        r = ratio_table[ratio_table["runtime"] == runtime]
        # nudge runtimes apart along the log axis so their intervals do not hide each other
        x = r["world_size"] * 2 ** ((i - (len(runtimes) - 1) / 2) * 0.06)
        low = (r["ratio"] - r["ci_low"]).fillna(0).clip(lower=0)
        high = (r["ci_high"] - r["ratio"]).fillna(0).clip(lower=0)
        ax.errorbar(x, r["ratio"], yerr=np.vstack([low, high]), marker="o", capsize=5, lw=0, elinewidth=2,
                    ms=8, color=colors[runtime], label=runtime)
    ax.axhline(1.0, ls="--", color="grey", lw=1.5, label=f"{baseline} (= 1)")
    _gpu_axis(ax, ratio_table["world_size"])
    lo = min(0.9, float(ratio_table[["ratio", "ci_low"]].min().min()) - 0.02)
    hi = max(1.05, float(ratio_table[["ratio", "ci_high"]].max().max()) + 0.02)
    ax.set_ylim(lo, hi)
    ax.set_ylabel(f"tok/s relative to {baseline}")
    ax.set_title(f"Steady-state throughput relative to {baseline} (95% CI over repeats)\n{_wrap(config)}")
    ax.legend(loc="best")
    return fig


def _wrap(config: str, width: int = 80) -> str:
    """A config label over as many lines as it needs to fit the figure's width."""
    return "\n".join(textwrap.wrap(config, width))


def save(fig, out_dir: Path, name: str, title: str) -> SavedFigure:
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    fig.savefig(png, dpi=PNG_DPI)
    fig.savefig(svg)
    plt.close(fig)
    return SavedFigure(name, title, png, svg)


def config_figures(points: pd.DataFrame, ratio_table: pd.DataFrame, baseline: str, config: str,
                   out_dir: Path, prefix: str) -> list[SavedFigure]:
    """All figures of one config that have data, saved under out_dir with names starting with prefix."""
    colors = runtime_colors(list(points["runtime"]) + list(ratio_table["runtime"]), baseline)
    made = []
    with plt.rc_context(STYLE):
        for name, title, fig in (
            ("throughput", "Throughput vs GPUs", throughput(points, colors, baseline, config)),
            ("efficiency", "Parallel efficiency", efficiency(points, colors, config)),
            ("mfu", "MFU", mfu(points, colors, config)),
            ("startup", "Start-up time", startup(points, colors, config)),
            ("ratio", f"Ratio to {baseline}", ratios(ratio_table, colors, baseline, config)),
        ):
            if fig is not None:
                made.append(save(fig, out_dir, f"{prefix}-{name}", title))
    return made
