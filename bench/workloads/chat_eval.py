"""nanochat's chat evaluation (bench/nanochat/chat_eval.py) as a stage under torchrun.

Nothing in it depends on the rank count but how the problems are dealt: categorical batches of
`-b/--batch-size` problems, batch i on rank i mod W, generative problems one at a time, problem i on rank
i mod W. So any rank count works; ranks beyond the number of batches (or problems) idle and say 0/0.
Its time: the generative problems of the busiest rank, each decoding at most -m/--max-new-tokens tokens one
at a time (the samples of a problem decode together) at the sweep's assumed rate (--assume-decode-tok-s); the
categorical tasks' forwards, seconds where generation takes minutes, are not counted.
"""

from bench.workloads.base import EVALUATION, PointContext, PointPlan, Settings
from bench.workloads.stage import ChatStage

RUN_WORKLOAD = "nanochat-chat-eval"


def decode_tokens_per_rank(config, ranks: int) -> tuple[int, int]:
    """(generative problems, tokens the busiest rank decodes at most): -x/--max-problems of each generative
    task chosen (-1: the real data's), problem i on rank i mod W, -m/--max-new-tokens each."""
    from bench.nanochat.chat_eval_config import GENERATIVE_PROBLEMS, task_names

    counts = [GENERATIVE_PROBLEMS[t] if config.max_problems < 0 else min(config.max_problems, GENERATIVE_PROBLEMS[t])
              for t in task_names(config.task_name) if t in GENERATIVE_PROBLEMS]
    return sum(counts), sum(-(-n // ranks) for n in counts) * config.max_new_tokens


class ChatEval(ChatStage):
    name = "chat_eval"
    summary = "chat evaluation of a base, mid or SFT checkpoint (-i)"
    run_workload = RUN_WORKLOAD
    module = "bench.nanochat.chat_eval"
    parser = "bench.nanochat.chat_eval_config:parse"
    kind = EVALUATION
    PLAN_COLUMNS = (("batch", "batch_size", "{}"), ("problems", "max_problems", "{}"))
    headers = {"eval_tok_per_sec": "generated tok/s"}  # the generative tasks' tokens over their seconds

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        config = settings.config
        problems = config.max_problems if config.max_problems > 0 else "all"
        est, note = None, ""
        if config.device_type != "cpu":
            generative, tokens = decode_tokens_per_rank(config, point.ranks)
            est = point.estimate.decode_hours(tokens)
            note = (f"est: {generative:,} generative problems x at most {config.max_new_tokens} new tokens, "
                    f"{tokens:,} on the busiest rank at {point.estimate.decode_tok_per_s:g} tok/s (categorical "
                    f"forwards not counted)") if est is not None else ""
        return PointPlan(train_argv=settings.argv, columns=(("batch_size", config.batch_size),
                                                            ("max_problems", problems)), note=note, est_hours=est)

    def describe(self, sweep) -> list[str]:
        return [*super().describe(sweep), f"generation estimated at {sweep.assume_decode_tok_s:g} tok/s per rank "
                                          f"(--assume-decode-tok-s)"]


WORKLOAD = ChatEval()
