"""Each folder of bench/ lists its modules in its __init__, one line each, and lists only modules that exist:
the map a newcomer reads first stays true as modules come and go.

    python -m pytest tests/unit/test_module_lists.py -q
"""

import ast
import re
from pathlib import Path

import pytest

import bench

ROOT = Path(bench.__file__).parent
PACKAGES = sorted(p.parent for p in ROOT.rglob("__init__.py") if "__pycache__" not in p.parts)
# A listing line names a module (`name.py`, `sub/name.py`) or a folder (`name/`) first, after an optional "- ".
LISTED = re.compile(r"^\s*(?:- )?((?:[\w]+/)*(?:[\w]+\.py|[\w]+/))(?=\s)", re.M)


def listed(package: Path) -> set[str]:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return set(LISTED.findall(doc + "\n"))


def present(package: Path) -> set[str]:
    """What its listing must name: its modules, its subpackages (`name/`) and the modules of a plain folder."""
    names = {f.name for f in package.glob("*.py") if f.name != "__init__.py"}
    for sub in (d for d in package.iterdir() if d.is_dir() and d.name != "__pycache__"):
        if (sub / "__init__.py").exists():
            names.add(sub.name + "/")
        elif list(sub.glob("*.py")):
            names |= {f"{sub.name}/{f.name}" for f in sub.glob("*.py")}
        else:
            names.add(sub.name + "/")  # data (schemas/, templates): named as a folder
    return names


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_the_init_lists_every_module_and_nothing_else(package):
    names, have = listed(package), present(package)
    assert not have - names, f"{package}/__init__.py does not list: {sorted(have - names)}"
    assert not names - have, f"{package}/__init__.py lists what is not there: {sorted(names - have)}"
