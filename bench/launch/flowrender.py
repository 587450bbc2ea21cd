"""A flow's job as shell text: the batch script (slurm/flow.sh.j2) and the interactive guide
(slurm/flow_interactive.sh.j2), both from slurm/_flow.sh.j2: the tokenizer once, then each stage's run
block (slurm/_run.sh.j2, the one every job uses), each gated on the stages before it having ended ok.
"""

import functools
import shlex

from bench import contract, workloads
from bench.launch import render
from bench.launch.flow import TOKENIZER_LOG, FlowJob
from bench.launch.job import interactive_minutes

FLOW_TEMPLATE = "flow.sh.j2"
FLOW_INTERACTIVE_TEMPLATE = "flow_interactive.sh.j2"
one_task = functools.partial(render.one_task, outside_run=True)  # what a flow runs besides its stages' runs


def flow_context(fj: FlowJob, rendered_by: str) -> dict:
    job = fj.job
    ctx = render.job_context(job, rendered_by)
    for run_ctx, stage in zip(ctx["runs"], fj.stages):
        run_ctx.update(stage=stage.name, workload=stage.workload)
    first = job.runs[0]
    python = first.spec.command[0]
    log = shlex.quote(str(fj.point_dir / TOKENIZER_LOG))
    ctx.update(flow=fj.flow, stage_names=" -> ".join(s.name for s in fj.stages), model_tag=fj.tag, tokenizer={
        "exports": [(k, shlex.quote(v)) for k, v in first.spec.env.items() if k != contract.ENV_RUN_DIR],
        # the image where the tokenizer's task runs (each stage's own block repeats the step: it keeps what is there)
        "prepare": [render.multiline(first.image_lines())] if first.image_step else [],
        "train": one_task(first, python, "-m", "bench.cli", "tokenizer", "train", *fj.tokenizer_args),
        "eval": one_task(first, python, "-m", "bench.cli", "tokenizer", "eval"), "log": log})
    return ctx


def render_flow(fj: FlowJob, rendered_by: str = "submit --flow") -> str:
    """The batch script of one point: the tokenizer once per sweep, then the flow's stages in turn."""
    return render.environment().get_template(FLOW_TEMPLATE).render(flow_context(fj, rendered_by))


def render_flow_interactive(fj: FlowJob, base_dir: str, shards: int, shards_why: str = "what the plan needs",
                            rendered_by: str = "render interactive --flow") -> str:
    """The interactive guide of the flow: salloc, the staging, the tokenizer, then each stage's srun."""
    job, first = fj.job, fj.job.runs[0]
    python = first.spec.command[0]
    staging, seen = [], set()
    for stage in fj.stages:
        workload = workloads.get(stage.workload)
        command = workload.staging_command()
        if command and command not in seen:
            seen.add(command)
            staging.append({"what": workload.staging[1], "srun": one_task(first, python, "-m", "bench.cli", *command)})
    ctx = flow_context(fj, rendered_by)
    minutes = interactive_minutes(job, shards)  # the salloc covers the guide's data and tokenizer steps too
    # interactive: pasted into the salloc shell, a failed check must not `exit` that shell
    ctx.update(interactive=True, salloc=render.salloc_line(job, minutes), salloc_minutes=minutes,
               base_dir=shlex.quote(base_dir), shards=shards, shards_why=shards_why,
               data_srun=one_task(first, python, "-m", "bench.cli", "data", "download", "-n", str(shards)),
               staging=staging, shell_srun=render.comment_safe(one_task(first, "bash", tty=True)),
               shell_where=render.shell_where(first), collect_hint=render.collect_hint(job))
    return render.environment().get_template(FLOW_INTERACTIVE_TEMPLATE).render(ctx)
