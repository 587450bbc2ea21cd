"""The ways of running the trainer under srun, one module each, looked up by name.

`get(name)` returns a runtime or raises RuntimeConfigError listing the valid names; `names()` lists
them in the order the help text shows. Each module is small: see bench/runtimes/base.py for the interface.

  apptainer.py  srun apptainer exec --cleanenv --env-file ... IMAGE CMD
  bare.py       the host's Python, no container: the reference every runtime is compared with
  base.py       the interface: a launch spec in, srun options and the wrapped command out
  ce.py         CSCS's Container Engine, srun --environment=<EDF written into the run directory>
  edf.py        EDF files: the defaults as data and a TOML renderer
  podman.py     podman and podman-hpc: srun podman run --rm ... IMAGE CMD
  pyxis.py      NVIDIA's pyxis/enroot: srun --container-image=... --container-mounts=...
  sarus.py      classic Sarus (srun sarus run ...) and Sarus Suite (srun --edf=<EDF>)
"""

from bench.errors import RuntimeConfigError
from bench.runtimes.apptainer import Apptainer
from bench.runtimes.bare import Bare
from bench.runtimes.base import LaunchSpec, Mount, Runtime, Token, Var, shell_join
from bench.runtimes.ce import ContainerEngine
from bench.runtimes.podman import Podman, PodmanHPC
from bench.runtimes.pyxis import Pyxis
from bench.runtimes.sarus import Sarus, SarusSuite

__all__ = ["LaunchSpec", "Mount", "Runtime", "Token", "Var", "shell_join", "get", "names", "parse_names"]

_REGISTRY: dict[str, type[Runtime]] = {}


def register(cls: type[Runtime]) -> type[Runtime]:
    if cls.name in _REGISTRY:
        raise ValueError(f"runtime {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


for _cls in (Bare, ContainerEngine, Pyxis, Apptainer, Podman, PodmanHPC, Sarus, SarusSuite):
    register(_cls)


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str, given_as: str = "") -> Runtime:
    """The runtime called `name`; an unknown one is an error naming `given_as` (the flag and its value)."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        where = f"{given_as}: " if given_as else ""
        raise RuntimeConfigError(f"{where}unknown runtime {name!r}; valid runtimes: {', '.join(names())}") from None


def parse_names(text: str) -> list[str]:
    """`bare,ce,pyxis` -> the list, each checked, no duplicates."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise RuntimeConfigError(f"--runtimes {text!r} names no runtime; valid: {', '.join(names())}")
    for item in items:
        get(item, f"--runtimes {text!r}")
    if len(set(items)) != len(items):
        raise RuntimeConfigError(f"--runtimes {text!r} names a runtime twice")
    return items
