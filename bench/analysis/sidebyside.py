"""nanochat and NNTile side by side: runs of both workloads with the same shape on the same device.

Two workloads are never one config (they are different programs), so their scaling curves stay
apart; this table puts their points next to each other where the shape matches: the same depth
(n_layer for NNTile), sequence length, total batch (tokens per optimizer step), device and ranks.
Per point (a node count each: ranks within one node and across nodes are no repeats): runs, median steady tok/s,
MFU, peak memory, parameters, and tok/s relative to the nanochat point of the same runtime and node count (or,
when nanochat ran under another runtime only, its first).
Runs of one shape that differ in any other part of the comparison key (NNTile's tiles, nanochat's
precision or memory strategy, ...) or in device batch are points of their own, never pooled into one median, and the
`variant` column names what sets them apart; where several nanochat points could be the reference,
none is taken (the ratio is left out rather than made against an arbitrary one).
"""

import pandas as pd

from bench import workloads
from bench.analysis.columns import AGGREGATES, cell
from bench.analysis.scaling import GROUP_KEYS, identity_text, usable, with_config
from bench.analysis.tables import Table, frame_table

MATCH_KEYS = ("depth", "max_seq_len", "total_batch_size", "device", "world_size")
# The rest of the key, less what the family and the shape say: weak and strong runs of one shape are the same work.
# The device batch, no part of that key (the batch is left out), is kept: another one is another gradient
# accumulation, never a repeat (scaling.mixed_batches).
VARIANT_KEYS = (*(k for k in GROUP_KEYS if k not in (*MATCH_KEYS, "workload", "scaling", "batch")), "device_batch_size")


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (shape, workload, runtime) where both families ran that shape."""
    ok = with_config(usable(table))
    ok = ok.assign(family=ok["workload"].map(workloads.family)).dropna(subset=["family", *MATCH_KEYS])
    both = ok.groupby(list(MATCH_KEYS))["family"].transform("nunique") == 2
    ok = ok[both]
    if ok.empty:
        return pd.DataFrame()
    keys = [*MATCH_KEYS, "nodes", "family", "workload", "runtime", *VARIANT_KEYS]
    points = (ok.groupby(keys, sort=True, dropna=False)
              .agg(runs=("source", "size"),
                   **{c: (c, AGGREGATES[c]) for c in ("tok_per_sec", "mfu", "peak_mem_mib")})  # num_params: a key
              .reset_index())
    points["variant"] = _variants(points)
    refs = []
    for r in points.to_dict("records"):
        nano = points[(points[list(MATCH_KEYS)] == pd.Series({k: r[k] for k in MATCH_KEYS})).all(axis=1)
                      & (points["family"] == "nanochat")
                      # the same ranks over other nodes talk over the network between them: another point
                      & (points["nodes"].astype(object).map(str) == str(r["nodes"]))]
        same = nano[nano["runtime"] == r["runtime"]]
        ref = same if not same.empty or nano.empty else nano[nano["runtime"] == nano["runtime"].iloc[0]]
        refs.append(r["tok_per_sec"] / ref["tok_per_sec"].iloc[0] if len(ref) == 1 else float("nan"))
    points["vs_nanochat"] = refs
    return points.sort_values([*MATCH_KEYS, "nodes", "family", "runtime", "variant"]).reset_index(drop=True)


def _variants(points: pd.DataFrame) -> list[str]:
    """Per point, the parts of its key that differ between points of its shape and family ("" where none do)."""
    shape = [*MATCH_KEYS, "family"]  # never null: side_by_side dropped the rows without them
    differ = {name: [k for k in VARIANT_KEYS if g[k].astype(object).map(str).nunique() > 1]
              for name, g in points.groupby(shape, sort=False)}
    return [", ".join(identity_text(k, r[k]) for k in differ[tuple(r[c] for c in shape)])
            for r in points.to_dict("records")]


def side_by_side_table(points: pd.DataFrame) -> Table:
    cols = [("depth", "depth", "int"), ("seq", "max_seq_len", "int"), cell("total_batch_size"),
            ("device", "device", "s"), ("ranks", "world_size", "int"), ("nodes", "nodes", "int"),
            ("workload", "workload", "s"),
            ("runtime", "runtime", "s"), ("variant", "variant", "s"), ("runs", "runs", "int"), cell("num_params"),
            cell("tok_per_sec"), ("tok/s vs nanochat", "vs_nanochat", "2"), cell("mfu"), cell("peak_mem_mib")]
    return frame_table(points, cols, text_cols=(3, 6, 7, 8))
