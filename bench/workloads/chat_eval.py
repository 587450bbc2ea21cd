"""nanochat's chat evaluation (bench/nanochat/chat_eval.py) as a stage under torchrun.

Nothing in it depends on the rank count but how the problems are dealt: categorical batches of
`-b/--batch-size` problems, batch i on rank i mod W, generative problems one at a time, problem i on rank
i mod W. So any rank count works; ranks beyond the number of batches (or problems) idle and say 0/0.
"""

from bench.workloads.base import PointContext, PointPlan, Settings
from bench.workloads.stage import TorchrunStage

RUN_WORKLOAD = "nanochat-chat-eval"


class ChatEval(TorchrunStage):
    name = "chat_eval"
    run_workload = RUN_WORKLOAD
    module = "bench.nanochat.chat_eval"
    PLAN_COLUMNS = (("batch", "batch_size", "{}"), ("problems", "max_problems", "{}"))
    headers = {"eval_tok_per_sec": "generated tok/s"}  # the generative tasks' tokens over their seconds

    def parse(self, argv: list[str]):
        from bench.nanochat.chat_eval_config import parse

        return parse(argv)

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        config = settings.config
        problems = config.max_problems if config.max_problems > 0 else "all"
        return PointPlan(train_argv=settings.argv, columns=(("batch_size", config.batch_size),
                                                            ("max_problems", problems)))


WORKLOAD = ChatEval()
