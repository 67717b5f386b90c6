"""Exceptions raised by sst-cli.

Each one also inherits the builtin it means, so callers that do not know sst-cli can still
catch ``ValueError`` or ``OSError``; the CLI maps ``SstError`` to a message and an exit code.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors it was raised from or during, in turn (libraries and sst-cli's own writers wrap one
    in another), each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


class SstError(Exception):
    """Base class: an error whose message is meant for the user, without a traceback."""

    exit_code: int = 1


class ConfigError(SstError, ValueError):
    """A model name, scale, option or constructor config is not valid."""

    exit_code = 2


class CheckpointError(SstError, ValueError):
    """A weights file cannot be read, is unsafe, or does not match the network."""


class DamagedCheckpoint(CheckpointError):
    """A weights file that cannot be read (truncated, a byte changed): a download to repeat, not a wrong file."""


class ScaleMismatch(CheckpointError):
    """The weights are for another scale than the one asked for: the user's choice to change (exit code 2)."""

    exit_code = 2


class WeightsNotFound(SstError, FileNotFoundError):
    """Weights are neither on disk nor in the cache, and cannot be downloaded."""


class ImageError(SstError, OSError):
    """An image cannot be read or written."""


class VideoError(SstError, OSError):
    """A video cannot be read, decoded or written."""


class WriteError(SstError, OSError):
    """An output file (weights, state, report) cannot be written."""


class DiskFull(WriteError):
    """An output's file system ran out of space (or quota) earlier in the batch: the file was not computed."""


class OutputExists(SstError, FileExistsError):
    """Writing would overwrite a file the user did not ask to overwrite."""


class OutputIsInput(OutputExists):
    """An output would replace one of the run's own inputs: refused even with ``--overwrite``."""


class OutOfMemory(SstError, MemoryError):
    """Even the smallest pass the network allows does not fit in the device's memory."""


class NonFiniteOutput(SstError, ArithmeticError):
    """The network produced NaN or Inf (usually reduced precision overflowing)."""


class TrainingDiverged(SstError, ArithmeticError):
    """A training loss became NaN or infinite: the run failed (exit 1), which no option was wrong to ask for."""


class Terminated(KeyboardInterrupt):
    """SIGTERM / SIGHUP, turned into an interrupt so that the work stops the way Ctrl-C stops it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum
        self.exit_code = 128 + signum  # what a shell reports for a process killed by that signal


def first_line(text: str, limit: int = 300) -> str:
    """The first non-blank line of a message, stripped and cut to ``limit``: compilers' and PyTorch's errors run
    to pages, and a user's message has room for one line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:limit] if lines else ""


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, or the type alone for an exception without a message."""
    line = first_line(str(exc))
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def system_reason(exc: OSError) -> str:
    """``permission denied``: the system's reason for an OSError, worded as sst-cli's messages are (lower case; a
    missing path is "no such file or folder")."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "no such file or folder"
    reason = exc.strerror or str(exc) or type(exc).__name__
    return reason[:1].lower() + reason[1:]
