"""Run a workload on this machine, without Slurm: one run directory, the workload's local command.

`run_local` writes run.json first (status pending, the launch time), starts the workload's command
(nanochat: torchrun in standalone mode, bench/launch/torchrun.py; others: bench/workloads/) with
NANOCHAT_BENCH_RUN_DIR pointing at the run directory, copies the output to the terminal and to
`<run_dir>/train.log`, records the wall and CPU time of everything it started, and ends with
bench.schema.close_unfinished, the same last word a batch job has. It returns the command's exit status.
"""

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import schema, workloads


def default_run_dir(sweep_id: str = "local", root: str | os.PathLike = "runs") -> Path:
    """./runs/<sweep_id>/<run_id>, the run id a timestamp (with a suffix if that one exists)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(root) / sweep_id
    path = base / stamp
    n = 1
    while path.exists():
        path = base / f"{stamp}-{n}"
        n += 1
    return path


def run_local(train_args: list[str], nproc: int, run_dir: str | os.PathLike, env: dict | None = None,
              workload: str = workloads.DEFAULT, python: str | None = None) -> int:
    """Train with `nproc` local processes; the run directory gets run.json, metrics.jsonl, train.log."""
    chosen = workloads.get(workload)
    cmd = chosen.local_command(train_args, nproc, python)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    child_env = dict(os.environ if env is None else env)
    child_env[schema.ENV_RUN_DIR] = str(run_dir.resolve())
    child_env[schema.ENV_T0] = f"{t0:.6f}"
    child_env.setdefault("OMP_NUM_THREADS", "1")
    for key, value in chosen.local_env().items():
        child_env.setdefault(key, value)
    schema.update_run_json(run_dir, run_id=run_dir.name, sweep_id=run_dir.resolve().parent.name, runtime="bare",
                           workload=chosen.run_workload, status="pending",
                           launch={"kind": "local", "t0": t0, "command": cmd})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(run_dir / schema.TRAIN_LOG, "ab") as log:
        proc = subprocess.Popen(cmd, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            for chunk in iter(lambda: proc.stdout.readline(), b""):
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                log.write(chunk)
                log.flush()
            rc = proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)  # torchrun passes it on to the ranks, which record `cancelled`
            rc = proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    schema.update_run_json(run_dir, launch={"exit_code": rc, "finished_at": time.time(),
                                            "wall_time_s": time.time() - t0, "cpu_time_s": cpu})
    schema.close_unfinished(run_dir, rc, "the launcher" if workload != workloads.DEFAULT else "torchrun")
    return rc
