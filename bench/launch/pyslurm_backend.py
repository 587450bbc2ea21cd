"""Optional pyslurm backend for job states, used only when it imports and matches the running Slurm.

pyslurm's MAJOR.MINOR is the Slurm release it was built against (22.5.x for Slurm 22.05, 23.2.x for
23.02, ...) and a mismatch fails at load or, worse, reads wrong fields; so it is used only on a match.
It is never installed by this project (PyPI lacks most releases; sites build it). Submission stays
with `sbatch --parsable`, which reads the script's #SBATCH lines exactly as a user's sbatch would.
"""

from bench.launch.slurm import JobState, SlurmCLI


def _major_minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def matches(slurm_version: str) -> bool:
    """True when pyslurm imports and its MAJOR.MINOR equals Slurm's (22.5 <-> 22.05)."""
    try:
        import pyslurm
    except Exception:  # noqa: BLE001 - a broken build is as good as none
        return False
    mine = _major_minor(str(getattr(pyslurm, "__version__", "")))
    return mine is not None and mine == _major_minor(slurm_version)


class PyslurmBackend(SlurmCLI):
    """Job states through libslurm (pyslurm >= 22.5.2's Job API); everything else as SlurmCLI."""

    name = "pyslurm"

    def states(self, job_ids):
        import pyslurm

        out = {}
        missing = []
        for job_id in job_ids:
            try:
                job = pyslurm.Job.load(int(job_id))
            except Exception:  # noqa: BLE001 - forgotten by slurmctld: ask the command line
                missing.append(job_id)
                continue
            out[job_id] = JobState(job_id, str(job.state), str(getattr(job, "exit_code", "")),
                                   str(getattr(job, "allocated_nodes", "") or ""))
        if missing:
            out.update(SlurmCLI.states(self, missing))
        return {j: out[j] for j in job_ids}
