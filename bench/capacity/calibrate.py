"""The memory model against the probes: its error at every measured point, and constants refitted to them.

`check(summary)` compares bench/nanochat/memory.py's predicted peak with the measured one (torch's
max_memory_allocated, CUDA only) for every probe that trained, and under offload its host memory with
how far the host's available memory fell. `refit(summary)` fits the constants the model cannot know
(activation bytes per token, layer and width; logits bytes per token and vocabulary entry; bytes a
checkpointed block keeps) by least squares over the probes whose peak falls in the backward pass, the
rest of the prediction being sizes; it returns a calibration in memory_calibration.json's format.
"""

import copy
import time

import numpy as np

from bench.nanochat import memory

FITTED = ("act_bytes_per_token_layer_dim", "logits_bytes_per_token_vocab", "ac_saved_bytes_per_token_layer_dim")


def _point(p: dict, machine: dict) -> memory.MemoryPoint:
    q = p["probe"]
    return memory.MemoryPoint(q["depth"], q["aspect_ratio"], q["vocab_size"], q["max_seq_len"], q["device_batch_size"],
                              q["nproc"], q["strategy"], machine["device_type"])


def _trainer_probes(summary: dict) -> list[dict]:
    from bench.nanochat.parallel import Strategy

    out = []
    for p in summary["probes"]:
        try:
            Strategy.parse(p["probe"]["strategy"])
        except Exception:  # noqa: BLE001 - another workload's probe: not ours to model
            continue
        if p["outcome"] == "ok":
            out.append(p)
    return out


def check(summary: dict, calibration: dict | None = None) -> list[dict]:
    """One row per trained probe: measured and predicted peak (and host memory), relative errors."""
    rows = []
    for p in _trainer_probes(summary):
        est = memory.estimate(_point(p, summary["machine"]), calibration)
        measured = p["peak_mem_mib"] * 2 ** 20 if p.get("peak_mem_mib") else None
        cuda = summary["machine"]["device_type"] == "cuda"  # on CPU the host is the device: nothing apart
        host = p.get("host_peak_bytes") if cuda and "offload" in p["probe"]["strategy"] else None
        rows.append({"strategy": p["probe"]["strategy"], "depth": p["probe"]["depth"],
                     "device_batch_size": p["probe"]["device_batch_size"], "num_params": est.num_params,
                     "phase": est.phase, "measured_peak_bytes": measured, "predicted_peak_bytes": est.peak_bytes,
                     "error": (est.peak_bytes - measured) / measured if measured else None,
                     "measured_host_bytes": host, "predicted_host_bytes": est.host_bytes,
                     "host_error": (est.host_bytes - host) / host if host else None})
    return rows


def _with(calibration: dict, device: str, mode: str, values: dict, source: str | None = None) -> dict:
    c = copy.deepcopy(calibration)
    for name, value in values.items():
        section = c[device] if name.startswith("ac_saved") else c[device][mode]
        section[name]["value"] = value
        if source:
            section[name]["source"] = source
    return c


def refit(summary: dict, calibration: dict | None = None, mode: str = "eager") -> tuple[dict, dict]:
    """(calibration with FITTED refitted, fit facts); unchanged when fewer than two usable probes."""
    base = copy.deepcopy(calibration or memory.load_calibration())
    device = "cuda" if summary["machine"]["device_type"] == "cuda" else "cpu"
    rows, targets = [], []
    zero = _with(base, device, mode, {n: 0 for n in FITTED})
    for p in _trainer_probes(summary):
        if not p.get("peak_mem_mib"):
            continue
        point = _point(p, summary["machine"])
        fixed = memory.estimate(point, zero).phase_bytes("backward")
        units = [memory.estimate(point, _with(zero, device, mode, {n: 1})).phase_bytes("backward") - fixed
                 for n in FITTED]
        if memory.estimate(point, base).phase != "backward":
            continue
        rows.append(units)
        targets.append(p["peak_mem_mib"] * 2 ** 20 - fixed)
    facts = {"probes_used": len(rows), "fitted": {}}
    if len(rows) < 2:
        return base, facts
    a, b = np.array(rows, dtype=float), np.array(targets, dtype=float)
    used = [i for i in range(len(FITTED)) if a[:, i].any()]
    solution, *_ = np.linalg.lstsq(a[:, used], b, rcond=None)
    fitted = dict(zip((FITTED[i] for i in used), np.clip(solution, 0, None).round(2).tolist()))
    facts["fitted"] = fitted
    gpu = summary["machine"].get("gpu_name") or device
    source = (f"measured: least squares over {len(rows)} probes of benchmarks/capacity_bench.py on {gpu}, "
              f"{time.strftime('%Y-%m-%d')}")
    return _with(base, device, mode, fitted, source), facts
