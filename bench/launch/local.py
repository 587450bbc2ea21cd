"""Run a workload on this machine, without Slurm: one run directory, the workload's local command.

`run_local` = `prepare_local` (run.json first, status pending, the launch time; the workload's command,
nanochat's torchrun in standalone mode from bench/launch/torchrun.py, others from bench/workloads/) + the
process: NANOCHAT_BENCH_RUN_DIR points at the run directory, the output goes to the terminal and to
`<run_dir>/train.log`, the wall and CPU time of everything it started are recorded, and
bench.schema.close_unfinished has the last word, as it has for a batch job. It returns the exit status.
"""

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import schema, workloads
from bench.launch.torchrun import torchrun_command


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


def prepare_local(train_args: list[str], nproc: int, run_dir: str | os.PathLike, env: dict | None = None,
                  workload: str = workloads.DEFAULT, python: str | None = None,
                  module: str | None = None) -> tuple[list[str], dict]:
    """(command, environment) of a local run, with the launcher's run.json written. `module` replaces the
    nanochat trainer's module under torchrun (a wrapper around it, as the capacity probes' memory cap)."""
    chosen = workloads.get(workload)
    cmd = list(torchrun_command(python or sys.executable, nproc, train_args, module=module)) if module \
        else chosen.local_command(train_args, nproc, python)
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
    return cmd, child_env


def run_local(train_args: list[str], nproc: int, run_dir: str | os.PathLike, env: dict | None = None,
              workload: str = workloads.DEFAULT, python: str | None = None) -> int:
    """Train with `nproc` local processes; the run directory gets run.json, metrics.jsonl, train.log."""
    run_dir = Path(run_dir)
    cmd, child_env = prepare_local(train_args, nproc, run_dir, env, workload, python)
    t0 = time.time()
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
