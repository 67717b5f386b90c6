"""Termination signals handled like Ctrl-C (torch-free, so every command can use it at no start-up cost)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import Terminated


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Handle SIGTERM (``kill``, ``timeout``, job schedulers) and SIGHUP like Ctrl-C while the block runs.

    The handler raises ``Terminated`` (a KeyboardInterrupt), so the usual interrupt path removes temporary
    files and reports what was done. Windows has no SIGHUP; signals can only be set from the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise Terminated(signum)

    numbers = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    previous = {number: signal.signal(number, interrupt) for number in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
