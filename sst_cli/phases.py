"""Where a run's time went: seconds per named phase (imports, device, model, read, network, write), for ``sst
upscale -v`` and its JSON log. A GPU run's wall time is often mostly not the network (start-up, CUDA start,
loading, the first pass's kernel choices): this is how to see which. Torch-free."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    """Accumulated seconds per phase name, in the order phases first ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Add the time the ``with`` block takes (also when it raises) to ``name``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def merged(self, *others: Phases) -> Phases:
        """One ``Phases`` with this one's and ``others``' seconds added up per name."""
        total = Phases()
        for phases in (self, *others):
            for name, seconds in phases.seconds.items():
                total.add(name, seconds)
        return total

    def line(self, total: float | None = None) -> str:
        """ "start-up 0.6 s, model 0.3 s, ..." and, given the wall time, the rest as "other" and the total."""
        parts = [f"{name} {seconds:.2f} s" for name, seconds in self.seconds.items()]
        if total is not None:
            parts.append(f"other {max(0.0, total - sum(self.seconds.values())):.2f} s")
            return ", ".join(parts) + f"; total {total:.2f} s"
        return ", ".join(parts)


def process_seconds() -> float:
    """Seconds since this process started (the interpreter's own start-up included), or 0 if unknown."""
    import psutil

    try:
        return max(0.0, time.time() - psutil.Process().create_time())
    except (psutil.Error, OSError):
        return 0.0
