"""Worker threads and bounded channels: a worker's error reaches the waiting side unchanged; nothing is left running."""

from __future__ import annotations

import threading

import pytest

from sst_cli.pipeline import Channel, Stopped, Worker, workers


def _running() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("test-")]


def test_items_arrive_in_order_and_a_producer_error_reaches_the_consumer() -> None:
    stop = threading.Event()
    channel = Channel(2, stop)

    def produce(stop: threading.Event) -> None:
        for i in range(5):
            channel.put(i)
        raise OSError(28, "No space left on device")

    producer = Worker("test-producer", produce, stop)
    got = []
    with pytest.raises(OSError, match="No space left"), workers(producer):
        while True:
            got.append(channel.get(producer))
    assert got == [0, 1, 2, 3, 4] and not _running()


def test_a_consumer_error_reaches_the_blocked_producer() -> None:
    stop = threading.Event()
    channel = Channel(1, stop)

    def consume(stop: threading.Event) -> None:
        channel.get()
        raise ValueError("encoder refused the frame")

    consumer = Worker("test-consumer", consume, stop)
    with pytest.raises(ValueError, match="encoder refused"), workers(consumer):
        for i in range(100):  # the channel holds one item: the producer waits, then hears of the failure
            channel.put(i, consumer)
    assert not _running()


def test_an_interrupt_in_the_caller_stops_and_joins_the_workers() -> None:
    stop = threading.Event()
    channel = Channel(1, stop)
    ended: list[str] = []

    def produce(stop: threading.Event) -> None:
        try:
            while True:
                channel.put("frame")
        except Stopped:
            ended.append("stopped")
            raise

    with pytest.raises(KeyboardInterrupt), workers(Worker("test-producer", produce, stop)):
        channel.get()
        raise KeyboardInterrupt
    assert ended == ["stopped"] and not _running()
