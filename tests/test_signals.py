"""Signals whoever started sst-cli set to be ignored stay ignored: ``nohup sst train ... &`` survives a logout."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator

import pytest

from sst_cli.signals import catchable, second_interrupt_exits_at_once, stop_on_signals
from sst_cli.train import _stop_requests

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGHUP is POSIX")


@pytest.fixture
def hangup_and_interrupt_ignored() -> Iterator[None]:
    """As ``nohup`` leaves SIGHUP, and a shell leaves SIGINT for a background job."""
    saved = {number: signal.getsignal(number) for number in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


@pytest.mark.usefixtures("hangup_and_interrupt_ignored")
def test_ignored_signals_are_not_caught() -> None:
    assert catchable("SIGINT", "SIGTERM", "SIGHUP") == [signal.SIGTERM]
    with stop_on_signals():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert callable(signal.getsignal(signal.SIGTERM))
    with _stop_requests():  # the training loop's own handlers
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert callable(signal.getsignal(signal.SIGTERM))
    second_interrupt_exits_at_once()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_signals_not_ignored_are_caught_while_the_block_runs() -> None:
    before = signal.getsignal(signal.SIGHUP)
    with _stop_requests() as flag:
        assert signal.getsignal(signal.SIGHUP) not in (before, signal.SIG_IGN)
        signal.raise_signal(signal.SIGHUP)
        assert flag == [signal.SIGHUP]  # asks the loop to stop after its step
    assert signal.getsignal(signal.SIGHUP) == before
