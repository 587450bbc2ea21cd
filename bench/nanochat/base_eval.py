"""base_eval: the CORE metric of a base checkpoint (nanochat 5c93a56's scripts/base_eval.py).

    torchrun --standalone --nproc_per_node=2 -m bench.nanochat.base_eval -- --max_per_task=16

Reads the eval bundle staged in $NANOCHAT_BASE_DIR/eval_bundle (never downloads it: `nanochat-bench data download
--eval-bundle` does, before the job), scores each task over the ranks (bench/nanochat/core_eval.py), prints
upstream's lines and CSV, and writes the CSV to $NANOCHAT_BASE_DIR/base_eval/base_model_<step>.csv (and into the
run directory). Upstream always takes the largest d<N> tag at its last step; --model_tag and --model_step pick
another (a sweep's checkpoints live under <sweep>-<hash>/<run> tags). Figures: a `score` event per task (accuracy and
centred) and one for CORE; run.json `scores` holds each task's accuracy and CORE.
"""

import time
from dataclasses import asdict
from pathlib import Path

from bench.contract import write_text_atomic
from bench.nanochat import stagerun
from bench.nanochat.base_eval_config import BaseEvalConfig, parse
from bench.nanochat.common import get_base_dir, print0
from bench.processes import exit_now
from bench.workloads.base_eval import RUN_WORKLOAD

CSV_IN_RUN_DIR = "base_eval.csv"


def write_csv(text: str, step: int, run_dir: str | None) -> Path:
    path = get_base_dir() / "base_eval" / f"base_model_{step:06d}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
    if run_dir:
        write_text_atomic(Path(run_dir) / CSV_IN_RUN_DIR, text)
    return path


def run(config: BaseEvalConfig, record) -> tuple[dict, str, str | None]:
    from bench.nanochat.checkpoint import load_model
    from bench.nanochat.core_eval import evaluate_model, results_csv
    from bench.nanochat.evalbundle import load_bundle
    from bench.nanochat.tokenizer import get_tokenizer

    session = stagerun.begin(config, record, "nanochat-bench: base model evaluation, CORE (nanochat-faithful)")
    record.update(workload=RUN_WORKLOAD)
    bundle = load_bundle()  # a missing or damaged bundle stops here, on every rank, naming the staging command
    bundle.check_max_per_task(config.max_per_task)
    tokenizer = get_tokenizer()
    model, meta = load_model("base", session.device, config.model_tag or None,
                             None if config.model_step < 0 else config.model_step)
    model.eval()
    num_params, flops = model.num_params(), model.estimate_flops()
    record.emit("model_ready", num_params=num_params, flops_per_token=flops)
    record.update(num_params=num_params, flops_per_token=flops,
                  config={**asdict(config), "model_tag": meta["model_tag"], "model_step": meta["step"],
                          "eval_bundle": {"path": str(bundle.path), **bundle.origin()}},
                  vocabulary={"vocab_size": meta["model_config"]["vocab_size"], "source": "nanochat tokenizer"})
    if bundle.origin().get("origin") == "generated":
        print0(f"note: {bundle.path} was generated (`data generate --eval-bundle`): its CORE measures nothing")

    def on_task(r) -> None:
        record.emit("score", name=r.label, value=r.accuracy, centered=r.centered, problems=r.examples,
                    seconds=r.seconds)

    t0 = time.time()
    with session.watchdog.relaxed(), session.autocast():
        results, core = evaluate_model(model, tokenizer, bundle, session.device, config.max_per_task, session.rank,
                                       session.world_size, on_task)
    total_s = time.time() - t0
    examples = sum(r.examples for r in results)
    record.emit("score", name="CORE", value=core, seconds=total_s)  # its examples are the tasks' own
    if session.master:
        text = results_csv(results, core)
        write_csv(text, meta["step"], record.run_dir)
        print0("=" * 80)
        print0(f"Model: base_model (step {meta['step']})")
        print0("=" * 80)
        print0(text)
        print0(f"CORE: {examples:,} examples in {total_s:.2f}s ({examples / total_s:,.1f} examples/sec)")
    record.update(scores={**{r.label: r.accuracy for r in results}, "CORE": core})
    peak = stagerun.end(session, record, total_s, training=False)
    return {"peak_mem_mib": peak, "total_training_time_s": total_s}, "ok", None


def main(argv: list[str] | None = None) -> int:
    return stagerun.main(run, parse, argv)


if __name__ == "__main__":
    exit_now(main())  # without Python's teardown of torch (bench/processes.py)
