"""The base_eval stage (bench/nanochat/base_eval.py) under torchrun: the CORE metric of a base checkpoint.

Nothing in it must divide by the ranks (examples are strided, idx = rank mod W), so its plan passes the flags
through; a point's note says how the examples spread when --max_per_task leaves fewer per task than ranks.
"""

from bench.workloads.base import PointContext, PointPlan, Settings
from bench.workloads.stage import TorchrunStage

RUN_WORKLOAD = "nanochat-base-eval"


class BaseEval(TorchrunStage):
    name = "base_eval"
    run_workload = RUN_WORKLOAD
    module = "bench.nanochat.base_eval"
    PLAN_COLUMNS = (("max_per_task", "max_per_task", "{}"),)
    headers = {"problems_per_sec": "examples/s"}  # CORE's examples, each a forward of its prompts

    def parse(self, argv: list[str]):
        from bench.nanochat.base_eval import parse

        return parse(argv)

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        per_task = settings.config.max_per_task
        note = (f"--max_per_task={per_task} < {point.ranks} ranks: {point.ranks - per_task} rank(s) idle per task"
                if 0 < per_task < point.ranks else "")
        return PointPlan(train_argv=settings.argv, columns=(("max_per_task", per_task),), note=note)


WORKLOAD = BaseEval()
