"""A site profile: one TOML file, read into frozen dataclasses, every key checked.

The file (see alps.toml for a full one):

    name = "alps"
    network = "slingshot"             # slingshot | infiniband | ethernet
    nccl_net = "AWS Libfabric"        # what NCCL must choose between nodes ("Using network ...")
    gpu = "GH200"                     # optional: the nodes' GPU (bench/metrics.py's names), plan's default --gpu
    gpus_per_node = 4
    gpu_memory_gib = 96
    cpus_per_gpu = 72                 # optional: a GPU's share of a node's CPUs, what a --no-exclusive job asks
    shared_paths = ["/scratch"]       # optional: every node sees these alike, whatever their mount type
    default_partition = "normal"      # optional: where Slurm sends a job without --partition
    [partitions.normal]
    max_time = "12:00:00"             # Slurm's [D-]HH:MM:SS
    max_nodes = 2                     # optional
    [network_env]                     # every runtime's NCCL/libfabric variables on this network
    NCCL_NET = "AWS Libfabric"
    [runtimes.ce]                     # per runtime: how the fast network reaches the container
    setup = "the aws_ofi_nccl hook (cuda-dl) and the CXI hook"
    annotations = { "com.hooks.aws_ofi_nccl.enabled" = "true" }
    env = { ... }                     # on top of network_env; "" unsets a network_env variable
    mounts = ["/host/lib:/host/lib:ro"]
    devices = ["/dev/cxi0"]
    flags = ["--nccl"]                # the runtime's own switches (podman-hpc modules)
    [images.podman]                   # where a runtime's image comes from on the nodes
    archive = "${SCRATCH}/images/nanochat-bench.tar"   # `podman save`, loaded on nodes that lack the image

A runtime without a `[runtimes.X]` table gets `network_env` alone. Unknown keys are errors naming the file
and the key, so a typo never silently drops a setting; so is a key the runtime does not render (each takes its
`site_keys`, bench/runtimes: devices for pyxis or annotations for podman would be dropped).
"""

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from bench import metrics
from bench import runtimes as registry  # the runtimes' own registry: one list of names
from bench.errors import ConfigError, RuntimeConfigError
from bench.runtimes import edf
from bench.runtimes.base import LaunchSpec, Mount, Runtime, exportable

NETWORKS = ("slingshot", "infiniband", "ethernet")
SHIPPED_SUFFIX = ".toml"
_TIME = re.compile(r"^(?:(\d+)-)?(\d{1,2}):(\d{2}):(\d{2})$")


@dataclass(frozen=True)
class Partition:
    name: str
    max_time_s: int  # the partition's time limit
    max_nodes: int | None = None


@dataclass(frozen=True)
class NetworkSetup:
    """How one runtime reaches the site's network: variables, hook annotations, binds, devices, switches."""

    setup: str = ""  # one line, for messages and run.json: what this set-up is
    env: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    without_hook: "NetworkSetup | None" = None  # CE / Sarus Suite with `--ofi-hook off`

    def record(self) -> dict[str, Any]:
        """What run.json keeps of the set-up that was applied."""
        return {"setup": self.setup, "env": dict(self.env), "annotations": dict(self.annotations),
                "mounts": list(self.mounts), "devices": list(self.devices), "flags": list(self.flags)}


@dataclass(frozen=True)
class Site:
    name: str
    network: str
    nccl_net: str | None  # None: the site does not say, so no run is stopped for its network
    gpu: str | None = None  # the nodes' GPU model, what plan's estimates assume without --gpu (None: plan's default)
    gpus_per_node: int | None = None
    gpu_memory_gib: float | None = None
    cpus_per_gpu: int | None = None  # a GPU's share of a node's CPUs: what a job sharing its nodes asks for
    description: str = ""
    partitions: Mapping[str, Partition] = field(default_factory=dict)
    default_partition: str | None = None  # Slurm's default: the limits a job without --partition is checked against
    network_env: Mapping[str, str] = field(default_factory=dict)
    runtimes: Mapping[str, NetworkSetup] = field(default_factory=dict)
    device_batch_limits: Mapping[int, int] = field(default_factory=dict)  # from N ranks on: largest device batch
    shared_paths: tuple[str, ...] = ()  # every node sees these alike, whatever /proc/mounts says (sharedfs.py)
    image_archives: Mapping[str, str] = field(default_factory=dict)  # runtime -> archive its nodes load (podman)
    source: str = ""  # the file it was read from

    def max_device_batch(self, ranks: int) -> int | None:
        """The largest device batch this site allows at `ranks` (its observed limits), or None."""
        limits = [b for n, b in self.device_batch_limits.items() if ranks >= n]
        return min(limits) if limits else None

    def network_setup(self, runtime: str, ofi_hook: str = "default") -> NetworkSetup:
        """The runtime's set-up with the site's network variables under it ("" in the runtime unsets one);
        `ofi_hook="off"` takes the runtime's `without_hook` set-up where it has one."""
        own = self.runtimes.get(runtime, NetworkSetup(setup=f"{self.network} variables only"))
        if ofi_hook == "off" and own.without_hook is not None:
            own = own.without_hook
        env = {k: v for k, v in {**self.network_env, **own.env}.items() if v != ""}
        return NetworkSetup(own.setup, env, own.annotations, own.mounts, own.devices, own.flags)

    def partition(self, name: str) -> Partition:
        try:
            return self.partitions[name]
        except KeyError:
            known = ", ".join(self.partitions) or "none"
            raise ConfigError(f"site {self.name}: no partition {name!r} (the profile knows: {known}; "
                              f"{self.source})") from None


def names() -> list[str]:
    """The shipped profiles."""
    return sorted(p.name[: -len(SHIPPED_SUFFIX)] for p in resources.files(__package__).iterdir()
                  if p.name.endswith(SHIPPED_SUFFIX))


def load(name_or_file: str, given_as: str = "") -> Site:
    """A shipped profile by name (`alps`) or a TOML file by path; ConfigError names the file and key, or for a
    name that is neither, where it was given (`given_as`, the flag or variable with its value; --site's)."""
    path = Path(name_or_file)
    if name_or_file in names():
        text = resources.files(__package__).joinpath(name_or_file + SHIPPED_SUFFIX).read_text()
        where = f"site profile {name_or_file} (bench/sites/{name_or_file}{SHIPPED_SUFFIX})"
    elif path.suffix == SHIPPED_SUFFIX or path.exists():
        where = f"site profile {path}"
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{where} cannot be read: {getattr(e, 'strerror', None) or e}") from None
    else:
        given_as = given_as or f"--site {name_or_file!r}"
        raise ConfigError(f"{given_as}: not a shipped site ({', '.join(names())}) nor a .toml file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where} is not valid TOML: {e}") from None
    return _site(data, where)


def parse_time(text: str, where: str) -> int:
    """Slurm's `[D-]HH:MM:SS` in seconds."""
    m = _TIME.match(str(text))
    if not m:
        raise ConfigError(f"{where}: time {text!r} is not [D-]HH:MM:SS (e.g. 12:00:00)")
    days, h, mi, s = (int(g or 0) for g in m.groups())
    return ((days * 24 + h) * 60 + mi) * 60 + s


def _keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(allowed))}")


def _table(value: Any, where: str, form: str) -> dict[str, Any]:
    """A table of tables (partitions, runtimes), or none; another value would end the load in a traceback."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be {form}, not {value!r}")
    return value


def _text(value: Any, where: str, lines: bool = False) -> str:
    """A string, "" when absent, of one line unless `lines`: the name, the network and a set-up's line are
    exported to the job (NANOCHAT_BENCH_EXPECT_NET, NANOCHAT_BENCH_NET_SETUP) and quoted in its messages."""
    if value is None:
        return ""
    if not isinstance(value, str) or not (lines or exportable("NAME", value)):
        raise ConfigError(f"{where} must be a string{'' if lines else ' of one line'}, not {value!r}")
    return value


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where} must be a table of strings (NAME = \"value\")")
    return dict(value)


def _env(value: Any, where: str) -> dict[str, str]:
    """Variables the batch script exports (`export NAME=VALUE`) and each runtime passes by name: a name a shell
    cannot take would break the job's script, so it is refused here, naming the table and the name."""
    env = _strings(value, where)
    for name, text in env.items():
        if not exportable(name, text):
            raise ConfigError(f"{where}: {name} = {text!r} is not a variable name (letters, digits, '_', not "
                              "starting with a digit) with a one-line value")
    return env


def _annotations(value: Any, where: str) -> dict[str, str]:
    """Hook annotations, checked now as the EDF checks them: otherwise a bad one stops every render of the runtime
    without naming the profile."""
    annotations = _strings(value, where)
    try:
        edf.check_annotations(annotations)
    except RuntimeConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return annotations


def _list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings")
    return tuple(value)


def _mounts(value: Any, where: str, runtime: Runtime) -> tuple[str, ...]:
    """Binds in `--mount`'s form that `runtime` can express, checked now: otherwise a bad one (a ',' that pyxis,
    apptainer and sarus read as a separator) stops every render without naming the profile."""
    mounts = _list(value, where)
    for text in mounts:
        try:
            mount = Mount.parse(text)
        except RuntimeConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        if not (mount.src.startswith("/") and mount.target.startswith("/")):
            raise ConfigError(f"{where}: mount {text!r} needs absolute paths (e.g. \"/opt/lib:/opt/lib:ro\")")
        try:
            runtime.check(LaunchSpec(command=(), mounts=(mount,)))
        except RuntimeConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
    return mounts


def _absolute(value: Any, where: str) -> tuple[str, ...]:
    paths = _list(value, where)
    relative = [p for p in paths if not p.startswith("/")]
    if relative:
        raise ConfigError(f"{where}: {relative[0]!r} is not an absolute path (e.g. \"/scratch\")")
    return paths


def _positive(value: Any, where: str, kind=int):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or (
            kind is int and not isinstance(value, int)):
        raise ConfigError(f"{where} must be a positive {'whole number' if kind is int else 'number'}, not {value!r}")
    return kind(value)


def _site(data: Mapping[str, Any], where: str) -> Site:
    _keys(data, {"name", "description", "network", "nccl_net", "gpu", "gpus_per_node", "gpu_memory_gib",
                 "cpus_per_gpu", "partitions", "default_partition", "network_env", "runtimes", "device_batch_limits",
                 "shared_paths", "images"}, where)
    network = data.get("network")
    if network is None:
        raise ConfigError(f"{where}: `network` is required: one of {', '.join(NETWORKS)}")
    if network not in NETWORKS:
        raise ConfigError(f"{where}: network {network!r} is not one of {', '.join(NETWORKS)}")
    if not _text(data.get("name"), f"{where}: name"):
        raise ConfigError(f"{where}: `name` (a string) is required")
    partitions = {}
    for pname, table in _table(data.get("partitions"), f"{where}: partitions", "[partitions.NAME] tables").items():
        pw = f"{where}: partitions.{pname}"
        if not isinstance(table, dict):
            raise ConfigError(f"{pw} must be a table")
        _keys(table, {"max_time", "max_nodes"}, pw)
        if "max_time" not in table:
            raise ConfigError(f"{pw}: max_time is required")
        partitions[pname] = Partition(pname, parse_time(table["max_time"], f"{pw}.max_time"),
                                      _positive(table.get("max_nodes"), f"{pw}.max_nodes"))
    default_partition = data.get("default_partition")
    if default_partition is not None and default_partition not in partitions:
        raise ConfigError(f"{where}: default_partition {default_partition!r} is not one of its partitions "
                          f"({', '.join(partitions) or 'none'})")
    tables = _table(data.get("runtimes"), f"{where}: runtimes", "[runtimes.NAME] tables")
    unknown = sorted(set(tables) - set(registry.names()))
    if unknown:
        raise ConfigError(f"{where}: runtimes.{unknown[0]} is not a runtime; valid: {', '.join(registry.names())}")
    runtimes = {rname: _setup(table, f"{where}: runtimes.{rname}", registry.get(rname))
                for rname, table in tables.items()}
    nccl_net = data.get("nccl_net")
    if nccl_net is not None and not isinstance(nccl_net, str):
        raise ConfigError(f"{where}: nccl_net must be a string such as \"AWS Libfabric\", \"IB\" or \"Socket\"")
    _text(nccl_net, f"{where}: nccl_net")
    if nccl_net and not nccl_net.strip():  # kept, the gate would stop every multi-node run as wrong_network
        raise ConfigError(f"{where}: nccl_net {nccl_net!r} names no network; give the one NCCL must choose between "
                          f"nodes (\"AWS Libfabric\", \"IB\", \"Socket\"), or leave the key out for no expectation "
                          f"(no run is stopped for its network)")
    return Site(name=data["name"], network=network, nccl_net=nccl_net or None, gpu=_gpu(data.get("gpu"), where),
                gpus_per_node=_positive(data.get("gpus_per_node"), f"{where}: gpus_per_node"),
                gpu_memory_gib=_positive(data.get("gpu_memory_gib"), f"{where}: gpu_memory_gib", float),
                cpus_per_gpu=_positive(data.get("cpus_per_gpu"), f"{where}: cpus_per_gpu"),
                description=_text(data.get("description"), f"{where}: description", lines=True),
                partitions=partitions, default_partition=default_partition,
                network_env=_env(data.get("network_env", {}), f"{where}: network_env"),
                runtimes=runtimes, device_batch_limits=_batch_limits(data.get("device_batch_limits", {}), where),
                shared_paths=_absolute(data.get("shared_paths", []), f"{where}: shared_paths"),
                image_archives=_image_archives(data.get("images", {}), where), source=where)


def _gpu(value: Any, where: str) -> str | None:
    """The nodes' GPU, by a name bench/metrics.py knows the peak FLOPs of: another would leave every estimate out,
    and each run the default time limit."""
    name = _text(value, f"{where}: gpu")
    if value is not None and metrics.peak_flops(name) is None:
        known = ", ".join(pattern for pattern, _ in metrics.PEAK_BF16_FLOPS)
        raise ConfigError(f"{where}: gpu {value!r} has no peak FLOPs in bench/metrics.py; name one of {known}, or "
                          f"leave the key out (plan then assumes --gpu's default)")
    return name or None


def _setup(table: Any, where: str, runtime: Runtime, nested: bool = True) -> NetworkSetup:
    """A [runtimes.NAME] table. Only the keys the runtime renders are valid: a key it would not render (devices for
    pyxis, annotations for podman) is an error rather than a setting dropped unseen."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    allowed = {"setup", *runtime.site_keys} | ({"without_hook"} if nested and runtime.ofi_hook else set())
    _keys(table, allowed, where)
    without = table.get("without_hook")
    devices = _list(table.get("devices", []), f"{where}.devices")
    if runtime.device_files_only and (cdi := [d for d in devices if not d.startswith("/")]):
        raise ConfigError(f"{where}.devices: {', '.join(map(repr, cdi))}: {runtime.name} binds device files "
                          f"(/dev/...), not CDI names (they were dropped unseen)")
    return NetworkSetup(
        setup=_text(table.get("setup"), f"{where}.setup"), env=_env(table.get("env", {}), f"{where}.env"),
        annotations=_annotations(table.get("annotations", {}), f"{where}.annotations"),
        mounts=_mounts(table.get("mounts", []), f"{where}.mounts", runtime),
        devices=devices,
        flags=_list(table.get("flags", []), f"{where}.flags"),
        without_hook=_setup(without, f"{where}.without_hook", runtime, nested=False) if without is not None else None)


ARCHIVE_RUNTIMES = ("podman",)  # the runtimes whose nodes load an image archive (bench/runtimes/podman.py)


def _image_archives(table: Any, where: str) -> dict[str, str]:
    """`[images.podman] archive = "FILE"`: the `podman save` archive the nodes load where the image is missing."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: images must be a table of [images.RUNTIME] tables")
    out = {}
    for runtime, entry in table.items():
        iw = f"{where}: images.{runtime}"
        if runtime not in registry.names():  # a misspelt name is named so, as in [runtimes.NAME]
            raise ConfigError(f"{iw} is not a runtime; valid: {', '.join(registry.names())}")
        if runtime not in ARCHIVE_RUNTIMES:
            raise ConfigError(f"{iw}: only {', '.join(ARCHIVE_RUNTIMES)} load an image archive on their nodes (the "
                              f"others make their image once per sweep, or read it from the shared filesystem)")
        if not isinstance(entry, dict):
            raise ConfigError(f"{iw} must be a table")
        _keys(entry, {"archive"}, iw)
        if not isinstance(entry.get("archive"), str) or not entry["archive"]:
            raise ConfigError(f"{iw}.archive must be a file name (a `podman save` archive)")
        out[runtime] = entry["archive"]
    return out


def _batch_limits(table: Any, where: str) -> dict[int, int]:
    """`"128" = 16`: from 128 ranks on, a device batch of at most 16."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: device_batch_limits must be a table of \"RANKS\" = DEVICE_BATCH")
    limits = {}
    for ranks, batch in table.items():
        if not str(ranks).isdigit() or int(ranks) <= 0:
            raise ConfigError(f"{where}: device_batch_limits key {ranks!r} must be a rank count, e.g. \"128\"")
        limits[int(ranks)] = _positive(batch, f"{where}: device_batch_limits.{ranks}")
    return limits
