""".ci/lowest_constraints.py: the lowest versions CI installs are exactly pyproject's lower bounds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib (Python 3.11+) reads pyproject.toml, as CI does")

ROOT = Path(__file__).resolve().parent.parent


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("lowest_constraints", ROOT / ".ci" / "lowest_constraints.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_runtime_dependency_but_torch_is_pinned_to_its_lower_bound() -> None:
    pins = _script().lowest_pins(ROOT / "pyproject.toml")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    expected = [d.replace(">=", "==") for d in declared if not d.startswith("torch")]
    assert pins == expected and all(">" not in p and "<" not in p for p in pins)
    assert {p.split("==")[0] for p in pins} >= {"numpy", "typer", "rich", "pillow", "huggingface-hub", "psutil"}


def test_an_extra_named_is_pinned_after_the_runtime_dependencies(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\ndependencies = ["numpy>=1.24"]\n[project.optional-dependencies]\nvideo = ["av>=18"]\n'
    )
    assert _script().lowest_pins(tmp_path / "pyproject.toml", ("video",)) == ["numpy==1.24", "av==18"]
    assert _script().lowest_pins(tmp_path / "pyproject.toml") == ["numpy==1.24"]


def test_a_dependency_without_a_lower_bound_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["numpy>=1.24", "rich"]\n')
    with pytest.raises(SystemExit, match="rich has no lower bound"):
        _script().lowest_pins(tmp_path / "pyproject.toml")
