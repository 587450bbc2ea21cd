"""The fields of a row that say why a run took the time it did: its start-up phases, its steady step split,
the pre-flight bandwidth of its collectives, the network path NCCL took, and its slowest rank.

Computed from the run's own records: the phases from launch.t0, the events' first times (of the last
attempt, in a resumed run: rundir.milestone_times) and launch.finished_at with the rule of
bench/breakdown.py (so a run that died early still shows how far it got); the rest from run.json's
preflight, network and breakdown sections.
"""

import json
import statistics

from bench import breakdown, nccl_log
from bench.analysis.columns import COLLECTIVES, SPLIT
from bench.analysis.figures import finite


# a process's start time is read to the kernel's 10 ms ticks (runrecord.process_start_time): a phase this little
# below zero on one host is rounding, not skew
START_TIME_SLACK_S = 0.05


def section(manifest: dict, name: str) -> dict:
    """A section of run.json; {} when absent (or, in a run.json that failed validation, not an object)."""
    value = manifest.get(name)
    return value if isinstance(value, dict) else {}


def phase_fields(manifest: dict, first_times: dict) -> dict:
    """The phases' seconds. One that came out negative is no duration but the batch host's clock (launch, image
    step, finished) disagreeing with rank 0's node's (its events): then every phase spanning the two clocks is
    unknown, off by that skew, and `clock_skew` says which came out negative."""
    launch = section(manifest, "launch")
    times = {**{k: finite(v) for k, v in first_times.items()}, "launch": finite(launch.get("t0")),
             "image_ready": finite(launch.get("image_ready_at")), "finished": finite(launch.get("finished_at"))}
    phases = breakdown.phases(times)
    skewed = [f"{breakdown.LABELS[m]} came out {s:.1f} s" for m, s in phases.items() if s < -START_TIME_SLACK_S]
    unknown = breakdown.across_hosts(times) if skewed else set()
    out = {f"phase_{m}_s": max(s, 0.0) for m, s in phases.items() if m not in unknown}
    if skewed:
        out["clock_skew"] = "; ".join(skewed) + ": the batch host's and rank 0's node's clocks disagree"
    return out


def split_fields(steady_steps: list[dict]) -> dict:
    """Medians of the step split over the steady steps that carry it (--breakdown)."""
    out = {}
    for key in SPLIT:
        values = [v for s in steady_steps if (v := finite(s.get(key))) is not None]
        if values:
            out[f"step_{key}"] = statistics.median(values)
    return out


# What rank 0's NCCL_*/FI_* variables (run.json network_env) say that is no tuning: NCCL's logging, the version
# an image announces, and where a runtime finds the plugin (a path each runtime mounts at its own place).
NOT_TUNING = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_VERSION", "NCCL_NET_PLUGIN")


def tuning(network_env: dict) -> dict:
    """The variables of run.json network_env that set how NCCL and libfabric behave: on Alps, CE's hook sets its
    own and the other runtimes get the site profile's, so a runtime comparison shows whether they matched."""
    return {k: v for k, v in network_env.items() if k not in NOT_TUNING and isinstance(v, str)}


def section_fields(manifest: dict) -> dict:
    out = {}
    pre = section(manifest, "preflight")
    for c, bw in (pre.get("busbw_gbps") or {}).items():
        if c in COLLECTIVES:
            out[f"busbw_{c}_gbps"] = finite(bw)
    net = section(manifest, "network")
    out["net"] = net.get("net") or net.get("backend")
    if net.get("transports"):
        out["nccl_transports"] = json.dumps(net["transports"], sort_keys=True)
    out["net_over_sockets"] = nccl_log.over_sockets(net) if net.get("backend") == "nccl" else None
    if net.get("backend") == "nccl" and "network_env" in manifest:  # an older run recorded none: unknown, not unset
        out["net_tuning"] = json.dumps(tuning(section(manifest, "network_env")), sort_keys=True)
    bd = section(manifest, "breakdown")
    steps = [v for r in bd.get("ranks") or [] if isinstance(r, dict) and (v := finite(r.get("step_ms")))]
    if len(steps) > 1:
        out["rank_step_spread_pct"] = 100 * (max(steps) - min(steps)) / statistics.median(steps)
    return {k: v for k, v in out.items() if v is not None}
