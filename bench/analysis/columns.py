"""The table's columns, each declared once: name, type, where it comes from, how repeats of one point are
summarised, its label, unit and cell format, and whether it tells one model (or way of training) from another.

Everything that names a column derives from this catalogue: the run-directory flattening (bench/analysis/
rundir.py reads `source`, a dotted path into run.json), the table's types and order (collect.py), the
figures a references file may bound (check.py), the comparison key and the point summaries (scaling.py),
the report's headers and cells (tables.py) and ReFrame's performance variables and units
(bench/reframe_checks/checks.py). A new column is one entry here.

`source` "run.json:<path>" is flattened from run.json as it is; "why:<section>" is computed from that
section of run.json (why.py); "events" from metrics.jsonl (or a log's step lines; rundir.py, figures.py);
"derived" from several fields (rundir.py); "collect" columns are the table's own bookkeeping. `key` columns are
the comparison key (DESIGN.md, what may be compared): runs that differ in any of them are never repeats
of one point. `perf` columns are ReFrame's performance variables, each of the kinds of run that have it: a
training run's come from its steady steps; an evaluation takes no step, so its figures are the problems it
scored per second and its time from launch to end.
"""

from dataclasses import dataclass

from bench import breakdown, workloads
from bench.workloads.base import EVALUATION, TRAINING

# Why-fields (bench/analysis/why.py): the parts of a steady step and the collectives of the pre-flight.
SPLIT = ("fwd_bwd_ms", "comm_ms", "optim_ms", "data_ms", "other_ms")
SPLIT_LABELS = {"fwd_bwd_ms": "forward+backward", "comm_ms": "exposed comm", "optim_ms": "optimizer",
                "data_ms": "data wait", "other_ms": "other"}  # each part's name, in tables and figures
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # "str", "int" or "float"
    source: str = "derived"  # "run.json:<dotted path>", "why:<section>", "events", "derived" or "collect"
    agg: str | None = None  # how repeats of one point are summarised (median, min, max); None: not a figure
    label: str = ""  # table header; "{per}" becomes GPU or rank
    unit: str = ""  # as in references files and ReFrame
    fmt: str = "g"  # cell format (bench/analysis/tables.py fmt): int, 1, 2, 3, pct or g
    key: str = ""  # part of the comparison key: "config" (how it trained) or "model" (what it trained)
    perf: tuple[str, ...] = ()  # the kinds of run (bench/workloads/base.py) it is a ReFrame performance variable of

    @property
    def path(self) -> tuple[str, ...] | None:
        """The run.json keys this column is read from, or None when something else computes it."""
        prefix = "run.json:"
        return tuple(self.source[len(prefix):].split(".")) if self.source.startswith(prefix) else None


# `perf`: a figure of the steps, of an evaluation, of every run
TRAIN, EVAL, ANY = (TRAINING,), (EVALUATION,), (TRAINING, EVALUATION)


def _rj(name: str, type_: str, path: str | None = None, **kw) -> Column:
    return Column(name, type_, f"run.json:{path or name}", **kw)


CATALOGUE: tuple[Column, ...] = (
    Column("root", "str", "collect"), Column("source", "str", "collect"), Column("source_kind", "str", "collect"),
    _rj("run_id", "str"), _rj("sweep_id", "str"), _rj("workload", "str", key="config"),
    # a flow's stage (bench/launch/flow.py): chat_eval after mid-training and after SFT are one workload
    _rj("stage", "str", key="config"),
    _rj("runtime", "str"), _rj("repeat", "int"), _rj("nodes", "int"), _rj("gpus_per_node", "int"),
    _rj("world_size", "int"),
    _rj("depth", "int", "config.depth", key="config"), _rj("max_seq_len", "int", "config.max_seq_len", key="config"),
    _rj("device_batch_size", "int", "config.device_batch_size"),
    _rj("total_batch_size", "int", "config.total_batch_size", agg="median", label="total batch", fmt="int"),
    _rj("device_type", "str", "config.device_type"),
    # the training horizon: --num_iterations, else (-1) the steps the trainer derived and recorded (rundir.py horizon)
    Column("num_iterations", "int", "derived"),
    _rj("force_flash_sdpa", "str", "config.force_flash_sdpa", key="config"),
    _rj("sdpa_backends", "str", "config.sdpa_backends", key="config"),
    _rj("gpu_name", "str", "software.gpu_name"), _rj("image", "str", "image.reference"),
    _rj("image_digest", "str", "image.digest"), _rj("slurm_job_id", "str", "slurm.job_id"),
    _rj("nodelist", "str", "slurm.nodelist"), _rj("partition", "str", "slurm.partition"),
    _rj("git_revision", "str"), _rj("torch_version", "str", "software.torch"),
    _rj("cuda_version", "str", "software.cuda"), _rj("nccl_version", "str", "software.nccl"),
    _rj("driver_version", "str", "software.driver"),
    _rj("status", "str"), _rj("message", "str"), Column("skip_reason", "str"), Column("notes", "str"),
    Column("steps_recorded", "int", "events"), Column("last_step", "int", "events"),
    Column("steady_steps", "int", "events"), Column("steady_rule", "str", "events"),
    Column("tok_per_sec", "float", "events", "median", "tok/s", "tok/s", "int", perf=TRAIN),
    Column("tok_per_sec_per_gpu", "float", "events", "median", "tok/s/{per}", "tok/s", "int", perf=TRAIN),
    Column("step_time_ms", "float", "events", "median", "step ms", "ms", "1", perf=TRAIN),
    Column("step_time_cv", "float", "events", "median", "step CV", "", "3"),
    Column("step_time_p90_ms", "float", "events", "median", "step p90 ms", "ms", "1"),
    # The model's identity: the events' model_ready wins over run.json (the trainer's own count).
    _rj("num_params", "float", agg="median", label="params", fmt="int", key="model"),
    _rj("vocab_size", "int", "vocabulary.vocab_size", label="vocabulary", fmt="int", key="model"),
    _rj("flops_per_token", "float", label="FLOPs/token", key="model"),
    # config.fp8 -> fp8, else the dtype; " + fp8 lm_head" with config.fp8_lm_head
    Column("precision", "str", "derived", label="precision", key="model"),
    _rj("data_origin", "str", "data.origin", label="data", key="model"),  # generated, downloaded or mixed
    _rj("tokenizer_sha256", "str", "data.tokenizer_sha256", label="tokenizer", key="model"),
    Column("tiling", "str", "derived", label="tiling", key="model"),  # NNTile's tile settings
    _rj("peak_flops_per_gpu", "float"),
    Column("mfu", "float", "events", "median", "MFU %", "%", "1", perf=TRAIN), Column("mfu_source", "str", "events"),
    _rj("t0", "float", "launch.t0"), Column("t_start", "float", "events"),
    Column("startup_overhead_s", "float", "events", "median", "start-up s", "s", "1", perf=ANY),
    Column("time_to_first_step_s", "float", "events", "median", "1st step s", "s", "1", perf=TRAIN),
    Column("launch_to_first_step_s", "float", "events", "median", "launch to 1st step", "s", "1"),
    Column("peak_mem_mib", "float", "events", "max", "peak mem MiB", "MiB", "int", perf=ANY),
    Column("min_val_bpb", "float", "events", "min", "min val bpb", "", "3"),
    Column("final_loss", "float", "events"), Column("total_training_time_s", "float", "events"),
    # the step records as their lines print them, hashed (bench/logline.py): a console log with a run directory's
    # steps is that run's output, one run (collect.py)
    Column("steps_digest", "str", "events"),
    # a stage's own figures (run.json scores, JSON text by name) and what its time and throughput were
    Column("scores", "str", "derived"),
    # the flags it ran with (run.json config, JSON) less those naming its checkpoint or bounding its waits: a flow's
    # stages are repeats only where these agree (stages.py)
    Column("settings", "str", "derived"),
    Column("stage_time_s", "float", "derived", "median", "time s", "s", "1", perf=EVAL),  # launch to the final status
    Column("problems", "float", "events", "median", "problems", fmt="int"),  # examples its score events scored
    Column("problems_per_sec", "float", "events", "median", "problems/s", "problems/s", "2", perf=EVAL),
    # tokens its score events counted (generated, or run forward) over the seconds of those scores
    Column("eval_tok_per_sec", "float", "events", "median", "eval tok/s", "tok/s", "int"),
    _rj("scaling", "str", key="config"), _rj("val_files_k", "int"), _rj("ofi_hook", "str"),
    _rj("strategy", "str", "config.strategy", key="config"),
    _rj("aspect_ratio", "int", "config.aspect_ratio", key="config"),
    # config.fused_kernels, the hand-written kernels by name ("" = none): other kernels, another program
    # (rundir.py fused_kernels reads the previous release's bool as the names it meant)
    Column("fused_kernels", "str", "derived", key="config"),
    *(Column(f"phase_{m}_s", "float", "events", "median", breakdown.LABELS[m], "s", "1")
      for m in breakdown.MILESTONES[1:]),
    Column("clock_skew", "str", "events"),  # the phases that came out negative: two hosts' clocks (why.py)
    *(Column(f"step_{k}", "float", "events", "median", f"{SPLIT_LABELS[k]} ms", "ms", "1") for k in SPLIT),
    *(Column(f"busbw_{c}_gbps", "float", "why:preflight", "median", f"{c.replace('_', '-')} GB/s", "GB/s", "1",
             perf=ANY) for c in COLLECTIVES),
    _rj("preflight_bytes", "float", "preflight.bytes", agg="median"),
    Column("net", "str", "why:network"), _rj("net_provider", "str", "network.net_provider"),
    Column("nccl_transports", "str", "why:network"), Column("net_over_sockets", "str", "why:network"),
    _rj("net_unverified", "str", "network.unverified"),  # a multi-node run the network gate could not judge
    # rank 0's NCCL/libfabric settings (run.json network_env less logging and plugin paths), JSON: CE's hook sets
    # its own, so runtimes compared may have run different tuning (findings.py)
    Column("net_tuning", "str", "why:network"),
    _rj("slowest_rank", "int", "breakdown.slowest_rank"), _rj("slowest_host", "str", "breakdown.slowest_host"),
    Column("rank_step_spread_pct", "float", "why:breakdown", "max"),
    Column("fingerprint", "str", "collect"), Column("row_version", "int", "collect"),
)

BY_NAME = {c.name: c for c in CATALOGUE}
TYPES = {c.name: c.type for c in CATALOGUE}  # the table's columns and types, in order
FIGURES = [c.name for c in CATALOGUE if c.type in ("int", "float")]  # what a references file may bound
AGGREGATES = {c.name: c.agg for c in CATALOGUE if c.agg}
FLAT = {c.name: c.path for c in CATALOGUE if c.path}  # the columns run.json fills as it is, by their path
KEYS = tuple(c.name for c in CATALOGUE if c.key)


def perf_units(kind: str) -> dict[str, str]:
    """ReFrame's performance variables of a kind of run (TRAINING or EVALUATION) and their units."""
    return {c.name: c.unit for c in CATALOGUE if kind in c.perf}


def header(name: str, per: str = "GPU", workload=None) -> str:
    """The column's table header ("{per}" as GPU or rank); the workload's own where its runs' figure means
    something else (run.json `workload`, bench/workloads `headers`: SFT's supervised tok/s)."""
    own = getattr(workloads.by_run_workload(workload), "headers", {}) if isinstance(workload, str) else {}
    col = BY_NAME.get(name)
    return own.get(name, col.label if col and col.label else name).format(per=per)


def cell(name: str, per: str = "GPU", workload=None) -> tuple[str, str, str]:
    """(header, column, format) of a table cell of this column."""
    return header(name, per, workload), name, BY_NAME[name].fmt
