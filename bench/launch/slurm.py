"""Slurm through its command line (submitit's way): `sbatch --parsable`, `squeue --json`, `scontrol show job -o`.

No sacct: it needs slurmdbd, which sites (and CI) may lack. squeue knows pending, running and recently
finished jobs (for MinJobAge, 300 s by default); scontrol answers where squeue --json cannot. Answers we
cannot parse raise SubmitError quoting them. JSON layouts differ between Slurm releases (openapi
v0.0.38 in 22.05: strings and ints; v0.0.40+: lists and {"set", "number"} objects), so fields are
read tolerantly. pyslurm is not used: it must be built for the exact Slurm release of each site.
"""

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.errors import SubmitError

# Slurm job states after which nothing will change (squeue/scontrol spelling).
TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                   "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT")

# Job ids per squeue call: one --jobs argument of a sweep's thousands would pass Linux's 128 KiB an argument may have,
# and before 24.05 squeue --json answers with every job whatever --jobs asks (23.x honours one id), so calls are few.
SQUEUE_JOBS_PER_CALL = 1000
# squeue's (and scontrol's) answer when asked for one job that slurmctld no longer knows (MinJobAge passed)
FORGOTTEN = "Invalid job id specified"


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, ...; UNKNOWN once Slurm has forgotten the job
    exit_code: str = ""
    nodelist: str = ""
    reason: str = ""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


def _run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        if cwd is not None and not Path(cwd).is_dir():  # subprocess names no file: the directory is as missing
            raise SubmitError(f"{cwd}: no such directory, so {argv[0]} cannot run in it") from None
        raise SubmitError(f"{argv[0]} not found: run this on a Slurm login node (or install slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmDidNotAnswer(f"{' '.join(argv)} did not answer within 120 s; is slurmctld up?") from None


def parse_parsable(stdout: str) -> str:
    """`sbatch --parsable` prints `<jobid>` or `<jobid>;<cluster>`."""
    m = re.fullmatch(r"(\d+)(;\S+)?", stdout.strip())
    if not m:
        raise SubmitError(f"could not read a job id from sbatch --parsable output {stdout!r}")
    return m.group(1)


def _first(value):
    """openapi >= v0.0.40 wraps states in lists and numbers in {"set": .., "number": ..} objects."""
    if isinstance(value, list):
        return value[0] if value else ""
    if isinstance(value, dict):
        return value.get("number", value.get("return_code", "")) if value.get("set", True) else ""
    return value


class SlurmDidNotAnswer(SubmitError):
    """slurmctld was not reached (or refused the query): no job's state is known, none is forgotten."""


def parse_squeue_json(text: str) -> dict[str, JobState]:
    try:
        answer = json.loads(text)
        jobs, errors = answer.get("jobs", []), answer.get("errors") or []
    except (json.JSONDecodeError, AttributeError):
        raise SubmitError(f"squeue --json answered something that is not its JSON: {text[:200]!r}") from None
    if errors:  # Slurm 22.05 exits 0 with an empty job list and these when slurmctld is down
        raise SlurmDidNotAnswer("; ".join(f"{e.get('source', '')}: {e.get('description', '')} ({e.get('error', '')})"
                                          if isinstance(e, dict) else str(e) for e in errors))
    out = {}
    for job in jobs:
        exit_code = job.get("exit_code", "")
        if isinstance(exit_code, dict):  # v0.0.40+: {"status": [...], "return_code": {...}}
            exit_code = _first(exit_code.get("return_code", ""))
        elif isinstance(exit_code, int) and exit_code:
            # v0.0.38 (Slurm 22.05) gives the raw wait status (143 << 8 for exit 143): as scontrol's CODE:SIGNAL
            exit_code = f"{exit_code >> 8}:{exit_code & 0x7f}"
        job_id = str(_first(job.get("job_id", "")))
        out[job_id] = JobState(job_id, str(_first(job.get("job_state", ""))), str(exit_code),
                               str(job.get("nodes", "")), str(job.get("state_reason", "")))
    return out


def parse_scontrol_oneliners(text: str) -> dict[str, JobState]:
    """`scontrol show job -o`: one `Key=Value Key=Value ...` line per job."""
    out = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" in fields:
            out[fields["JobId"]] = JobState(fields["JobId"], fields.get("JobState", ""), fields.get("ExitCode", ""),
                                            fields.get("NodeList", ""), fields.get("Reason", ""))
    return out


_FEATURE = re.compile(r"[A-Za-z0-9_.-]+")  # a node feature's name in a --constraint


def features_match(constraint: str):
    """Whether a node's features satisfy sbatch's --constraint, as a test of a set of feature names, where the
    constraint is one feature or several joined by & alone or by | alone; None for any other form (brackets,
    counts, `!`, & and | mixed), which Slurm reads by rules of its own."""
    for op, test in (("&", all), ("|", any)):
        names = constraint.split(op)
        if all(_FEATURE.fullmatch(name) for name in names):
            return lambda features: test(name in features for name in names)
    return None


class SlurmCLI:
    """The portable backend: Slurm's own commands."""

    name = "cli"

    def submit(self, script: Path, exclude: list[str] = ()) -> str:
        """Submit a script from its own directory (where its relative Slurm log goes); return the job id.
        `exclude`: nodes the job must not get (sbatch --exclude), e.g. those an earlier attempt lost."""
        extra = [f"--exclude={','.join(exclude)}"] if exclude else []
        r = _run(["sbatch", "--parsable", *extra, script.name], cwd=script.parent)
        if r.returncode != 0:
            raise SubmitError(f"sbatch {script} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()}")
        return parse_parsable(r.stdout)

    def partitions(self) -> list[str] | None:
        """The cluster's partition names (sinfo), or None when sinfo cannot say. --all: hidden ones too, which its
        users may still submit to."""
        try:
            r = _run(["sinfo", "--all", "-h", "-o", "%R"])
        except SubmitError:
            return None
        names = sorted({line.strip() for line in r.stdout.splitlines() if line.strip()})
        return names if r.returncode == 0 and names else None

    def nodes(self, partition: str | None) -> list[tuple[str, set[str]]] | None:
        """Each node of these partitions (sbatch's comma list; None: every node) by sinfo: its CPU count as sinfo
        prints it and its features (%f, those a --constraint asks for; sinfo's "(null)" for none), or None when
        sinfo cannot say."""
        try:
            r = _run(["sinfo", "-h", "-N", "-o", "%c %f", *([f"--partition={partition}"] if partition else [])])
        except SubmitError:
            return None
        rows = [(cpus, set(features.split(",")) - {"(null)", ""})
                for cpus, _, features in (line.strip().partition(" ") for line in r.stdout.splitlines()) if cpus]
        return rows if r.returncode == 0 and rows else None

    def node_cpus(self, partition: str | None, constraint: str | None = None) -> int | None:
        """The most CPUs any node of these partitions (None: every node) has, by sinfo, or None when sinfo cannot
        say. With a `constraint` (sbatch's --constraint) that features_match can read, only the nodes whose
        features it selects count; any other is not considered."""
        match = features_match(constraint) if constraint else None
        counts = [int(cpus) for cpus, features in self.nodes(partition) or ()
                  if cpus.isdigit() and (match is None or match(features))]
        return max(counts, default=None)

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        """States of the given jobs with squeue (one call per SQUEUE_JOBS_PER_CALL of them) and, only where squeue
        did not answer, one scontrol call."""
        want = set(job_ids)
        found: dict[str, JobState] = {}
        if not want:
            return found
        ids = sorted(map(str, want), key=lambda j: (len(j), j))
        failed = []  # why squeue did not answer
        for start in range(0, len(ids), SQUEUE_JOBS_PER_CALL):
            # --jobs: a site's squeue --json lists every user's jobs, tens of thousands, each poll. --all: without it
            # a job of a hidden partition (one the user may still submit to) is left out, as if forgotten
            sq = _run(["squeue", "--json", "--all", f"--jobs={','.join(ids[start:start + SQUEUE_JOBS_PER_CALL])}"])
            if sq.returncode == 0:
                try:
                    found.update({k: v for k, v in parse_squeue_json(sq.stdout).items() if k in want})
                except SlurmDidNotAnswer as e:
                    failed.append(str(e))
            elif FORGOTTEN not in sq.stderr:  # asked for one job, squeue fails so when slurmctld no longer knows it
                failed.append(sq.stderr.strip())
        # a job squeue answered without has been forgotten: scontrol, asking the same slurmctld, knows no more
        if failed:
            sc = _run(["scontrol", "--all", "show", "job", "-o"])
            if sc.returncode != 0:  # neither answered: the controller is down, not the jobs forgotten
                raise SlurmDidNotAnswer(f"Slurm did not answer: squeue: {failed[0]!r}; "
                                        f"scontrol: {sc.stderr.strip()!r}")
            found.update({k: v for k, v in parse_scontrol_oneliners(sc.stdout).items() if k in want - set(found)})
        return {j: found.get(j, JobState(j, "UNKNOWN")) for j in job_ids}
