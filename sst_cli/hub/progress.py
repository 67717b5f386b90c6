"""What a front end shows while weights download: a ``Display`` set for a block of code with ``show_downloads``.

The library prints nothing itself. huggingface_hub reports progress to a tqdm class; ``tqdm_class()`` adapts the
current display to that interface (for Hub downloads and for the release fallback, which uses the same helper).
With no display set, huggingface_hub's own bars show as they would in any HF tool.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any


class Display:
    """Receives download notes and byte counts; this base class shows nothing (``--quiet``, JSON logs)."""

    def note(self, text: str) -> None:
        """One remark, e.g. where a file was found."""

    def start(self, label: str, total: int | None) -> None:
        """A download of ``total`` bytes (None: unknown) begins."""

    def advance(self, count: int) -> None:
        """``count`` more bytes arrived (negative when a restarted download discards what it had)."""

    def stop(self) -> None:
        """The download ended (finished or failed)."""


_DISPLAY: ContextVar[Display | None] = ContextVar("sst_cli_download_display", default=None)


@contextlib.contextmanager
def show_downloads(display: Display | None) -> Iterator[None]:
    """Route the download notes and progress of this block to ``display`` (``Display()``: silent)."""
    token = _DISPLAY.set(display)
    try:
        yield
    finally:
        _DISPLAY.reset(token)


def current_display() -> Display | None:
    return _DISPLAY.get()


def note(text: str) -> None:
    display = _DISPLAY.get()
    if display is not None:
        display.note(text)


def progress_kwargs(function: Any) -> dict[str, Any]:
    """``{"tqdm_class": ...}`` for a huggingface_hub download function that takes one (recent versions), else
    nothing (older versions show their own bars)."""
    import inspect

    cls = tqdm_class()
    if cls is None:
        return {}
    try:
        accepted = "tqdm_class" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        accepted = False
    return {"tqdm_class": cls} if accepted else {}


def tqdm_class() -> type | None:
    """A tqdm look-alike feeding the current display, for huggingface_hub's ``tqdm_class``; None without one."""
    current = _DISPLAY.get()
    if current is None:
        return None
    display = current  # narrowed for the class body below

    class _Bar:
        """The part of tqdm's interface huggingface_hub uses (http_get and the Xet reporter)."""

        def __init__(self, *args: Any, total: int | None = None, initial: int = 0, desc: str | None = None,
                     **kwargs: Any) -> None:  # fmt: skip
            self.n, self.total, self.desc, self.closed = initial, total, desc, False
            self.format_dict: dict[str, Any] = {}
            display.start((desc or "weights").rsplit("/", 1)[-1], total)
            if initial:
                display.advance(initial)

        def update(self, count: int | float = 1) -> None:
            self.n += int(count)
            display.advance(int(count))

        def update_transfer(self, count: int) -> None:  # Xet network bytes: the file bytes are what we show
            pass

        def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
            pass

        def set_transfer_postfix_str(self, *args: Any, **kwargs: Any) -> None:
            pass

        def refresh(self, *args: Any, **kwargs: Any) -> None:
            pass

        def close(self) -> None:
            if not self.closed:
                self.closed = True
                display.stop()

        def __enter__(self) -> _Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            self.close()

    return _Bar
