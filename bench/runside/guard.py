"""A diverged run is not `ok`: its loss stops being a number, or climbs far above where it started.

Checked each step on the loss the rank logs (before it reaches an event or a line), so a non-finite
value never goes into run.json or metrics.jsonl: the run ends with status `diverged` naming the step
and the value. `json_safe` is the last line of defence for any other figure: NaN and infinities
become null (bare NaN is not JSON, and every reader of the run directory would fail on it).
"""

import math

from bench.errors import BenchError

RISE_FACTOR = 1.5  # a loss this many times its reference, after warm-up, has diverged
RISE_AFTER_STEPS = 10  # the rise check starts after these steps (the first steps may overshoot)
REMEDY = "lower the learning rates (--matrix_lr, --embedding_lr, --unembedding_lr)"  # nanochat's flags


class Diverged(BenchError):
    """The training loss is not finite, or far above its start: the run ends as `diverged`."""


class DivergenceGuard:
    """The reference is the larger of the first loss seen and `floor` (the trainer gives ln(vocabulary), the
    loss of a uniform guess), so a resumed run, whose first loss is already low, is not held to it: a loss
    1.5 x above a uniform guess is far worse than an untrained model, never a spike of a healthy run."""

    def __init__(self, floor: float = 0.0, rise_factor: float = RISE_FACTOR, warmup_steps: int = RISE_AFTER_STEPS,
                 remedy: str = REMEDY):
        self.floor = floor
        self.remedy = remedy  # what the message tells the user to change: the workload's own flags
        self.rise_factor = rise_factor
        self.warmup_steps = warmup_steps
        self.first: float | None = None

    def check(self, step: int, loss: float, what: str = "training loss") -> None:
        """Raise Diverged when `loss` of `step` is not finite, or (after warm-up) rise_factor x the first."""
        check_finite(step, loss, what, self.remedy)
        if self.first is None:
            self.first = loss
        reference = max(self.first, self.floor)
        if step > self.warmup_steps and reference > 0 and loss > self.rise_factor * reference:
            raise Diverged(f"diverged at step {step}: the {what} is {loss:.4g}, more than {self.rise_factor:g} x "
                           f"its start {reference:.4g}; {self.remedy}")


def check_finite(step: int, value: float, what: str, remedy: str = REMEDY) -> None:
    """Raise Diverged when `value` (a loss, a validation bpb) of `step` is NaN or infinite."""
    if not math.isfinite(value):
        raise Diverged(f"diverged at step {step}: the {what} is {value} (not a number); {remedy}")


def json_safe(value):
    """`value` with every non-finite float (at any depth of dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
