"""How many cores this process may use (torch-free: image encoding and worker planning both ask)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Cores this process may run on (its affinity where the platform says, else all)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
