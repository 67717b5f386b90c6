"""The one place that prints: consoles, the error map, and options shared by several commands."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from ..archs.attention import BACKENDS
from ..errors import SstError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])

# Options that several commands take, declared once so that their names and help stay the same.
WeightsOption = Annotated[
    str | None, typer.Option("--weights", help="Weights file or hf://OWNER/REPO/PATH[@REV] instead of the zoo's.")
]
ConfigOption = Annotated[
    str | None, typer.Option("--config", help="JSON file of SST constructor keywords for --weights.")
]
HubRepoOption = Annotated[
    str | None,
    typer.Option("--hub-repo", help="Hugging Face repo OWNER/REPO for zoo weights (overrides the manifest)."),
]
DeviceOption = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
PrecisionOption = Annotated[str, typer.Option("--precision", help="auto, fp32 or bf16.")]
AttentionOption = Annotated[str, typer.Option("--attention", help=f"Attention kernel: {', '.join(BACKENDS)}.")]


def debug_enabled() -> bool:
    return os.environ.get("SST_DEBUG", "") not in ("", "0")


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` to stderr and return the exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    return typer.Exit(code)


def handle_errors(command: F) -> F:
    """Turn library errors into one line and an exit code; tracebacks only with --debug."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SstError as exc:
            if debug_enabled():
                raise
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]
