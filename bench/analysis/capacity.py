"""The capacity report: the largest model each memory strategy trains, its memory and its speed.

Reads the summary.json of one or more capacity sweeps (bench/capacity/sweep.py; one per GPU count, say)
and writes `capacity.md` with figures (PNG and SVG) beside it:
- the largest trainable parameter count per strategy and GPU count, with its ratio to fsdp's;
- peak memory per GPU against parameters, measured (batch 1) and predicted (bench/nanochat/memory.py),
  with the GPU's memory drawn; for offloading strategies the host memory the probe took, with the host's;
- tok/s and MFU against parameters, at batch 1 and at the best batch measured.
"""

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from bench.analysis.columns import cell, header  # noqa: E402
from bench.analysis.plots import STYLE, _human, round_log_axis, save  # noqa: E402
from bench.analysis.tables import frame_table, md_table  # noqa: E402
from bench.capacity.search import params_text  # noqa: E402
from bench.contract import write_text_atomic  # noqa: E402

REPORT_MD = "capacity.md"
GIB = 2 ** 30


def load(sweep_dirs: list[str | os.PathLike]) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """(probes, searches, machines) of the sweeps; ConfigError naming a directory without a summary or with a
    damaged one (bench/capacity/sweep.py's load_summary)."""
    from bench.capacity.sweep import load_summary, ratios_to_fsdp

    probes, searches, machines = [], [], []
    for d in sweep_dirs:
        s = load_summary(d)
        m = s["machine"]
        machines.append(m)
        machine = {"gpus": m["nproc"], "gpu_name": m.get("gpu_name") or m["device_type"]}
        # a capacity holds at its sequence length only (one --seq a sweep): two sweeps read as one without it
        seq = {p["probe"]["strategy"]: p["probe"].get("max_seq_len") for p in s["probes"]}
        for p in s["probes"]:
            probes.append({**{k: v for k, v in p.items() if k != "probe"}, **p["probe"], **machine})
        for p in s.get("not_probed", []):  # summaries before it was recorded have none
            after = p.get("after") or {}
            probes.append({**{k: v for k, v in p.items() if k != "probe"}, **p["probe"], **machine,
                           "outcome": f"{p['outcome']}: {after.get('shape')} {after.get('outcome')}"})
        for c, ratio in zip(s["searches"], ratios_to_fsdp(s["searches"])):  # not the stored one: see there
            cap, fail = c.get("capacity") or {}, c.get("first_failure") or {}
            searches.append({"strategy": c["strategy"], "aspect_ratio": c["aspect_ratio"], **machine,
                             "capacity": cap.get("name"),
                             "capacity_params": cap.get("num_params"), "ratio_to_fsdp": ratio,
                             "seq": seq.get(c["strategy"], (s.get("config") or {}).get("max_seq_len")),
                             "tok_per_sec": c.get("tok_per_sec_at_capacity"), "batch": c.get("batch_at_capacity"),
                             "first_failure": fail.get("name"), "failure_params": fail.get("num_params"),
                             "stopped": _bound(c), "probes": c.get("probes")})
    # the columns even when no search was recorded (probes only), so the report shows the probes alone
    search_columns = ["strategy", "aspect_ratio", "gpus", "gpu_name", "capacity", "capacity_params", "seq",
                      "ratio_to_fsdp", "tok_per_sec", "batch", "first_failure", "failure_params", "stopped", "probes"]
    return pd.DataFrame(probes), pd.DataFrame(searches, columns=search_columns), machines


def _bound(search: dict) -> str | None:
    """What bounds a search's capacity besides the model: its stop or its end before the border (a lower bound),
    or the memory other processes held as its first failure started (the capacity of what they left)."""
    stop, held = search.get("stopped"), search.get("held_by_others_bytes")
    if stop:
        return f"{stop['outcome']} at {stop['shape']}"
    if search.get("complete") is False:
        return "not finished"
    return f"{held / GIB:.1f} GiB held by others" if held else None


def _colors(strategies) -> dict:
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {s: cycle[i % len(cycle)] for i, s in enumerate(dict.fromkeys(strategies))}


def _params_axis(ax) -> None:
    # round numbers: matplotlib's log ticks are powers of ten, none in a sweep's span of sizes (17.6M-39.8M)
    round_log_axis(ax, "x")
    ax.set_xlabel("parameters (log scale)")


def capacity_bars(searches: pd.DataFrame, colors: dict):
    s = searches.dropna(subset=["capacity_params"])
    if s.empty:
        return None
    fig, ax = plt.subplots()
    width = lambda r: "" if r.aspect_ratio == 64 else f" a{r.aspect_ratio}"  # noqa: E731 - as the sweep's table
    labels = [f"{r.strategy}{width(r)} ({r.gpus} GPU{'s' if r.gpus > 1 else ''})" for r in s.itertuples()]
    # a bar per row, where its label is: bars of one label (two sweeps of one GPU count) would be drawn as one
    ax.barh(range(len(s)), s["capacity_params"], color=[colors[x] for x in s["strategy"]], tick_label=labels)
    for i, r in enumerate(s.itertuples()):
        ratio = f", {r.ratio_to_fsdp:.2f}x fsdp" if pd.notna(r.ratio_to_fsdp) else ""
        stopped = f" ({r.stopped})" if isinstance(r.stopped, str) else ""  # a search that did not find its border
        ax.text(r.capacity_params, i, f" {r.capacity} {params_text(r.capacity_params)}{ratio}{stopped}", va="center")
    ax.xaxis.set_major_formatter(FuncFormatter(_human))
    ax.set_xlim(0, float(s["capacity_params"].max()) * 1.45)
    ax.invert_yaxis()
    ax.set_xlabel("largest model that trained (parameters, device batch 1)")
    ax.set_title(f"Capacity per memory strategy ({', '.join(sorted(set(s['gpu_name'])))})")
    return fig


def _predicted_curve(strategy: str, probes: pd.DataFrame, key: str) -> tuple[list, list]:
    """Predicted bytes (need or host) over the family's depths around the probed ones, at batch 1."""
    from bench.nanochat import memory
    from bench.nanochat.parallel import Strategy

    try:
        Strategy.parse(strategy)
    except Exception:  # noqa: BLE001 - another workload's strategy: no model of ours
        return [], []
    p = probes.iloc[0]
    depths = range(2, int(probes["depth"].max() * 1.25) + 3, 2)
    xs, ys = [], []
    for d in depths:
        e = memory.estimate(memory.MemoryPoint(d, int(p.aspect_ratio), int(p.vocab_size), int(p.max_seq_len), 1,
                                               int(p.nproc), strategy, p.device_type))
        xs.append(e.num_params)
        ys.append((e.need_bytes if key == "need" else e.host_bytes * int(p.nproc)) / GIB)
    return xs, ys


def _per_sweep_setting(strategy: str, p: pd.DataFrame, panel: pd.DataFrame, cuda: bool) -> list[tuple]:
    """(line style, label, probes) per GPU count and sequence length of a strategy's probes: the prediction depends on
    both, so sweeps of other --gpus or --seq reported together each get their own curve, labelled where they differ."""
    settings = list(dict.fromkeys(zip(panel["nproc"], panel["max_seq_len"])))
    out = []
    for (n, seq), q in p.groupby(["nproc", "max_seq_len"], sort=False):
        ranks = f"{n} {'GPU' if cuda else 'rank'}{'s' if n > 1 else ''}"
        label = f"{strategy} predicted, {ranks}, seq {seq}" if len(settings) > 1 else "_predicted"
        out.append((("--", "-.", ":")[settings.index((n, seq)) % 3], label, q))
    return out


def _finish_panel(ax, machines: list[dict], key: str, limit: str, ylabel: str, title: str) -> None:
    """Each machine's memory limit drawn (where it recorded one), the size axis, labels and legend of one panel."""
    names = {}  # limit in GiB -> the machines of it: sweeps of an H100 and an H200 each drawn against its own
    for m in machines:
        if m.get(key):  # a limit of 0 would be a line at the axis and an axis of no height
            names.setdefault(m[key] / GIB, {}).setdefault(m.get("gpu_name") or m["device_type"])
    for i, (limit_gib, of) in enumerate(sorted(names.items())):
        machine = f"{', '.join(of)} " if len(names) > 1 else ""
        ax.axhline(limit_gib, color="black", lw=1.5, ls=("-", "--", "-.", ":")[i % 4],
                   label=f"{machine}{limit} {limit_gib:.3g} GiB")  # a CPU cap of 875M is 0.854
    if names:
        ax.set_ylim(0, max(names) * 1.5)
    _params_axis(ax)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=12)
    ax.legend(loc="upper left", fontsize=9)


def memory_figure(probes: pd.DataFrame, machines: list[dict], colors: dict):
    aspect = 64 if (probes["aspect_ratio"] == 64).any() else probes["aspect_ratio"].iloc[0]  # one family per panel
    b1 = probes[(probes["device_batch_size"] == 1) & (probes["aspect_ratio"] == aspect)]
    if b1.empty:
        return None
    cuda = any(m["device_type"] == "cuda" for m in machines)  # on CPU runs the host is the device
    offload = b1[b1["strategy"].str.contains("offload")] if cuda else b1.iloc[0:0]
    fig, axes = plt.subplots(1, 2 if not offload.empty else 1, squeeze=False)
    ax = axes[0][0]
    for strategy, p in b1.groupby("strategy", sort=False):
        ok, oom = p[p["outcome"] == "ok"], p[p["outcome"] == "oom"]  # a hang or a failure is not drawn as one
        if ok["peak_mem_mib"].notna().any():  # a CPU probe measures no peak: no legend entry for points never drawn
            ax.plot(ok["num_params"], ok["peak_mem_mib"] * 2 ** 20 / GIB, "o", color=colors[strategy], ms=8,
                    label=f"{strategy} measured")
        if oom["predicted_need_bytes"].notna().any():
            ax.plot(oom["num_params"], oom["predicted_need_bytes"] / GIB, "x", color=colors[strategy], ms=10, mew=2)
        for style, label, q in _per_sweep_setting(strategy, p, b1, cuda):
            ax.plot(*_predicted_curve(strategy, q, "need"), style, color=colors[strategy], lw=1.2, label=label)
    _finish_panel(ax, machines, "device_bytes", "device memory",
                  f"peak memory per {'GPU' if cuda else 'rank'} (GiB)",
                  "Peak memory vs size, device batch 1\n(o measured, x out of memory, -- predicted)")
    if not offload.empty:
        ax = axes[0][1]
        for strategy, p in offload.groupby("strategy", sort=False):
            ax.plot(p["num_params"], p["host_peak_bytes"] / GIB, "o", color=colors[strategy], ms=8,
                    label=f"{strategy} taken from the host")
            for style, label, q in _per_sweep_setting(strategy, p, offload, cuda):
                ax.plot(*_predicted_curve(strategy, q, "host"), style, color=colors[strategy], lw=1.2,
                        label="predicted" if label.startswith("_") else label)
        _finish_panel(ax, machines, "host_bytes", "host memory", "host memory (GiB)",
                      "Host memory of offloading strategies")
    return fig


def speed_figure(probes: pd.DataFrame, colors: dict, ranks: str = "GPUs"):
    ok = probes[probes["outcome"] == "ok"]
    if ok.empty:
        return None
    has_mfu = ok["mfu"].notna().any()
    fig, axes = plt.subplots(1, 2 if has_mfu else 1, squeeze=False)
    labels = (f"tokens/s (all {ranks})", header("mfu"))
    for col, (ax, key, label) in enumerate(zip(axes[0], ("tok_per_sec", "mfu"), labels)):
        for strategy, p in ok.groupby("strategy", sort=False):
            b1 = p[p["device_batch_size"] == 1].sort_values("num_params")
            best = p.loc[p.groupby("num_params")["tok_per_sec"].idxmax()].sort_values("num_params")
            ax.plot(b1["num_params"], b1[key], "o-", color=colors[strategy])
            ax.plot(best["num_params"], best[key], "s:", mfc="none", color=colors[strategy])
        _params_axis(ax)
        if key == "tok_per_sec":
            round_log_axis(ax, "y")
        else:
            ax.yaxis.set_major_formatter(FuncFormatter(_human))
        ax.set_ylabel(label)
        ax.set_title(("Throughput" if col == 0 else "MFU") + " vs size")
        if col == 0:
            handles = [Line2D([], [], color=colors[x], lw=2, label=x) for x in dict.fromkeys(ok["strategy"])]
            handles += [Line2D([], [], color="grey", marker="o", label="device batch 1"),
                        Line2D([], [], color="grey", marker="s", mfc="none", ls=":", label="best batch measured")]
            ax.legend(handles=handles, loc="best", fontsize=9)
    return fig


def _md_table(df: pd.DataFrame, cols: list[tuple[str, str, str]]) -> str:
    """The report's one Markdown table writer (bench/analysis/tables.py), byte counts shown in GiB or MiB."""
    unit = {"gib": GIB, "mib": 2 ** 20}
    df = df.assign(**{c: df[c] / unit[k] for _, c, k in cols if k in unit and c in df})
    cols = [(h, c, "1" if k in unit else k) for h, c, k in cols]
    text = tuple(i for i, (_, _, k) in enumerate(cols) if k == "s")
    return md_table(frame_table(df.reindex(columns=[c for _, c, _ in cols]), cols, text_cols=text))


SEARCH_COLS = [("strategy", "strategy", "s"), ("GPUs", "gpus", "int"), ("largest that trained", "capacity", "s"),
               ("parameters", "capacity_params", "int"), ("seq", "seq", "int"), ("x fsdp", "ratio_to_fsdp", "2"),
               ("tok/s there", "tok_per_sec", "int"), ("at batch", "batch", "int"),
               ("smallest that did not", "first_failure", "s"), ("its parameters", "failure_params", "int"),
               ("search stopped by", "stopped", "s"), ("probes", "probes", "int")]
PROBE_COLS = [("strategy", "strategy", "s"), ("GPUs", "gpus", "int"), ("depth", "depth", "int"),
              ("batch", "device_batch_size", "int"), ("parameters", "num_params", "int"), ("outcome", "outcome", "s"),
              ("peak MiB", "peak_mem_mib", "int"), ("predicted GiB", "predicted_need_bytes", "gib"),
              ("host GiB", "host_peak_bytes", "gib"), cell("tok_per_sec"), cell("mfu"),
              ("OOM asked MiB", "oom_bytes", "mib"), ("s", "wall_s", "int")]  # often a few MiB: 0.0 in GiB


def _per(cols: list, ranks: str) -> list:
    """The columns with the count of ranks headed as what they ran on (GPUs, or a CPU sweep's ranks)."""
    return [(ranks if h == "GPUs" else h, c, k) for h, c, k in cols]


def _machine_text(m: dict) -> str:
    # a CPU sweep on a host without /proc/meminfo records neither memory
    device = f"{m['device_bytes'] / GIB:.1f} GiB per device" if m.get("device_bytes") else "memory not recorded"
    host = f"{m['host_bytes'] / GIB:.0f} GiB" if m.get("host_bytes") else "not recorded"
    return f"{m.get('gpu_name') or m['device_type']}, {device}, host {host}"


def write_capacity_report(sweep_dirs: list[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """capacity.md and figures/ under out_dir; returns the Markdown file's path."""
    probes, searches, machines = load(sweep_dirs)
    cuda = any(m["device_type"] == "cuda" for m in machines)
    ranks = "GPUs" if cuda else "ranks"  # a CPU sweep's probes run on ranks of the host, no GPU
    out_dir = Path(out_dir)
    fig_dir = out_dir / "figures"
    colors = _colors(list(searches.get("strategy", [])) + list(probes.get("strategy", [])))
    figures = []
    with plt.rc_context(STYLE):
        if not probes.empty:
            drawn = (("capacity", "Capacity per strategy", capacity_bars(searches, colors)),
                     ("memory", "Peak memory vs size", memory_figure(probes, machines, colors)),
                     ("speed", "Throughput and MFU vs size", speed_figure(probes, colors, ranks)))
            figures = [save(fig, fig_dir, f"capacity-{name}", title) for name, title, fig in drawn if fig is not None]
    sweeps_of: dict[str, list[str]] = {}  # each machine, with its sweeps: one H100's and one H200's are two
    for d, m in zip(sweep_dirs, machines):
        sweeps_of.setdefault(_machine_text(m), []).append(str(d))
    if len(sweeps_of) == 1:
        machine_line = f"Machine: {next(iter(sweeps_of))}. Sweeps: {', '.join(str(d) for d in sweep_dirs)}."
    else:
        machine_line = "Machines: " + "; ".join(f"{m} ({', '.join(ds)})" for m, ds in sweeps_of.items()) + "."
    # two sweeps' rows of one strategy on as many GPUs would read alike: their GPU tells them apart, as seq does
    search_cols, probe_cols = (cols if len(set(rows.get("gpu_name", ()))) < 2 else
                               cols[:1] + [("machine", "gpu_name", "s")] + cols[1:]
                               for rows, cols in ((searches, SEARCH_COLS), (probes, PROBE_COLS)))
    lines = ["# Capacity: the largest model each memory strategy trains", "", machine_line, "",
             "A probe trains a few optimizer steps of one model (random tokens, no torch.compile) in its own process; "
             "it fits when every step ends with a finite loss. Capacity is the largest model that fits at device "
             "batch 1 (a search stopped or `not finished` gives a lower bound; one stopped by `GiB held by others` ran "
             "out of memory while other processes held that much of the GPU, so it found the capacity of what they "
             "left, not the node's); `x fsdp` is its parameter count over fsdp's, when both searches finished with "
             "no memory held by others. "
             "Peak memory is torch's max_memory_allocated over the steps" + ("" if cuda else
                                                                             " (on a GPU: these CPU probes have none)")
             + "; host memory is how far the host's available memory fell during the probe.", "",
             _md_table(searches, _per(search_cols, ranks)) if not searches.empty else
             "No capacity search in these sweeps.", ""]
    for f in figures:
        lines += [f"![{f.title}](figures/{f.png.name})", ""]
    lines += ["## Every probe", "", _md_table(probes, _per(probe_cols, ranks)) if not probes.empty else "None.", ""]
    write_text_atomic(out_dir / REPORT_MD, "\n".join(lines))
    return out_dir / REPORT_MD
