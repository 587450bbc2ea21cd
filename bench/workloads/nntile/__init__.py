"""The NNTile workload: NNTile's GPT-2 training on StarPU (torch-nntile), in its own interpreter.

torch-nntile 0.1.0 is a cp312 wheel linked against the CUDA build of torch 2.9.1, so it cannot live in
the main process (another Python, another torch): the launchers start `runner.py` with the NNTile
interpreter, chosen by
  1. `--python` of `nanochat-bench train` (or `--python` of submit/render for the bare runtime),
  2. NANOCHAT_BENCH_NNTILE_PYTHON,
  3. the environment `env.sh` builds: $NANOCHAT_BENCH_NNTILE_VENV, else ~/.cache/nanochat-bench/nntile-venv;
inside a container image built from containers/nntile.Containerfile it is the image's own Python.

One process per node, no torchrun: StarPU spreads the tiles over every CPU core and GPU of the node
(torch-nntile 0.1.0 has no multi-node runtime, so runs are single-node). Standard library only.

  config.py   the flags of NNTile's GPT-2 example, checked before StarPU starts
  model.py    torch-nntile's GPT-2 made trainable with tiles, and its tiled axes' names
  runner.py   the training on StarPU, leaving the run directory every nanochat-bench run leaves
  env.sh      builds the NNTile interpreter's environment
  gpt2_default_config.json  GPT-2 small as NNTile's example shapes it: the default of --config-path
"""

import os
import shlex
import shutil
from pathlib import Path

from bench import contract, paths
from bench.errors import ConfigError
from bench.workloads.base import PointContext, PointPlan, Settings, Workload

WORKLOAD_NAME = contract.NNTILE_WORKLOAD
ONE_NODE = "torch-nntile 0.1.0 runs on one node (no StarPU-MPI); use --nodes 1"
PATH_FLAGS = ("config_path", "dataset_path")  # the flags that name host files (bench/workloads/nntile/config.py)
ENV_PYTHON = "NANOCHAT_BENCH_NNTILE_PYTHON"
ENV_VENV = "NANOCHAT_BENCH_NNTILE_VENV"
ENV_SCRIPT = Path(__file__).with_name("env.sh")
RUNNER = Path(__file__).with_name("runner.py")
RUNNER_MODULE = "bench.workloads.nntile.runner"


def default_venv() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get(ENV_VENV) or cache / "nanochat-bench" / "nntile-venv")


def interpreter(python: str | None = None) -> str:
    """The NNTile interpreter (see the module docstring); a ConfigError says how to make one."""
    chosen = python or os.environ.get(ENV_PYTHON)
    if chosen:
        if shutil.which(chosen) is None:  # a path or a name on PATH, as for the other workloads; no directory
            source = "--python" if python else ENV_PYTHON
            raise ConfigError(f"{source}={chosen}: no such interpreter (a path or a name on PATH); build the "
                              f"NNTile environment with {ENV_SCRIPT} (it prints the interpreter's path)")
        return chosen
    default = default_venv() / "bin" / "python"
    if not (default.parent.parent / ".nanochat-bench-nntile").is_file():
        raise ConfigError(f"no NNTile environment at {default.parent.parent}: build it with {ENV_SCRIPT} "
                          f"(a few minutes and ~7 GB the first time), or give an interpreter with torch-nntile "
                          f"as --python or {ENV_PYTHON}")
    return str(default)


def starpu_env(base_dir: str | None = None) -> dict[str, str]:
    """StarPU's variables for a run: quiet, performance models under one pinned directory beside the data
    ($NANOCHAT_BASE_DIR/starpu, so the calibration of one run serves the next), one BLAS thread per
    StarPU worker."""
    return {"STARPU_SILENT": "1", "STARPU_HOME": str(Path(paths.base_dir(base_dir)) / "starpu"),
            "OPENBLAS_NUM_THREADS": "1"}


class NNTile(Workload):
    name = "nntile"
    summary = "NNTile's GPT-2 on StarPU, in the NNTile interpreter"
    run_workload = WORKLOAD_NAME
    family = "nntile"
    precision = "float32"  # torch-nntile 0.1.0's GPT-2 is built in torch's default dtype: no bf16, no autocast
    image_recipe = "containers/nntile.Containerfile"  # nanochat-bench's image has no torch-nntile
    # the token file it trains from, which `data bin` tokenizes from the shards with the trained tokenizer
    staging = (("data", "bin"), "the token file NNTile trains from (train.bin, the shards tokenized)")

    def check(self, argv: list[str], nproc: int) -> None:
        from bench.workloads.nntile.config import check_dataset, parse_args, workers

        if nproc != 1:
            raise ConfigError(f"--nproc={nproc}: the nntile workload is one process (StarPU uses every core "
                              "and GPU itself); leave --nproc out and set STARPU_NCPU / STARPU_NCUDA")
        config, shape = parse_args(argv)
        check_dataset(config, shape)
        workers(config.restrict)  # the runner inherits this environment: a bad worker count fails here, at once

    def missing_staged(self, base_dir: str, settings: Settings | None = None) -> str:
        """The train.bin the runs read (--dataset-path, else under `base_dir`) when it is not there: each run would
        stop with no_data on its node."""
        path = self._train_bin(base_dir, settings)
        if path.is_file():
            return ""
        return f"no token file at {path}; make it with `nanochat-bench {shlex.join(self.staging_command(settings))}`"

    def staging_command(self, settings: Settings | None = None) -> tuple[str, ...]:
        """`data bin`, into --dataset-path's directory where one is given (it writes train.bin there)."""
        given = settings is not None and self._config(settings).dataset_path
        return (*self.staging[0], *(("--out", str(self._train_bin(None, settings).parent)) if given else ()))

    def _config(self, settings: Settings):
        from bench.workloads.nntile.config import parse_args

        return parse_args(list(settings.argv))[0]

    def _train_bin(self, base_dir: str | None, settings: Settings | None) -> Path:
        from bench.workloads.nntile.config import NNTileConfig, train_bin

        return train_bin(self._config(settings) if settings is not None else NNTileConfig(), base_dir)

    def local_command(self, argv: list[str], nproc: int, python: str | None = None) -> list[str]:
        return [interpreter(python), str(RUNNER), *argv]

    def local_env(self) -> dict[str, str]:
        return starpu_env()

    def launch_env(self, base_dir: str, gpus_per_node: int) -> dict[str, str]:
        """`gpus_per_node`: the GPUs the job reserves on a node (0 on a CPU run), StarPU's CUDA workers."""
        return {**starpu_env(base_dir), "STARPU_NCUDA": str(gpus_per_node)}

    def settings(self, train: dict, scaling: str) -> Settings:
        """NNTile's flags from the --train-arg pairs, checked by its parser (its config stays unparsed
        here: parsing reads the model's JSON, which the runner reads again on the node)."""
        from bench.workloads.nntile.config import parse_args

        # its files named as the job will read them: a batch script runs in its run directory, not here
        train = {k: os.path.abspath(v) if k.replace("-", "_") in PATH_FLAGS and v else v for k, v in train.items()}
        argv = [f"--{k.replace('_', '-')}={v}" for k, v in sorted(train.items())]
        parse_args(argv)
        return Settings(None, tuple(argv), dict(train))

    def read_paths(self, settings: Settings) -> tuple[str, ...]:
        """The folders of --config-path and of --dataset-path's train.bin, where given."""
        config = self._config(settings)
        given = [Path(config.config_path).parent] if config.config_path else []
        if config.dataset_path:
            given.append(self._train_bin(None, settings).parent)
        return tuple(dict.fromkeys(map(str, given)))

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        """A point on more nodes is impossible: the plan says so, and submit leaves it out as it does any such. A CPU
        run records no GPUs, as its runner does (it keeps the launcher's count where it sees none)."""
        return PointPlan(train_argv=settings.argv, reason="" if point.nodes == 1 else ONE_NODE,
                         manifest=() if self.uses_gpus(settings) else (("gpus_per_node", 0),))

    def uses_gpus(self, settings: Settings) -> bool:
        return settings.train.get("restrict") != "cpu"

    def ranks_per_node(self, settings: Settings, gpus_per_node: int) -> int:
        """Its GPUs, which the runner counts as its world size; on the CPU its one process."""
        return gpus_per_node if self.uses_gpus(settings) else 1

    def host_python(self, python: str | None) -> str:
        """--python as given (a path on the nodes, not checked here), else the NNTile interpreter as `train`
        finds it: this Python has no torch-nntile, and the job would fail on the node."""
        return python or interpreter()

    def launch_command(self, python: str, nodes: int, nproc_per_node: int, argv: list,
                       containerised: bool, numa_binding: str | None = None,
                       join_timeout_s: int | None = None) -> tuple:  # StarPU places its workers; one node
        if nodes != 1:
            raise ConfigError(f"--nodes {nodes}: {ONE_NODE}")
        # in an image nanochat-bench is installed in the NNTile Python; on the host the runner is run by path
        return (python, "-m", RUNNER_MODULE, *argv) if containerised else (python, str(RUNNER), *argv)

    def manifest_config(self, argv: list[str]) -> dict:
        from bench.workloads.nntile.config import as_record, parse_args

        return as_record(*parse_args(argv))


WORKLOAD = NNTile()
