"""Figures of one run from its step records: the steady-state rule, throughput, step-time spread, MFU.

The steady-state rule, one place for it: steps 0..10 are warm-up (torch.compile, allocator and
NCCL warm-up), exactly the steps nanochat's base_train leaves out of its `total time`; figures use
the steps after them. A run with no step beyond 10 (a smoke run) uses the later half of its steps
instead, and the row says which rule applied, so a short run still gets figures that are labelled.
Steps a trainer flags as warm-up (`warmup_epoch`: NNTile's --nepochs-warmup epochs, which its runner leaves out
of its own timed figure) are never steady, whatever their step.
Throughput is the median over steady steps: robust to the odd slow step (checkpoint, eval spill-over).
"""

import bisect
import math
import statistics

from bench.metrics import WARMUP_STEPS, mfu_percent

RULE_AFTER_WARMUP = f"step > {WARMUP_STEPS}"
RULE_AFTER_RESTARTS = f"step > {WARMUP_STEPS} after each start (resumed: warms up again)"
RULE_SECOND_HALF = "second half (run shorter than warm-up)"
WARMUP_EPOCHS_LEFT_OUT = "; warm-up epochs left out"  # added to the rule where flagged steps were left out

STEADY_STATE_RULE = (
    f"Steady state: steps 0..{WARMUP_STEPS} are warm-up and excluded, as nanochat excludes them from its "
    f"total time, and so are the first {WARMUP_STEPS + 1} steps after a resumed run's restart and the steps of "
    f"warm-up epochs (NNTile's --nepochs-warmup); a run without other steps beyond {WARMUP_STEPS} uses the later "
    "half of its other steps. "
    "Throughput and step time are medians over the steady steps; spread is the coefficient of "
    "variation (sample std / mean) and the 90th percentile of step time."
)


def warmup_flags(records: list[dict]) -> list[bool]:
    """Per step record, whether its trainer flagged it as warm-up (`warmup_epoch`: NNTile's --nepochs-warmup)."""
    return [r.get("warmup_epoch") is True for r in records]


def steady_mask(steps: list[int], starts=(0,), warmup=()) -> tuple[list[bool], str | None]:
    """Which records count as steady state, and the rule that chose them (None without records). `starts`: the
    first step of each start of the trainer (a resumed run starts again, compiling and warming up anew);
    `warmup`: per record, whether the trainer flagged it as warm-up (warmup_flags), never steady."""
    if not steps:
        return [], None
    warm = list(warmup) or [False] * len(steps)
    suffix = WARMUP_EPOCHS_LEFT_OUT if any(warm) else ""
    firsts = sorted({0, *starts})
    mask = [s - firsts[bisect.bisect_right(firsts, s) - 1] > WARMUP_STEPS and not w for s, w in zip(steps, warm)]
    if any(mask):
        return mask, (RULE_AFTER_WARMUP if firsts == [0] else RULE_AFTER_RESTARTS) + suffix
    # Rank by step, not by position, so out-of-order records still give the later half.
    timed = [i for i in range(len(steps)) if not warm[i]]
    later = set(sorted(timed, key=steps.__getitem__)[len(timed) // 2:])
    return [i in later for i in range(len(steps))], RULE_SECOND_HALF + suffix


def finite(x) -> float | None:
    """x as a float if it is a finite number, else None (bools, strings and NaN are not figures)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        return float(x) if math.isfinite(x) else None
    except OverflowError:  # an integer past a float's range (JSON's integers have no bound)
        return None


def diverged(records: list[dict]) -> str | None:
    """Why a run's steps are no figures of its model, or None: a loss that became NaN or infinite. This trainer
    stops such a run (status `diverged`); an older release's run, or upstream's log, says ok and goes on."""
    bad = [int(r["step"]) for r in records if isinstance(r.get("loss"), float) and not math.isfinite(r["loss"])]
    return f"loss non-finite from step {min(bad)}: the run diverged" if bad else None


def _is_positive(x) -> bool:
    """A finite number above 0 (NaN fails both comparisons; bools and strings are not numbers)."""
    return type(x) in (int, float) and 0 < x < math.inf


def spread(values: list[float]) -> tuple[float, float, float | None]:
    """(median, 90th percentile, coefficient of variation) of step times; CV needs two values.

    Plain Python on purpose: for the tens of values of one run it is several times faster than numpy's
    per-call overhead, which matters when collecting thousands of runs. The percentile interpolates
    linearly between order statistics, as numpy's default does (statistics' "inclusive" method).
    """
    med = statistics.median(values)
    p90 = values[0] if len(values) == 1 else statistics.quantiles(values, n=10, method="inclusive")[-1]
    if len(values) < 2:
        return med, p90, None
    mean = math.fsum(values) / len(values)
    var = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return med, p90, math.sqrt(var) / mean


def step_figures(records: list[dict], world_size: int | None, flops_per_token: float | None,
                 peak_flops_per_gpu: float | None, tok_are_positions: bool = True,
                 starts=(0,)) -> tuple[dict, list[str]]:
    """Steady-state figures from step records (dicts with step, dt_ms, tok_per_sec, mfu, loss).

    Returns (figures, notes). Records whose time or throughput is not a finite positive number are
    left out and counted in a note, never averaged in. `tok_are_positions` False: tok_per_sec counts
    fewer tokens than the model ran (SFT's supervised ones), so MFU is the trainer's own, from the positions.
    """
    notes: list[str] = []
    fig: dict = {"steps_recorded": len(records)}
    if not records:
        return fig, notes
    steps = [int(r["step"]) for r in records]
    last = max(range(len(steps)), key=steps.__getitem__)
    fig["last_step"], fig["final_loss"] = steps[last], finite(records[last].get("loss"))

    mask, rule = steady_mask(steps, starts, warmup_flags(records))
    steady = [r for r, m in zip(records, mask, strict=True) if m]
    good = [(float(dt), float(tps), r.get("mfu")) for r in steady
            if _is_positive(dt := r.get("dt_ms")) and _is_positive(tps := r.get("tok_per_sec"))]
    if len(good) < len(steady):
        notes.append(f"{len(steady) - len(good)} steady step(s) with a non-finite or non-positive dt/tok_per_sec "
                     "left out")
    fig["steady_rule"], fig["steady_steps"] = rule, len(good)
    if not good:
        return fig, notes
    fig["tok_per_sec"] = statistics.median(g[1] for g in good)
    fig["step_time_ms"], fig["step_time_p90_ms"], fig["step_time_cv"] = spread([g[0] for g in good])
    if world_size:
        fig["tok_per_sec_per_gpu"] = fig["tok_per_sec"] / world_size

    # MFU recomputed from the recorded FLOPs per token and peak, so every run uses the same definition;
    # the per-step value the trainer logged is the fall-back (upstream logs assume an H100 peak), and the
    # figure where tok/s is not the work the GPU did (the trainer's MFU counts every position it ran).
    mfu = mfu_percent(flops_per_token, fig["tok_per_sec"], world_size, peak_flops_per_gpu) \
        if flops_per_token and world_size and tok_are_positions else None
    if mfu is not None:
        fig["mfu"], fig["mfu_source"] = mfu, "recomputed"
    elif peak_flops_per_gpu:
        recorded = [m for g in good if (m := finite(g[2])) is not None]
        if recorded:
            fig["mfu"], fig["mfu_source"] = statistics.median(recorded), "recorded"
    return fig, notes
