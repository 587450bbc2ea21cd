"""Secrets in the environment reach no file the project writes: run.json, metrics.jsonl, logs, EDFs,
rendered batch scripts, the collected table or the report.

    python -m pytest tests/integration/test_secrets_stay_out.py -q

A real 2-rank CPU run (the `nanochat-bench train` wrapper, torchrun, gloo) with credentials set as a
site would have them, then collect + report of it, `render compare` of every runtime and `edf`; every
file under the test's directory and everything printed is searched for each secret value. Names under
a recorded prefix (NCCL_*, FI_*, ...) are included: provenance records those prefixes, not credentials.
"""

import uuid
from pathlib import Path

import pytest

from bench import cli, runtimes

NAMES = ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN",
         "MY_DB_PASSWORD", "OAUTH_CLIENT_SECRET", "NCCL_IB_TOKEN", "FI_CXI_PASSWORD", "TORCH_NCCL_SECRET",
         "UCX_AUTH_TOKEN"]
TINY = ["--depth=1", "--max_seq_len=32", "--device_batch_size=2", "--total_batch_size=128", "--eval_every=2",
        "--eval_tokens=256", "--sample_every=-1", "--num_iterations=3", "--model_tag=secrets"]


def leaks(root: Path, printed: str, secrets: dict[str, str]) -> list[str]:
    found = [f"printed: {n}" for n, v in secrets.items() if v in printed]
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {n}" for n, v in secrets.items() if v.encode() in data]
    return found


@pytest.mark.slow
def test_secrets_in_the_environment_reach_no_file(tiny_base_dir, tmp_path, monkeypatch, capfd):
    secrets = {name: f"{name.lower()}-{uuid.uuid4().hex}" for name in NAMES}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tiny_base_dir))
    monkeypatch.delenv("NANOCHAT_VAL_FILES_K", raising=False)
    monkeypatch.chdir(tmp_path)

    run_dir = tmp_path / "runs" / "local" / "with-secrets"
    assert cli.main(["train", "--nproc", "2", "--run-dir", str(run_dir), "--", *TINY]) == 0
    assert (run_dir / "run.json").is_file() and (run_dir / "train.log").is_file()
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(tmp_path / "table")]) == 0
    assert cli.main(["report", str(tmp_path / "table"), "--out", str(tmp_path / "report")]) == 0

    images = tmp_path / "images"
    images.mkdir()
    (images / "nb.sqsh").write_bytes(b"hsqs")
    (images / "nb.sif").write_bytes(b"sif")
    assert cli.main(["render", "compare", "--nodes=2", f"--runtimes={','.join(runtimes.names())}",
                     "--gpus-per-node=2", "--device_type=cpu", f"--base-dir={tiny_base_dir}",
                     f"--image=ce={images / 'nb.sqsh'}", f"--image=pyxis={images / 'nb.sqsh'}",
                     f"--image=apptainer={images / 'nb.sif'}", f"--out={tmp_path / 'rendered'}"]) == 0
    assert list((tmp_path / "rendered").rglob("*.sbatch"))
    assert cli.main(["edf", "--image", str(images / "nb.sqsh"), "-o", str(tmp_path / "ce.toml")]) == 0

    printed = capfd.readouterr()
    assert leaks(tmp_path, printed.out + printed.err, secrets) == []
