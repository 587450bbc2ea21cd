"""The contract's version, MAJOR.MINOR, and the migration of the older majors it knows.

A minor release only adds (an optional field, a status, an event): a reader reads every run.json of its
major whatever the minor, and what it does not know is kept and noted (validate.Reading). A major
release renames or removes: its readers migrate the majors before it, so a user's old results are read
by every later release. Only an unknown major is a reason not to read a run.

    1    release 7031fbf and before: a free-form dict (launch facts at the top level, integer version)
    2    the typed contract (integer 2 until the version became MAJOR.MINOR)
    2.1  `evidence` and its settled status (bench/contract/outcome.py); statuses diverged, wrong_network;
         breakdown.phases_s and breakdown.step_ms retired (nothing read them: the reader computes both
         from the events), kept without a note where a 2.0 run has them; `data` (the shards' origin and
         the tokenizer's hash), `site` (the site profile and network set-up applied), `checkpoint` (the
         last one saved, for a resubmission to resume from)
    2.2  the speedrun's later stages: `scores` (a stage's figures by name) and the `score` event;
         launch.image_ready_at and launch.image_step (the image step before srun: its own start-up phase,
         image_ready), image.file (the .sqsh or .sif the runtime ran, its sha256 in image.digest)
    2.3  flows: `stage` (the flow's stage a run is, its point's directory above it) and the evidence kind
         `not_run` (a stage a failed stage before it kept from starting)
    2.4  network.unverified: why a multi-node run whose site expects a network had its NCCL name none
    2.5  `sandbox`: the layers that fenced the model-written code a chat evaluation ran
"""

from typing import Any, Callable, Dict, List, Tuple

from .validate import SchemaError

SCHEMA_VERSION = "2.5"


def parse_version(value: Any, where: str = "run.json") -> Tuple[int, int]:
    """(major, minor) of a schema_version: an integer (majors 1 and 2 wrote one) or "MAJOR.MINOR"."""
    if type(value) is int:
        return value, 0
    if isinstance(value, str):
        major, _, minor = value.partition(".")
        if major.isdigit() and (minor.isdigit() or not minor):
            return int(major), int(minor or 0)
    raise SchemaError(f"{where}: schema_version {value!r} is not a version (MAJOR.MINOR, as {SCHEMA_VERSION!r})")


MAJOR = parse_version(SCHEMA_VERSION)[0]
# Fields earlier minors of this major wrote and this one no longer has: kept as written, never noted.
RETIRED = {("breakdown", "phases_s"), ("breakdown", "step_ms")}


def newer(a: str, b: str) -> str:
    """The later of two versions of one major (a rewrite never lowers a file's minor)."""
    return a if parse_version(a) > parse_version(b) else b


def _from_v1(data: Dict[str, Any], notes: List[str]) -> Dict[str, Any]:
    """Release 7031fbf's run.json as major 2: launch facts into `launch`, renamed fields, null sections out."""
    data = dict(data)
    launch = data.get("launch")
    if launch is None or isinstance(launch, dict):  # another shape is left for the reader to name
        launch = dict(launch or {})
        for old, new in (("launch_t0", "t0"), ("launcher", "kind"), ("command", "command")):
            if old in data:
                launch.setdefault(new, data.pop(old))
        data["launch"] = launch
    if "grad_accum_steps" in data:
        data.setdefault("grad_accum", data.pop("grad_accum_steps"))
    result = data.get("result")
    if isinstance(result, dict) and "num_iterations" in result:  # a copy of the top-level num_iterations
        data["result"] = {k: v for k, v in result.items() if k != "num_iterations"}
    for name in [k for k, v in data.items() if v is None and k in ("slurm", "image", "software", "result")]:
        del data[name]  # major 1 wrote null for a section it had nothing for
    notes.append("run.json: schema_version 1 (release 7031fbf or before), read as 2")
    return data


# major -> the step that brings it to the next major
MIGRATIONS: Dict[int, Callable[[Dict[str, Any], List[str]], Dict[str, Any]]] = {1: _from_v1}


def migrate(data: Dict[str, Any], notes: List[str], where: str = "run.json") -> Dict[str, Any]:
    """run.json of any known major as this major (schema_version "MAJOR.MINOR"); SchemaError for an
    unknown major, the one reason a reader cannot read a run."""
    major, minor = parse_version(data.get("schema_version"), where)
    if major > MAJOR or (major < MAJOR and major not in MIGRATIONS):
        known = ", ".join(str(m) for m in sorted({*MIGRATIONS, MAJOR}))
        # only a later major is a newer release's; one below the first (0, -1) no release wrote
        whose = "a newer release of nanochat-bench reads it" if major > MAJOR \
            else "no release of nanochat-bench wrote it"
        raise SchemaError(f"{where}: schema_version {data.get('schema_version')!r} is of major {major}; this reader "
                          f"reads majors {known} ({whose})")
    while major < MAJOR:
        data = MIGRATIONS[major](data, notes)
        major, minor = major + 1, 0
    return {**data, "schema_version": f"{major}.{minor}"}
