"""nanochat-bench as ReFrame checks: a stage of nanochat's speedrun (base pretraining by default) under each
container runtime, judged from its run directory.

    reframe -C bench/reframe_checks/config/test_cluster.py -c bench/reframe_checks/checks.py -r
    reframe -C site.py -c bench/reframe_checks/checks.py -P num_nodes=1,2,4,8 -S depth=20 -r
    reframe -C site.py -c bench/reframe_checks/checks.py -P workload=mid_train,chat_sft -r

Parameters: `runtime` (every nanochat-bench runtime; a case runs only on partitions that list the runtime's
feature among their features: its name with `_` for `-` (runtime_feature), or, with ReFrame 4.10.4, its name)
and `scaling` (weak, strong).
Variables, set with -S or turned into parameters with ReFrame's -P: `workload` (a workload of
bench/workloads: nanochat, the default, is pre-training; base_loss, base_eval, mid_train, chat_sft,
chat_eval the later stages, each reading the checkpoint the stage before left in the partition's base_dir),
`num_nodes`, `depth` (for a workload that takes it: pre-training), `train_args` (KEY=VALUE trainer flags of
the workload) and `references` (a nanochat-bench references file; default $NANOCHAT_BENCH_REFERENCES).

Each case is one nanochat-bench run. Setup plans and renders its job.sbatch through bench/launch (see
case.py) into the stage directory; ReFrame's job (launcher `local`, one task per node) runs it with
bash, and the script's own srun starts the runtime on every node and records run.json. Sanity and
performance read that run directory with bench.analysis.rundir, the reader `collect` uses, and the
references come from the same file and matching code as `nanochat-bench check`. The performance
variables and their units are the table's (bench/analysis/columns.py `perf`), those of the workload's kind:
a training run (pre-training, mid_train, chat_sft) has its steady steps' figures and must have recorded steps;
an evaluation (base_loss, base_eval, chat_eval) takes no step, so it must have recorded its scores, and its
figures are problems per second and its time from launch to end. The run directory is kept in
ReFrame's output directory (keep_files), where `collect` reads it (bench/analysis/collect.py says why).
"""

import math
import os
import shlex
from contextlib import contextmanager
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import ConfigError, PerformanceError, SanityError

from bench import contract, netgate, runtimes, workloads
from bench.analysis.check import load_references, row_figure
from bench.analysis.columns import perf_units
from bench.analysis.rundir import read_run_dir
from bench.errors import BenchError
from bench.launch.plan import SCALING_MODES
from bench.reframe_checks import case as casemod
from bench.reframe_checks.references import check_bounds, figure_of, reframe_reference
from bench.workloads.base import EVALUATION

ENV_REFERENCES = "NANOCHAT_BENCH_REFERENCES"
ENVIRON_FEATURE = "nanochat_bench"  # programming environments the checks may use declare this feature


def runtime_feature(runtime: str) -> str:
    """The partition feature that lets a runtime's cases run there: its name with `_` for `-` (podman_hpc,
    sarus_suite), as every ReFrame 4 schema but 4.10.4's refuses a `-` in a feature."""
    return runtime.replace("-", "_")


def feature_specs(feature: str) -> list[str]:
    """ReFrame's valid_systems or valid_prog_environs for a feature in either spelling, any one selecting: ReFrame
    4.10.4 takes a `-` in a feature, so a site may declare podman-hpc or nanochat-bench, as it names them."""
    return [f"+{f}" for f in dict.fromkeys((feature.replace("-", "_"), feature.replace("_", "-")))]


def run_problem(row: dict, kind: str) -> str | None:
    """Why a run's row cannot be judged (None when it can): run.json status ok; a training run recorded steps
    with steady figures; an evaluation, which takes no step, recorded its scores (run.json `scores`)."""
    run_id, skip = row.get("run_id"), row.get("skip_reason")
    status = row.get("status")
    if (status is None or isinstance(status, float) and math.isnan(status)) and skip:  # NaN: a table's None
        return f"run {run_id} has no status: {skip}"
    if status != "ok":
        return f"run.json status is {status!r}: {row.get('message') or 'no message'}"
    if skip:  # first: a run whose figures the reader refused has no step count, however many steps it recorded
        return f"run {run_id} cannot be measured: {skip}"
    if kind != EVALUATION and not row.get("steps_recorded"):
        return f"run {run_id} recorded no step events ({row.get('source')}/{contract.METRICS_JSONL})"
    if kind == EVALUATION and not row.get("scores"):
        return f"run {run_id} recorded no scores (run.json scores)"
    return None


def performance(row: dict, kind: str, wanted: dict) -> dict[str, tuple[float, str]]:
    """Performance variable -> (value, unit): the figures of the run's kind (bench/analysis/columns.py) that it
    has, and every figure a reference bounds (`wanted`: ReFrame's reference tuples by variable; a score's, as
    score_CORE, from the row's `scores`). A figure the run lacks (MFU without a known peak, on CPU; busbw on one
    rank; a score of another bundle) is left out, unless a reference asks for it: it is then NaN, and ReFrame's own
    check fails it."""
    units = perf_units(kind)
    for name, ref in wanted.items():
        units.setdefault(name, ref[3])
    values = {name: row_figure(row, figure_of(name)) for name in units}
    return {name: (_number(values[name]), unit) for name, unit in units.items()
            if name in wanted or values[name] is not None}


def nccl_net_problem(manifest: dict, expected: str, nodes: int) -> str | None:
    """Why the run's network is not the one the partition expects (None when it is, or when nothing is
    expected): run.json's `network`, the network NCCL chose between nodes (bench/nccl_log.py), compared as the
    run's own gate compares it (bench/netgate.py)."""
    if not expected or nodes < 2:
        return None  # on one node nothing crosses the network
    network = manifest.get("network")
    # as the run's own gate reads it: the "Using network" line, else a NET/ transport; names in any case
    seen = netgate.chosen_network(network) if isinstance(network, dict) else None
    if seen is None:
        return f"the partition expects NCCL's network {expected!r} between nodes, but run.json records none"
    if netgate.check(network, nodes=nodes, expected=expected):
        return f"NCCL's network between nodes was {seen!r}, the partition expects {expected!r}"
    return None


def references_given_by(variable: str) -> str:
    """What named the references file (Site.references_file: the check's variable, else the partition's), as
    its errors say it."""
    return f"-S references (or ${ENV_REFERENCES})" if variable else f"extras['{casemod.EXTRAS_KEY}'].references"


@contextmanager
def one_line(error_class):
    """nanochat-bench's expected failures as ReFrame's own, which it reports as one line, no traceback."""
    try:
        yield
    except BenchError as e:
        raise error_class(str(e)) from None


class NanochatBenchBase(rfm.RunOnlyRegressionTest):
    """The check without its parameters: subclass it to fix other runtimes or scaling modes for a site."""

    descr = "a nanochat speedrun stage (nanochat-bench): throughput, time and start-up under a runtime"
    valid_prog_environs = feature_specs(ENVIRON_FEATURE)
    sourcesdir = None
    executable = "bash"
    num_tasks_per_node = 1  # the rendered script's srun starts one task per node itself
    tags = {"nanochat-bench", "ml"}  # a training stage or an evaluation: the workload variable says which

    workload = variable(str, value=workloads.DEFAULT, loggable=True)  # bench/workloads: nanochat or a stage
    num_nodes = variable(int, value=1, loggable=True)
    depth = variable(int, value=20, loggable=True)
    train_args = variable(typ.List[str], value=[], loggable=True)  # KEY=VALUE trainer flags
    references = variable(str, value=os.environ.get(ENV_REFERENCES, ""), loggable=True)
    # Set by setup and after the run, so that ReFrame's perflog and run report name the run they measured;
    # the table is collected from the run directory itself, kept in ReFrame's output directory.
    run_id = variable(str, value="", loggable=True)
    run_dir = variable(str, value="", loggable=True)
    world_size = variable(int, value=0, loggable=True)
    gpus_per_node = variable(int, value=0, loggable=True)
    max_seq_len = variable(int, value=0, loggable=True)
    device_batch_size = variable(int, value=0, loggable=True)
    total_batch_size = variable(int, value=0, loggable=True)
    grad_accum = variable(int, value=0, loggable=True)
    num_iterations = variable(int, value=0, loggable=True)
    run_status = variable(str, value="", loggable=True)
    gpu_name = variable(str, value="", loggable=True)

    @run_after("init")
    def select_partitions(self):
        self.valid_systems = feature_specs(runtime_feature(self.runtime))

    @run_before("setup")  # not at init: -P workload=... sets the workload after the init hooks
    def run_an_evaluation_once(self):
        """An evaluation trains no batch, so weak and strong scaling plan the same run: it ran twice at full cost
        (CORE, chat_eval's generation) under -P workload=base_eval. Its weak case is skipped; a workload name that
        does not exist is left to setup, which says what would be valid."""
        evaluation = self.workload in workloads.names() and workloads.get(self.workload).kind == EVALUATION
        self.skip_if(self.scaling == "weak" and evaluation,
                     f"{self.workload} is an evaluation: its strong case runs it (weak scaling plans the same run)")

    @run_after("setup")
    def render_job(self):
        part = self.current_partition
        with one_line(ConfigError):
            site = casemod.Site.from_extras(part.extras, part.fullname)
            case = casemod.Case(self.runtime, self.num_nodes, self.scaling, self.depth, list(self.train_args), site,
                                self.short_name, self.workload)
            built = casemod.build(case, Path(self.stagedir), dry_run=self.is_dry_run())
            self._kind = workloads.get(self.workload).kind
            # read now: a mistake in the file (or its path) is met before the run, not after hours of it
            self._references_path = site.references_file(self.references)
            self._references = check_bounds(self._references_path, load_references(
                self._references_path, references_given_by(self.references))) if self._references_path else None
        p = built.point
        self.run_id, self.run_dir = p.run_id, str(built.run_dir)
        self.world_size, self.gpus_per_node = p.ranks, site.gpus_per_node
        config = built.job.runs[0].manifest["config"]
        self.max_seq_len, self.device_batch_size = config.get("max_seq_len", 0), p.device_batch_size
        self.total_batch_size, self.grad_accum, self.num_iterations = p.total_batch_size, p.grad_accum, p.num_iterations
        self.num_tasks = self.num_nodes
        self.exclusive_access = site.exclusive
        self.time_limit = f"{built.minutes}m"
        self.job.options += built.directives
        self.executable_opts = [shlex.quote(str(built.job.script))]
        self.keep_files = [os.path.relpath(built.sweep_dir, self.stagedir)]  # the run directory outlives the stage
        self._site = site

    # -- the run directory, read once after the job ----------------------------------------------------
    def row(self) -> dict:
        if getattr(self, "_row", None) is None:
            run_dir = Path(self.run_dir)
            self._row = {}
            self._manifest = {}
            self._unsettled = None
            try:
                present = (run_dir / contract.RUN_JSON).exists()
            except OSError:  # a stat that fails other than with ENOENT (EACCES, EIO): the read below says why
                present = True
            if present:
                try:
                    try:
                        # ReFrame's job has ended: a run it left pending (the batch script stopped before the run
                        # began) or running never ends, so it is settled here as the batch script settles a run
                        contract.close_unfinished(run_dir, self.job.exitcode, "ReFrame's job", source="launcher")
                    except OSError as e:  # not written (ENOSPC, a read-only filesystem), or not opened: read below
                        self._unsettled = f"{e.strerror} ({e.filename})"
                    self._manifest = contract.read_run_json(run_dir)
                except (contract.RunJsonError, contract.SchemaError, OSError):
                    # no run's record, or none that opens (a directory of that name, EACCES, EIO): sanity fails
                    # the run with the reason its row gives
                    pass
                self._row = read_run_dir(run_dir)
            self.run_status = str(self._row.get("status") or "")
            self.gpu_name = str(self._row.get("gpu_name") or "")
        return self._row

    @sanity_function
    def run_finished_ok(self):
        """run.json says ok and the run has what its kind is judged by (run_problem); and where the partition
        names one (extras' `nccl_net`, e.g. "AWS Libfabric" on Slingshot), NCCL took that network."""
        row = self.row()
        if not row:
            # setup wrote it (pending), and the batch script replaces it, never removes it
            raise SanityError(f"no run.json in {self.run_dir}: setup wrote one, so the run directory was removed or "
                              f"moved while ReFrame's job ran (see {self.job.stdout})")
        if not self._manifest:  # no run's record: the status the reader inferred from the events is not run.json's
            raise SanityError(f"run {row.get('run_id')} has no status: {row.get('skip_reason')}")
        if self._unsettled:  # read, but ReFrame's job's end could not be recorded in it
            raise SanityError(f"run {row.get('run_id')} ({self._manifest.get('status')}) could not be settled: "
                              f"{self._unsettled}")
        problem = run_problem(row, self._kind) or nccl_net_problem(self._manifest, self._site.nccl_net, self.num_nodes)
        if problem:
            raise SanityError(problem)
        return True

    @run_before("performance")
    def set_performance(self):
        """Figures of the run as performance variables, references from the references file."""
        row = self.row()
        wanted: dict = {}
        if self._references is not None:
            with one_line(PerformanceError):
                reference, used = reframe_reference(self.current_partition.fullname, row, self._references)
            self.reference, wanted = reference, reference[self.current_partition.fullname]
            self.logger.info(f"{self.short_name}: references {', '.join(used) or 'none'} from {self._references_path}")
        self.perf_variables = {name: sn.make_performance_function(sn.defer(value), unit)
                               for name, (value, unit) in performance(row, self._kind, wanted).items()}

    @run_after("performance")
    def name_the_kept_run(self):
        """A case that passed keeps its run in the output directory only: ReFrame removes the stage directory
        after the perflog and run report are written, so they name the copy that stays. A case that failed
        never gets here, and its stage directory is kept."""
        if not self.is_dry_run():
            self.run_dir = str(Path(self.outputdir) / os.path.relpath(self.run_dir, self.stagedir))


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


@rfm.simple_test
class nanochat_bench(NanochatBenchBase):  # ReFrame names tests in snake case
    runtime = parameter(runtimes.names())
    scaling = parameter(list(SCALING_MODES))
