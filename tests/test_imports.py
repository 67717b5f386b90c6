"""The house: imports inside sst_cli flow one way, with no circles.

Every import statement counts, wherever it stands: at the top, inside a function (a lazy import only hides a
circle until the function runs) and under ``if TYPE_CHECKING:`` (a type-only circle is still two modules
that each need the other). ``from package import name`` points at the submodule when ``name`` is one, else
at the package's ``__init__``; a module does not depend on its parent packages merely by living in them.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sst_cli"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package tree it imports (by parsing, nothing is imported)."""
    files = {_module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                submodules = {f"{source}.{alias.name}" for alias in node.names} & files.keys()
                targets.update(submodules)
                if len(submodules) < len(node.names):
                    targets.add(source)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules in order, the first repeated at the end), or None."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as error:
        return list(error.args[1])
    return None


def test_no_import_cycles_inside_sst_cli() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 50  # the whole package was read
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # a lazy import inside a function closes the circle too
        ({"__init__.py": "", "a.py": "from .b import x\n", "b.py": "def f():\n    from .a import y\n"}, True),
        # as does a type-only import
        (
            {
                "__init__.py": "",
                "a.py": "from . import b\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
            },
            True,
        ),
        # a name from the package's __init__, which imports the module back
        (
            {
                "__init__.py": "from .sub.c import C\nVERSION = 1\n",
                "sub/__init__.py": "",
                "sub/c.py": "from .. import VERSION\n",
            },
            True,
        ),
        # a submodule imported through its package is not an import of the package's __init__
        ({"__init__.py": "from .a import A\n", "a.py": "from . import b\n", "b.py": "X = 1\n"}, False),
    ],
)
def test_the_cycle_finder_sees_every_kind_of_circle(tmp_path: Path, files: dict[str, str], expected: bool) -> None:
    root = tmp_path / "pkg"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert (find_cycle(import_graph(root)) is not None) is expected
