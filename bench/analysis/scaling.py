"""Scaling maths over the table: like-for-like groups, speedup and efficiency, runtime ratios with CIs.

Comparisons are made only between runs of the same workload config (GROUP_KEYS), and only with usable
rows (status ok, steady-state figures present). Repeats of one point are summarised by their median.
The key holds what was trained as well as how (the catalogue's "model" keys: parameters, vocabulary, FLOPs
per token, precision, the data's origin and tokenizer, NNTile's tiles): runs that differ there are never
repeats, and `kept_apart` lists the groups that would otherwise look like one config.

A config is one curve. Its batch key depends on the scaling mode (DESIGN.md, scaling rules): in weak
scaling each rank keeps device batch x sequence and `total_batch_size` grows with the ranks, so the
key is the per-rank work; in strong scaling the total is what stays fixed (a sweep may lower the
device batch where the ranks grow, bench/nanochat/config.py fit_batch), so the key is the total.
Runs recorded before a field existed are read with the only value it could have had then (LEGACY).

Ratio of a runtime to the baseline (bare metal) at one rank count: the ratio of geometric means of the
runs' steady-state tok/s, with a 95% confidence interval from Welch's t-interval on the difference of
mean log tok/s (unequal variances, Welch-Satterthwaite degrees of freedom), exponentiated. Logs make
the interval multiplicative, as ratios are. With fewer than two runs on either side there is no CI, nor
where each side's repeats are all identical: bit-identical figures come from copied run directories or a
figure fixed by construction, and a zero-width interval would claim a certainty no repeats can give.
"""

import math
import warnings
from collections import Counter

import numpy as np
import pandas as pd
from scipy.stats import ttest_ind

from bench import breakdown, workloads
from bench.analysis import columns

# Another attention kernel, memory strategy, model or data is another program to measure: never pooled.
# The keys are the catalogue's (bench/analysis/columns.py) and two derived here (batch_key, device_name):
# the device batch size is no key of a strong curve and the total is none of a weak one (see the
# module's docstring).
GROUP_KEYS = (*columns.KEYS, "batch", "device")
# Fields added to the run contract after runs were recorded: before `--scaling` the launcher knew only
# strong scaling (issue 18), before `--strategy` only nanochat's sharded optimizers (zero2, issue 17),
# the model's width was always 64 x depth, and before `--fused_kernels` compile made every kernel. Only for
# nanochat's trainer: NNTile has none of these.
LEGACY = {"scaling": "strong", "strategy": "zero2", "aspect_ratio": 64, "fused_kernels": ""}  # "": no kernel
LEGACY_METHOD = ("Runs recorded before a field existed are read with the only value there was then: "
                 "strong scaling, strategy zero2, aspect ratio 64, no fused kernels (nanochat's trainer). "
                 "Runs that recorded --fused_kernels as true (before the flag took names) used rotary_norm alone.")
CPU = "CPU"
BASELINE_RUNTIME = "bare"
UNKNOWN_RUNTIME = "unknown"  # a run that names none (this trainer's console log): no runtime to compare with
CI_LEVEL = 0.95
CI_METHOD = (
    "Ratio = geometric mean of a runtime's steady-state tok/s over repeats / that of the baseline at the "
    "same rank count and config; 95% CI = Welch t-interval on the difference of mean log tok/s, "
    "exponentiated (no CI with fewer than 2 repeats on either side, nor where each side's repeats are all "
    "identical: copied runs or a figure that cannot vary, not certainty)."
)
# What a ratio and its CI are, said beside each ratio table and figure: the point tables show medians instead
RATIO_STAT, CI_STAT = "geometric means over repeats", "Welch t on log tok/s"
NO_CI_FEW = "under 2 runs a side"  # why a ratio has no CI (no_ci)
NO_CI_IDENTICAL = "repeats identical"
STARTUP_PHASES = tuple(f"phase_{m}_s" for m in breakdown.MILESTONES[1:breakdown.MILESTONES.index("first_step") + 1])
POINT_FIGURES = {name: how for name, how in columns.AGGREGATES.items() if name != "total_batch_size"}


def usable(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose figures may be compared: read cleanly, status ok, steady-state throughput known."""
    return df[df["skip_reason"].isna() & df["tok_per_sec"].notna() & df["world_size"].notna()]


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def device_name(gpu_name, gpus_per_node, device_type=None) -> str | None:
    """The device a run trained on: the GPU's name, CPU for a run without GPUs (or trained with
    --device_type=cpu: under Slurm gpus_per_node counts its ranks), None when not recorded."""
    if not _missing(gpu_name):
        return str(gpu_name)
    no_gpus = not _missing(gpus_per_node) and int(gpus_per_node) == 0
    if no_gpus or (not _missing(device_type) and device_type == "cpu"):
        return CPU
    return None


def rank_unit(device) -> str:
    """What one rank is, for axes and headers: a GPU where the device is one, else a rank."""
    return "ranks" if _missing(device) or device == CPU else "GPUs"


def count(n, unit: str) -> str:
    """'1 GPU', '8 GPUs', '2 ranks', '1 node': a number of GPUs, ranks or nodes (unit given in the plural)."""
    n = int(n)
    return f"{n} {unit[:-1] if n == 1 else unit}"


def nodes_text(nodes) -> str:
    """'1 node', '2 nodes', or 'nodes 1,2' for runs of several node counts (an upstream log records no node
    count: 'nodes not recorded')."""
    if _missing(nodes):
        return "nodes not recorded"
    return count(nodes, "nodes") if str(nodes).isdigit() else f"nodes {nodes}"


def rank_step_sequences(total_batch_size, max_seq_len, world_size) -> int | None:
    """The sequences each rank trains on per optimizer step (device batch x gradient accumulation), from the total
    batch; None where a field is not recorded or the total is no whole number of sequences per rank."""
    if _missing(total_batch_size) or _missing(max_seq_len) or _missing(world_size):
        return None
    per_rank, left = divmod(int(total_batch_size), int(world_size) * int(max_seq_len))
    return per_rank if per_rank and not left else None


def batch_key(scaling, total_batch_size, device_batch_size, max_seq_len, world_size=None) -> str | None:
    """The batch that stays fixed along a curve: per rank and optimizer step in weak scaling ('32x2048':
    sequences x sequence length), in total otherwise ('524288')."""
    if scaling == "weak":
        if _missing(device_batch_size) or _missing(max_seq_len):
            return None
        # the plan may lower a weak point's device batch with accumulation making up the rest (a site's limit,
        # the memory model): the rank's work per step is the same, so the point stays on its curve
        sequences = rank_step_sequences(total_batch_size, max_seq_len, world_size) or int(device_batch_size)
        return f"{sequences}x{int(max_seq_len)}"
    return None if _missing(total_batch_size) else str(int(total_batch_size))


def _batch_label(scaling, batch) -> str:
    if _missing(batch):
        return f"{scaling} scaling"
    if scaling == "weak":
        dbs, seq = batch.split("x")
        return f"weak scaling, {int(dbs)} x {int(seq):,} tokens per rank"
    return ("" if _missing(scaling) else f"{scaling} scaling, ") + f"batch {int(batch):,}"


def config_label(row) -> str:
    """A short human label of a workload config, parts joined by ' · ' (figure titles break only there),
    e.g. 'nanochat-base d20 · seq 2048 · strong scaling, batch 524,288 · zero2 · NVIDIA H200'."""
    parts = [str(row.get("workload") or "?")]
    if not _missing(row.get("depth")):
        parts[0] += f" d{int(row['depth'])}"
    if not _missing(row.get("aspect_ratio")) and int(row["aspect_ratio"]) != LEGACY["aspect_ratio"]:
        parts[0] += f" (aspect {int(row['aspect_ratio'])})"
    if not _missing(row.get("max_seq_len")):
        parts.append(f"seq {int(row['max_seq_len'])}")
    if not (_missing(row.get("scaling")) and _missing(row.get("batch"))):
        parts.append(_batch_label(row.get("scaling"), row.get("batch")))
    if not _missing(row.get("strategy")):
        parts.append(str(row["strategy"]))
    parts.append(str(row.get("device") or "device not recorded"))
    if not _missing(row.get("force_flash_sdpa")):
        parts.append(f"forced flash SDPA: {'yes' if str(row['force_flash_sdpa']) == 'True' else 'no'}")
    if not _missing(row.get("sdpa_backends")) and row["sdpa_backends"]:
        parts.append(f"SDPA kernels: {row['sdpa_backends']}")
    if not _missing(row.get("fused_kernels")) and row["fused_kernels"]:
        parts.append("fused: " + str(row["fused_kernels"]).replace(",", ", "))
    return " · ".join(parts)


def identity_text(key: str, value) -> str:
    """One field of a model's identity as the report writes it, e.g. 'vocab 65,536', '17.2M params'."""
    if _missing(value):
        return f"{columns.header(key)} not recorded"
    if key == "num_params":
        return f"{_human_count(float(value))} params"
    if key == "vocab_size":
        return f"vocab {int(value):,}"
    if key == "device_batch_size":
        return f"device batch {int(value)}"
    if key == "flops_per_token":
        return f"{float(value):.4g} FLOPs/token"
    if key == "tokenizer_sha256":
        return f"tokenizer {str(value)[:12]}"
    if key == "data_origin":
        return f"{value} data"
    return f"{columns.header(key)} {value}"


def _human_count(n: float) -> str:
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:g}"


def _exact(value) -> str:
    """A key's value as recorded: 17,240,000 for a whole float, else as it is."""
    return f"{value:,.0f}" if isinstance(value, float) and value.is_integer() else str(value)


def _labels(keys: set[tuple]) -> dict[tuple, str]:
    """A label per distinct key: the config's, and where several keys share it (runs of different models,
    precision or data), the fields that tell them apart appended, so that no two groups share a label."""
    base = {k: config_label(dict(zip(GROUP_KEYS, k, strict=True))) for k in keys}
    labels, uses = dict(base), Counter(base.values())
    for label in [v for v, n in uses.items() if n > 1]:
        same = [k for k in keys if base[k] == label]
        differ = [i for i, name in enumerate(GROUP_KEYS) if len({k[i] for k in same}) > 1]
        for k in same:
            labels[k] = label + " · " + ", ".join(identity_text(GROUP_KEYS[i], k[i]) for i in differ)
        # the short form can round two values alike (17.21M and 17.24M params): then as recorded, never one group
        if len({labels[k] for k in same}) < len(same):
            for k in same:
                exact = (f"{columns.header(GROUP_KEYS[i])} {_exact(k[i])}" for i in differ)
                labels[k] = label + " · " + ", ".join(exact)
    return labels


def with_legacy(df: pd.DataFrame) -> pd.DataFrame:
    """The rows with LEGACY's values where nanochat's runs predate a field, as the report and check read them."""
    df = df.copy()
    nanochat = df["workload"].map(lambda w: workloads.family(w) == "nanochat").astype(bool)
    for col, value in LEGACY.items():
        filled = df[col].astype(object).where(df[col].notna() | ~nanochat, value)
        df[col] = filled.where(filled.notna(), None)  # None, not pd.NA: the keys are compared as plain values
    return df


def with_config(df: pd.DataFrame) -> pd.DataFrame:
    """The rows with the derived keys (LEGACY values filled for nanochat, `batch`, `device`), a `config`
    column (the label of their GROUP_KEYS values; nulls are a value too) and `config_base`, the label
    without what tells different models apart."""
    df = with_legacy(df)
    df["device"] = [device_name(g, p, d) for g, p, d in zip(df["gpu_name"], df["gpus_per_node"], df["device_type"])]
    df["batch"] = [batch_key(*k) for k in zip(df["scaling"], df["total_batch_size"], df["device_batch_size"],
                                             df["max_seq_len"], df["world_size"])]
    keys = df[list(GROUP_KEYS)].astype(object).where(df[list(GROUP_KEYS)].notna(), None)
    rows = [tuple(k) for k in keys.itertuples(index=False)]
    labels = _labels(set(rows))
    df["config"] = [labels[k] for k in rows]
    df["config_base"] = [config_label(dict(zip(GROUP_KEYS, k, strict=True))) for k in rows]
    df["runtime"] = df["runtime"].fillna(UNKNOWN_RUNTIME)
    return df


def kept_apart(df: pd.DataFrame) -> pd.DataFrame:
    """Usable runs that look alike (same config label) but trained another model, precision or data, so
    they are separate groups, not repeats: one row per group with its runs and the fields that differ."""
    ok = with_config(usable(df))
    rows = []
    for base, g in ok.groupby("config_base", sort=True):
        if g["config"].nunique() < 2:
            continue
        differ = [k for k in GROUP_KEYS if g[k].astype(object).map(str).nunique() > 1]
        for config, c in g.groupby("config", sort=True):  # what the label adds to its base tells the group apart
            rows.append({"config_base": base, "config": config, "runs": len(c), "differs": ", ".join(differ),
                         "values": config[len(base + " · "):]})
    return pd.DataFrame(rows, columns=["config_base", "config", "runs", "differs", "values"])


def phase_label(column: str) -> str:
    """The human name of a phase column (phase_<milestone>_s)."""
    return breakdown.LABELS[column[len("phase_"):-len("_s")]]


def _node_counts(nodes: pd.Series) -> str | None:
    """The node count of one point, e.g. "2" (its runs ran on one: mixed_nodes); None when no run recorded one (a
    table's '–')."""
    return ",".join(map(str, sorted(nodes.dropna().unique()))) or None


POINT_COLUMNS = ["config", "runtime", "world_size", "runs", "tok_per_sec_min", "tok_per_sec_max", "nodes",
                 "scaling", "device", "workload", "depth", "max_seq_len", "total_batch_size", *POINT_FIGURES,
                 "ideal_tok_per_sec", "speedup", "efficiency"]


def scaling_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (config, runtime, world_size): repeats, median figures, speedup and efficiency.

    Speedup S(n) = T(n) / T(n0) and parallel efficiency E(n) = S(n) * n0 / n, with T the median tok/s and
    n0 the smallest rank count measured for the config; ideal T(n) = T(n0) * n / n0. In weak scaling E(n) is
    the per-rank tok/s over the smallest point's, and the ideal per-rank tok/s is flat. A runtime without a
    run at n0 has none of the three: from its own smallest point it would read 100% there, however slow. A count
    whose runs all failed is no n0 (report.rebased_note says so beside the table).
    A point whose runs differ in device batch (mixed_batches) or node count (mixed_nodes) is left out; one whose runs
    validated on different shards (NANOCHAT_VAL_FILES_K: the last K shards are the validation split, and the planner
    picks K per rank count) or trained for different step counts (num_iterations: the learning rate decays over the
    horizon) has no min val bpb, a minimum over them being of none (val_sets, horizons); its speed is still of repeats.
    """
    ok = with_config(usable(df))
    ok = ok.drop(mixed_batches(ok).index.union(mixed_nodes(ok).index))
    if ok.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    agg = {col: (col, how) for col, how in POINT_FIGURES.items()}
    first = {col: (col, "first") for col in ("scaling", "device", "workload", "depth", "max_seq_len")}
    points = (ok.groupby(["config", "runtime", "world_size"], observed=True, dropna=False)
              .agg(runs=("source", "size"), tok_per_sec_min=("tok_per_sec", "min"),
                   tok_per_sec_max=("tok_per_sec", "max"), nodes=("nodes", _node_counts),
                   total_batch_size=("total_batch_size", columns.AGGREGATES["total_batch_size"]), **first, **agg,
                   val_sets=("val_files_k", settings), horizons=("num_iterations", settings))
              .reset_index())
    points["min_val_bpb"] = points["min_val_bpb"].where((points["val_sets"] < 2) & (points["horizons"] < 2))
    points["world_size"] = points["world_size"].astype(int)
    points = points.sort_values(["config", "runtime", "world_size"]).reset_index(drop=True)
    base = points.groupby("config")["world_size"].transform("min")
    base_tps = points["tok_per_sec"].where(points["world_size"] == base)
    base_tps = base_tps.groupby([points["config"], points["runtime"]]).transform("first")  # NaN: not run at n0
    points["ideal_tok_per_sec"] = base_tps * points["world_size"] / base
    points["speedup"] = points["tok_per_sec"] / base_tps
    points["efficiency"] = points["speedup"] * base / points["world_size"]
    return points[POINT_COLUMNS]


def mixed_batches(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of points (config, runtime, rank count) whose runs differ in device batch. A strong curve keeps only
    its total (the device batch is no key), so each is another gradient accumulation, not a repeat of the others:
    scaling_table leaves the point out rather than take a median across them; a run that recorded none is one more
    setting (settings)."""
    return mixed(runs, "device_batch_size")


def mixed_nodes(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of points (config, runtime, rank count) whose runs ran on different node counts: 2 ranks on one node
    talk within it, on two over the network between them, so neither is a repeat of the other and scaling_table leaves
    the point out rather than take a median across them; a run that recorded none is one more setting (settings)."""
    return mixed(runs, "nodes")


def mixed(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """The runs of points (config, runtime, rank count) whose runs differ in `column` (settings)."""
    return runs[runs.groupby(["config", "runtime", "world_size"], dropna=False)[column].transform(settings) > 1]


def settings(values: pd.Series) -> int:
    """How many settings a column's values name, a value not recorded counting as one of its own: a run that recorded
    no device batch may have run another, so it is never taken as a repeat of one that did (mixed_batches, and
    check's pooled columns). Not astype(str), whose NaN is "nan" under pandas 2 and NaN, so dropped, under 3."""
    return values.map(lambda v: None if _missing(v) else str(v)).nunique(dropna=False)


def ratio_ci(x, base, level: float = CI_LEVEL) -> tuple[float, float, float]:
    """(ratio, low, high) of geometric means of x over base; low/high NaN without 2+ values each side or
    where each side's values are all identical (no_ci says which)."""
    lx, lb = np.log(np.asarray(x, float)), np.log(np.asarray(base, float))
    if len(lx) == 0 or len(lb) == 0:
        return math.nan, math.nan, math.nan
    d = lx.mean() - lb.mean()
    if len(lx) < 2 or len(lb) < 2:
        return math.exp(d), math.nan, math.nan
    if lx.var() == 0 and lb.var() == 0:  # no spread to estimate one from: no interval, never a zero-wide one
        return math.exp(d), math.nan, math.nan
    with warnings.catch_warnings():
        # One side's repeats identical: scipy warns "Results may be unreliable" while the interval is exact (the
        # other side's variance and n-1 degrees of freedom alone); said on stderr, the warning misled readers.
        warnings.filterwarnings("ignore", message="Precision loss occurred in moment calculation")
        ci = ttest_ind(lx, lb, equal_var=False).confidence_interval(confidence_level=level)
    return math.exp(d), math.exp(ci.low), math.exp(ci.high)


def no_ci(runs, baseline_runs, ci_low) -> str | None:
    """Why a ratio of runtime_ratios has no CI (NO_CI_FEW or NO_CI_IDENTICAL), None where it has one."""
    if not _missing(ci_low):
        return None
    return NO_CI_FEW if min(runs, baseline_runs) < 2 else NO_CI_IDENTICAL


def compared(df: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The rows a ratio to the baseline is taken of: runs that name no runtime (UNKNOWN_RUNTIME) ran under none that
    is known, so a ratio of theirs, either way, compares with nothing known; they are left out, and --baseline
    refuses to name them."""
    return df[df["runtime"] != UNKNOWN_RUNTIME]


def recorded(runs: pd.DataFrame, column: str) -> list:
    """The whole-number values of `column` the runs recorded (device batch, nodes, K, num_iterations), sorted, once
    each, then "unknown" where a run recorded none."""
    known = runs[column].dropna()
    return sorted(set(known.astype(int))) + (["unknown"] if len(known) < len(runs) else [])


def unlike_nodes(runs: pd.DataFrame, baseline_runs: pd.DataFrame) -> tuple[list, list] | None:
    """The node counts of a runtime's runs and of the baseline's at one point where they are not all one, else None:
    a ratio of runs within one node to runs across nodes would time the network between them, not the runtime."""
    mine, theirs = recorded(runs, "nodes"), recorded(baseline_runs, "nodes")
    return (mine, theirs) if len({*mine, *theirs}) > 1 else None


def device_batches(runs: pd.DataFrame, baseline_runs: pd.DataFrame) -> tuple[list, list] | None:
    """The device batch sizes of a runtime's runs and of the baseline's at one point where they are not all one, else
    None. A strong curve keeps only its total (the device batch is no key), so at one rank count another device
    batch is another gradient accumulation: a ratio would time that, not the runtime. No ratio is taken there."""
    mine, theirs = recorded(runs, "device_batch_size"), recorded(baseline_runs, "device_batch_size")
    return (mine, theirs) if len({*mine, *theirs}) > 1 else None


def runtime_ratios(df: pd.DataFrame, baseline: str = BASELINE_RUNTIME) -> pd.DataFrame:
    """Each runtime's steady-state tok/s relative to the baseline runtime, per config and rank count (runs that
    name no runtime only where they are the baseline: compared; none where device batches or node counts differ:
    device_batches, unlike_nodes)."""
    ok = compared(with_config(usable(df)), baseline)
    rows = []
    for (config, world), g in ok.groupby(["config", "world_size"]):
        base = g.loc[g["runtime"] == baseline, "tok_per_sec"].dropna()
        base = base[base > 0]
        if base.empty:
            continue
        for runtime, r in g[g["runtime"] != baseline].groupby("runtime"):
            if device_batches(r, g[g["runtime"] == baseline]) or unlike_nodes(r, g[g["runtime"] == baseline]):
                continue
            x = r["tok_per_sec"].dropna()
            x = x[x > 0]
            if x.empty:
                continue
            ratio, low, high = ratio_ci(x, base)
            rows.append({"config": config, "world_size": int(world), "runtime": runtime, "runs": len(x),
                         "baseline_runs": len(base), "ratio": ratio, "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows, columns=["config", "world_size", "runtime", "runs", "baseline_runs",
                                       "ratio", "ci_low", "ci_high"])
