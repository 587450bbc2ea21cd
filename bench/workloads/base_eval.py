"""The base_eval stage (bench/nanochat/base_eval.py) under torchrun: the CORE metric of a base checkpoint.

Nothing in it must divide by the ranks (examples are strided, idx = rank mod W), so its plan passes the flags
through; a point's note says how the examples spread when --max_per_task leaves fewer per task than ranks.
Its time: every example is one forward of its prompts (one per choice or context option), each at most the
model's context long (an upper bound: a prompt is its shots and its question), through the flow's model;
with --max_per_task=-1 the examples are the whole bundle's, unknown until it is read, so there is no estimate.
"""

from bench.workloads.base import EVALUATION, FORWARD_SHARE, PointContext, PointPlan, Settings
from bench.workloads.stage import TorchrunStage, model_estimate

RUN_WORKLOAD = "nanochat-base-eval"


def evalgen_tasks() -> list:
    """The 22 CORE tasks as the real bundle has them (bench/nanochat/evalgen.py TASKS)."""
    from bench.nanochat.evalgen import TASKS

    return TASKS


def prompts_per_example() -> dict[str, int]:
    """Prompts of one example of each of the 22 CORE tasks (bench/nanochat/evalgen.py TASKS, as the real bundle
    has them): a task whose random baseline is b% has 100/b choices or context options, one prompt each (boolq's
    62% rounds to its 2); a language-modelling task (baseline 0) scores one prompt."""
    return {label: round(100 / baseline) if baseline else 1 for label, _, _, baseline, _, _ in evalgen_tasks()}


class BaseEval(TorchrunStage):
    name = "base_eval"
    summary = "the CORE metric of a base checkpoint"
    run_workload = RUN_WORKLOAD
    module = "bench.nanochat.base_eval"
    parser = "bench.nanochat.base_eval_config:parse"
    kind = EVALUATION
    reads_checkpoint = True  # the base checkpoint
    PLAN_COLUMNS = (("max_per_task", "max_per_task", "{}"),)
    staging = (("data", "download", "--eval-bundle"), "the eval bundle for CORE (base_eval)")
    headers = {"problems_per_sec": "examples/s"}  # CORE's examples, each a forward of its prompts

    def missing_staged(self, base_dir: str, settings: Settings | None = None) -> str:
        from pathlib import Path

        from bench.nanochat.evalbundle import missing_staged

        return missing_staged(Path(base_dir))

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        per_task = settings.config.max_per_task
        shots = max(shots for _, _, shots, _, _, _ in evalgen_tasks())
        if 0 < per_task <= shots:  # base_eval refuses it at its start: in a flow, after pre-training's hours
            return PointPlan(reason=f"--max_per_task={per_task}: CORE's tasks take up to {shots} shots, each from "
                                    f"the task's other examples, so give at least {shots + 1} (or -1 for all)")
        note = (f"--max_per_task={per_task} < {point.ranks} ranks: {point.ranks - per_task} rank(s) idle per task"
                if 0 < per_task < point.ranks else "")
        est, assumed = self.estimate(settings, point)
        return PointPlan(train_argv=settings.argv, columns=(("max_per_task", per_task),),
                         note="; ".join(filter(None, [note, assumed])), est_hours=est)

    def estimate(self, settings: Settings, point: PointContext) -> tuple[float | None, str]:
        per_task, config = settings.config.max_per_task, settings.config
        if per_task < 0 and config.device_type != "cpu":
            return None, "est ?: --max_per_task=-1 scores the whole bundle, its size unknown until it is read"
        prompts = prompts_per_example()
        seq, mean = (point.model.sequence_len if point.model else 0), sum(prompts.values()) / len(prompts)
        work = (f"{per_task} examples x {len(prompts)} tasks, {mean:.1f} prompts each (one per choice) of at most "
                f"{seq:,} tokens, forward")
        return model_estimate(point, config, per_task * sum(prompts.values()) * seq, mean, work, FORWARD_SHARE)


WORKLOAD = BaseEval()
