"""Scaling maths over the table: like-for-like groups, speedup and efficiency, runtime ratios with CIs.

Comparisons are made only between runs of the same workload config (GROUP_KEYS: same model, sequence
length, total batch and GPU), and only with usable rows (status ok, steady-state figures present).
Repeats of one point are summarised by their median.

Ratio of a runtime to the baseline (bare metal) at one GPU count: the ratio of geometric means of the
runs' steady-state tok/s, with a 95% confidence interval from Welch's t-interval on the difference of
mean log tok/s (unequal variances, Welch-Satterthwaite degrees of freedom), exponentiated. Logs make
the interval multiplicative, as ratios are. With fewer than two runs on either side there is no CI.
"""

import math

import numpy as np
import pandas as pd
from scipy.stats import ttest_ind

# Another attention kernel is another program to measure: never pooled. The device batch size is not a
# key: a sweep lowers it where ranks grow (bench/nanochat/config.py fit_batch) and the points still form one curve.
GROUP_KEYS = ("workload", "depth", "max_seq_len", "total_batch_size", "gpu_name", "force_flash_sdpa",
              "sdpa_backends")
BASELINE_RUNTIME = "bare"
CI_LEVEL = 0.95
CI_METHOD = (
    "Ratio = geometric mean of a runtime's steady-state tok/s over repeats / that of the baseline at the "
    "same GPU count and config; 95% CI = Welch t-interval on the difference of mean log tok/s, "
    "exponentiated (no CI with fewer than 2 repeats on either side)."
)
POINT_FIGURES = {  # column -> how repeats of one point are summarised
    "tok_per_sec": "median", "tok_per_sec_per_gpu": "median", "mfu": "median", "step_time_ms": "median",
    "step_time_cv": "median", "step_time_p90_ms": "median", "startup_overhead_s": "median",
    "time_to_first_step_s": "median", "peak_mem_mib": "max", "min_val_bpb": "min",
}


def usable(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose figures may be compared: read cleanly, status ok, steady-state throughput known."""
    return df[df["skip_reason"].isna() & df["tok_per_sec"].notna() & df["world_size"].notna()]


def config_label(row) -> str:
    """A short human label of a workload config, e.g. 'nanochat d20 · seq 2048 · batch 524,288 · NVIDIA H200'."""
    parts = [str(row.get("workload") or "?")]
    if not _missing(row.get("depth")):
        parts[0] += f" d{int(row['depth'])}"
    if not _missing(row.get("max_seq_len")):
        parts.append(f"seq {int(row['max_seq_len'])}")
    if not _missing(row.get("total_batch_size")):
        parts.append(f"batch {int(row['total_batch_size']):,}")
    parts.append(str(row.get("gpu_name") or "CPU/unknown device"))
    if not _missing(row.get("force_flash_sdpa")):
        parts.append(f"forced flash SDPA: {'yes' if str(row['force_flash_sdpa']) == 'True' else 'no'}")
    if not _missing(row.get("sdpa_backends")) and row["sdpa_backends"]:
        parts.append(f"SDPA kernels: {row['sdpa_backends']}")
    return " · ".join(parts)


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def with_config(df: pd.DataFrame) -> pd.DataFrame:
    """The rows with a `config` column: the label of their GROUP_KEYS values (nulls are a value too)."""
    df = df.copy()
    keys = df[list(GROUP_KEYS)].astype(object).where(df[list(GROUP_KEYS)].notna(), None)
    distinct = set(map(tuple, keys.itertuples(index=False)))
    labels = {k: config_label(dict(zip(GROUP_KEYS, k, strict=True))) for k in distinct}
    df["config"] = [labels[tuple(k)] for k in keys.itertuples(index=False)]
    df["runtime"] = df["runtime"].fillna("unknown")
    return df


def _node_counts(nodes: pd.Series) -> str:
    """The node counts behind one point, e.g. "2" (or "1,2" when runs of one GPU count differ in layout)."""
    return ",".join(map(str, sorted(nodes.dropna().unique())))


def scaling_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (config, runtime, world_size): repeats, median figures, speedup and efficiency.

    Speedup S(n) = T(n) / T(n0) and parallel efficiency E(n) = S(n) * n0 / n, with T the median tok/s and
    n0 the smallest GPU count measured for that runtime and config; ideal T(n) = T(n0) * n / n0.
    """
    ok = with_config(usable(df))
    if ok.empty:
        return pd.DataFrame(columns=["config", "runtime", "world_size", "runs", "tok_per_sec_min",
                                     "tok_per_sec_max", "nodes", *POINT_FIGURES,
                                     "ideal_tok_per_sec", "speedup", "efficiency"])
    agg = {col: (col, how) for col, how in POINT_FIGURES.items()}
    points = (ok.groupby(["config", "runtime", "world_size"], observed=True, dropna=False)
              .agg(runs=("source", "size"), tok_per_sec_min=("tok_per_sec", "min"),
                   tok_per_sec_max=("tok_per_sec", "max"), nodes=("nodes", _node_counts),
                   **agg)
              .reset_index())
    points["world_size"] = points["world_size"].astype(int)
    points = points.sort_values(["config", "runtime", "world_size"]).reset_index(drop=True)
    base = points.groupby(["config", "runtime"])["world_size"].transform("min")
    base_tps = points.groupby(["config", "runtime"])["tok_per_sec"].transform("first")  # sorted: smallest n first
    points["ideal_tok_per_sec"] = base_tps * points["world_size"] / base
    points["speedup"] = points["tok_per_sec"] / base_tps
    points["efficiency"] = points["speedup"] * base / points["world_size"]
    return points


def ratio_ci(x, base, level: float = CI_LEVEL) -> tuple[float, float, float]:
    """(ratio, low, high) of geometric means of x over base; low/high NaN without 2+ values each side."""
    lx, lb = np.log(np.asarray(x, float)), np.log(np.asarray(base, float))
    if len(lx) == 0 or len(lb) == 0:
        return math.nan, math.nan, math.nan
    d = lx.mean() - lb.mean()
    if len(lx) < 2 or len(lb) < 2:
        return math.exp(d), math.nan, math.nan
    if lx.var() == 0 and lb.var() == 0:  # identical repeats: scipy gives NaN, the interval is the point
        return math.exp(d), math.exp(d), math.exp(d)
    ci = ttest_ind(lx, lb, equal_var=False).confidence_interval(confidence_level=level)
    return math.exp(d), math.exp(ci.low), math.exp(ci.high)


def runtime_ratios(df: pd.DataFrame, baseline: str = BASELINE_RUNTIME, metric: str = "tok_per_sec") -> pd.DataFrame:
    """Each runtime's steady-state metric relative to the baseline runtime, per config and GPU count."""
    ok = with_config(usable(df))
    rows = []
    for (config, world), g in ok.groupby(["config", "world_size"]):
        base = g.loc[g["runtime"] == baseline, metric].dropna()
        base = base[base > 0]
        if base.empty:
            continue
        for runtime, r in g[g["runtime"] != baseline].groupby("runtime"):
            x = r[metric].dropna()
            x = x[x > 0]
            if x.empty:
                continue
            ratio, low, high = ratio_ci(x, base)
            rows.append({"config": config, "world_size": int(world), "runtime": runtime, "runs": len(x),
                         "baseline_runs": len(base), "ratio": ratio, "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows, columns=["config", "world_size", "runtime", "runs", "baseline_runs",
                                       "ratio", "ci_low", "ci_high"])
