"""The NNTile environment the nntile tests train in, built on first use (bench/workloads/nntile/env.sh).

A fresh machine has none: the first test that needs it builds it (a Python 3.12 venv with torch 2.9.1 and
torch-nntile 0.1.0, about 3 minutes and 7 GB, cached in ~/.cache/nanochat-bench/nntile-venv), saying so
on the terminal, so `tests/run` alone is enough. Only where no Python 3.12 exists, and never in CI, are
those tests skipped.
"""

import os
import subprocess
import sys

import pytest

from bench.workloads import nntile

BUILD_TIMEOUT_S = 1500


def unavailable(proc: subprocess.CompletedProcess) -> bool:
    """env.sh found no Python 3.12 to build from (its exit status 2), outside CI."""
    return proc.returncode == 2 and "no Python 3.12" in proc.stderr and os.environ.get("CI") != "true"


def build(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """env.sh (or a command that runs it), with a line on the terminal while a cold build takes minutes."""
    if not (nntile.default_venv() / ".nanochat-bench-nntile").is_file():
        print(f"\n[tests] building the NNTile environment in {nntile.default_venv()} (first time: ~3 minutes, "
              "~7 GB; cached after)", file=sys.__stderr__, flush=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, **kwargs)


def interpreter() -> str:
    """The NNTile interpreter: NANOCHAT_BENCH_NNTILE_PYTHON, else the one env.sh builds (or finds built)."""
    if os.environ.get(nntile.ENV_PYTHON):
        return os.environ[nntile.ENV_PYTHON]
    proc = build(["bash", str(nntile.ENV_SCRIPT)])
    if unavailable(proc):
        pytest.skip(f"the NNTile environment cannot be built here: {proc.stderr.strip()}")
    assert proc.returncode == 0, f"env.sh failed:\n{proc.stderr[-3000:]}"
    return proc.stdout.strip().splitlines()[-1]
