"""The project's image, built with Podman from the real Containerfile on a local stand-in for NGC PyTorch.

containers/standin-base.sh makes Debian bookworm (debootstrap) + CPU torch 2.13 with an NGC-style pip
constraint file; containers/build.sh builds the Containerfile on it. Both cache (the debootstrap tarball
under ~/.cache/nanochat-bench, Podman's layers): cold on a fresh machine 6-10 minutes on 2 cores, warm
about a minute. Built when NANOCHAT_BENCH_CONTAINER_TEST=1 or CI=true (CI runs the container tests every
time); elsewhere the tests that need it skip, saying why. Needs root, podman, runc, debootstrap and the
CPU torch wheel for Python 3.11 (TORCH_WHEEL, default the path standin-base.sh names).
"""

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERS = REPO / "containers"
TAG = "localhost/nanochat-bench:test"
DEFAULT_WHEEL = re.search(r"TORCH_WHEEL:-([^}]+)}", (CONTAINERS / "standin-base.sh").read_text()).group(1)
TIMINGS: dict[str, float] = {}


def wanted() -> bool:
    return os.environ.get("NANOCHAT_BENCH_CONTAINER_TEST") == "1" or \
        os.environ.get("CI", "").lower() in ("1", "true", "yes")


def why_not() -> str | None:
    """Why the image cannot be built here (None when it can)."""
    if not wanted():
        return "container build and run: set NANOCHAT_BENCH_CONTAINER_TEST=1 (6-10 min cold; CI always runs it)"
    missing = [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (tests/run installs them as root)"
    if os.geteuid() != 0:
        return "debootstrap needs root"
    if not Path(os.environ.get("TORCH_WHEEL", DEFAULT_WHEEL)).is_file():
        return f"no CPU torch wheel at {os.environ.get('TORCH_WHEEL', DEFAULT_WHEEL)} (set TORCH_WHEEL)"
    return None


def run_step(name: str, argv: list[str], timeout: int = 900, env: dict[str, str] | None = None,
             **kw) -> subprocess.CompletedProcess:
    """Run a step, time it, and fail with its output when it fails; `env` adds to the environment."""
    start = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=kw.pop("cwd", REPO),
                         env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, **kw)
    TIMINGS[name] = time.monotonic() - start
    print(f"\n[container test] {name}: {TIMINGS[name]:.1f} s")
    assert out.returncode == 0, f"{name} failed ({out.returncode}):\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out


def podman(*args: str) -> list[str]:
    """podman with containers/podman-local.sh's settings (runc, no default ulimits, host network)."""
    return [str(CONTAINERS / "podman-local.sh"), *args]


def build_standin() -> str:
    return run_step("stand-in base (debootstrap, cached)",
                    [str(CONTAINERS / "standin-base.sh")]).stdout.strip().splitlines()[-1]


def build_image(standin: str, tag: str = TAG) -> str:
    run_step("build Containerfile", [str(CONTAINERS / "build.sh"), "--local", "--base", standin, "--tag", tag])
    return tag


# -- podman-hpc (NERSC): its own storage, a squash store of migrated images, a site configuration file --------
# podman-hpc reads its site configuration from PODMANHPC_CONFIG_FILE (podman_hpc/siteconfig.py), so the tests
# write one of their own and never touch /etc/podman_hpc. Its `migrate` runs mksquashfs *inside* the image
# (bind-mounted there), so the binary must be static: NERSC ships mksquashfs.static; Debian ships neither a
# static one nor, in bookworm, one new enough (migrate passes -xattrs-exclude, new in squashfs-tools 4.6).
CACHE = Path(os.environ.get("NANOCHAT_BENCH_CACHE", Path.home() / ".cache" / "nanochat-bench"))
MKSQUASHFS_SOURCE = "deb-src http://deb.debian.org/debian trixie main"  # squashfs-tools 4.6.x
PODMAN_HPC_TOOLS = ("podman-hpc", "fuse-overlayfs-wrap", "fuse-overlayfs", "squashfuse_ll", "inotifywait",
                    "apt-get", "gcc", "make")


def podman_hpc_why_not() -> str | None:
    """Why podman-hpc cannot run the image here (None when it can); the image itself is why_not()'s."""
    bindir = str(Path(sys.executable).parent)  # where pip put podman-hpc's scripts
    missing = [t for t in PODMAN_HPC_TOOLS if shutil.which(t, path=f"{bindir}:{os.environ['PATH']}") is None]
    if missing:
        return f"not installed: {', '.join(missing)} (tests/run installs them: apt packages and the test extras)"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse: podman-hpc mounts its squashed images with squashfuse and fuse-overlayfs"
    return None


def static_mksquashfs() -> Path:
    """A statically linked mksquashfs (gzip and lz4 only) from Debian's source package, built once and cached."""
    target = CACHE / "mksquashfs.static"
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory(prefix="nanochat-bench-mksquashfs.") as tmp:
        work = Path(tmp)
        (work / "sources.list").write_text(MKSQUASHFS_SOURCE + "\n")
        (work / "lists" / "partial").mkdir(parents=True)
        apt = ["apt-get", f"-oDir::Etc::SourceList={work / 'sources.list'}", "-oDir::Etc::SourceParts=/dev/null",
               f"-oDir::State::Lists={work / 'lists'}"]  # a private source list: the machine's stays as it is
        run_step("squashfs-tools source (apt-get source)", [*apt, "update", "-qq"])
        run_step("squashfs-tools source download", [*apt, "source", "--download-only", "squashfs-tools"], cwd=work)
        orig = next(work.glob("squashfs-tools_*.orig.tar.gz"))
        run_step("squashfs-tools unpack", ["tar", "-xzf", str(orig), "-C", str(work)])
        src = next(work.glob("squashfs-tools-*/squashfs-tools"))
        run_step("mksquashfs.static build", ["make", "-C", str(src), "-j2", "mksquashfs", "GZIP_SUPPORT=1",
                                             "LZ4_SUPPORT=1", "EXTRA_LDFLAGS=-static"])
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        shutil.copy2(src / "mksquashfs", partial)
        partial.rename(target)  # whole or absent: a build stopped half-way leaves nothing to trust
    return target


class PodmanHPCSite:
    """A podman-hpc site in one folder: its configuration file, the compute nodes' storage (empty of images:
    they run from the squash store only, as on a real site whose node-local /tmp starts empty) and the squash
    store `migrate` fills. The login node's storage, which `migrate` reads, is Podman's own, where the image
    was built: `podman-hpc build` builds into one of the same layout, and a copy through `podman-hpc load`
    would only add minutes of writing 2 GB twice."""

    def __init__(self, root: Path):
        self.root = root
        self.squash_dir = root / "squash"
        self.mount_log = root / "fuse-overlayfs-wrap.log"  # where the mount program says what it mounted
        bindir = Path(sys.executable).parent
        for name in ("modules.d", "hooks.d"):  # no modules (--gpu, --nccl) and no OCI hooks on a CPU machine
            (root / name).mkdir(parents=True, exist_ok=True)
        # As containers/podman-local.sh (runc, no default ulimits), and the host's PID namespace: both test
        # "nodes" are one host on its network, so in private namespaces the two torchrun agents would have
        # the same host name and PID 1, which c10d's rendezvous takes for one node (its node id is fqdn+pid).
        (root / "containers.conf").write_text(
            '[containers]\ndefault_ulimits = []\npidns = "host"\n\n[engine]\nruntime = "runc"\n')
        (root / "podman_hpc.yaml").write_text("".join(f'{key}: "{value}"\n' for key, value in {
            "podman_bin": shutil.which("podman"),
            "mount_program": shutil.which("fuse-overlayfs-wrap", path=f"{bindir}:{os.environ['PATH']}"),
            "mksquashfs_bin": static_mksquashfs(),
            "modules_dir": root / "modules.d",
            "hooks_dir": root / "hooks.d",
            "graph_root_template": root / "node-storage",
            "run_root_template": root / "run",
            "config_home_template": root / "config",
        }.items()))

    def env(self) -> dict[str, str]:
        """The environment that selects this site, for the tests and (through sbatch) for the jobs."""
        return {"PODMANHPC_CONFIG_FILE": str(self.root / "podman_hpc.yaml"), "SQUASH_DIR": str(self.squash_dir),
                "CONTAINERS_CONF": str(self.root / "containers.conf"), "LOG": str(self.mount_log),
                "USER": os.environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name,  # podman-hpc needs it
                "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def migrate(self, image: str) -> None:
        """What a user does once on a login node after building the image: `podman-hpc migrate IMAGE`."""
        built_in = run_step("podman graph root", podman("info", "--format", "{{.Store.GraphRoot}}")).stdout.strip()
        login = {**self.env(), "PODMANHPC_GRAPH_ROOT": built_in}  # the variable beats the file's node storage
        out = run_step("podman-hpc migrate", ["podman-hpc", "--log-level=info", "migrate", image], env=login)
        squashed = self.images()
        # migrate exits 0 when mksquashfs fails; the image in the squash store is the proof it worked
        assert squashed.get(image) == "true", f"migrate left no squashed {image}: {squashed}\n{out.stderr[-3000:]}"

    def remove_containers(self) -> None:
        """Stop and remove what the nodes left running (a cancelled step's conmon outlives srun), which
        also unmounts the squashed image."""
        subprocess.run(["podman-hpc", "rm", "--force", "--all", "--time=5"], capture_output=True, timeout=120,
                       env={**os.environ, **self.env()})

    def images(self) -> dict[str, str]:
        """`podman-hpc images` as the compute nodes see them: reference -> read-only ("true": the squash store)."""
        listing = ["podman-hpc", "images", "--format", "{{.Repository}}:{{.Tag}} {{.ReadOnly}}"]
        out = run_step("podman-hpc images", listing, env=self.env())
        return dict(line.split() for line in out.stdout.splitlines() if line.strip())
