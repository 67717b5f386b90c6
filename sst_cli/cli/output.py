"""The one place that prints: consoles and the error map (tracebacks only with ``sst --debug``)."""

from __future__ import annotations

import functools
import os
import re
import sys
import traceback
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console, ConsoleDimensions

from ..errors import SstError, system_reason
from ..files import json_text
from ..signals import stop_on_signals

if TYPE_CHECKING:
    from rich.progress import Progress


class _Guarded:
    """Standard output or error as the current ``sys`` stream (test runners swap it), which a full disk or a
    closed pipe cannot turn into a traceback: the first failure is kept (``handle_errors`` says it once, on
    stderr), what follows is dropped, and the stream is pointed at the null device so that Python's own flush
    at exit does not fail again. Everything else (isatty, fileno, encoding) is the stream's own."""

    def __init__(self, name: str) -> None:
        self._name = name
        self.failure: OSError | None = None

    def __getattr__(self, attribute: str) -> Any:
        stream = getattr(sys, self._name)
        if stream is None:  # closed at start (``>&-``, pythonw): Python sets it to None
            raise AttributeError(attribute)
        return getattr(stream, attribute)

    def write(self, text: str) -> int:
        self._guard(lambda stream: stream.write(text))
        return len(text)

    def flush(self) -> None:
        self._guard(lambda stream: stream.flush())

    def _guard(self, action: Callable[[Any], object]) -> None:
        stream = getattr(sys, self._name)
        if self.failure is not None or stream is None:
            return
        try:
            action(stream)
        except (OSError, ValueError) as exc:  # ValueError: a stream closed meanwhile
            self.failure = exc if isinstance(exc, OSError) else OSError(str(exc))
            with suppress(Exception):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, stream.fileno())
                os.close(null)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with control characters written out (``\\x1b``): a file name must not send escape sequences
    to the terminal (colours, a cleared screen, a moved cursor) nor a carriage return over its own line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


_FILE_WIDTH = 200  # columns a table may take in a pipe or a file, where nothing wraps it


class _Console(Console):
    """A console whose printed strings are made ``visible``: whatever reaches a message (paths, reasons from
    other libraries) is shown, never obeyed. Rich's own styling is added after this, when rendering. Text sent
    to a pipe or a file is not wrapped at 80 columns (``sst models info X | grep weights`` found half a line),
    nor are tables cut there (``size``)."""

    def print(self, *objects: Any, **options: Any) -> None:
        if not self.is_terminal and all(isinstance(o, str) for o in objects):
            options.setdefault("soft_wrap", True)
        super().print(*(visible(o) if isinstance(o, str) else o for o in objects), **options)

    @property
    def size(self) -> ConsoleDimensions:
        """A terminal's size; elsewhere at least ``_FILE_WIDTH`` columns, so that a table's cells stay whole (two
        models' names were both "experimen…" in a log)."""
        size = super().size
        return size if self.is_terminal else ConsoleDimensions(max(size.width, _FILE_WIDTH), size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


_stdout, _stderr = _Guarded("stdout"), _Guarded("stderr")
console = _Console(file=_stdout, highlight=False)  # type: ignore[arg-type]
err_console = _Console(file=_stderr, highlight=False)  # type: ignore[arg-type]

F = TypeVar("F", bound=Callable[..., Any])


class _Debug:
    """Set by the root command's --debug: library errors then show their traceback."""

    enabled = False


def set_debug(enabled: bool) -> None:
    _Debug.enabled = enabled


def debug_enabled() -> bool:
    return _Debug.enabled


def count_progress(*, disable: bool = False, **options: Any) -> Progress:
    """A transient bar on stderr counting items: description, bar, done/total, time left; on a terminal only
    (stopping it elsewhere left an empty line in logs)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    shown = err_console.is_terminal and not disable
    target = err_console if shown else Console(quiet=True)  # rich 13.0 wrote a newline for a disabled bar
    return Progress(*columns, console=target, transient=True, disable=not shown, **options)


_errors_said: list[str] = []  # the error events written by this process


def json_event(event: str, **fields: Any) -> None:
    """One ``--json-log`` line on stdout: a JSON object whose ``event`` names what happened."""
    if event == "error":
        _errors_said.append(str(fields.get("message")))
    print(json_text({"event": event, **fields}), file=_stdout, flush=True)


def say_refused_command_line(argv: list[str], exit_code: object) -> None:
    """The ``error`` event of a command line Click refused before any command ran (``--scale abc``, an unknown
    option): the README promises one for every error that stops a run. Click has written its message to stderr."""
    if exit_code == 2 and "--json-log" in argv and not _errors_said:
        json_event("error", message="the command line was refused: its message is on standard error", exit_code=2)


def note(text: str) -> None:
    """``note: text`` on stderr: something the user should know that does not stop the command."""
    err_console.print(f"[yellow]note:[/] {as_markup(text)}", soft_wrap=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` to stderr and return the exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True, markup=True, highlight=False)
    return typer.Exit(code)


def system_error_text(exc: OSError) -> str:
    """``cannot use 'photos/x': permission denied``: an OSError as one line naming its file."""
    where = f"cannot use '{exc.filename}': " if exc.filename is not None else ""
    return where + system_reason(exc)


def handle_errors(command: F) -> F:
    """Turn library errors into one line and an exit code; tracebacks too with --debug. A command run with
    ``--json-log`` also gets the error as a JSON event on stdout, so that a program reading it learns why."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _stdout.failure = _stderr.failure = None  # a command of its own (tests run many in one process)
        try:
            with stop_on_signals():
                return command(*args, **kwargs)
        except SstError as exc:
            if debug_enabled():  # the traceback as well, not instead: the exit code and JSON event stay
                err_console.print(traceback.format_exc().rstrip(), markup=False, highlight=False, soft_wrap=True)
            if kwargs.get("json_log"):
                json_event("error", message=str(exc), exit_code=exc.exit_code)
            raise fail(as_markup(str(exc)), exc.exit_code) from None
        except OSError as exc:  # the system's refusal where no check of ours foresaw it: one line, not a traceback
            if debug_enabled():
                err_console.print(traceback.format_exc().rstrip(), markup=False, highlight=False, soft_wrap=True)
            message = system_error_text(exc)
            if kwargs.get("json_log"):
                json_event("error", message=message, exit_code=1)
            raise fail(as_markup(message)) from None
        except KeyboardInterrupt as exc:  # before a command's own handling (a batch's summary) begins
            code = getattr(exc, "exit_code", 130)
            message = "interrupted" if code == 130 else f"stopped by signal {code - 128}"
            if kwargs.get("json_log"):
                json_event("error", message=message, exit_code=code, interrupted=True)
            raise fail(message, code) from None
        finally:
            if _stdout.failure is not None and not isinstance(_stdout.failure, BrokenPipeError):  # `| head`: as asked
                reason = system_reason(_stdout.failure)
                err_console.print(
                    f"[yellow]warning:[/] could not write to standard output ({as_markup(reason)}): what it shows is "
                    "cut short",
                    soft_wrap=True,
                )

    return wrapper  # type: ignore[return-value]


def as_markup(text: str) -> str:
    """Plain text (a library message, a file name) placed in rich markup: brackets in paths must not be read
    as styles, control characters are written out."""
    from rich.markup import escape

    return escape(visible(text))
