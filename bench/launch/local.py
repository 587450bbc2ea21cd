"""Run the trainer on this machine, without Slurm: torchrun in standalone mode, one run directory.

`run_local` starts `python -m torch.distributed.run --standalone --nproc_per_node=N -m
bench.nanochat.train -- <flags>` with NANOCHAT_BENCH_RUN_DIR pointing at the run directory, copies
the output to the terminal and to `<run_dir>/train.log`, and returns torchrun's exit status. The
launcher writes run.json first (status running, launch time); the trainer merges its part into it.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.schema import ENV_RUN_DIR, ENV_T0, read_run_json, update_run_json

TRAIN_LOG = "train.log"


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


def torchrun_command(train_args: list[str], nproc: int, module: str = "bench.nanochat.train") -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", module, "--", *train_args]


def prepare_local(train_args: list[str], nproc: int, run_dir: str | os.PathLike, env: dict | None = None,
                  module: str = "bench.nanochat.train") -> tuple[list[str], dict]:
    """(command, environment) of a local run; writes the launcher's part of run.json (status running)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    t0 = time.time()
    child_env[ENV_RUN_DIR] = str(run_dir.resolve())
    child_env[ENV_T0] = f"{t0:.6f}"
    child_env.setdefault("OMP_NUM_THREADS", "1")
    cmd = torchrun_command(train_args, nproc, module)
    update_run_json(run_dir, run_id=run_dir.name, sweep_id=run_dir.parent.name, runtime="bare",
                    status="running", launcher="local", launch_t0=t0, command=cmd)
    return cmd, child_env


def run_local(train_args: list[str], nproc: int, run_dir: str | os.PathLike, env: dict | None = None) -> int:
    """Train with `nproc` local processes; the run directory gets run.json, metrics.jsonl, train.log."""
    run_dir = Path(run_dir)
    cmd, child_env = prepare_local(train_args, nproc, run_dir, env)
    with open(run_dir / TRAIN_LOG, "ab") as log:
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
    close_if_unfinished(run_dir, rc)
    return rc


def close_if_unfinished(run_dir: Path, rc: int) -> None:
    """A run whose trainer died before recording an end (killed, crashed at import) is marked failed."""
    status = read_run_json(run_dir).get("status")
    if status in (None, "pending", "running"):
        update_run_json(run_dir, status="ok" if rc == 0 else "failed", finished_at=time.time(),
                        message=None if rc == 0 else f"torchrun exited with status {rc}; see {TRAIN_LOG}")
