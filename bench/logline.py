"""nanochat's human log lines: the formatter and the parser side by side, so they cannot drift.

One regex reads our logs and upstream nanochat's base_train logs alike, e.g.
  step 00042/21400 (0.20%) | loss: 7.123456 | grad norm: 0.8123 | lrm: 1.00 | dt: 487.12ms | tok/sec: 1,076,234 | mfu: 47.52 | total time: 0.34m
  Step 00250 | Validation bpb: 1.0234
(the `grad norm:` segment is optional: upstream added it on 2025-11-05; the `/total` too: mid-training's
line has none). A label that `srun -l` puts in front (`0: step 00042/...`) is allowed and ignored. Where MFU
is not measured (a CPU, a GPU without a known peak) the field stays, so the line keeps its shape for every
parser, and reads `mfu: -` (parsed as None): a printed 0.00 would claim a measured zero.
"""

import hashlib
import re

SRUN_LABEL = r"(?:\d+: )?"  # srun -l labels each line with its task number
STEP_RE = re.compile(
    r"^" + SRUN_LABEL + r"step (?P<step>\d+)(?:/(?P<num_iterations>\d+))? \((?P<pct>[\d.]+)%\) \| "
    r"loss: (?P<loss>[-\d.naninf]+) \| "
    r"(?:grad norm: (?P<grad_norm>[-\d.naninf]+) \| )?"
    r"lrm: (?P<lrm>[-\d.]+) \| "
    r"dt: (?P<dt_ms>[\d.]+)ms \| "
    r"tok/sec: (?P<tok_per_sec>[\d,]+) \| "
    r"mfu: (?P<mfu>-|[-\d.naninf]+) \| "
    r"total time: (?P<total_time_m>[\d.]+)m\s*$"
)
VAL_RE = re.compile(r"^" + SRUN_LABEL + r"Step (?P<step>\d+) \| Validation bpb: (?P<val_bpb>[-\d.naninf]+)\s*$")


def format_step_line(step: int, num_iterations: int, loss: float, lrm: float, dt_s: float,
                     tok_per_sec: float, mfu: float | None, total_time_s: float,
                     grad_norm: float | None = None) -> str:
    """nanochat's step line; `mfu` None (not measured) prints as `mfu: -`."""
    pct = 100 * step / max(num_iterations, 1)
    grad = f" grad norm: {grad_norm:.4f} |" if grad_norm is not None else ""
    mfu_text = "-" if mfu is None else f"{mfu:.2f}"
    return (f"step {step:05d}/{num_iterations:05d} ({pct:.2f}%) | loss: {loss:.6f} |{grad} "
            f"lrm: {lrm:.2f} | dt: {dt_s * 1000:.2f}ms | tok/sec: {int(tok_per_sec):,} | "
            f"mfu: {mfu_text} | total time: {total_time_s / 60:.2f}m")


def format_progress_step_line(step: int, pct: float, loss: float, lrm: float, dt_s: float, tok_per_sec: float,
                              mfu: float | None, total_time_s: float) -> str:
    """Mid-training's line (upstream mid_train's): no total (the data decides when the stage ends); the percentage is
    the data's progress."""
    return (f"step {step:05d} ({pct:.2f}%) | loss: {loss:.6f} | lrm: {lrm:.2f} | dt: {dt_s * 1000:.2f}ms | "
            f"tok/sec: {int(tok_per_sec):,} | mfu: {'-' if mfu is None else f'{mfu:.2f}'} | "
            f"total time: {total_time_s / 60:.2f}m")


def format_val_line(step: int, val_bpb: float) -> str:
    return f"Step {step:05d} | Validation bpb: {val_bpb:.4f}"


def steps_digest(records: list[dict]) -> str | None:
    """The step records as their lines print them (step, loss to 6 decimals, dt to 0.01 ms), hashed: a run's step
    events and its console log's step lines give the same digest, another run's timings another (None: no steps)."""
    if not records:
        return None
    h = hashlib.blake2b(digest_size=12)
    for r in records:
        h.update(f"{r.get('step')}|{_printed(r.get('loss'), '.6f')}|{_printed(r.get('dt_ms'), '.2f')}\n".encode())
    return h.hexdigest()


def _printed(value, spec: str) -> str:
    """A number as a step line prints it; a damaged record's field (a string, a bool, none, an integer past a
    float's range) as '-'."""
    try:
        return format(value, spec) if type(value) in (int, float) else "-"
    except OverflowError:
        return "-"


def parse_step_line(line: str) -> dict | None:
    """The fields of a step line as numbers, or None if the line is not one."""
    m = STEP_RE.match(line.strip())
    if not m:
        return None
    d = m.groupdict()
    return {
        "step": int(d["step"]),
        "num_iterations": int(d["num_iterations"]) if d["num_iterations"] is not None else None,
        "loss": float(d["loss"]),
        "grad_norm": float(d["grad_norm"]) if d["grad_norm"] is not None else None,
        "lrm": float(d["lrm"]),
        "dt_ms": float(d["dt_ms"]),
        "tok_per_sec": float(d["tok_per_sec"].replace(",", "")),
        "mfu": None if d["mfu"] == "-" else float(d["mfu"]),
        "total_time_s": float(d["total_time_m"]) * 60,
    }


def parse_val_line(line: str) -> dict | None:
    m = VAL_RE.match(line.strip())
    if not m:
        return None
    return {"step": int(m["step"]), "val_bpb": float(m["val_bpb"])}
