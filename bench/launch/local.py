"""Run the trainer on this machine, without Slurm: torchrun in standalone mode, one run directory.

`run_local` writes run.json first (status pending, the launch time), starts torchrun
(bench/launch/torchrun.py) with NANOCHAT_BENCH_RUN_DIR pointing at the run directory, copies the
output to the terminal and to `<run_dir>/train.log`, and ends with bench.schema.close_unfinished, the
same last word a batch job has. It returns torchrun's exit status.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import schema
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


def run_local(train_args: list[str], nproc: int, run_dir: str | os.PathLike, env: dict | None = None) -> int:
    """Train with `nproc` local processes; the run directory gets run.json, metrics.jsonl, train.log."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = list(torchrun_command(sys.executable, nproc, train_args))
    t0 = time.time()
    child_env = dict(os.environ if env is None else env)
    child_env[schema.ENV_RUN_DIR] = str(run_dir.resolve())
    child_env[schema.ENV_T0] = f"{t0:.6f}"
    child_env.setdefault("OMP_NUM_THREADS", "1")
    schema.update_run_json(run_dir, run_id=run_dir.name, sweep_id=run_dir.resolve().parent.name, runtime="bare",
                           status="pending", launch={"kind": "local", "t0": t0, "command": cmd})
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
    schema.update_run_json(run_dir, launch={"exit_code": rc, "finished_at": time.time()})
    schema.close_unfinished(run_dir, rc, "torchrun")
    return rc
