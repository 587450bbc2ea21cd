"""A real two-node Slurm cluster on one machine, in a temporary directory, for the integration tests.

Debian's slurmctld/slurmd/munge run as root: one munged on its own socket, one slurmctld, and two
`slurmd -N n1|n2` sharing the host with per-node ports, spool, pid and log files (slurm.conf's `%n`).
Node names are not host names, so `NodeAddr=127.0.0.1` is what the rendezvous must use. Ports are
picked free at start, state lives under the directory, and every daemon is stopped by its own pid, so a
second cluster (or a site's real one) on the machine is left alone. Clients find it through SLURM_CONF.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
NODES = ("n1", "n2")
CPUS_PER_NODE = 2


def missing_programs() -> list[str]:
    """The Slurm/munge programs this machine lacks (empty when a cluster can be started)."""
    needed = (*DAEMONS, "sbatch", "squeue", "scontrol", "sinfo", "scancel", "mungekey")
    return [p for p in needed if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_ports(n: int) -> list[int]:
    """n distinct ports free right now; consecutive ones for the slurmd range (`Port=[a-b]`)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        ok = True
        for port in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return list(range(base, base + n))
    raise RuntimeError("no free consecutive ports for the test cluster")


SLURM_CONF = """\
ClusterName=nbtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
StateSaveLocation={root}/state
SlurmctldPidFile={root}/slurmctld.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdSpoolDir={root}/spool/%n
SlurmdPidFile={root}/slurmd-%n.pid
SlurmdLogFile={root}/slurmd-%n.log
PlugStackConfig={root}/plugstack.conf
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=n[1-2] NodeHostname={host} NodeAddr=127.0.0.1 Port=[{node_port_lo}-{node_port_hi}] CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """Start with `start()`, stop with `stop()`; `env` is the environment clients need (SLURM_CONF)."""

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}  # read now: a test's own variables reach its jobs

    def __init__(self, root: Path):
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []

    # -----------------------------------------------------------------------------------------------
    def start(self, timeout: float = 30) -> "SlurmCluster":
        for sub in ("munge", "state", "spool"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        ctld_port, lo, hi = _free_ports(3)
        self.conf.write_text(SLURM_CONF.format(host=socket.gethostname(), root=self.root, ctld_port=ctld_port,
                                               node_port_lo=lo, node_port_hi=hi, cpus=CPUS_PER_NODE))
        (self.root / "plugstack.conf").write_text("")  # no SPANK plugins (a site's pyxis would load otherwise)
        self._start_munge()
        self._spawn("slurmctld", [_program("slurmctld"), "-D", "-c", "-f", str(self.conf)])
        for node in NODES:
            self._spawn(f"slurmd-{node}", [_program("slurmd"), "-D", "-N", node, "-f", str(self.conf)])
        self._wait_idle(timeout)
        return self

    def _start_munge(self) -> None:
        m = self.root / "munge"
        key = m / "munge.key"
        subprocess.run([_program("mungekey"), "--create", f"--keyfile={key}"], check=True,
                       capture_output=True)
        os.chmod(key, 0o600)
        self._spawn("munged", [_program("munged"), "-F", "--force", f"--socket={m}/munge.socket",
                               f"--key-file={key}", f"--pid-file={m}/munged.pid",
                               f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"])
        deadline = time.time() + 10
        while not (m / "munge.socket").exists():
            if time.time() > deadline:
                raise RuntimeError(f"munged did not start; see {m}/munged.log")
            time.sleep(0.1)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "w")
        # A new session keeps the daemons out of pytest's signals; they are stopped by pid in stop().
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True))
        log.close()

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.time() + timeout
        out = ""
        while time.time() < deadline:
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead} exited at start; logs in {self.root}")
            r = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
            out = r.stdout
            states = dict(line.split() for line in out.splitlines() if line.strip())
            if all(states.get(n) == "idle" for n in NODES):
                return
            if any(s.startswith(("down", "drain", "unk")) for s in states.values()):
                self.run(["scontrol", "update", "nodename=n[1-2]", "state=resume"], check=False)
            time.sleep(0.5)
        raise RuntimeError(f"nodes not idle after {timeout}s (sinfo: {out!r}); logs in {self.root}")

    # -----------------------------------------------------------------------------------------------
    def run(self, argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check, timeout=60, **kw)

    def stop(self) -> None:
        """Cancel what still runs, then stop each daemon by its own pid (slurmd first, munged last)."""
        if self.procs:
            self.run(["scancel", "--full", "--user=root"], check=False)
            time.sleep(0.5)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        self.procs = []
