"""A sweep's summary rebuilt from its probes' run directories, for a sweep that ended without writing one
(killed with SIGKILL, or by a power cut): `capacity --report` then reports what the finished probes found.
So too when the summary there is older than a probe: an earlier sweep's, left by a later one that ended so.

Each finished probe's run.json holds its settings and outcome under `capacity` (bench/capacity/probe.py);
per strategy and width, the capacity is the largest model that trained at device batch 1 and the first
failure the smallest larger one that did not fit. The search is complete where those two settle it, as the
sweep's own search ends (no shape of the family it searches between them, nor below a first failure without a
capacity), else incomplete, since what the sweep would have probed next is not known. The --depths points a smaller
one's failure or hang left not probed (no run directory of their own) come from that probe and the --depths the
newest probe recorded (the sweep that ended).
"""

import sys
from dataclasses import replace
from pathlib import Path

from bench.capacity.probe import ProbeResult, ProbeSpec, read_probe, recorded_spec
from bench.capacity.search import Shape, family, num_params, shapes
from bench.capacity.sweep import (DEVICE_KEYS, MACHINE_KEYS, SUMMARY_JSON, _shape_dict, not_probed_after, save_summary,
                                  summarize)
from bench.errors import ConfigError
from bench.contract import RUN_JSON, RunJsonError, read_run_json


def finished_probes(out: Path) -> list[ProbeResult]:
    """Every probe under <out>/runs/ with a recorded outcome, smallest model first; a probe whose run.json is
    damaged (cut short by the kill that ended the sweep) is left out with a note, so the others are reported."""
    found = []
    for run_json in sorted((out / "runs").glob("*/*/run.json")):
        try:
            cap = read_run_json(run_json.parent).get("capacity")
            spec = ProbeSpec(**recorded_spec(cap))
        except RunJsonError as e:
            print(f"note: {e.problem}; that probe is left out of the rebuilt summary", file=sys.stderr)
            continue
        except OSError as e:
            print(f"note: {run_json} cannot be read: {e.strerror or e}; that probe is left out of the rebuilt "
                  f"summary", file=sys.stderr)
            continue
        except (TypeError, KeyError):
            continue  # not a finished probe (cancelled, or written by another release)
        if (result := read_probe(spec, run_json.parent)) is not None:
            # recorded without a count by earlier releases when it ended before its model was built
            result.num_params = result.num_params or num_params(spec.depth, spec.aspect_ratio, spec.vocab_size)
            found.append(result)
    return sorted(found, key=lambda r: (r.spec.strategy, r.num_params or 0, r.spec.device_batch_size))


# What makes probes of one sweep comparable, besides the shape, batch and strategy each probe varies.
SETTINGS = ("max_seq_len", "nproc", "steps", "device_type", "vocab_size", "memory_limit")


def _settings(probe: ProbeResult) -> dict:
    """Its settings, and the device it ran on: another GPU's probes of an --out on a shared file system are another
    sweep's, which a resumed sweep runs again (a probe recorded without its device is of any)."""
    device = {k: probe.extra[k] for k in DEVICE_KEYS if probe.extra.get(k) is not None}
    return {**{k: getattr(probe.spec, k) for k in SETTINGS}, **device}


def _same(probe: ProbeResult, kept: dict) -> bool:
    return all(kept.get(k, v) == v for k, v in _settings(probe).items())


def search_from_probes(strategy: str, aspect_ratio: int, results: list[ProbeResult]) -> dict:
    """A strategy's search state from its probes at device batch 1, complete where they settle its border."""
    at_b1 = [r for r in results if r.spec.strategy == strategy and r.spec.aspect_ratio == aspect_ratio
             and r.spec.device_batch_size == 1 and r.num_params]
    shape = lambda r: Shape(r.num_params, r.spec.depth, r.spec.aspect_ratio)  # noqa: E731
    fits = max((r for r in at_b1 if r.fits), key=lambda r: r.num_params, default=None)
    bound = fits.num_params if fits else 0
    fail = min((r for r in at_b1 if r.outcome == "oom" and r.num_params > bound), key=lambda r: r.num_params,
               default=None)
    stop = next((r for r in at_b1 if r.outcome in ("failed", "timeout")), None)
    # the shapes the sweep's search steps over (family: a larger --max-depth adds none below the first failure)
    fits_depth = fits.spec.depth if fits else 0
    between = fail and [c for c in family(fail.spec.depth, aspect_ratio, fail.spec.vocab_size)
                        if fits_depth < c.depth < fail.spec.depth]
    return {"strategy": strategy, "aspect_ratio": aspect_ratio, "capacity": _shape_dict(fits and shape(fits)),
            "first_failure": _shape_dict(fail and shape(fail)),
            "probes": sum(r.outcome != "budget" for r in at_b1),  # a probe the budget left no time for never ran
            "complete": stop is None and fail is not None and not between,
            "stopped": stop and stop.stop_record()}


def not_probed_from(results: list[ProbeResult], depths: list[int]) -> list[ProbeResult]:
    """The --depths points the sweep left not probed after a smaller one of their strategy and width failed or hung,
    which leave no run directory: from that probe and the sweep's `depths`, by the sweep's rule."""
    probed = {(r.spec.strategy, r.spec.aspect_ratio, r.spec.depth) for r in results if r.spec.device_batch_size == 1}
    first: dict[tuple[str, int], ProbeResult] = {}
    for r in results:  # smallest first: the point that stopped the larger ones
        if r.spec.device_batch_size == 1 and r.outcome in ("failed", "timeout") and r.spec.depth in depths:
            first.setdefault((r.spec.strategy, r.spec.aspect_ratio), r)
    return [not_probed_after(r, replace(r.spec, depth=s.depth), s.num_params) for r in first.values()
            for s in shapes(depths, r.spec.aspect_ratio, r.spec.vocab_size)
            if s.depth > r.spec.depth and (r.spec.strategy, s.aspect_ratio, s.depth) not in probed]


def summary_is_stale(out: str | Path) -> bool:
    """True when a probe under <out>/runs/ was written after <out>/summary.json (a sweep writes its summary
    after its last probe, even when stopped by a signal): a later sweep into the same --out ended without
    one, over the probes that summary lists."""
    newest = max((p.stat().st_mtime for p in (Path(out) / "runs").glob("*/*/run.json")), default=0.0)
    return newest > (Path(out) / SUMMARY_JSON).stat().st_mtime


def rebuild_summary(out: str | Path) -> dict:
    """summary.json and probes.csv of <out> from its finished probes; ConfigError when there are none."""
    out = Path(out)
    results = finished_probes(out)
    if not results:
        raise ConfigError(f"{out}: no capacity summary and no finished probe under {out / 'runs'} (run "
                          f"`nanochat-bench capacity --out {out}` first)")
    # An --out that held an earlier sweep of other settings: its probes are not this search's; the newest probe's
    # settings are the sweep's that ended.
    newest = max(results, key=lambda r: (Path(r.run_dir) / RUN_JSON).stat().st_mtime)
    kept = _settings(newest)
    others = [r for r in results if not _same(r, kept)]
    results = [r for r in results if _same(r, kept)]
    first = results[0]
    machine = {k: first.extra.get(k) for k in MACHINE_KEYS}
    machine.update(nproc=first.spec.nproc, memory_limit=first.spec.memory_limit, host_available_bytes=None)
    pairs = dict.fromkeys((r.spec.strategy, r.spec.aspect_ratio) for r in results)
    searches = [search_from_probes(strategy, ar, results) for strategy, ar in pairs]
    # its --depths too (none recorded by earlier releases): a probe of an earlier sweep holds that sweep's list
    depths = newest.extra.get("sweep_depths") or []
    summary = summarize({"out": str(out)}, machine, results, searches, not_probed_from(results, depths))
    differ = sorted({f"{k}={v}" for r in others for k, v in _settings(r).items() if kept.get(k, v) != v})
    summary["rebuilt"] = "the sweep wrote no summary" + (
        f"; {len(others)} probe(s) of an earlier sweep left out: {', '.join(differ)}" if others else "")
    # whether the sweep was stopped is not recorded: only a search its probes leave unsettled shows it was
    if not all(s["complete"] for s in searches):
        summary["interrupted"] = "an end without a summary, before every search was settled"
    save_summary(out, summary)
    return summary
