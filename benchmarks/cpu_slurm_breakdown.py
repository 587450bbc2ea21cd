"""The breakdown of runs on the test suite's two-node Slurm cluster (CPU ranks, gloo), and what measuring it costs.

    python benchmarks/cpu_slurm_breakdown.py OUT                 # as root: starts and stops its own cluster
    python benchmarks/cpu_slurm_breakdown.py OUT --repeats 3 --steps 30

A weak-scaling sweep on 1 and 2 nodes (2 CPU ranks a node, bare runtime, depth 2, sequence 128) runs
`--repeats` times with the pre-flight and the step split on, and as often with both off
(`--preflight=0 --breakdown=0`), alternating. OUT gets the sweeps' run directories, `table/` and `report/`
(`nanochat-bench collect` / `report`), and `summary.md`: per node count the start-up phases, the steady
step split and how much of the step it explains, the pre-flight busbw, the network backend, and steady
tok/s with and without the instrumentation.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration" / "slurm"))

from slurm_cluster import SlurmCluster, missing_programs  # noqa: E402

from bench import cli  # noqa: E402
from bench.analysis.collect import collect  # noqa: E402
from bench.analysis.report import write_report  # noqa: E402

SHAPE = ["--gpus-per-node=2", "--runtimes=bare", "--nodes=1,2", "--depth=2", "--max_seq_len=128",
         "--device_batch_size=4", "--eval_every=-1", "--device_type=cpu", "--no-exclusive"]
OFF = ["--train-arg", "preflight=0", "--train-arg", "breakdown=0"]


def prepare_data(base: Path) -> None:
    from bench.nanochat import dataset, tokenizer

    os.environ["NANOCHAT_BASE_DIR"] = str(base)
    os.environ.pop("NANOCHAT_VAL_FILES_K", None)
    dataset.generate_shards(3, 512, 64)
    tokenizer.train_tokenizer(vocab_size=1024)


def sweep(out: Path, name: str, base: Path, steps: int, extra: list[str]) -> None:
    sweep_dir = out / name
    argv = ["submit", *SHAPE, f"--num_iterations={steps}", *extra, f"--base-dir={base}", f"--out={sweep_dir}"]
    if cli.main(argv) != 0 or cli.main(["status", str(sweep_dir), "--wait", "--poll=2", "--timeout=900"]) != 0:
        raise SystemExit(f"sweep {name} did not end ok (see {sweep_dir})")


PHASES = ["phase_runtime_start_s", "phase_start_s", "phase_imports_done_s", "phase_dist_init_s", "phase_preflight_s",
          "phase_model_ready_s", "phase_data_ready_s", "phase_first_step_s", "phase_steady_s", "phase_end_s",
          "phase_finished_s"]
SPLIT = ["step_fwd_bwd_ms", "step_comm_ms", "step_optim_ms", "step_data_ms"]


def summary(table) -> str:
    """Per node count: medians of the instrumented runs, and tok/s against the runs without."""
    table = table[table["status"] == "ok"]
    on, off = table[table["sweep_id"].str.startswith("on-")], table[table["sweep_id"].str.startswith("off-")]
    lines = ["| nodes | ranks | runs on/off | tok/s on | tok/s off | on/off | step ms | fwd+bwd | exposed comm | "
             "optimizer | data wait | other | parts/step | all_reduce busbw GB/s | backend |",
             "|" + "---:|" * 14 + ":---|"]
    phases = []
    for nodes in sorted(on["nodes"].unique()):
        a, b = on[on["nodes"] == nodes], off[off["nodes"] == nodes]
        m = a.median(numeric_only=True)
        parts = sum(m[c] for c in SPLIT)
        tok_on, tok_off = m["tok_per_sec"], b["tok_per_sec"].median()
        lines.append(f"| {nodes} | {int(m['world_size'])} | {len(a)}/{len(b)} | {tok_on:,.0f} | {tok_off:,.0f} | "
                     f"{tok_on / tok_off:.3f} | {m['step_time_ms']:.1f} | {m['step_fwd_bwd_ms']:.1f} | "
                     f"{m['step_comm_ms']:.2f} | {m['step_optim_ms']:.1f} | {m['step_data_ms']:.2f} | "
                     f"{m['step_other_ms']:.2f} | {100 * (parts + m['step_other_ms']) / m['step_time_ms']:.1f}% | "
                     f"{m['busbw_all_reduce_gbps']:.3f} | {a['net'].dropna().iloc[0] if a['net'].notna().any() else 'gloo'} |")
        known = {c.removeprefix("phase_").removesuffix("_s"): m[c] for c in PHASES if c in m and m[c] == m[c]}
        phases.append(f"- {nodes} node(s), launch to exit {sum(known.values()):.1f} s: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in known.items()))
    return "\n".join(lines + ["", "Phases in seconds, each from the milestone before it (medians, instrumented runs):",
                               *phases])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    if missing_programs():
        raise SystemExit(f"needs Slurm and munge (as root): missing {', '.join(missing_programs())}")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        prepare_data(base)
        cluster = SlurmCluster(Path(tmp) / "slurm").start()
        os.environ["SLURM_CONF"] = str(cluster.conf)
        try:
            for r in range(1, args.repeats + 1):  # alternating, so that load drifts hit both alike
                sweep(args.out, f"on-{r}", base, args.steps, [])
                sweep(args.out, f"off-{r}", base, args.steps, OFF)
        finally:
            cluster.stop()
    table = collect([args.out], args.out / "table").table
    write_report(table, args.out / "report")
    text = summary(table)
    (args.out / "summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
