"""Threads that overlap input and output work with the network: bounded channels, errors handed to the caller.

A video is decoded ahead of the network and encoded behind it (PyAV releases the GIL inside FFmpeg's codec
work), so the network never waits for a codec while there is work queued. Every channel is bounded, so memory
does not grow with the length of the input. A worker's exception is raised again in the thread that waits on
it, unchanged, so it reads exactly as it would without threads. Only the main thread receives Ctrl-C and
SIGTERM: ``workers`` stops and joins every worker however its block ends, so nothing is left writing to a
file that is about to be removed.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_POLL = 0.05  # seconds between looks at the stop flag and at the other side's health


class Stopped(Exception):
    """Raised inside a worker when the run was stopped (an error or an interrupt elsewhere)."""


class Worker(threading.Thread):
    """A daemon thread running ``work(stop)``; what it raises is kept in ``error`` for the waiting side."""

    def __init__(self, name: str, work: Callable[[threading.Event], None], stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.work = work
        self.stop = stop
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.work(self.stop)
        except Stopped:
            pass
        except BaseException as exc:  # handed to the other side, which raises it
            self.error = exc
            self.stop.set()

    def check(self) -> None:
        """Raise this worker's error, if it failed."""
        if self.error is not None:
            raise self.error


class Channel:
    """A bounded queue between one producer and one consumer.

    ``put`` and ``get`` wait in short steps, so a side whose partner failed or was stopped is not left waiting:
    the partner's error is raised (``Worker.check``), or ``Stopped`` once the run is stopped.
    """

    def __init__(self, size: int, stop: threading.Event) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, size))
        self._stop = stop

    def put(self, item: Any, consumer: Worker | None = None) -> None:
        while True:
            self._raise_if_ended(consumer)
            try:
                self._queue.put(item, timeout=_POLL)
                return
            except queue.Full:
                continue

    def get(self, producer: Worker | None = None) -> Any:
        while True:
            try:
                return self._queue.get(timeout=_POLL)
            except queue.Empty:
                pass
            try:
                self._raise_if_ended(producer)
            except Stopped as stopped:
                try:  # the producer's last item may have arrived just before it ended
                    return self._queue.get_nowait()
                except queue.Empty:
                    raise stopped from None

    def _raise_if_ended(self, partner: Worker | None) -> None:
        if partner is not None:
            partner.check()
            if not partner.is_alive():
                raise Stopped(f"{partner.name} ended early")
        if self._stop.is_set():
            raise Stopped("stopped")


@contextmanager
def workers(*stages: Worker) -> Iterator[None]:
    """Start the workers; on leaving, however that happens, stop them and wait until they have returned."""
    for stage in stages:
        stage.start()
    try:
        yield
    except Stopped:  # a worker failed and stopped the run: its error is the one to raise
        _end(stages)
        for stage in stages:
            stage.check()
        raise
    finally:
        _end(stages)


def _end(stages: tuple[Worker, ...]) -> None:
    for stage in stages:
        stage.stop.set()
    for stage in stages:
        stage.join()
