"""The mid_train stage: bench/nanochat/mid_train.py under torchrun, one process per GPU (or CPU rank).

How it plans a sweep point, as pre-training (bench/workloads/nanochat.py):
- weak scaling (the default): each rank keeps device batch x sequence with no accumulation, so
  total_batch_size = device batch x sequence x ranks grows with the ranks;
- strong: total_batch_size stays (524,288 by default); fit_batch lowers the device batch or raises the
  accumulation, and a total the ranks cannot divide is the point's reason;
- upstream's `assert total_batch_size % (B*T*W) == 0` is checked here, before any process starts;
- no memory fit: the base checkpoint's depth is known only once a rank reads it; the site's observed limit on the
  device batch at this rank count (its `device_batch_limits`, as pre-training takes it) lowers the device batch on
  a GPU, the accumulation keeping the tokens per rank and step;
- a multi-node point needs $NANOCHAT_BASE_DIR on a filesystem all nodes share (bench/workloads/sharedfs.py):
  every node reads the base checkpoint and the next stage reads this one.
A sweep trains SWEEP_NUM_ITERATIONS batches unless told otherwise (-1: one epoch of the mixture). Its time:
num_iterations - 1 optimizer steps of total_batch_size tokens through the flow's model, as pre-training's
estimate (validation not counted); one epoch's tokens are known only once the mixture is rendered and packed,
so -1 has no estimate.
"""

from dataclasses import replace

from bench.workloads.base import PointContext, PointPlan, Settings
from bench.workloads.stage import ChatStage, argv_of, model_estimate
from bench.workloads.nanochat import SWEEP_NUM_ITERATIONS, lower_device_batch, site_cap


class MidTrain(ChatStage):
    name = "mid_train"
    summary = "mid-training from a base checkpoint"
    run_workload = "nanochat-mid"  # run.json's workload
    module = "bench.nanochat.mid_train"
    parser = "bench.nanochat.mid_train:parse_args"
    deadline_flag = "--deadline="
    PLAN_COLUMNS = (("device_bs", "device_batch_size", "{}"), ("grad_accum", "grad_accum", "{}"),
                    ("total_batch", "total_batch_size", "{:,}"), ("steps", "steps", "{}"))
    sweep_defaults = {"num_iterations": SWEEP_NUM_ITERATIONS}
    weak_scaled = ("total_batch_size", "device batch x sequence x ranks")
    until_data_ends = True
    first_step_event = 1  # its step events count the steps done
    dtype_sets_precision = False  # upstream's --dtype, accepted: mid_train autocasts to bfloat16 whatever it says

    def check(self, argv: list[str], nproc: int) -> None:
        from bench.nanochat.config import grad_accum_steps

        config = self.parse(argv)
        grad_accum_steps(config.total_batch_size, config.device_batch_size, config.max_seq_len, nproc)

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        from bench.nanochat.config import scaled_batch

        config, ranks = settings.config, point.ranks
        fit, total = scaled_batch(point.scaling, config.total_batch_size, config.device_batch_size,
                                  config.max_seq_len, ranks)
        if not fit.possible:
            return PointPlan(reason=fit.reason)
        dbs, accum, note = fit.device_batch_size, fit.grad_accum, fit.note
        if config.device_type != "cpu":  # the same model and context as pre-training: the same limit holds
            dbs, accum, capped = lower_device_batch(dbs, accum, *site_cap(point, dbs))
            note = "; ".join(filter(None, [note, capped]))
        flags = {**settings.train, "device_batch_size": dbs, "total_batch_size": total}
        replace(config, device_batch_size=dbs, total_batch_size=total).validate()
        steps = config.num_iterations - 1  # the first batch is the prefetch: N batches, N - 1 optimizer steps
        est, assumed = (None, "est ?: one epoch of the mid mixture, its tokens unknown until it is packed") \
            if steps < 1 and config.device_type != "cpu" else \
            model_estimate(point, config, steps * total, dbs, f"{steps} steps x {total:,} tokens")
        return PointPlan(train_argv=tuple(argv_of(flags)),
                         columns=(("device_batch_size", dbs), ("grad_accum", accum), ("total_batch_size", total),
                                  # optimizer steps, as status counts them, not --num_iterations' batches
                                  ("num_iterations", config.num_iterations),
                                  ("steps", steps if steps > 0 else "epoch")),
                         manifest=(("grad_accum", accum),), note="; ".join(filter(None, [note, assumed])),
                         est_hours=est)

    def describe(self, sweep) -> list[str]:
        config = sweep.settings.config
        grows = "total batch grows with the ranks" if sweep.scaling == "weak" else "total batch fixed"
        horizon = "one epoch of the mid mixture" if config.num_iterations < 0 else \
            f"{config.num_iterations} batches ({config.num_iterations - 1} steps)"
        return [f"workload: mid_train max_seq_len={config.max_seq_len} scaling={sweep.scaling} ({grows}); "
                f"{horizon}; from the base checkpoint {config.model_tag or '(largest d<depth>)'}"]


WORKLOAD = MidTrain()
