"""Findings in words: what the figures of one config say, each sentence with the evidence behind it.

Only what the data says: every finding needs measured values on both sides of its comparison and a
gap beyond a threshold, and the thresholds are named here with the reason for their size. A config
without any gap that large has no findings, and the report says so.
  - a multi-node run whose NCCL took TCP sockets between nodes (the line of NCCL's log that proves it);
  - runtimes compared at one node count whose NCCL/libfabric settings differed (CE's hook sets its own);
  - runtimes compared in a ratio whose runs recorded other software (torch, CUDA, NCCL, driver, this project);
  - a runtime's throughput relative to the baseline, where its confidence interval excludes 1;
  - parallel efficiency below a floor, with the pre-flight busbw of the same points beside it, or above ideal;
  - a runtime's start-up longer or shorter than the baseline's, and the phase the difference is in;
  - exposed communication taking a large part of the steady step;
  - a straggler: the ranks of one run far apart, its slowest rank and host named.
"""

from dataclasses import dataclass

import json

import pandas as pd

from bench.analysis.scaling import STARTUP_PHASES, count, nodes_text, phase_label
from bench.analysis.tables import NOT_MEASURED, transports_text

# Identical runs on one H200 differ by about 1 s in Python imports and torchrun's spawn alone
# (results/h200-d20/breakdown: imports 6.0-7.0 s, spawn 3.0-3.6 s over three runs): a start-up
# difference must be twice that before it is the runtime's.
STARTUP_GAP_S = 2.0
# A synchronous step waits for its slowest rank, so ranks 5% apart cost about 5% of throughput; the
# step times of one healthy run vary far less (step CV <= 1.1% in results/h200-d20/table).
STRAGGLER_PCT = 5.0
# Communication left on the critical path above a tenth of the step is the largest lever after compute;
# a single-node run leaves next to none (0.05 of 3,440 ms on one H200, results/h200-d20/breakdown).
COMM_SHARE = 0.10
# A ratio whose 95% CI excludes 1 but lies within 1% of it is real yet too small to act on: the same
# command differs by more than that between two hosts of one kind (results/h200-d20/breakdown/README.md).
RATIO_GAP = 0.01
# Efficiency below 90% loses a tenth of the machine: worth its explanation (repeats vary by ~1%).
EFFICIENCY_FLOOR = 0.90
# Efficiency above 100% by more than the repeats' spread (~1%) is no speed-up to celebrate: more ranks
# doing better than ideal means the smallest point was slowed (a cold cache, another job) or the points
# are not the same work; the figure is flagged, never taken as is.
ABOVE_IDEAL = 0.01
MAX_PER_KIND = 5  # findings of one kind per config; more are summarised by a count


@dataclass
class Finding:
    text: str
    evidence: str  # quoted as code: a log line, or the figures the sentence rests on


def _where(runtime: str, world: int, nodes, unit: str) -> str:
    return f"{runtime} at {count(world, unit)} ({nodes_text(nodes)})"


def _capped(found: list[Finding], what: str) -> list[Finding]:
    if len(found) <= MAX_PER_KIND:
        return found
    more = len(found) - MAX_PER_KIND
    return found[:MAX_PER_KIND] + [Finding(f"… and {more} more {what} like these", "see the tables below")]


def sockets(runs: pd.DataFrame) -> list[Finding]:
    """Multi-node runs whose inter-node NCCL traffic went over TCP sockets, per runtime x node count."""
    multi = runs[(runs["nodes"].fillna(1) > 1) & runs["net_over_sockets"].notna()]
    out = []
    for (runtime, nodes), g in multi.groupby(["runtime", "nodes"], sort=True):
        total = int(((runs["runtime"] == runtime) & (runs["nodes"] == nodes)).sum())
        line = str(g["net_over_sockets"].iloc[0]).replace("`", "'")
        transports = transports_text(g["nccl_transports"].iloc[0])
        seen = f"; transports {transports}" if transports != NOT_MEASURED else ""
        out.append(Finding(f"{runtime} at {int(nodes)} nodes: inter-node NCCL used NET/Socket (TCP) in {len(g)} of "
                           f"{total} run(s), so its throughput measures that fallback, not the runtime "
                           f"(run {g['run_id'].iloc[0]}{seen})", line))
    return _capped(out, "socket fallbacks")


def unverified(runs: pd.DataFrame) -> list[Finding]:
    """Multi-node runs whose site expects a network but whose NCCL named none: their network is unknown."""
    multi = runs[(runs["nodes"].fillna(1) > 1) & runs["net_unverified"].notna()]
    return _capped([Finding(f"{runtime} at {int(nodes)} nodes: the network between nodes of {len(g)} run(s) was not "
                            f"verified, so their throughput may measure another network than the site's "
                            f"(run {g['run_id'].iloc[0]})", str(g["net_unverified"].iloc[0]))
                    for (runtime, nodes), g in multi.groupby(["runtime", "nodes"], sort=True)], "unverified networks")


def tuning(runs: pd.DataFrame) -> list[Finding]:
    """Node counts whose runtimes ran NCCL/libfabric with different settings (rank 0's, run.json network_env): their
    gap may be that tuning, not the runtime. On Alps CE's aws_ofi_nccl hook sets its own values, which change
    between CE releases, while the other runtimes get the site profile's."""
    if "net_tuning" not in runs:
        return []
    out = []
    for nodes, g in runs[runs["net_tuning"].notna()].groupby("nodes", sort=True):
        # every run's settings, by runtime: repeats of one runtime may differ too (a hook changed between them)
        settings = {runtime: [json.loads(x) for x in sorted(set(t))]
                    for runtime, t in g.groupby("runtime", sort=True)["net_tuning"]}
        if len(settings) < 2:
            continue
        every = [s for ss in settings.values() for s in ss]
        differ = [k for k in sorted({k for s in every for k in s}) if len({s.get(k) for s in every}) > 1]
        if not differ:
            continue
        shown = [f"{k}: " + ", ".join(f"{rt} " + " or ".join(sorted({str(s.get(k, 'unset')) for s in ss}))
                                      for rt, ss in settings.items()) for k in differ]
        out.append(Finding(f"at {nodes_text(int(nodes))} the runtimes ran NCCL/libfabric with different settings "
                           f"({len(differ)} variable(s)), so their gap may be that tuning, not the runtime",
                           "; ".join(shown).replace("`", "'")))
    return _capped(out, "tuning differences")


# run.json's software versions and the project's revision, as a finding names them
SOFTWARE = {"torch_version": "torch", "cuda_version": "CUDA", "nccl_version": "NCCL", "driver_version": "driver",
            "git_revision": "nanochat-bench"}


def software(runs: pd.DataFrame, ratios: pd.DataFrame, baseline: str, unit: str) -> list[Finding]:
    """Runtimes whose runs at the rank counts of their ratios to the baseline and the baseline's recorded other
    software versions (a version no run recorded is no difference): the ratio measures those too. A container's own
    NCCL may be the point of the comparison, but the report says so rather than credit the runtime alone."""
    out = []
    for runtime, r in ratios.groupby("runtime", sort=True):
        worlds = sorted(set(r["world_size"]))
        at = runs[runs["world_size"].isin(worlds)]
        sides = {rt: at[at["runtime"] == rt] for rt in (baseline, runtime)}
        names, shown = [], []
        for col, name in SOFTWARE.items():
            if col not in runs:
                continue
            values = {rt: sorted(set(g[col].dropna().astype(str))) for rt, g in sides.items()}
            if len({v for vs in values.values() for v in vs}) > 1:
                names.append(name)
                shown.append(f"{name}: " + ", ".join(f"{rt} {' or '.join(vs) or 'not recorded'}"
                                                     for rt, vs in values.items()))
        if names:
            out.append(Finding(f"{runtime} and {baseline}, compared at {', '.join(map(str, worlds))} {unit}, ran other "
                               f"software ({', '.join(names)}), so the ratio measures that too, not the runtime alone",
                               "; ".join(shown).replace("`", "'")))
    return _capped(out, "software differences")


def throughput_ratios(ratios: pd.DataFrame, baseline: str, unit: str) -> list[Finding]:
    out = []
    for r in ratios.to_dict("records"):
        excludes_one = r["ci_high"] < 1 or r["ci_low"] > 1
        if pd.isna(r["ci_low"]) or not excludes_one or abs(r["ratio"] - 1) < RATIO_GAP:
            continue
        word = "slower" if r["ratio"] < 1 else "faster"
        out.append(Finding(f"{r['runtime']} is {100 * abs(1 - r['ratio']):.1f}% {word} than {baseline} at "
                           f"{count(r['world_size'], unit)}",
                           f"ratio {r['ratio']:.3f}, 95% CI [{r['ci_low']:.3f}, {r['ci_high']:.3f}], "
                           f"{int(r['runs'])} vs {int(r['baseline_runs'])} runs"))
    return _capped(out, "throughput gaps")


def low_efficiency(points: pd.DataFrame, unit: str, scaling: str) -> list[Finding]:
    out = []
    for runtime, p in points.groupby("runtime", sort=False):
        p = p.sort_values("world_size")
        first = p.iloc[0]
        low = p[p["efficiency"] < EFFICIENCY_FLOOR]
        if low.empty:
            continue
        r = low.iloc[0]  # where it first drops below the floor
        per = unit[:-1]
        if scaling == "weak":
            how = (f"tok/s per {per} {r['tok_per_sec_per_gpu']:,.0f} vs {first['tok_per_sec_per_gpu']:,.0f} at "
                   f"{count(first['world_size'], unit)}")
        else:
            ideal = r["world_size"] / first["world_size"]  # 1.5 from 4 to 6 GPUs: not a whole number
            how = f"speedup {r['speedup']:.2f}x of an ideal {ideal:.3g}x"
        bw = [f"{c.replace('busbw_', '').replace('_gbps', '')} {first[c]:,.0f} -> {r[c]:,.0f} GB/s"
              for c in ("busbw_all_reduce_gbps",) if not pd.isna(r[c]) and not pd.isna(first[c]) and first[c] > 0]
        out.append(Finding(f"{_where(runtime, r['world_size'], r['nodes'], unit)} reaches {100 * r['efficiency']:.1f}% "
                           f"parallel efficiency, below {100 * EFFICIENCY_FLOOR:.0f}%",
                           "; ".join([how, *(f"pre-flight busbw {b}" for b in bw)])))
    return _capped(out, "efficiency drops")


def above_ideal(points: pd.DataFrame, unit: str) -> list[Finding]:
    """Points whose parallel efficiency exceeds 100% by more than ABOVE_IDEAL."""
    out = []
    for runtime, p in points.groupby("runtime", sort=False):
        p = p.sort_values("world_size")
        first = p.iloc[0]
        for r in p[p["efficiency"] > 1 + ABOVE_IDEAL].to_dict("records"):
            out.append(Finding(f"{_where(runtime, r['world_size'], r['nodes'], unit)} reaches "
                               f"{100 * r['efficiency']:.1f}% parallel efficiency, above ideal: check the smallest "
                               f"point ({count(first['world_size'], unit)}) for a slowed run before trusting the gain",
                               f"tok/s per {unit[:-1]} {r['tok_per_sec_per_gpu']:,.0f} at "
                               f"{count(r['world_size'], unit)} vs {first['tok_per_sec_per_gpu']:,.0f} at "
                               f"{count(first['world_size'], unit)}"))
    return _capped(out, "points above ideal")


def startup_gaps(points: pd.DataFrame, baseline: str, unit: str) -> list[Finding]:
    """A runtime whose launch-to-first-step differs from the baseline's at the same rank counts, and
    the phase (measured on both sides) where most of the difference lies."""
    base = points[points["runtime"] == baseline].set_index("world_size")
    out = []
    for runtime, p in points[points["runtime"] != baseline].groupby("runtime", sort=True):
        p = p.set_index("world_size")
        common = [n for n in p.index if n in base.index and not pd.isna(p.at[n, "launch_to_first_step_s"])
                  and not pd.isna(base.at[n, "launch_to_first_step_s"])]
        if not common:
            continue
        gap = (p.loc[common, "launch_to_first_step_s"] - base.loc[common, "launch_to_first_step_s"]).mean()
        if abs(gap) < STARTUP_GAP_S:
            continue
        diffs = {c: (p.loc[common, c] - base.loc[common, c]).mean() for c in STARTUP_PHASES
                 if p.loc[common, c].notna().all() and base.loc[common, c].notna().all()}
        word = "longer" if gap > 0 else "shorter"
        sizes = ", ".join(str(int(n)) for n in common)
        text = f"{runtime} start-up is {abs(gap):.1f} s {word} than {baseline} (mean over {sizes} {unit})"
        if diffs:
            phase = max(diffs, key=lambda c: abs(diffs[c]))
            text += f", most of it in {phase_label(phase)} ({diffs[phase]:+.1f} s)"
            inside = _unmeasured_before(phase, p.loc[common], base.loc[common])
            if inside:
                text += f", which includes {' and '.join(inside)} (not measured)"
        evidence = "; ".join(f"{count(n, unit)}: launch to first step {p.at[n, 'launch_to_first_step_s']:.1f} s vs "
                             f"{base.at[n, 'launch_to_first_step_s']:.1f} s" for n in common)
        out.append(Finding(text, evidence))
    return _capped(out, "start-up gaps")


def _unmeasured_before(phase: str, a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """The phases just before `phase` that a side did not measure: their time is inside `phase`."""
    out = []
    for col in reversed(STARTUP_PHASES[:STARTUP_PHASES.index(phase)]):
        if a[col].notna().all() and b[col].notna().all():
            break
        out.insert(0, phase_label(col))
    return out


def exposed_comm(points: pd.DataFrame, unit: str) -> list[Finding]:
    share = points["step_comm_ms"] / points["step_time_ms"]
    return _capped([Finding(f"{_where(r['runtime'], r['world_size'], r['nodes'], unit)} spends {100 * s:.0f}% of its "
                            f"steady step waiting on communication",
                            f"exposed comm {r['step_comm_ms']:,.1f} ms of a {r['step_time_ms']:,.1f} ms step")
                    for r, s in zip(points[share >= COMM_SHARE].to_dict("records"), share[share >= COMM_SHARE])],
                   "points with exposed communication")


def stragglers(runs: pd.DataFrame, unit: str) -> list[Finding]:
    """Runs whose ranks' steady steps lie far apart, per runtime x rank count and slowest rank/host."""
    slow = runs[runs["rank_step_spread_pct"] >= STRAGGLER_PCT]
    keys = ["runtime", "world_size", "slowest_rank", "slowest_host"]
    out = []
    for (runtime, world, rank, host), g in slow.groupby(keys, sort=True, dropna=False):
        total = int(((runs["runtime"] == runtime) & (runs["world_size"] == world)).sum())
        rank = "?" if pd.isna(rank) else int(rank)
        host = "an unrecorded host" if pd.isna(host) else f"host {host}"
        worst = g.loc[g["rank_step_spread_pct"].idxmax()]
        out.append(Finding(f"rank {rank} on {host} is the slowest rank of {runtime} at {count(world, unit)} "
                           f"({nodes_text(g['nodes'].iloc[0])}) in {len(g)} of {total} run(s): the ranks' steady steps "
                           f"lie up to {worst['rank_step_spread_pct']:.1f}% of the median apart",
                           f"run {worst['run_id']}: rank_step_spread_pct {worst['rank_step_spread_pct']:.1f} "
                           f"= (slowest - fastest rank's median step) / median over ranks"))
    return _capped(out, "straggling runs")


def config_findings(runs: pd.DataFrame, points: pd.DataFrame, ratios: pd.DataFrame, baseline: str, unit: str,
                    scaling: str) -> list[Finding]:
    """The findings of one config: its usable runs, its points and its ratios to the baseline."""
    return [*sockets(runs), *unverified(runs), *tuning(runs), *software(runs, ratios, baseline, unit),
            *throughput_ratios(ratios, baseline, unit),
            *low_efficiency(points, unit, scaling), *above_ideal(points, unit),
            *startup_gaps(points, baseline, unit), *exposed_comm(points, unit), *stragglers(runs, unit)]


THRESHOLDS = (f"Findings need a gap beyond a named threshold (bench/analysis/findings.py): start-up "
              f"{STARTUP_GAP_S:g} s, throughput ratio {100 * RATIO_GAP:g}% with a 95% CI excluding 1, efficiency "
              f"below {100 * EFFICIENCY_FLOOR:g}% or above {100 + 100 * ABOVE_IDEAL:g}%, exposed communication "
              f"{100 * COMM_SHARE:g}% of the step, ranks "
              f"{STRAGGLER_PCT:g}% apart; a socket fallback needs NCCL's own line.")
