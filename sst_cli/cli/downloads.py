"""The download display of the CLI: a transfer bar on stderr (one line per file when not a terminal), notes saying
where each file comes from, and nothing at all with --quiet or JSON logs. Imported by the commands that load
weights, inside them."""

from __future__ import annotations

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from .. import hub
from .output import err_console


def size_text(count: float) -> str:
    """Bytes in decimal units, as rich's DownloadColumn shows them."""
    for unit in ("B", "kB", "MB"):
        if count < 1000:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


class DownloadDisplay(hub.Display):
    """A transfer bar on a terminal, one line per file otherwise; notes say where files come from."""

    def __init__(self, *, bar: bool = True) -> None:
        self.bar = bar  # False while another live display runs (rich allows one at a time)
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def note(self, text: str) -> None:
        err_console.print(text, markup=False, soft_wrap=True, highlight=False)

    def start(self, label: str, total: int | None) -> None:
        self.stop()
        if not (self.bar and err_console.is_terminal):
            size = f" ({size_text(total)})" if total else ""
            err_console.print(f"downloading {label}{size}", markup=False, soft_wrap=True, highlight=False)
            return
        columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn())  # fmt: skip
        self.progress = Progress(*columns, console=err_console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task(label, total=total)

    def advance(self, count: int) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task, count)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress, self.task = None, None


def download_display(*, quiet: bool = False, json_log: bool = False, bar: bool = True) -> hub.Display:
    """Silent with --quiet or in the JSON log mode (stdout must stay pure JSON), else ``DownloadDisplay``."""
    return hub.Display() if quiet or json_log else DownloadDisplay(bar=bar)
