"""The one place that prints: consoles and the error map (tracebacks only with ``sst --debug``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console

from ..errors import SstError
from ..signals import stop_on_signals

if TYPE_CHECKING:
    from rich.progress import Progress

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])


class _Debug:
    """Set by the root command's --debug: library errors then show their traceback."""

    enabled = False


def set_debug(enabled: bool) -> None:
    _Debug.enabled = enabled


def debug_enabled() -> bool:
    return _Debug.enabled


def count_progress(*, disable: bool = False, **options: Any) -> Progress:
    """A transient bar on stderr counting items: description, bar, done/total, time left."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    return Progress(*columns, console=err_console, transient=True, disable=disable, **options)


def json_event(event: str, **fields: Any) -> None:
    """One ``--json-log`` line on stdout: a JSON object whose ``event`` names what happened."""
    print(json.dumps({"event": event, **fields}), flush=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` to stderr and return the exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True, markup=True, highlight=False)
    return typer.Exit(code)


def handle_errors(command: F) -> F:
    """Turn library errors into one line and an exit code; tracebacks only with --debug. A command run with
    ``--json-log`` also gets the error as a JSON event on stdout, so that a program reading it learns why."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with stop_on_signals():
                return command(*args, **kwargs)
        except SstError as exc:
            if debug_enabled():
                raise
            if kwargs.get("json_log"):
                json_event("error", message=str(exc), exit_code=exc.exit_code)
            raise fail(_escape(str(exc)), exc.exit_code) from None
        except KeyboardInterrupt as exc:
            code = getattr(exc, "exit_code", 130)
            raise fail("interrupted" if code == 130 else f"stopped by signal {code - 128}", code) from None

    return wrapper  # type: ignore[return-value]


def _escape(text: str) -> str:
    """Library messages are plain text: brackets in paths must not be read as rich markup."""
    from rich.markup import escape

    return escape(text)
