"""Termination signals handled like Ctrl-C (torch-free, so every command can use it at no start-up cost)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import Terminated


def catchable(*names: str) -> list[int]:
    """The signals of ``names`` this platform has and whoever started the process did not set to be ignored:
    ``nohup`` ignores SIGHUP, and a shell ignores SIGINT for a background job, so that a training left running
    past a logout, or Ctrl-C meant for a script, does not stop it."""
    numbers = [getattr(signal, name) for name in names if hasattr(signal, name)]
    return [number for number in numbers if signal.getsignal(number) is not signal.SIG_IGN]


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Handle SIGTERM (``kill``, ``timeout``, job schedulers) and SIGHUP like Ctrl-C while the block runs (unless
    ignored: ``catchable``).

    The handler raises ``Terminated`` (a KeyboardInterrupt), so the usual interrupt path removes temporary
    files and reports what was done. Windows has no SIGHUP; signals can only be set from the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise Terminated(signum)

    previous = {number: signal.signal(number, interrupt) for number in catchable("SIGTERM", "SIGHUP")}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def second_interrupt_exits_at_once() -> None:
    """Ctrl-C raises KeyboardInterrupt once, which stops the run cleanly; a second one (pressed while that
    clean-up or Python's own shutdown runs) ends the process at once with the same exit code, instead of
    breaking the shutdown with a traceback. Temporaries it leaves are removed by the next run in that folder.
    For the command-line process only (a library must not take over its host's Ctrl-C)."""

    def at_once(signum: int, frame: object) -> None:
        import multiprocessing

        for child in multiprocessing.active_children():  # --workers: they would go on computing, unwatched
            child.kill()
        os._exit(130)

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, at_once)
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread() and catchable("SIGINT"):
        signal.signal(signal.SIGINT, first)
