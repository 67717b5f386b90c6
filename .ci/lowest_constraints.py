"""Print pip constraints pinning each runtime dependency to the lowest version pyproject.toml allows.

`name>=X` becomes `name==X` (pip reads 2.31 as 2.31.0, so each bound must name a real release); torch is left
out: CI installs the CPU wheel on its disk before (README, "Tested versions"). A dependency without a lower
bound is an error: what is declared must be what is tested.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*)")
_NOT_PINNED_HERE = {"torch"}


def lowest_pins(pyproject: Path, extras: tuple[str, ...] = ()) -> list[str]:
    """``name==lowest`` for every entry of [project].dependencies but torch, then of the named extras."""
    project = tomllib.loads(pyproject.read_text())["project"]
    dependencies = list(project["dependencies"])
    for extra in extras:
        dependencies += project["optional-dependencies"][extra]
    pins: list[str] = []
    for requirement in dependencies:
        match = _REQUIREMENT.match(requirement)
        if match is None:
            raise SystemExit(f"{pyproject}: cannot read the requirement {requirement!r}")
        name, spec = match[1], match[2]
        if name.lower() in _NOT_PINNED_HERE:
            continue
        lower = re.search(r">=\s*([^,\s]+)", spec)
        if lower is None:
            raise SystemExit(f"{pyproject}: {name} has no lower bound (>=): CI cannot test the lowest version")
        pins.append(f"{name}=={lower[1]}")
    return pins


if __name__ == "__main__":
    # usage: lowest_constraints.py [EXTRA ...]  (the extras whose lower bounds are pinned too, e.g. video)
    root = Path(__file__).resolve().parent.parent
    print("\n".join(lowest_pins(root / "pyproject.toml", tuple(sys.argv[1:]))))
