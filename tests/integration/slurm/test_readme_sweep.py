"""README's tiny CPU sweep, as written, on the two-node test cluster: it finishes and every run is ok.

    python -m pytest tests/integration/slurm/test_readme_sweep.py -q
"""

import json
import os
import subprocess

import pytest

from tests.e2e.test_readme_commands import CPU_SWEEP

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_the_readme_cpu_sweep_runs_to_the_end(slurm_cluster, tiny_base_dir, tmp_path):
    assert CPU_SWEEP is not None
    env = {**os.environ, "NANOCHAT_BASE_DIR": str(tiny_base_dir), "OMP_NUM_THREADS": "1"}
    env.pop("NANOCHAT_VAL_FILES_K", None)

    def run(command: str, timeout: int) -> None:
        p = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=timeout)
        assert p.returncode == 0, f"{command}: exit {p.returncode}\n{(p.stdout + p.stderr)[-3000:]}"

    run(CPU_SWEEP, 60)
    name = CPU_SWEEP.split("--name ", 1)[1].split()[0]
    run(f"nanochat-bench status runs/{name} --wait --poll=2 --timeout=480", 540)
    runs = sorted((tmp_path / "runs" / name).glob("*/run.json"))
    assert [p.parent.name for p in runs] == ["n1-bare-r1", "n2-bare-r1"]
    assert {json.loads(p.read_text())["status"] for p in runs} == {"ok"}
