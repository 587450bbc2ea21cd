"""Render jobs into shell text through the templates in slurm/ (jinja2).

Templates hold text, Python holds decisions: every value reaches a template already quoted
(`shell_join`/`shlex.quote`) or made comment-safe, so the templates only substitute and loop. The
templates live once, in the repository's slurm/ folder; a wheel ships them as the package
`bench.slurm_templates` (pyproject's package-dir mapping), and a checkout reads them in place.
"""

import functools
import re
import shlex
from dataclasses import replace
from pathlib import Path

import jinja2

from bench import contract
from bench.launch import jobrecord, rdzvport
from bench.launch.job import NODE_CPUS, PORT_BASE, UNSET_HOST_PYTHON, Job, Run, interactive_minutes
from bench.launch.plan import slurm_time
from bench.runtimes import Var, shell_join
from bench.runtimes import get as get_runtime

TEMPLATE_PACKAGE = "bench.slurm_templates"
SBATCH_TEMPLATE = "sbatch.sh.j2"
INTERACTIVE_TEMPLATE = "interactive.sh.j2"


def template_dirs() -> list[Path]:
    """Where the templates are: inside the installed package (a wheel), else a checkout's slurm/ folder."""
    package = Path(__file__).resolve().parent.parent  # bench/
    dirs = [package / TEMPLATE_PACKAGE.split(".")[-1], package.parent / "slurm"]
    return [d for d in dirs if (d / SBATCH_TEMPLATE).is_file()]


@functools.lru_cache(maxsize=1)  # one compile of the templates for a sweep of hundreds of jobs
def environment() -> jinja2.Environment:
    dirs = template_dirs()
    if not dirs:
        raise FileNotFoundError("the Slurm templates (slurm/*.j2) are missing from this installation")
    return jinja2.Environment(loader=jinja2.FileSystemLoader([str(d) for d in dirs]),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              autoescape=False)


def comment_safe(text: str) -> str:
    """Text for a `# ...` line: a newline in a name or path must not end the comment. Only control characters are
    escaped (a newline as \\n): a command shown there is pasted as it reads, its quoting and backslashes whole."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def multiline(lines: list[list]) -> str:
    """Token lines joined with backslash continuations, each quoted once."""
    return " \\\n    ".join(shell_join(line) for line in lines)


def uses(run: Run, variable: str) -> bool:
    """Whether the run's command reads this batch-script variable (a Var token), so the script must set it."""
    return any(isinstance(t, Var) and t.name == variable for t in run.spec.command)


def lib_file(job: Job, module) -> str:
    """The sweep's copy of a bookkeeping module (bench/launch/job.py ships them), quoted."""
    return shlex.quote(str(job.lib_dir / Path(module.__file__).name))


def image_facts(run: Run) -> str | None:
    """The arguments of `runjson image` after the step: the image file to hash, the command printing the id."""
    step = run.image_step
    facts = []
    digest_file = step.digest_file if step and step.digest_file else run.runtime.digest_file(run.spec)
    if digest_file:
        facts.append(f"--file {shlex.quote(digest_file)}")
    id_command = step.id_command if step and step.id_command else run.runtime.id_command(run.spec)
    if id_command:
        facts.append(f'--id "$({shell_join(list(id_command))} 2>/dev/null || true)"')
    return " ".join(facts) or None


def one_task(run: Run, *command: str, tty: bool = False, outside_run: bool = False) -> str:
    """srun of one task on one node through the run's runtime, with the run's variables. `outside_run` (what a
    flow runs outside every measured run): without the run's directory, and host Python paths kept out as in
    bench.launch.job.Run.srun_lines."""
    env = {k: v for k, v in run.spec.env.items() if not (outside_run and k == contract.ENV_RUN_DIR)}
    spec = replace(run.spec, command=command, env=env)
    wrap = run.runtime.shell_wrap(spec) if tty else run.runtime.wrap(spec)
    # every task gets the node's CPUs (a tokenizer's threads), a shell too: torchrun started from it would
    # otherwise train on the one CPU Slurm 22.05 to 23.02 gives a step without -c. The shell overlaps the other
    # steps (srun --overlap): held open, it neither waits for a running step's CPUs nor holds back the next one
    shell = ["--pty", "--overlap"] if tty else []
    line = ["srun", "--nodes=1", "--ntasks=1", *shell, NODE_CPUS, *run.runtime.srun_options(spec), *wrap]
    if outside_run and run.runtime.python is not None:
        line = [*UNSET_HOST_PYTHON, *line]
    return shell_join(line)


def run_context(job: Job, run: Run, index: int, inherited: frozenset = frozenset()) -> dict:
    """`inherited`: the variables the job's earlier runs exported. The ones this run does not set are unset
    first, so each run starts from the environment it would have alone (a runtime comparison's CE run must not
    get the bare run's Slingshot variables, which CE's hook sets, nor a later run a plugin path it does not mount)."""
    version = run.runtime.version_command()
    step = run.image_step
    rendezvous = uses(run, "rdzv_endpoint")  # torchrun across nodes meets at the batch script's endpoint
    return {
        "rendezvous": rendezvous, "rdzvport": lib_file(job, rdzvport), "deadline": uses(run, "run_deadline"),
        "resume": uses(run, "resume_step"), "run_id": run.run_id, "runtime": run.runtime.name, "nodes": run.nodes,
        "nproc_per_node": run.nproc_per_node, "run_dir": shlex.quote(str(run.run_dir)),
        "exports": [(name, shlex.quote(value)) for name, value in run.spec.env.items()],
        "unsets": [shlex.quote(name) for name in sorted(inherited - run.spec.env.keys())],
        "port_base": PORT_BASE, "index": index, "time_minutes": run.time_minutes, "margin_s": run.deadline_margin_s,
        "image_step": multiline(run.image_lines()) if step else None,
        "image_what": shlex.quote(step.what) if step else None,
        "image_comment": comment_safe(step.what) if step else None,
        "image_facts": image_facts(run), "guarded": rendezvous or step is not None,
        "version_command": shell_join(version) if version else None, "srun": multiline(run.srun_lines()),
    }


def job_context(job: Job, rendered_by: str) -> dict:
    return {
        "title": comment_safe(job.title), "rendered_by": comment_safe(rendered_by), "interactive": False,
        "directives": job.directives, "job_dir": comment_safe(shlex.quote(str(job.job_dir))),
        "script_name": job.script.name, "lib_dir": comment_safe(str(job.lib_dir)),
        "jobrecord": lib_file(job, jobrecord), "rendezvous": any(uses(run, "rdzv_endpoint") for run in job.runs),
        "image_steps": any(run.image_step for run in job.runs), "python": shlex.quote(job.python),
        "runs": [run_context(job, run, i, frozenset(k for earlier in job.runs[:i] for k in earlier.spec.env))
                 for i, run in enumerate(job.runs)],
    }


def render_sbatch(job: Job, rendered_by: str = "submit") -> str:
    """The batch script of a job: one run (a sweep point) or several in turn (a runtime comparison)."""
    return environment().get_template(SBATCH_TEMPLATE).render(job_context(job, rendered_by))


def salloc_line(job: Job, minutes: int | None = None) -> str:
    """The guide's salloc: the job's directives less what only a batch job has; `minutes` replaces its time."""
    argv = ["salloc", *(f"--time={slurm_time(minutes)}" if minutes is not None and d.startswith("--time=") else d
                        for d in job.directives if not d.startswith(("--output", "--job-name", "--no-requeue")))]
    return comment_safe(shell_join(argv))


def render_interactive(job: Job, base_dir: str, shards: int, shards_why: str = "what the plan needs",
                       rendered_by: str = "render interactive") -> str:
    """The interactive guide: the salloc line (its time covers the guide's own steps too), then the srun lines of
    the image step, data, tokenizer, what the workload stages besides them (job.staging: nntile's token file) and
    training (the steps before it outside the run, as a flow's guide has them)."""
    run = job.runs[0]
    minutes = interactive_minutes(job, shards)
    # data, tokenizer and staging: in the run's container, or on the host where the workload's image cannot run them
    bench = replace(run, runtime=get_runtime("bare")) if job.bench_on_host else run
    python = bench.runtime.python or job.python  # the host's, with nanochat-bench: not a workload's own (nntile's)
    ctx = job_context(job, rendered_by)
    # interactive: pasted into the salloc shell, a failed check must not `exit` that shell
    ctx.update(interactive=True, salloc=salloc_line(job, minutes), base_dir=shlex.quote(base_dir), shards=shards,
               shards_why=shards_why, salloc_minutes=minutes,
               data_exports=[(name, shlex.quote(value)) for name, value in run.spec.env.items()
                             if name == contract.ENV_VAL_FILES_K],
               bench_on_host=job.bench_on_host and run.runtime.python is not None,
               image_srun=multiline(run.image_lines()) if run.image_step else None,
               data_srun=one_task(bench, python, "-m", "bench.cli", "data", "download", "-n", str(shards),
                                  outside_run=True),
               tokenizer_srun=one_task(bench, python, "-m", "bench.cli", "tokenizer", "train", outside_run=True),
               staging=[{"what": what, "srun": one_task(bench, python, "-m", "bench.cli", *command, outside_run=True)}
                        for what, command in job.staging],
               shell_srun=comment_safe(one_task(run, "bash", tty=True, outside_run=True)),
               shell_where=shell_where(run), collect_hint=collect_hint(job))
    return environment().get_template(INTERACTIVE_TEMPLATE).render(ctx)


def collect_hint(job: Job) -> str:
    """The guide's last line, quoted for echo: the commands that turn its sweep's run directories into figures."""
    sweep = job.job_dir.parent
    table, report = (shlex.quote(str(sweep / name)) for name in ("table", "report"))
    return shlex.quote(f"then: nanochat-bench collect {shlex.quote(str(sweep))} --out {table} && "
                       f"nanochat-bench report {table} --out {report}")


def shell_where(run: Run) -> str:
    """Where the guide's shell line opens a shell: on a node (the host's Python), else in the runtime's container."""
    if run.runtime.python is None:
        return "on one of the nodes"
    return f"inside the {run.runtime.name} container on one node"
