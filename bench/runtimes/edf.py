"""Container Engine environment definition files (EDF): the defaults as data and a TOML renderer.

An EDF is the TOML file that CSCS's Container Engine (`srun --environment=<file>`) and Sarus Suite
(`srun --edf=<file>`) read to start a container: image, mounts, workdir, `[env]` and `[annotations]`
(https://docs.cscs.ch/software/container-engine/edf/). This module is the one source of truth for
the files the benchmark uses: `nanochat-bench edf` renders the checked-in `edf/*.toml` with it, and
the CE runtime writes one into each run directory with it.

The TOML is written by hand rather than with a TOML library because the layout matters to the people
reading the file (documented dotted annotation keys, one mount a line, a header saying how to
regenerate it); every string goes through `toml_string`, which escapes per the TOML spec, and the tests
round-trip hostile values (quotes, backslashes, newlines, `$(...)`) through `tomllib`. What cannot be
escaped is refused with RuntimeConfigError: a control character in a header line (a TOML comment takes
none but tab) and text that is not UTF-8 (a surrogate from an undecodable command-line byte).
"""

import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence

from bench.errors import RuntimeConfigError

# Images: the NGC base in enroot's `registry#image` form (a `/` after nvcr.io would be read as Docker
# Hub unless the credentials file names nvcr.io), and our image imported to SquashFS by
# `containers/enroot-import.sh` (enroot names it NAME+TAG.sqsh).
NGC_IMAGE = "nvcr.io#nvidia/pytorch:25.10-py3"
SQSH_IMAGE = "${SCRATCH}/ce-images/nanochat-bench+latest.sqsh"

# Where the Containerfile installs the project and where a run starts.
WORKDIR = "/workspace/nanochat-bench"

# Scratch is bind-mounted at the same path, so paths in run directories mean the same inside and out.
# $HOME is deliberately not mounted: stale per-user caches (~/.triton, ~/.cache) break runs (CSCS advice).
DEFAULT_MOUNTS = ("${SCRATCH}:${SCRATCH}",)

# NCCL and libfabric variables are not pinned: CE's aws_ofi_nccl hook sets its own, and they drift between
# CE releases (NCCL_CROSS_NIC went from 1 to 0 in CE v26.06.1); every run records the values in effect
# (run.json network_env). A site that wants them fixed passes them with `submit --env NAME=VALUE`.

# What CSCS's PyTorch page sets besides the network, plus the debug level whose INIT/NET lines prove
# the path NCCL took ("Using network AWS Libfabric", "NET/OFI Selected provider is cxi"). Every GPU run
# gets these, whatever its runtime (bench/launch/job.py).
TORCH_ENV: dict[str, str] = {
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    "CUDA_CACHE_DISABLE": "1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # a failed collective tears the process down at once
    "MPICH_GPU_SUPPORT_ENABLED": "0",  # GPU-aware MPI next to NCCL can deadlock
}

# The benchmark's own variables (README, "Contracts"); ${SCRATCH} expands on the host. NANOCHAT_VAL_FILES_K is
# not among them: CE's [env] wins over the host's environment, so a K here would silently override the one a user
# exports (the plan's for the ranks); unset, the trainer takes 1 and a rank left without a validation row group
# stops at start-up naming the K to export. A run's own EDF gets the plan's K from the run's env.
BENCH_ENV: dict[str, str] = {
    "NANOCHAT_BASE_DIR": "${SCRATCH}/nanochat-bench/cache",
}

DEFAULT_ENV: dict[str, str] = {**BENCH_ENV, **TORCH_ENV}

# aws_ofi_nccl hook variants: cuda12/cuda13 are linked statically and must match the image's CUDA
# major version; cuda-dl links CUDA dynamically and is CSCS's general recommendation.
OFI_NCCL_VARIANTS = ("cuda-dl", "cuda13", "cuda12", "rocm6", "rocm5")
DEFAULT_OFI_NCCL_VARIANT = "cuda-dl"
OFI_HOOK_ENABLED = "com.hooks.aws_ofi_nccl.enabled"
# CE's documentation gives a hook's com.hooks.<hook>.enabled the strings "true" and "false" only
HOOK_ENABLED_VALUES = ("true", "false")


def ofi_nccl_annotations(variant: str = DEFAULT_OFI_NCCL_VARIANT) -> dict[str, str]:
    """The annotations that enable the aws_ofi_nccl hook (which implies the CXI hook) with a variant."""
    if variant not in OFI_NCCL_VARIANTS:
        raise RuntimeConfigError(
            f"aws_ofi_nccl variant {variant!r} is not one of: {', '.join(OFI_NCCL_VARIANTS)}")
    return {OFI_HOOK_ENABLED: "true", "com.hooks.aws_ofi_nccl.variant": variant}


DEFAULT_ANNOTATIONS: dict[str, str] = ofi_nccl_annotations()


def ofi_hook_annotations(hook: str) -> dict[str, str]:
    """A run's hook annotations for `--ofi-hook`: none (CE's own default), enabled (the default variant), or off."""
    if hook == "default":
        return {}
    if hook == "on":
        return ofi_nccl_annotations()
    if hook == "off":
        return {OFI_HOOK_ENABLED: "false"}
    raise RuntimeConfigError(f"--ofi-hook {hook!r}: valid values are default, on, off")

# ---------------------------------------------------------------------------------------------------
# TOML text

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(value: str) -> str:
    """A TOML basic string holding exactly `value`: quotes, backslashes and control characters escaped."""
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    """A TOML key for one name: bare when it may be, quoted otherwise (a dot in it stays literal)."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_dotted_key(key: str) -> str:
    """`com.hooks.x.y` as TOML dotted keys, the form CE documents for annotations."""
    return ".".join(toml_key(part) for part in key.split("."))


# ---------------------------------------------------------------------------------------------------
# Checks: bad input is named with what would be valid; CE itself would fail later and less clearly.

def _check_text(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise RuntimeConfigError(f"EDF {what} must be a string, got {type(value).__name__} {value!r}")
    bad = not_utf8(value)
    if bad:
        raise RuntimeConfigError(f"EDF {what} {value!r} is not UTF-8 text (an undecodable byte {bad}); "
                                 "TOML files hold UTF-8 only")
    return value


def not_utf8(text: str) -> str | None:
    """The first character of text that UTF-8 cannot encode (a lone surrogate, from an undecodable byte
    of a command-line argument), shown as the byte it came from; None when there is none."""
    ch = next((c for c in text if 0xD800 <= ord(c) <= 0xDFFF), None)
    if ch is None:
        return None
    return f"\\x{ord(ch) - 0xDC00:02x}" if 0xDC80 <= ord(ch) <= 0xDCFF else f"U+{ord(ch):04X}"


def line_breaker(text: str) -> str | None:
    """The first control character or line separator in text (tab excepted), as U+XXXX; None when none.
    A TOML comment may hold no control character but tab, and str.splitlines() also breaks at U+0085,
    U+2028 and U+2029, so none of these can sit in a one-line header."""
    ch = next((c for c in text if c != "\t" and (unicodedata.category(c) in ("Cc", "Zl", "Zp"))), None)
    return None if ch is None else f"U+{ord(ch):04X}"


def check_mount(mount: str, what: str = "EDF mount") -> str:
    """A mount must be `SRC:DST[:FLAGS]`; SRC absolute, `./relative` or `${VAR}...`; DST absolute or `${VAR}...`.
    `what` names the value in the error (`--mount` for a flag's)."""
    _check_text("mount", mount)
    parts = mount.split(":")
    problem = None
    if len(parts) not in (2, 3):
        problem = f"has {len(parts)} ':'-separated part(s)"
    elif not parts[0].startswith(("/", "./", "$")):
        problem = f"has the relative SRC {parts[0]!r}" if parts[0] else "has no SRC"
    elif not parts[1].startswith(("/", "$")):
        problem = f"has the relative DST {parts[1]!r}" if parts[1] else "has no DST"
    elif len(parts) == 3 and not all(re.fullmatch(r"[a-z]+", flag) for flag in parts[2].split("+")):
        problem = f"has the flags {parts[2]!r}, not lowercase words"
    if problem:
        raise RuntimeConfigError(f"{what} {mount!r} {problem}; a mount is SRC:DST[:FLAGS] with SRC absolute, "
                                 "./relative or from a ${VAR}, DST absolute or from a ${VAR}, flags joined by + "
                                 "(e.g. /scratch/me:/scratch/me:ro or ./img.sqsh:/data:sqsh)")
    return mount


def _flag_item(flag: str, key: str, value: object) -> str:
    """A flag's NAME=VALUE item as the user gave it (`--env '1BAD=x'`)."""
    return f"{flag} {f'{key}={value}'!r}"


def check_env(env: Mapping[str, str], flag: str = "") -> None:
    """`flag` (`--env`) names the flag whose NAME=VALUE items `env` holds, for the error to name it."""
    for key, value in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", _check_text("[env] name", key)):
            where = f"{_flag_item(flag, key, value)}: the name {key!r}" if flag else f"EDF [env] name {key!r}"
            raise RuntimeConfigError(f"{where} is not a valid environment variable name (letters, digits and '_', "
                                     "not starting with a digit, e.g. NCCL_DEBUG)")
        _check_text(f"[env] value of {key}", value)


def check_annotations(annotations: Mapping[str, str], flag: str = "", given: Collection[str] = ()) -> None:
    """The annotations named in `given` came from `flag`'s NAME=VALUE items (`--annotation`): an error about one
    names the flag and the item rather than the EDF's annotation."""
    keys = list(annotations)
    for key, value in annotations.items():
        item = _flag_item(flag, key, value) if key in given else None
        if not _check_text("annotation name", key) or "" in key.split("."):
            where = f"{item}: the name {key!r}" if item else f"EDF annotation name {key!r}"
            raise RuntimeConfigError(f"{where} has an empty part between dots; an annotation name must be dotted "
                                     "words, e.g. com.hooks.cxi.enabled")
        _check_text(f"annotation {key} (use \"true\", not true)", value)
        if key.startswith("com.hooks.") and key.endswith(".enabled") and value not in HOOK_ENABLED_VALUES:
            raise RuntimeConfigError(f"{item or f'EDF annotation {key} = {value!r}'}: a hook's enabled annotation is "
                                     + " or ".join(f'"{v}"' for v in HOOK_ENABLED_VALUES))
        # TOML dotted keys build nested tables, so a key cannot also be the prefix of another one.
        clash = next((k for k in keys if k.startswith(key + ".")), None)
        if clash and not flag:
            raise RuntimeConfigError(f"EDF annotations {key!r} and {clash!r} clash: one is a prefix of the other")
        if clash:
            a, b = (_flag_item(flag, k, annotations[k]) if k in given else f"the annotation {k!r}"
                    for k in (key, clash))
            raise RuntimeConfigError(f"{a} and {b} clash: one name is a prefix of the other, which an EDF's "
                                     "dotted keys cannot hold")


# ---------------------------------------------------------------------------------------------------

def render_edf(image: str, *, mounts: Sequence[str] = (), workdir: str | None = None,
               env: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
               writable: bool = True, header: str | None = None, devices: Sequence[str] = ()) -> str:
    """The EDF for `image` as TOML text.

    `env` and `annotations` default (None) to DEFAULT_ENV and DEFAULT_ANNOTATIONS; pass {} for none.
    `workdir` None leaves the image's working directory. `header` lines become leading comments.
    Raises RuntimeConfigError naming the value at fault.
    """
    if not _check_text("image", image).strip() or "\n" in image:
        raise RuntimeConfigError(f"EDF image {image!r} must be a registry reference "
                                 f"(e.g. {NGC_IMAGE}) or an absolute path to a .sqsh file")
    if isinstance(mounts, str):
        raise RuntimeConfigError(f"EDF mounts must be a list of SRC:DST strings, got the string {mounts!r}")
    mounts = [check_mount(m) for m in mounts]
    env = DEFAULT_ENV if env is None else env
    annotations = DEFAULT_ANNOTATIONS if annotations is None else annotations
    check_env(env)
    check_annotations(annotations)

    lines = []
    for line in header.split("\n") if header else []:
        bad = line_breaker(line) or not_utf8(line)
        if bad:
            raise RuntimeConfigError(f"EDF header line {line!r} holds the control character {bad}; header lines "
                                     "are TOML comments, which take no control character but tab")
        lines.append(f"# {line}".rstrip())
    lines.append(f"image = {toml_string(image)}")
    if mounts:
        lines.append("mounts = [")
        lines += [f"    {toml_string(m)}," for m in mounts]
        lines.append("]")
    if workdir is not None:
        lines.append(f"workdir = {toml_string(_check_text('workdir', workdir))}")
    lines.append(f"writable = {'true' if writable else 'false'}")
    if devices:  # Sarus Suite only: Podman --device values (paths or CDI names)
        lines.append("devices = [" + ", ".join(toml_string(_check_text("device", d)) for d in devices) + "]")
    if env:
        lines += ["", "[env]"]
        lines += [f"{toml_key(k)} = {toml_string(v)}" for k, v in env.items()]
    if annotations:
        lines += ["", "[annotations]"]
        lines += [f"{toml_dotted_key(k)} = {toml_string(v)}" for k, v in annotations.items()]
    return "\n".join(lines) + "\n"
