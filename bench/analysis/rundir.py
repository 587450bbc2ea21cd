"""One run directory -> one flat row: manifest fields, status, and the figures of its events.

Reads the contract of bench/schema.py (run.json + metrics.jsonl) and never trusts it blindly:
an empty, truncated or half-written file, an unknown schema_version, NaN figures or a run still
going are reported in the row (`skip_reason` when its figures must not be used, `notes` for what
was repaired), never raised and never averaged in. Only rows with `skip_reason` None are usable.
Steps come from metrics.jsonl; without step events, from nanochat step lines in the run's *.log.
Only regular files are read (bench/analysis/regular_files.py): a link or a FIFO under a run's name is
left unread and said so in the row.
"""

import json
import math
import os
from pathlib import Path

from bench import schema
from bench.analysis import upstream
from bench.analysis.figures import _finite, step_figures
from bench.analysis.regular_files import NotRegularFile, read_regular

# Nested sections of run.json that may hold the trainer config (asdict(TrainConfig) and friends).
CONFIG_SECTIONS = ("config", "train_config", "trainer", "user_config")
MANIFEST_FIELDS = ("run_id", "sweep_id", "workload", "runtime", "repeat", "nodes", "gpus_per_node",
                   "world_size", "peak_flops_per_gpu", "flops_per_token", "git_revision", "message")
CONFIG_FIELDS = ("depth", "max_seq_len", "device_batch_size", "total_batch_size", "num_iterations",
                 "force_flash_sdpa", "sdpa_backends")
SOFTWARE_FIELDS = {"gpu_name": "gpu_name", "torch": "torch_version", "cuda": "cuda_version",
                   "nccl": "nccl_version", "driver": "driver_version"}
SLURM_FIELDS = {"job_id": "slurm_job_id", "nodelist": "nodelist", "partition": "partition"}
LIVE_STATUSES = ("pending", "running")


def is_run_dir(names: set[str]) -> bool:
    return schema.RUN_JSON in names or schema.METRICS_JSONL in names


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
        return {}, "run.json is empty (being written, or the writer died)"
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as e:
        return {}, f"run.json is not valid JSON ({e.msg} at line {e.lineno})"
    if not isinstance(manifest, dict):
        return {}, "run.json is not a JSON object"
    version = manifest.get("schema_version")
    if version is None:
        notes.append(f"run.json has no schema_version; read as version {schema.SCHEMA_VERSION}")
    elif version != schema.SCHEMA_VERSION:
        return manifest, (f"run.json schema_version {version!r} is not the known version "
                          f"{schema.SCHEMA_VERSION}; figures not computed")
    return manifest, None


# Keys every event of a type must have: the contract's fields plus "event" and "t".
_REQUIRED = {name: frozenset(("event", "t", *fields)) for name, fields in schema.EVENTS.items()}


def _decode(lines: list[str], cut: bool, notes: list[str]) -> tuple[list, int]:
    """JSON values of non-empty lines and the count of bad ones. One parse of the whole file as a JSON
    array when every line is sound (the common case, several times faster), else line by line."""
    body = [line for line in lines if line.strip()]
    try:
        values = json.loads("[" + ",".join(body) + "]")
        if len(values) == len(body):  # a line holding two values (`{..}, {..}`) is not sound JSONL
            return values, 0
    except json.JSONDecodeError:
        pass
    values, bad = [], 0
    for i, line in enumerate(body):
        try:
            values.append(json.loads(line))
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
    events, unknown = [], 0
    for ev in values:
        required = _REQUIRED.get(ev.get("event")) if isinstance(ev, dict) else None
        if required is None:
            unknown += 1
        elif not required <= ev.keys():
            bad += 1
        else:
            events.append(ev)
    if bad:
        notes.append(f"metrics.jsonl: {bad} malformed line(s) left out")
    if unknown:
        notes.append(f"metrics.jsonl: {unknown} value(s) of unknown event type ignored")
    return events


def _lookup(manifest: dict, key: str):
    """A field from the top level of run.json, else from a nested trainer-config section."""
    if key in manifest:
        return manifest[key]
    for section in CONFIG_SECTIONS:
        value = manifest.get(section)
        if isinstance(value, dict) and key in value:
            return value[key]
    return None


def _scalar(value):
    """Keep table cells scalar: numbers and strings pass, anything else becomes its JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def manifest_fields(manifest: dict, notes: list[str]) -> dict:
    row = {k: _scalar(_lookup(manifest, k)) for k in MANIFEST_FIELDS + CONFIG_FIELDS}
    non_finite = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]
    for k in non_finite:
        row[k] = None  # NaN/inf in the manifest is no value: treated as unknown, and said
    if non_finite:
        notes.append(f"run.json: non-finite {', '.join(non_finite)} treated as unknown")
    image = manifest.get("image")
    if isinstance(image, dict):
        row["image"], row["image_digest"] = image.get("reference") or image.get("ref"), image.get("digest")
    else:
        row["image"] = _scalar(image)
    for section, fields in (("software", SOFTWARE_FIELDS), ("slurm", SLURM_FIELDS)):
        values = manifest.get(section) if isinstance(manifest.get(section), dict) else {}
        for key, column in fields.items():
            row[column] = _scalar(values.get(key))
    row["t0"] = launch_t0(manifest)
    return row


def launch_t0(manifest: dict) -> float | None:
    """The launcher's NANOCHAT_BENCH_T0 as recorded: `t0`, the trainer's `launch_t0`, the batch
    script's `launcher.t0`, or a copy of the environment; None when the run was not launched with it."""
    launcher = manifest.get("launcher") if isinstance(manifest.get("launcher"), dict) else {}
    env = manifest.get("env") if isinstance(manifest.get("env"), dict) else {}
    for value in (manifest.get("t0"), manifest.get("launch_t0"), launcher.get("t0"), env.get(schema.ENV_T0)):
        t0 = _finite(_number(value))
        if t0:
            return t0
    return None


def _number(value):
    """Numbers written as strings (an environment variable copied verbatim) become floats."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return value


def event_fields(events: list[dict]) -> dict:
    """Milestone times and end-of-run figures; the first milestone and the last end/error win."""
    first: dict[str, dict] = {}
    last: dict[str, dict] = {}
    for ev in events:
        first.setdefault(ev["event"], ev)
        last[ev["event"]] = ev
    row: dict = {}
    # milestone times: a non-numeric or NaN `t` is no time (step times are not needed: steps carry dt_ms)
    t = {name: v for name in ("start", "dist_init", "model_ready", "first_step")
         if name in first and (v := _finite(first[name]["t"])) is not None}
    row["t_start"] = t.get("start")
    if "start" in t and "first_step" in t:
        row["time_to_first_step_s"] = t["first_step"] - t["start"]
    if "model_ready" in first:
        row["flops_per_token"] = _finite(first["model_ready"].get("flops_per_token"))
        row["num_params"] = _finite(first["model_ready"].get("num_params"))
    if "dist_init" in first:
        row["world_size"] = first["dist_init"].get("world_size")
    if "end" in last:
        end = last["end"]
        # 0 is the trainer's "not measured" on CPU (as nanochat's `get_max_memory = lambda: 0`), not a figure
        row["peak_mem_mib"] = _finite(end.get("peak_mem_mib")) or None
        row["total_training_time_s"] = _finite(end.get("total_training_time_s"))
        row["min_val_bpb"] = _finite(end.get("min_val_bpb"))
    if row.get("min_val_bpb") is None:
        vals = [v for v in (_finite(ev.get("val_bpb")) for ev in events if ev["event"] == "val") if v is not None]
        row["min_val_bpb"] = min(vals) if vals else None
    if "error" in last:
        row["error_kind"], row["error_message"] = last["error"].get("kind"), last["error"].get("message")
    row["has_end"] = "end" in last
    return row


def resolve_status(manifest: dict, ev: dict, notes: list[str]) -> tuple[str, str | None]:
    """The run's status and message: run.json's word first, then the events' (error, end)."""
    status, message = manifest.get("status"), manifest.get("message")
    if status is None:
        if ev.get("error_kind"):
            status = ev["error_kind"] if ev["error_kind"] in schema.FINAL_STATUSES else "failed"
        elif ev.get("has_end"):
            status = "ok"
        else:
            status = "running"
        if manifest:
            notes.append(f"run.json has no status; '{status}' inferred from events")
        else:
            notes.append(f"no run.json; status '{status}' inferred from events")
    if message is None and ev.get("error_message"):
        message = f"{ev.get('error_kind')}: {ev['error_message']}"
    if status == "ok" and ev.get("error_kind"):
        notes.append(f"status ok but an error event was recorded ({ev['error_kind']})")
    return str(status), (str(message) if message is not None else None)


def read_run_dir(run_dir: Path, names: set[str] | None = None) -> dict:
    """The flat row of one run directory (see bench/analysis/collect.py COLUMNS for the columns)."""
    run_dir = Path(run_dir)
    names = names if names is not None else set(os.listdir(run_dir))
    notes: list[str] = []
    manifest, skip = read_run_json(run_dir / schema.RUN_JSON, notes)
    events = read_events(run_dir / schema.METRICS_JSONL, notes)
    row = {"source": str(run_dir), "source_kind": "run_dir", **manifest_fields(manifest, notes)}
    ev = event_fields(events)
    row.update({k: v for k, v in ev.items() if v is not None and k not in ("has_end",)})
    nodes, per_node = row.get("nodes"), row.get("gpus_per_node")
    if row.get("world_size") is None and isinstance(nodes, int) and isinstance(per_node, int):
        row["world_size"] = nodes * per_node
    if row.get("run_id") is None:
        row["run_id"] = run_dir.name
    row["status"], row["message"] = resolve_status(manifest, ev, notes)
    if row["status"] not in schema.STATUSES:
        skip = skip or f"unknown status {row['status']!r} (known: {', '.join(schema.STATUSES)})"
    if row.get("t0") is not None and row.get("t_start") is not None:
        row["startup_overhead_s"] = row["t_start"] - row["t0"]
        if row.get("time_to_first_step_s") is not None:
            row["launch_to_first_step_s"] = row["startup_overhead_s"] + row["time_to_first_step_s"]

    steps = [e for e in events if e["event"] == "step"]
    if not steps:
        steps = _steps_from_logs(run_dir, names, notes)
    if skip is None:
        world = row.get("world_size") if isinstance(row.get("world_size"), int) else None
        figs, fig_notes = step_figures(steps, world, row.get("flops_per_token"), row.get("peak_flops_per_gpu"))
        row.update({k: v for k, v in figs.items() if v is not None})
        notes += fig_notes
    row["skip_reason"] = skip or usability(row)
    row["notes"] = "; ".join(notes) or None
    return row


def usability(row: dict) -> str | None:
    """Why a readable row still cannot enter the figures (None when it can)."""
    status = row["status"]
    if status in LIVE_STATUSES:
        return f"run {status}: not finished"
    if status != "ok":
        return f"run {status}"
    if not row.get("steps_recorded"):
        return "status ok but no step records"
    if row.get("tok_per_sec") is None:
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
