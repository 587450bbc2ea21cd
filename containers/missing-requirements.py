"""Print the project's requirements that the image's Python does not have yet, one a line.

Used by the Containerfile so that pip installs only what is missing: a package the base image already
ships (torch, numpy, jinja2 in NGC PyTorch) is kept at the image's version, whatever pyproject.toml
allows, because the image is part of what the benchmark measures.
    python missing-requirements.py pyproject.toml [EXTRA ...] > requirements.txt
"""

import re
import sys
from importlib import metadata

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def name_of(requirement: str) -> str:
    """The project name of a PEP 508 requirement string (`pandas>=2.0` -> `pandas`)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        sys.exit(f"missing-requirements: cannot read requirement {requirement!r}")
    return match.group(1)


def installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit(__doc__)
    try:
        with open(argv[0], "rb") as f:
            project = tomllib.load(f)["project"]
    except OSError as e:
        sys.exit(f"missing-requirements: {argv[0]} cannot be read: {e.strerror or e}; "
                 "give the project's pyproject.toml")
    except tomllib.TOMLDecodeError as e:
        sys.exit(f"missing-requirements: {argv[0]} is not TOML ({e}); give the project's pyproject.toml")
    except KeyError:
        sys.exit(f"missing-requirements: {argv[0]} has no [project] table; give the project's pyproject.toml")
    requirements = list(project.get("dependencies", []))
    for extra in argv[1:]:
        if extra not in project.get("optional-dependencies", {}):
            sys.exit(f"missing-requirements: no extra {extra!r} in {argv[0]}; "
                     f"valid: {', '.join(project.get('optional-dependencies', {}))}")
        requirements += project["optional-dependencies"][extra]
    for requirement in requirements:
        if not installed(name_of(requirement)):
            print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
