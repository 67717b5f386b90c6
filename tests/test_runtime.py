"""runtime.py's calls into psutil (RAM, usable cores), at whichever psutil is installed (CI: lowest and newest)."""

from __future__ import annotations

import os

import torch

from sst_cli import runtime


def test_available_ram_is_a_plausible_byte_count() -> None:
    ram = runtime.available_ram()
    assert isinstance(ram, int) and 16 << 20 < ram < 1 << 50  # more than 16 MiB, less than a petabyte
    budget = runtime.memory_budget(torch.device("cpu"))
    assert abs(budget - ram * runtime.RAM_FRACTION) < 256 << 20  # RAM moves a little between the two readings


def test_cpu_name_counts_the_cores_this_process_may_use() -> None:
    text = runtime.device_name(torch.device("cpu"))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert text.endswith(f"({usable} cores available)")
