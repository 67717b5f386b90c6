"""Shared fixtures: the reference data in ../shared (beside the clone), skipped with a reason when absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
GOLDEN = SHARED / "golden"
DATASETS = SHARED / "datasets"

needs_golden = pytest.mark.skipif(
    not (GOLDEN / "mini_x3.pth").is_file(), reason=f"golden checkpoints not found in {GOLDEN}"
)
needs_datasets = pytest.mark.skipif(
    not (DATASETS / "Set5").is_dir(), reason=f"benchmark datasets not found in {DATASETS}"
)


@pytest.fixture(autouse=True, scope="session")
def _two_threads() -> None:
    """The golden vectors were computed with 2 intra-op threads; CI has 2 cores."""
    torch.set_num_threads(2)


def golden_config(case: str) -> dict:
    return json.loads((GOLDEN / f"{case}.json").read_text())
