"""The two-node test cluster (tests/integration/slurm/slurm_cluster.py) plus what the faults need:
kill one node's slurmd and bring it back, and a job's state."""

import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "slurm"))

from slurm_cluster import SlurmCluster, _program, missing_programs  # noqa: E402

__all__ = ["FaultCluster", "missing_programs"]


class FaultCluster(SlurmCluster):
    def _slurmd(self, node: str):
        return next(p for p in self.procs if p.args[:1] == [_program("slurmd")] and p.args[3] == node)

    def kill_slurmd(self, node: str) -> None:
        """SIGKILL the node's slurmd (by its own pid); the job steps it started stay as they are."""
        proc = self._slurmd(node)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def restart_slurmd(self, node: str, timeout: float = 90) -> None:
        """Start the node's slurmd again and wait until both nodes are idle (resumed if marked down)."""
        old = self._slurmd(node)
        if old.poll() is None:
            return
        self.procs.remove(old)
        self._spawn(f"slurmd-{node}", [_program("slurmd"), "-D", "-N", node, "-f", str(self.conf)])
        time.sleep(1)
        self._wait_idle(timeout)

    def _job_field(self, job_id: str, name: str) -> str | None:
        out = self.run(["scontrol", "show", "job", "-o", job_id], check=False).stdout
        return out.split(f" {name}=")[1].split()[0] if f" {name}=" in out else None

    def job_state(self, job_id: str) -> str | None:
        return self._job_field(job_id, "JobState")

    def exit_code(self, job_id: str) -> int | None:
        """The job's exit status as a shell reports it: the code, or 128 + the signal that ended it."""
        value = self._job_field(job_id, "ExitCode")
        if not value:
            return None
        code, _, sig = value.partition(":")
        return int(code) or (128 + int(sig) if sig and int(sig) else 0)
