"""The abstract runtime: how one way of running turns a launch spec into what `srun` needs.

Mirrors ReFrame's container platforms (reframe/core/containers.py): shared typed fields (image, mounts,
env, workdir, command) and a few small methods per runtime. Commands are token lists, quoted once when
a script is rendered (`shell_join`), never pasted together as strings: a path or name holding spaces,
quotes, `$(...)` or newlines stays one literal word. The one exception is `Var`, a token that ends in a
variable of the batch script (the launch time, the rendezvous address), expanded there as one word.
"""

import os
import re
import shlex
from abc import ABC
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Union

from bench.errors import RuntimeConfigError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a shell can `export` and a runtime pass by name


def exportable(name: str, value: str) -> bool:
    """Whether the batch script can `export NAME=VALUE` it and each runtime pass it by name: a name a shell takes,
    a value of one line."""
    return bool(ENV_NAME.fullmatch(name)) and "\n" not in value and "\0" not in value


@dataclass(frozen=True)
class Var:
    """A token `prefix` + the value of the batch-script variable `name`, e.g. `--rdzv_id=` + SLURM_JOB_ID."""

    name: str
    prefix: str = ""

    def __post_init__(self):
        if not ENV_NAME.fullmatch(self.name):
            raise ValueError(f"not a shell variable name: {self.name!r}")


@dataclass(frozen=True)
class OptVar(Var):
    """Like Var, but no token at all while the variable is empty (a flag only some runs get)."""


Token = Union[str, Var]


def quote_token(token: Token) -> str:
    """One token as shell text: literal strings quoted by shlex, a Var as `prefix"${name}"`, an OptVar as
    `${name:+prefix"${name}"}` (nothing when empty)."""
    if not isinstance(token, Var):
        if "$" in token:  # the same literal text as '...'; shellcheck reads '$x' as a mistake
            return "$'" + token.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return shlex.quote(token)
    word = (shlex.quote(token.prefix) if token.prefix else "") + f'"${{{token.name}}}"'
    return f"${{{token.name}:+{word}}}" if isinstance(token, OptVar) else word


def shell_join(tokens: Sequence[Token]) -> str:
    """shlex.join that also knows Var tokens; the only place a command becomes shell text."""
    return " ".join(quote_token(t) for t in tokens)


@dataclass(frozen=True)
class Mount:
    """A bind mount: host path `src` at `dst` in the container (same path by default)."""

    src: str
    dst: str = ""
    readonly: bool = False

    @property
    def target(self) -> str:
        return self.dst or self.src

    @classmethod
    def parse(cls, text: str) -> "Mount":
        """`SRC[:DST[:ro]]`, the form of the `--mount` flag."""
        parts = text.split(":")
        if not 1 <= len(parts) <= 3 or not parts[0] or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise RuntimeConfigError(f"mount {text!r} is not SRC[:DST[:ro|rw]] (e.g. /scratch/me or /data:/data:ro)")
        # an empty DST would silently mean SRC's own path, and a relative one is refused by every container runtime
        # only when the job starts on its node
        if len(parts) > 1 and not parts[1].startswith("/"):
            raise RuntimeConfigError(f"mount {text!r}: DST {parts[1]!r} is not an absolute path in the container "
                                     f"(e.g. {parts[0]}:/data, or {parts[0]} alone for the same path)")
        return cls(parts[0], parts[1] if len(parts) > 1 else "", len(parts) == 3 and parts[2] == "ro")


@dataclass(frozen=True)
class LaunchSpec:
    """What to run, the same for every runtime; `env` values are exported by the batch script."""

    command: tuple[Token, ...]
    image: str | None = None
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    run_dir: str = "."
    gpus: bool = False
    ofi_hook: str = "default"  # CE's aws_ofi_nccl hook: the site's default, "on" or "off" (bench/launch/job.py)
    # The site's network set-up for this runtime (bench/sites): hook annotations (None: from ofi_hook),
    # devices (paths or CDI names) and the runtime's own switches. Its variables are in `env`, its binds in `mounts`.
    annotations: Mapping[str, str] | None = None
    devices: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    # Variables the run must not have (`--env NAME=`): every runtime starts the command under `env -u NAME`,
    # so the host's value, the image's and an EDF's are all gone alike (CE's EDF cannot set a variable empty).
    unset: tuple[str, ...] = ()
    # The image as the user named it, where the run uses a copy made once per sweep (a .sqsh, a .sif)
    image_source: str | None = None
    image_archive: str | None = None  # podman: the site's `podman save` archive, loaded on nodes that lack the image


@dataclass(frozen=True)
class ImageStep:
    """What makes a run's image present where it runs, run by the batch script before srun and timed as its own
    start-up phase (run.json launch.image_ready_at). `script` is one of the step scripts in slurm/ (shipped into
    the sweep's .lib/), run with `args`; a failure prints one line `nanochat-bench: node NODE: image REF: ...`."""

    what: str  # one line: what the step does (the log, run.json launch.image_step)
    script: str  # slurm/image-podman.sh (per node) or slurm/image-once.sh (once per sweep)
    args: tuple[str, ...]
    per_node: bool  # True: one srun task on every node of the run; False: once, on the batch host
    digest_file: str | None = None  # the image file whose sha256 is the image's digest (computed once per sweep)
    id_command: tuple[str, ...] | None = None  # prints the engine's image id on the batch host (podman)


# enroot's version, named: `enroot version` prints the number alone (pyxis and CE run on enroot)
ENROOT_VERSION = ("sh", "-c", 'v=$(enroot version) && echo "enroot $v"')
IMAGES_DIR = ".images"  # <sweep>/.images: the images made once per sweep (.sqsh, .sif), their locks and digests
ONCE = "image-once.sh"  # slurm/: the step making a sweep's image once, under a lock (apptainer, pyxis, Sarus Suite)


def inner(spec: LaunchSpec) -> list[Token]:
    """The command as the container (or host) starts it: under `env -u NAME` for each variable to unset."""
    unset = [t for name in spec.unset for t in ("-u", name)]
    return [*(["env", *unset] if unset else []), *spec.command]


# Characters that separate fields in the mount syntax of one runtime or another (SRC:DST, a,b lists).
_MOUNT_SEPARATORS = {":": "':' separates SRC:DST", ",": "',' separates mounts"}


class Runtime(ABC):
    """One way of running the trainer under srun. Subclasses set the class fields and override what differs."""

    name: ClassVar[str]
    default_image: ClassVar[str | None] = None  # documented per runtime; ${VAR} expanded at submit time
    python: ClassVar[str | None] = "python"  # the interpreter inside the container (None: the host's)
    mount_forbidden: ClassVar[str] = ":"  # characters a mount path may not hold for this runtime
    ofi_hook: ClassVar[bool] = False  # whether --ofi-hook means anything here (CE's hooks)
    device_files_only: ClassVar[bool] = False  # a site's devices must be /dev paths (no CDI names) for this runtime
    # what a site profile's [runtimes.NAME] may give this runtime: the fields of the launch spec it renders
    site_keys: ClassVar[tuple[str, ...]] = ("env", "mounts")
    tty_flags: ClassVar[tuple[str, ...]] = ()  # what the wrapper needs for an interactive shell (after its subcommand)
    version: ClassVar[tuple[str, ...] | None] = None  # prints the runtime's version, recorded with each run

    # -- inputs ----------------------------------------------------------------------------------
    def resolve_image(self, image: str | None, *, must_exist: bool = True) -> str | None:
        """The image to use (the default when None), checked; RuntimeConfigError names what is wrong."""
        image = image or self.default_image
        if not image:
            raise RuntimeConfigError(f"runtime {self.name} needs an image: pass --image {self.name}=REF")
        expanded = expand_variables(image)
        unset = unset_variables(expanded)
        # a file whose name holds a literal `$NAME` is taken as it is; only a missing one names a variable
        if must_exist and unset and not Path(expanded).expanduser().exists():
            raise RuntimeConfigError(
                f"runtime {self.name}: image {image!r} names the unset variable(s) {', '.join(unset)}; "
                f"set them or pass --image {self.name}=REF")
        return self.check_image(expanded, must_exist)

    def check_image(self, image: str, must_exist: bool) -> str:
        """Validate one image reference; the default accepts registry references only."""
        if looks_like_path(image):
            raise RuntimeConfigError(
                f"runtime {self.name} takes a registry reference, not the path {image!r} "
                f"(e.g. {self.default_image})")
        return image

    def check(self, spec: LaunchSpec) -> None:
        """Refuse mounts this runtime's syntax cannot express, naming the mount and the character."""
        for m in spec.mounts:
            for path in (m.src, m.target):
                if not path.startswith("/"):
                    raise RuntimeConfigError(f"mount path {path!r} must be absolute")
                for ch in self.mount_forbidden:
                    if ch in path:
                        why = _MOUNT_SEPARATORS.get(ch, "it is special in the mount syntax")
                        raise RuntimeConfigError(
                            f"runtime {self.name} cannot mount {path!r}: {why} in its mount syntax; "
                            "use a path without it (e.g. a symlink)")
                if "\n" in path:
                    raise RuntimeConfigError(f"mount path {path!r} holds a newline")

    # -- what the batch script runs -----------------------------------------------------------------
    def write_files(self, spec: LaunchSpec) -> list[Path]:
        """Files this runtime needs in the run directory (an EDF), written at render time."""
        return []

    def image_step(self, spec: LaunchSpec) -> ImageStep | None:
        """The step that makes the image present where the run runs (None: the runtime brings it itself)."""
        return None

    def sweep_image(self, image: str | None, images_dir: Path) -> str | None:
        """The file this runtime runs when `image` is made once per sweep into `images_dir` (None: as given)."""
        return None

    def digest_file(self, spec: LaunchSpec) -> str | None:
        """An image file whose sha256 is the run's image digest (a .sqsh or .sif), when there is one."""
        return spec.image if spec.image and spec.image.endswith((".sqsh", ".sif")) else None

    def id_command(self, spec: LaunchSpec) -> tuple[str, ...] | None:
        """A command printing the engine's id or digest of the run's image on the batch host, where the runtime
        has no image step that names one (None: nothing to ask)."""
        return None

    def srun_options(self, spec: LaunchSpec) -> list[Token]:
        """Options this runtime adds to srun (a SPANK plugin's --container-image, CE's --environment)."""
        return []

    def wrap(self, spec: LaunchSpec) -> list[Token]:
        """The command srun starts on each node: the inner command, wrapped by the runtime's launcher."""
        return inner(spec)

    def shell_wrap(self, spec: LaunchSpec) -> list[Token]:
        """wrap() for an interactive command (a shell): the runtime's tty flags after its subcommand."""
        wrapped = self.wrap(spec)
        return [*wrapped[:2], *self.tty_flags, *wrapped[2:]]

    def version_command(self) -> list[str] | None:
        """A command printing the runtime's version, recorded with each run (None: nothing to ask)."""
        return list(self.version) if self.version else None


def unset_variables(text: str) -> list[str]:
    """The `$NAME` / `${NAME}` references os.path.expandvars left in `text` (a `$` before anything else,
    as in `a$.sqsh` or `$1`, is a literal character, not a variable)."""
    return sorted({a or b for a, b in _VARIABLE.findall(text)})


_VARIABLE = re.compile(r"\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})")


def expand_variables(text: str) -> str:
    """os.path.expandvars, but a variable set to nothing is left as an unset one is: `${SCRATCH}/x` with an empty
    SCRATCH would name `/x`, a path nobody meant, and the error would then not name the variable."""
    return _VARIABLE.sub(lambda m: os.environ.get(m[1] or m[2]) or m[0], text)


def looks_like_path(image: str) -> bool:
    return image.startswith(("/", "./", "../", "~")) or image.endswith((".sqsh", ".sif", ".tar"))


def check_image_file(runtime: str, image: str, suffixes: tuple[str, ...], must_exist: bool,
                     allow_dir: bool = False) -> str:
    """An image given as a path: absolute, existing, a file with one of `suffixes` (or a dir if allowed)."""
    path = Path(image).expanduser()
    if not path.name.endswith(suffixes) and not (allow_dir and path.is_dir()):
        raise RuntimeConfigError(
            f"runtime {runtime}: image file {image!r} should end in {' or '.join(suffixes)}")
    if must_exist and not (path.is_file() or (allow_dir and path.is_dir())):
        raise RuntimeConfigError(
            f"runtime {runtime}: image {image!r} does not exist; build or import it first "
            f"(see containers/) or pass --image {runtime}=PATH")
    if must_exist and path.is_file() and path.stat().st_size == 0:
        raise RuntimeConfigError(
            f"runtime {runtime}: image file {image!r} is empty (0 bytes), as an interrupted build or import "
            f"leaves it; build or import it again (see containers/)")
    return str(path.absolute()) if must_exist else image


def check_registry_ref(runtime: str, image: str) -> str:
    """Enroot-style `[USER@][REGISTRY#]IMAGE[:TAG]`: a registry host before a '/' would be read as Docker Hub."""
    if any(c.isspace() for c in image) or not image:
        raise RuntimeConfigError(f"runtime {runtime}: image reference {image!r} holds whitespace")
    scheme, _, ref = image.partition("://") if "://" in image else ("", "", image)
    first = ref.split("/", 1)[0]
    fixed = ref.replace("/", "#", 1) if "#" not in ref and "/" in ref and ("." in first or ":" in first) else ref
    if scheme:  # enroot is handed docker:// by the runtime (pyxis, CE, image-once.sh): a second one fails
        raise RuntimeConfigError(f"runtime {runtime}: give the image without its scheme, as in {fixed!r} (enroot's "
                                 f"docker:// is added to it)")
    if fixed != ref:
        raise RuntimeConfigError(
            f"runtime {runtime}: write the registry with '#', as in {fixed!r} (enroot reads {image!r} as a "
            f"Docker Hub image)")
    return image


def check_enroot_image(runtime: str, image: str, must_exist: bool) -> str:
    """What enroot-based runtimes (CE, pyxis) take: a .sqsh file, made absolute when it must exist (pyxis
    reads a value not starting with '/' or './' as a registry image), or an enroot registry reference."""
    if looks_like_path(image):
        return check_image_file(runtime, image, (".sqsh",), must_exist)
    return check_registry_ref(runtime, image)


SCHEMES = ("docker://", "oras://", "library://", "docker-daemon:", "oci-archive:", "docker-archive:")


def image_name(image: str) -> str:
    """A file name for an image reference: `nvcr.io#nvidia/pytorch:25.10-py3` -> `nvcr.io+nvidia+pytorch+25.10-py3`
    (enroot's rule: '/' and ':' become '+'), a scheme (docker://) dropped."""
    for scheme in SCHEMES:
        image = image.removeprefix(scheme)
    return re.sub(r"[^A-Za-z0-9_.-]+", "+", image.replace("#", "/")).strip("+.") or "image"
