"""Stand-in executables (srun, scontrol, ...) for running a rendered batch script without Slurm."""

from pathlib import Path


def write_stubs(folder: Path, scripts) -> Path:
    """Each (name, script text) as an executable file in `folder` (made here), which is returned for PATH."""
    folder.mkdir()
    for name, text in dict(scripts).items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder
