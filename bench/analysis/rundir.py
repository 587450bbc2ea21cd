"""One run directory -> one flat row: manifest fields, status, and the figures of its events.

Reads the contract of bench/contract/ (run.json + metrics.jsonl) and validates it: a run.json that
is empty, half-written or not as the contract says (another schema_version, a field of the wrong type
or an unknown one) is the row's `skip_reason`; an event line that is cut, malformed or not in the
contract is left out and counted in `notes`. NaN figures and runs still going are reported the same
way, never raised and never averaged in. Only rows with `skip_reason` None are usable. Steps come
from metrics.jsonl; without step events, from nanochat step lines in the run's *.log.
Only regular files are read (bench/analysis/regular_files.py): a link or a FIFO under a run's name is
left unread and said so in the row. A config value an older release recorded in another form is read as
what it meant then (fused_kernels: a bool before it took names); one it did not record is scaling.py's LEGACY.
"""

import json
import math
import os
from pathlib import Path

from bench import contract, workloads
from bench.analysis import upstream
from bench.analysis import why
from bench.analysis.columns import FLAT
from bench.analysis.figures import diverged, finite, step_figures, steady_mask, warmup_flags
from bench.analysis.regular_files import NotRegularFile, read_regular
from bench.errors import json_reason
from bench.logline import steps_digest
from bench.workloads.base import EVALUATION, TRAINING
from bench.workloads.nntile.config import TILES

LIVE_STATUSES = ("pending", "running")


def is_run_dir(names: set[str]) -> bool:
    return contract.RUN_JSON in names or contract.METRICS_JSONL in names


def never_ran(run_dir: Path, names: set[str]) -> bool:
    """A flow's stage that never started: only its run.json, whose evidence is all `not_run`. It is no run (no
    attempt, no figures), and a rerun of an earlier release set such marks aside as <stage>.attempt-<time>, so
    each Ctrl-C of a flow was counted again as a cancelled run per stage it never reached."""
    if names != {contract.RUN_JSON}:
        return False
    manifest, skip = read_run_json(run_dir / contract.RUN_JSON, [])
    return skip is None and contract.never_started(manifest.get("evidence"))


def read_run_json(path: Path, notes: list[str]) -> tuple[dict, str | None]:
    """The manifest and a reason to skip the run's figures (None when it can be read as ours)."""
    try:
        text = read_regular(path).decode("utf-8")
    except FileNotFoundError:
        return {}, None
    except NotRegularFile as e:
        return {}, f"run.json is {e.strerror}"
    except OSError as e:
        return {}, f"run.json unreadable: {e.strerror}"
    except UnicodeDecodeError:
        return {}, "run.json is not UTF-8 text (a damaged or foreign file)"
    if not text.strip():
        return {}, "run.json is empty (nanochat-bench replaces it whole: a copy or another tool emptied it)"
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as e:
        return {}, f"run.json is not valid JSON ({json_reason(e)})"
    except RecursionError:  # json's parser recurses once per nesting level
        return {}, "run.json is not a run's (arrays or objects nested too deep to read)"
    try:
        read = contract.RunManifest.from_dict(manifest)  # any known major, migrated; unknown fields noted
        notes += read.notes
        return read.to_dict(), None
    except contract.SchemaError as e:
        plain = manifest if isinstance(manifest, dict) else {}
        return plain, f"run.json does not follow the run contract ({e}); figures not computed"


def _decode(lines: list[str], cut: bool, notes: list[str]) -> tuple[list, int]:
    """JSON values of non-empty lines and the count of bad ones. One parse of the whole file as a JSON
    array when every line is sound (the common case, several times faster), else line by line."""
    body = [line for line in lines if line.strip()]
    try:
        values = json.loads("[" + ",".join(body) + "]")
        if len(values) == len(body):  # a line holding two values (`{..}, {..}`) is not sound JSONL
            return values, 0
    except (json.JSONDecodeError, RecursionError):  # RecursionError: a line nested too deep to parse
        pass
    values, bad = [], 0
    for i, line in enumerate(body):
        try:
            values.append(json.loads(line))
        except RecursionError:
            bad += 1
        except json.JSONDecodeError:
            if cut and i == len(body) - 1:
                notes.append("metrics.jsonl: last line cut mid-JSON, left out")
            else:
                bad += 1
    return values, bad


def read_events(path: Path, notes: list[str]) -> list[dict]:
    """The well-formed events of metrics.jsonl; bad lines are counted in notes and left out."""
    try:
        text = read_regular(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except NotRegularFile as e:
        notes.append(f"metrics.jsonl is {e.strerror}")
        return []
    except OSError as e:
        notes.append(f"metrics.jsonl unreadable: {e.strerror}")
        return []
    lines = text.split("\n")
    cut = lines[-1].strip() != ""  # a last line without its newline is being written or was cut off
    values, bad = _decode(lines, cut, notes)
    events, violations = [], []
    for ev in values:
        try:
            events.append(contract.parse_event(ev, notes))
        except contract.SchemaError as e:  # named without its file: the note below says metrics.jsonl once
            violations.append(str(e).removeprefix(f"{contract.METRICS_JSONL}: "))
    if bad:
        notes.append(f"metrics.jsonl: {bad} malformed line(s) left out")
    if violations:
        notes.append(f"metrics.jsonl: {len(violations)} line(s) not in the run contract left out "
                     f"(first: {violations[0]})")
    return events


def _scalar(value):
    """Keep table cells scalar: numbers and strings pass, anything else becomes its JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def manifest_fields(manifest: dict, notes: list[str]) -> dict:
    """The columns run.json fills (bench/analysis/columns.py FLAT, by their paths) and the derived ones."""
    row = {name: _scalar(_at(manifest, path)) for name, path in FLAT.items()}
    config = why.section(manifest, "config")
    row["num_iterations"] = horizon(config, manifest)
    non_finite = [k for k, v in row.items() if (isinstance(v, float) and not math.isfinite(v))
                  or (type(v) is int and not -2 ** 63 <= v < 2 ** 63)]
    for k in non_finite:
        row[k] = None  # NaN/inf (or a count past 64 bits) in the manifest is no value: treated as unknown, and said
    if non_finite:
        notes.append(f"run.json: non-finite or out-of-range {', '.join(non_finite)} treated as unknown")
    row["t0"] = finite(row["t0"])  # NANOCHAT_BENCH_T0, taken before srun
    row["precision"] = precision(config, manifest.get("workload")) if manifest else None
    row["fused_kernels"] = fused_kernels(config)
    row["tiling"] = tiling(config, why.section(manifest, "nntile"))
    row["scores"] = scores_text(manifest.get("scores"))
    row["settings"] = settings_text(config)
    row["stage_time_s"] = stage_time(manifest)
    return row


def scores_text(scores) -> str | None:
    """run.json `scores` as one cell: JSON of the finite figures by name, sorted (None when there are none)."""
    if not isinstance(scores, dict):
        return None
    kept = {str(k): float(v) for k, v in scores.items() if finite(v) is not None and not isinstance(v, bool)}
    return json.dumps(kept, sort_keys=True) if kept else None


# Flags that change neither what a stage computes nor how: its name, its checkpoint's folder (a point's own tag),
# when a batch job must stop (its clock time), the bounds of its waits, and the step a later attempt resumed from
NOT_SETTINGS = ("run", "model_tag", "deadline", "watchdog_s", "heartbeat_timeout_s", "join_timeout_s",
                "resume_from_step")


def settings_text(config: dict) -> str | None:
    """run.json `config` as one cell: JSON of the flags a run ran with, less NOT_SETTINGS and where base_eval's
    bundle was staged (its origin, rows and seed stay); None where none was recorded."""
    kept = {k: v for k, v in config.items() if k not in NOT_SETTINGS}
    if isinstance(kept.get("eval_bundle"), dict):
        kept["eval_bundle"] = {k: v for k, v in kept["eval_bundle"].items() if k != "path"}
    return json.dumps(kept, sort_keys=True, default=str) if kept else None


def horizon(config: dict, manifest: dict):
    """The steps a run was set to train: --num_iterations where it gave them; where it left them to the trainer (-1:
    from --target_flops or --target_param_data_ratio, or an epoch of the data) the steps the trainer recorded (run.json
    num_iterations), as runs given -1 and other targets trained other horizons; the flag where none was recorded (an
    older release, a run that stopped before it knew its horizon)."""
    flag, steps = _scalar(config.get("num_iterations")), manifest.get("num_iterations")
    if type(flag) is int and flag <= 0 and type(steps) is int and 0 < steps < 2 ** 63:
        return steps
    return flag


def stage_time(manifest: dict) -> float | None:
    """Seconds from the launch (NANOCHAT_BENCH_T0) to the end the launcher saw, else to the final status."""
    launch = why.section(manifest, "launch")
    t0, end = finite(launch.get("t0")), finite(launch.get("finished_at")) or finite(manifest.get("finished_at"))
    return end - t0 if t0 is not None and end is not None and end >= t0 else None


def _at(manifest: dict, path: tuple[str, ...]):
    """The value at a path of run.json; None where a section is absent or not an object."""
    value = manifest
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


# upstream's --dtype spelling of the bf16 that runs without the flag record by default: one precision, one key
DTYPE_SPELLINGS = {"bfloat16": "bf16"}


def precision(config: dict, workload=None) -> str:
    """fp8 when the run trained in FP8 (`--fp8`), else its dtype; a run that records neither trained in its
    workload's precision (bf16 for nanochat, the only one before `--fp8` existed; float32 for NNTile).
    `--fp8_lm_head` (lm_head's matmul in FP8 too, or alone) is another program, so it is part of the
    precision: " + fp8 lm_head"."""
    known = workloads.by_run_workload(workload)
    dtype = config.get("dtype") if getattr(known, "dtype_sets_precision", True) else None
    dtype = DTYPE_SPELLINGS.get(dtype, dtype) if isinstance(dtype, str) else dtype
    default = getattr(known, "precision", "bf16")
    base = "fp8" if config.get("fp8") is True else str(dtype) if isinstance(dtype, str) and dtype else default
    return base + " + fp8 lm_head" if config.get("fp8_lm_head") is True else base


# --fused_kernels as recorded from its start (9f17fe5) until it took names: a bool, rotary + QK norm its one kernel
FUSED_KERNELS_OF_A_BOOL = {True: "rotary_norm", False: ""}


def fused_kernels(config: dict) -> str | None:
    """The hand-written kernels a run used, as the trainer records them: their names, comma-separated, in one order
    ("" for none); None where not recorded (scaling.LEGACY: nanochat's runs from before the flag used none).
    The previous release recorded a bool, whose true meant rotary_norm alone; read so, those runs are repeats of
    the ones that name the same kernels, and never of runs with another set. Only here is run.json's JSON type
    seen: in the table both were text, and "True" would be taken for every kernel of a later release."""
    value = config.get("fused_kernels")
    return FUSED_KERNELS_OF_A_BOOL[value] if isinstance(value, bool) else _scalar(value)


def tiling(config: dict, nntile: dict) -> str | None:
    """NNTile's tiled axes ("minibatch_tile=4,seq_tile=64"), "untiled" where none is, else the tiling it recorded;
    None for a workload without tiles. The runner records each tile resolved, an untiled axis's as its extent (the
    GPT-2 shape's, or --minibatch), and -1 means untiled as the flags take it: either cuts nothing, so runs that
    differ only in an extent (--minibatch) are not told apart by their tiling."""
    shape = config.get("gpt2") if isinstance(config.get("gpt2"), dict) else {}
    extents = {**shape, "minibatch": config.get("minibatch")}
    tiles = {k: v for k, v in sorted(config.items()) if k.endswith("_tile") and isinstance(v, int)}
    if tiles:
        cut = {k: v for k, v in tiles.items() if v != -1 and v != extents.get(dict(TILES).get(k))}
        return ",".join(f"{k}={v}" for k, v in cut.items()) or "untiled"
    recorded = nntile.get("tiling")
    return json.dumps(recorded, sort_keys=True) if isinstance(recorded, dict) and recorded else None


def last_attempt(events: list[dict]) -> list[dict]:
    """The events of the trainer's last start: a run resumed into its directory (--resume_from_step) appends a
    second start, and run.json's launch time is that attempt's, so its milestones are measured from it alone.
    `runtime_start` is written beside its `start` (after it by the trainer), so one just before it goes with it."""
    starts = [i for i, ev in enumerate(events) if ev["event"] == "start"]
    if not starts:
        return events
    begin = starts[-1]
    if begin > 0 and events[begin - 1]["event"] == "runtime_start":
        begin -= 1
    return events[begin:]


def milestone_times(events: list[dict]) -> dict:
    """{event: t} of the last attempt, the first of each kind (a non-numeric or NaN `t` is no time)."""
    times: dict = {}
    for ev in last_attempt(events):
        times.setdefault(ev["event"], finite(ev["t"]))
    return {name: t for name, t in times.items() if t is not None}


def event_fields(events: list[dict]) -> dict:
    """Milestone times (of the last attempt) and end-of-run figures; the first milestone and the last end/error
    win."""
    first: dict[str, dict] = {}
    last: dict[str, dict] = {}
    for ev in events:
        first.setdefault(ev["event"], ev)
        last[ev["event"]] = ev
    row: dict = {}
    # milestone times (step times are not needed: steps carry dt_ms)
    t = milestone_times(events)
    row["t_start"] = t.get("start")
    if "start" in t and "first_step" in t:
        row["time_to_first_step_s"] = t["first_step"] - t["start"]
    if "model_ready" in first:
        row["flops_per_token"] = finite(first["model_ready"].get("flops_per_token"))
        row["num_params"] = finite(first["model_ready"].get("num_params"))
    if "dist_init" in first:
        row["world_size"] = first["dist_init"].get("world_size")
    if "end" in last:
        end = last["end"]
        # 0 is the trainer's "not measured" on CPU (as nanochat's `get_max_memory = lambda: 0`), not a figure
        row["peak_mem_mib"] = finite(end.get("peak_mem_mib")) or None
        row["total_training_time_s"] = finite(end.get("total_training_time_s"))
        row["min_val_bpb"] = finite(end.get("min_val_bpb"))
    if row.get("min_val_bpb") is None:
        vals = [v for v in (finite(ev.get("val_bpb")) for ev in events if ev["event"] == "val") if v is not None]
        row["min_val_bpb"] = min(vals) if vals else None
    row.update(score_rates([ev for ev in events if ev["event"] == "score"]))
    if "error" in last:
        row["error_kind"], row["error_message"] = last["error"].get("kind"), last["error"].get("message")
    row["has_end"] = "end" in last
    return row


# The scores that are means of the others (CORE over base_eval's tasks, ChatCORE over chat_eval's): what they
# cover is counted in the tasks' own events (base_eval's CORE event once carried its tasks' count again).
MEAN_SCORES = ("CORE", "ChatCORE")


def score_rates(scored: list[dict]) -> dict:
    """An evaluation's throughput from its score events: the problems they scored (sequences, examples) and
    the tokens they counted, each over the seconds of the scores that counted them (only where every such
    score was timed; a mean of other scores counts nothing)."""
    scored = [ev for ev in scored if ev.get("name") not in MEAN_SCORES]
    row = {}
    for count, rate in (("problems", "problems_per_sec"), ("tokens", "eval_tok_per_sec")):
        counted = [ev for ev in scored if finite(ev.get(count)) is not None]
        seconds = [t for ev in counted if (t := finite(ev.get("seconds")))]
        total = sum(finite(ev[count]) for ev in counted)
        if count == "problems" and counted:
            row["problems"] = total
        if counted and len(seconds) == len(counted) and sum(seconds) > 0:
            row[rate] = total / sum(seconds)
    return row


def resolve_status(manifest: dict, ev: dict, notes: list[str],
                   unread: str | None = None) -> tuple[str | None, str | None]:
    """The run's status and message: run.json's word first, then the events' (error, end); `unread`: why a
    run.json that is there could not be read. With neither, the status is None (unknown): run.json is replaced
    whole, never seen half written, so an unreadable one says nothing of a live run, however long ago its writer
    died, and the run is reported as unreadable, not as not finished. Nor is such a run ok for its end event: its
    figures are not used, so collect's count of ok runs would disagree with the report's runs skipped."""
    status, message = manifest.get("status"), manifest.get("message")
    if status is None:
        if ev.get("error_kind"):
            status = ev["error_kind"] if ev["error_kind"] in contract.FINAL_STATUSES else "failed"
        elif not unread:
            status = "ok" if ev.get("has_end") else "running"
        inferred = (f"'{status}' inferred from events" if status else
                    "unknown (an end event, yet only run.json says a run succeeded)" if ev.get("has_end") else
                    "unknown (no end or error event)")
        notes.append(f"run.json has no status; {inferred}" if manifest
                     else f"{unread or 'no run.json'}; status {inferred}")
    if message is None and ev.get("error_message"):
        message = f"{ev.get('error_kind')}: {ev['error_message']}"
    if status == "ok" and ev.get("error_kind"):
        notes.append(f"status ok but an error event was recorded ({ev['error_kind']})")
    return (str(status) if status is not None else None), (str(message) if message is not None else None)


def read_run_dir(run_dir: Path, names: set[str] | None = None) -> dict:
    """The flat row of one run directory (its columns: bench/analysis/columns.py)."""
    run_dir = Path(run_dir)
    names = names if names is not None else set(os.listdir(run_dir))
    notes: list[str] = []
    manifest, skip = read_run_json(run_dir / contract.RUN_JSON, notes)
    impl = workloads.by_run_workload(manifest.get("workload"))  # None: a workload this release does not know
    events = read_events(run_dir / contract.METRICS_JSONL, notes)
    if impl is not None:  # what an older release of the workload recorded in another form, read as it meant
        events = impl.read_events(events, why.section(manifest, "config"))
    row = {"source": str(run_dir), "source_kind": "run_dir", **manifest_fields(manifest, notes)}
    ev = event_fields(events)
    row.update({k: v for k, v in ev.items() if v is not None and k != "has_end"})
    nodes, per_node = row.get("nodes"), row.get("gpus_per_node")
    if row.get("world_size") is None and isinstance(nodes, int) and isinstance(per_node, int):
        row["world_size"] = nodes * per_node
    if row.get("run_id") is None:
        row["run_id"] = run_dir.name
    row["status"], row["message"] = resolve_status(manifest, ev, notes, skip)
    if row["status"] not in contract.STATUSES:
        skip = skip or f"unknown status {row['status']!r} (known: {', '.join(contract.STATUSES)})"

    steps = [e for e in events if e["event"] == "step"]
    starts = restart_steps(events)
    if not steps:
        steps = _steps_from_logs(run_dir, names, notes)
    row["steps_digest"] = steps_digest(steps)  # whatever the run's end: its console log elsewhere is this run
    if skip is None:
        world = row.get("world_size") if isinstance(row.get("world_size"), int) else None
        # a trainer whose tok/s is not the positions it ran (SFT's supervised tokens) has its own MFU recorded
        positions = getattr(impl, "step_tokens", "positions") == "positions"
        figs, fig_notes = step_figures(steps, world, row.get("flops_per_token"), row.get("peak_flops_per_gpu"),
                                       tok_are_positions=positions, starts=starts)
        row.update({k: v for k, v in figs.items() if v is not None})
        notes += fig_notes
        mask, _ = steady_mask([int(s["step"]) for s in steps], starts, warmup_flags(steps))
        row.update(why.split_fields([s for s, m in zip(steps, mask) if m]))
    row.update(why.phase_fields(manifest, milestone_times(events)))
    # launch.t0 is the batch host's clock, t_start rank 0's node's: under a skew both are off by it
    if row.get("t0") is not None and row.get("t_start") is not None and not row.get("clock_skew"):
        row["startup_overhead_s"] = max(row["t_start"] - row["t0"], 0.0)
        if row.get("time_to_first_step_s") is not None:
            row["launch_to_first_step_s"] = row["startup_overhead_s"] + row["time_to_first_step_s"]
    row.update(why.section_fields(manifest))
    row["skip_reason"] = skip or usability(row, getattr(impl, "kind", TRAINING) == EVALUATION) or diverged(steps)
    row["notes"] = "; ".join(notes) or None
    return row


def restart_steps(events: list[dict]) -> list[int]:
    """The first step after each `start` event but the first: a run resumed into its directory
    (--resume_from_step) starts again at a later step, and its first steps there are warm-up again (compile,
    allocator). The first start's steps follow the plain rule, whatever step they begin at."""
    starts, seen, new = [], 0, False
    for ev in events:
        if ev["event"] == "start":
            seen, new = seen + 1, True
        elif ev["event"] == "step" and new:
            if seen > 1:
                starts.append(int(ev["step"]))
            new = False
    return starts


def usability(row: dict, evaluation: bool = False) -> str | None:
    """Why a readable row still cannot enter the figures (None when it can). An evaluation (a workload of that
    kind: base_loss, base_eval, chat_eval; it takes no training step) has its scores, time and rates as figures."""
    status = row["status"]
    if status in LIVE_STATUSES:
        return f"run {status}: not finished"
    if status != "ok":
        return f"run {status}"
    if not evaluation and not row.get("steps_recorded"):
        return "status ok but no step records"
    if not evaluation and row.get("tok_per_sec") is None:
        return "no steady-state step with a finite time"
    if not isinstance(row.get("world_size"), int) or row["world_size"] < 1:
        return "world_size unknown"
    return None


def _steps_from_logs(run_dir: Path, names: set[str], notes: list[str]) -> list[dict]:
    """Step records from nanochat step lines in the run's logs, when metrics.jsonl has none."""
    for name in sorted(n for n in names if n.endswith(".log")):
        log = upstream.parse_log(run_dir / name)
        if log.restarts:
            notes.append(f"{name} holds several runs (step counter restarts); its steps not used")
        elif log.steps:
            notes.append(f"steps parsed from {name} (no step events)")
            return log.steps
    return []
