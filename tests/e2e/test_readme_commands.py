"""Every command README.md shows runs as written on this kind of machine, or is listed here with why not.

    python -m pytest tests/e2e/test_readme_commands.py -q

The commands run in README order through bash, in a fresh directory that stands for a user's working
directory: `$NANOCHAT_BASE_DIR` and `$SCRATCH` point into it (with the image files the render commands
expect), and the repository's `results/*.toml` and `edf/` are copied in, since the commands name them by
relative path. Each must exit 0 within COMMAND_TIMEOUT_S. A command this machine cannot run (a GPU, a
download, a site's Slurm and images) is in NOT_HERE with the reason, the tiny CPU sweep runs on the test
Slurm cluster (tests/integration/slurm/test_readme_sweep.py) and the chat data's download against a local
stand-in of the Hugging Face Hub (tests/support/hub.py), so a new README command fails here until it is
either runnable or listed.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.nanochat import chatdata
from bench.workloads import nntile
from tests.support import hub
from tests.support import nntile as support_nntile
from tests.support.readme import README, commands

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 600
# glibc's malloc keeps large blocks instead of mapping and unmapping them: the d2 runs allocate logits of tens of MB a
# step (hundreds on a 65,536-token vocabulary, where mapping them afresh took as much CPU time as training); on the
# tour's 8,192 tokens the first train command takes 13.6 s here with this, 14.6 s without; the losses are the same.
# Not for capacity's CPU stand-in, whose address-space cap was calibrated with malloc as usual.
FAST_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295"
ENV_SH = "bench/workloads/nntile/env.sh"
_TOUR_TOKENIZER = re.search(r"^nanochat-bench tokenizer train --vocab_size (\d+)$", "\n".join(commands()), re.M)
TOUR_VOCAB = int(_TOUR_TOKENIZER.group(1)) if _TOUR_TOKENIZER else None  # the tour's tokenizer's vocabulary
CPU_SWEEP = next((c for c in commands() if c.startswith("nanochat-bench submit") and "--device_type cpu" in c), None)
# run against a local stand-in of the Hugging Face Hub, in a base directory of their own (the main run stages
# `data generate --chat` stand-ins there, which a download refuses to mix with), by
# test_chat_download_runs_as_written_against_a_local_hub
ON_LOCAL_HUB = [c for c in commands() if c.startswith("nanochat-bench data download --chat")]

NOT_HERE = {
    "pip install torch==2.13.0 -e . && nanochat-bench smoke":
        "the set-up command: CI installs this way; tests/e2e/test_smoke.py runs the smoke job",
    "tests/run": "the test command: this suite",
    "nanochat-bench data download -n 240 -w 8": "downloads FineWeb-Edu shards (no network here)",
    "nanochat-bench data download --eval-bundle": "downloads the CORE eval bundle (no network here; "
                                                  "tests/unit/nanochat/test_eval_bundle.py serves one locally)",
    "torchrun --standalone --nproc_per_node=8 -m bench.nanochat.train -- --depth=20 --device_batch_size=32 "
    "--run=dummy": "8 GPUs",
    "torchrun --standalone --nproc_per_node=8 -m bench.nanochat.chat_sft -- --run=dummy":
        "8 GPUs and a mid checkpoint (the chat_sft commands before it run the stage on 2 CPU ranks)",
    "torchrun --standalone --nproc_per_node=8 -m bench.nanochat.chat_eval -- -i sft":
        "8 GPUs and an SFT checkpoint (tests/integration/test_chat_eval_stage.py runs the stage on 2 CPU ranks)",
    "nanochat-bench capacity --gpus 1 --strategies zero2,fsdp,fsdp+ac,fsdp+ac+offload --out runs/capacity":
        "a GPU (tests/integration/test_capacity.py runs the search on CPU ranks)",
    "nanochat-bench capacity --depths 12,24,36 --out runs/capacity": "a GPU (d36 on a CPU takes hours)",
    "nanochat-bench capacity --report --out runs/capacity": "the output of the capacity runs above",
    "python benchmarks/capacity_bench.py OUT": "a GPU",
    "python benchmarks/capacity_bench.py runs/capacity-cpu --tiny --strategies zero2,fsdp+ac+offload --max-batch 1":
        "tests/integration/test_capacity.py runs this very command and checks where its search ends",
    "nanochat-bench train --workload nntile -- --batch=8 --minibatch=4 --seq-tile=64":
        "GPT-2 small (124M parameters, context 1,024): hours on 2 CPU cores; the d2.json lines run instead",
    "nanochat-bench submit --nodes 1,2,4,8 --gpus-per-node 4 --runtimes bare,ce --repeats 3 "
    "--image ce=$SCRATCH/ce-images/nanochat-bench+latest.sqsh --partition normal --name d20-scaling":
        "a GPU cluster with a partition `normal` and 8 nodes",
    "nanochat-bench status runs/d20-scaling --wait": "the d20 sweep submitted above",
    "nanochat-bench status runs/d20-scaling --resubmit-failed": "the d20 sweep submitted above",
    CPU_SWEEP: "runs on the test Slurm cluster: tests/integration/slurm/test_readme_sweep.py",
    "nanochat-bench submit --flow speedrun --nodes 1,2,4 --gpus-per-node 4 --runtimes bare,ce --name speedrun":
        "a GPU cluster (tests/integration/slurm/test_slurm_flow.py runs a flow on the test cluster)",
    "reframe -C site.py -c bench/reframe_checks/checks.py --timestamp -P num_nodes=1,2,4,8 -S depth=20 "
    "-S references=results/my-site/references.toml -r":
        "a site's ReFrame configuration and GPU nodes (tests/integration/slurm/test_reframe.py runs the "
        "check on the test cluster)",
    "reframe -C site.py -c bench/reframe_checks/checks.py --timestamp -P workload=mid_train,chat_sft -S num_nodes=1 "
    "-r":
        "a site's ReFrame configuration, GPU nodes and the checkpoints of the stages before (tests/integration/"
        "slurm/test_reframe.py runs stage cases on the test cluster)",
    "nanochat-bench collect output/ stage/ --out results/reframe-table":
        "ReFrame's output of the run above (tests/integration/slurm/test_reframe.py collects it)",
    "containers/build.sh": "pulls nvcr.io/nvidia/pytorch (the stand-in build: tests/integration/test_container_build.py)",
    "containers/build.sh --target deps": "pulls nvcr.io/nvidia/pytorch",
    'containers/build.sh -- --build-arg PROJECT_EXTRAS=test --build-arg EXTRA_PIP_PACKAGES="pkg==1.0"':
        "pulls nvcr.io/nvidia/pytorch, and pkg==1.0 stands for a package of the reader's",
    "containers/enroot-import.sh": "enroot and the image built above",
    "NANOCHAT_BENCH_CONTAINER_TEST=1 tests/run tests/integration/test_container_build.py -s":
        "a part of this suite (.ci/run sets NANOCHAT_BENCH_CONTAINER_TEST=1)",
    "python benchmarks/gpu_bench.py --gpus 1,2 --steps 25": "2 GPUs",
    'python benchmarks/gpu_bench.py --steps 15 --upstream DIR --variant bf16 --variant "fp8::--fp8"':
        "a GPU and a checkout of upstream nanochat (tests/unit/benchmarks/test_gpu_bench.py runs it on a CPU at d2)",
    "python benchmarks/cpu_slurm_breakdown.py OUT": "a benchmark: it starts its own Slurm cluster, run by hand",
    "python benchmarks/bench_tokenizer.py": "a benchmark of the tools: it prints figures, run by hand",
    "python benchmarks/bench_loader.py": "a benchmark of the tools: it prints figures, run by hand",
    "python benchmarks/bench_collect.py": "a benchmark of the tools (10,000 run directories), run by hand",
    "python benchmarks/compare_decode.py --depth 20": "a checkout of upstream nanochat (never vendored) and a GPU",
    "python benchmarks/decode_steps.py --depth 20": "a checkout of upstream nanochat (never vendored) and a GPU",
}

# Commands whose documented exit status here is not 0: the reference files hold GPU figures, which no CPU run
# matches, and `check` fails on a missing figure (README: "exit 1 on a regression or a missing one").
EXIT_HERE = {"nanochat-bench check results/table --references results/references.example.toml": 1,
             "nanochat-bench check results/table --references results/h200-d20/references.toml": 1}

# The small GPT-2 of the README's NNTile-beside-nanochat measurement (README: "with `d2.json` = `{...}`"),
# and the data the README states for it.
D2_CONFIG = re.search(r"`d2\.json` =\s*`(\{.*?\})`", README.read_text(), re.S)
_D2_PROSE = re.search(r"of 40 steps after (.*?) with `d2\.json`", README.read_text(), re.S)
D2_DATA = re.findall(r"`(nanochat-bench [^`]+)`", _D2_PROSE.group(1)) if _D2_PROSE else []


def _measured_beside_nntile(command: str) -> bool:
    """The README's nanochat-vs-NNTile lines, which run on their own data (1,024-token vocabulary)."""
    return "d2.json" in command or re.search(r"--data_bin_dir=\S*/base_data_bin", command) is not None


def _workdir(tmp_path: Path) -> tuple[Path, dict]:
    work = tmp_path / "work"
    (work / "results" / "h200-d20").mkdir(parents=True)
    shutil.copy(REPO / "results" / "references.example.toml", work / "results")
    shutil.copy(REPO / "results" / "h200-d20" / "references.toml", work / "results" / "h200-d20")
    shutil.copytree(REPO / "edf", work / "edf")
    scratch = tmp_path / "scratch"
    (scratch / "ce-images").mkdir(parents=True)
    (scratch / "ce-images" / "nanochat-bench+latest.sqsh").write_bytes(b"hsqs")  # render only checks it exists
    env = {**os.environ, "NANOCHAT_BASE_DIR": str(tmp_path / "base"), "SCRATCH": str(scratch),
           "OMP_NUM_THREADS": "1", "GLIBC_TUNABLES": FAST_MALLOC}
    for name in ("NANOCHAT_VAL_FILES_K", "NANOCHAT_BENCH_RUN_DIR", "NANOCHAT_BENCH_T0"):
        env.pop(name, None)
    return work, env


def _run(command: str, cwd: Path, env: dict, rc: int = 0) -> str:
    try:
        p = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"README command still running after {COMMAND_TIMEOUT_S} s: {command}")
    return _exited(p, command, rc)


def _exited(p: subprocess.CompletedProcess, command: str, rc: int = 0) -> str:
    assert p.returncode == rc, (f"README command exited {p.returncode}, not {rc}: {command}\n"
                                f"--- output (tail) ---\n{(p.stdout + p.stderr)[-3000:]}")
    return p.stdout + p.stderr


def test_every_readme_command_is_run_here_or_says_why_not():
    listed = commands()
    assert CPU_SWEEP is not None, "README shows no tiny CPU sweep (submit ... --device_type cpu)"
    assert D2_CONFIG is not None, "README no longer states d2.json as `d2.json` = `{...}`"
    assert len(D2_DATA) == 3, f"README's data for the NNTile comparison: {D2_DATA}"
    assert TOUR_VOCAB is not None, "README's tour trains no tokenizer as `tokenizer train --vocab_size N`"
    stale = sorted((set(NOT_HERE) | set(EXIT_HERE)) - set(listed))
    assert not stale, f"NOT_HERE or EXIT_HERE name commands README no longer shows: {stale}"


@pytest.mark.timeout(support_nntile.BUILD_TIMEOUT_S + 1800)  # the NNTile environment's first build, then every command
def test_readme_commands_run_as_written(tmp_path):
    """Regression: on a fresh machine this failed for want of the NNTile environment, which only .ci/run
    built; the README's env.sh line now runs here, in order, as a reader would run it."""
    work, env = _workdir(tmp_path)
    nntile_env = dict(env, NANOCHAT_BASE_DIR=str(tmp_path / "base-d2"))
    prepared = False
    no_nntile = None  # why the NNTile lines cannot run here (no Python 3.12 outside CI), else None
    ran = []
    for command in commands():
        if command in NOT_HERE or command in ON_LOCAL_HUB:
            continue
        if command == ENV_SH:
            built = support_nntile.build(["bash", "-c", command], cwd=REPO, env=env)  # a path in the checkout
            no_nntile = built.stderr.strip() if support_nntile.unavailable(built) else None
            if no_nntile is None:
                _exited(built, command)
            continue
        if "--workload nntile" in command and no_nntile:
            continue
        if command.startswith("nanochat-bench data bin"):  # README: GPT-2 small takes this data's vocabulary
            _run(command, work, env)
            _gpt2_small_accepts(env)
            ran.append(command)
            continue
        here = env
        if _measured_beside_nntile(command):
            here = nntile_env
            if not prepared:
                for prepare in D2_DATA:
                    _run(prepare, work, here)
                (work / "d2.json").write_text(json.dumps(json.loads(D2_CONFIG.group(1))))
                prepared = True
        if command.startswith("nanochat-bench capacity"):  # its CPU stand-in caps the address space: malloc as usual
            here = {k: v for k, v in here.items() if k != "GLIBC_TUNABLES"}
        out = _run(command, work, here, EXIT_HERE.get(command, 0))
        if command in EXIT_HERE:
            assert "no usable run matches" in out and "Traceback" not in out, out[-2000:]
        ran.append(command)
    assert any(c.startswith("nanochat-bench train --nproc") for c in ran) and any("report" in c for c in ran)
    statuses = [json.loads(p.read_text())["status"] for p in (work / "runs" / "local").rglob("run.json")]  # trained
    assert statuses and set(statuses) == {"ok"}, statuses
    report = (work / "results" / "report" / "report.md").read_text()
    if no_nntile is None:  # README: "the section 'nanochat and NNTile side by side' sets the 1-rank ..."
        assert "## nanochat and NNTile side by side" in report, report[-3000:]


def test_chat_download_runs_as_written_against_a_local_hub(tmp_path):
    """README's `data download --chat` lines as written, HF_ENDPOINT and the two files' variables pointing at
    tests/support/hub.py's hub, which serves `data generate --chat`'s files (no network here)."""
    assert ON_LOCAL_HUB, "README shows no `nanochat-bench data download --chat`"
    work, env = _workdir(tmp_path)
    with hub.serve(*hub.chat_files(tmp_path / "generated")) as local:
        env = {**env, **local.env(tmp_path / "hf-home")}
        for command in ON_LOCAL_HUB:
            out = _run(command, work, env)
            assert f"{len(chatdata.HUB_SPLITS) + 2} chat data item(s) staged" in out, out[-2000:]
        assert local.bodies(), "nothing was downloaded from the local hub"


def _gpt2_small_accepts(env: dict) -> None:
    """The README's GPT-2 small command (hours here, so not run) passes every check on the data the README
    made: its vocabulary is the tour's tokenizer's (`tokenizer train --vocab_size N`), not GPT-2's 50,257."""
    command = next(c for c in commands() if c.startswith("nanochat-bench train --workload nntile") and "d2" not in c)
    argv = shlex.split(command.split(" -- ", 1)[1])
    mp = pytest.MonkeyPatch()
    mp.setenv("NANOCHAT_BASE_DIR", env["NANOCHAT_BASE_DIR"])
    try:
        nntile.WORKLOAD.check(argv, 1)
        assert nntile.WORKLOAD.manifest_config(argv)["gpt2"]["vocab_size"] == TOUR_VOCAB
    finally:
        mp.undo()
