"""Whether a path is on a filesystem every node of a job shares. Standard library only (the planner's side).

The stages after pre-training read the checkpoint the stage before wrote, on every node: rank 0 of one node
writes the model, every rank of every node reads it. A checkpoint directory on a node-local disk (ext4, xfs,
tmpfs) is then missing on all but one node, and the next stage fails there after its job has waited in the
queue. So a multi-node point is planned only when $NANOCHAT_BASE_DIR, where checkpoints live, is on a network
filesystem by /proc/mounts' type, or under a path the site profile declares shared (`shared_paths`: a site
whose shared storage reports a local type, or the test cluster whose "nodes" are one host). A path this host
does not see (rendering on a login node that does not mount the nodes' filesystem) cannot be judged here: its
points are planned, and plan, render and submit note that it was not checked.
"""

import os
import re
from pathlib import Path

# /proc/mounts types of filesystems that every client node sees alike
NETWORK_FS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cephfs", "fuse.ceph", "wekafs", "cifs", "smb3", "smbfs",
    "glusterfs", "fuse.glusterfs", "panfs", "dvs", "afs", "orangefs", "pvfs2", "ocfs2", "gfs2", "9p",
    "fuse.sshfs", "fuse.juicefs", "fuse.s3fs", "vastfs", "quobyte", "fuse.quobyte",
})
MOUNTS = "/proc/mounts"


def _unescape(field: str) -> str:
    """/proc/mounts writes a space in a mount point as \\040 (and tab, newline, backslash likewise)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def mount_of(path: str | os.PathLike, mounts_text: str | None = None) -> tuple[str, str]:
    """(mount point, filesystem type) holding `path` (a path not created yet: where it will be), its links
    resolved: the longest mount point that contains it, the last mounted where several are stacked."""
    p = Path(path).resolve()
    mounts_text = Path(MOUNTS).read_text() if mounts_text is None else mounts_text
    best = ("/", "unknown")
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point, fstype = _unescape(parts[1]), parts[2]
        if _under(p, point) and len(point) >= len(best[0]):
            best = (point, fstype)
    return best


def _under(path: Path, root: str) -> bool:
    return path == Path(root) or Path(root) in path.parents


def declared_shared(path: str | os.PathLike, site=None) -> bool:
    """Whether `path` is under one of the `shared_paths` of `site` (a bench.sites.Site, or None)."""
    resolved = Path(path).resolve()
    return any(_under(resolved, shared) or _under(Path(os.path.abspath(path)), shared)
               for shared in getattr(site, "shared_paths", ()) or ())


def unseen(path: str | os.PathLike) -> bool:
    """Whether this host does not see `path` (a login node without the nodes' filesystem): then nothing here
    says which filesystem the nodes have there, and check_shared lets it pass (the CLI notes it)."""
    return not Path(path).exists()


def check_shared(path: str | os.PathLike, nodes: int, site=None, mounts_text: str | None = None) -> str | None:
    """None when `nodes` nodes all see `path` (one node always does) or this host does not see it (unseen: it
    cannot be judged here), else the reason, naming the path, its filesystem type and what would do. `site`: a
    bench.sites.Site whose `shared_paths` count as shared."""
    if nodes <= 1 or declared_shared(path, site) or unseen(path):
        return None  # an unseen path is not judged by the filesystem of its nearest ancestor here (often /)
    resolved = Path(path).resolve()
    try:
        point, fstype = mount_of(resolved, mounts_text)
    except OSError as e:  # no /proc/mounts (not Linux): nothing says the nodes share it
        point, fstype = "?", f"unknown ({MOUNTS}: {e.strerror})"
    if fstype in NETWORK_FS:
        return None
    profile = f"site profile {site.name}" if site is not None else "a site profile (--site)"
    return (f"NANOCHAT_BASE_DIR {resolved} is on {fstype} (mounted at {point}), not a filesystem all {nodes} "
            f"nodes share: each stage reads the checkpoint the one before wrote, on every node; give --base-dir "
            f"on a network filesystem (nfs, lustre, gpfs, beegfs, cephfs, wekafs, ...) or list it in the "
            f"shared_paths of {profile}")
