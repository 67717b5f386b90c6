"""``sst upscale``: validate options, load the model once, run the batch API, report progress and a summary."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..archs.attention import BACKENDS, KERNEL_LINE_PREFIX, NOTICE_PREFIX
from ..batch import (
    BatchInterrupted,
    BatchResult,
    FileResult,
    Job,
    discover_inputs,
    plan_output,
    run_batch,
)
from ..errors import ConfigError
from ..image_io import DEFAULT_MAX_PIXELS, is_image_file, normalise_format
from ..upscaler import ALPHA_MODES, DEFAULT_MODEL, DEFAULT_SCALE, PRECISIONS, Upscaler, resolve_device
from ..zoo import check_scale, get_variant
from .output import (
    AttentionOption,
    ConfigOption,
    DeviceOption,
    HubRepoOption,
    PrecisionOption,
    WeightsOption,
    console,
    err_console,
    fail,
    handle_errors,
)

_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_RESUME_HINT = "rerun the same command with --skip-existing to resume"


def parse_size(text: str) -> int:
    """'4G', '512M', '1.5GiB', '1000000' -> bytes (binary units); ValueError otherwise."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(text)
    size = int(float(match[1]) * _UNITS[match[2].lower()])
    if size <= 0:
        raise ValueError(text)
    return size


def parse_tile(text: str) -> int | Literal["auto"]:
    """'auto', 0 (whole image) or a positive tile side in pixels."""
    if text.strip().lower() == "auto":
        return "auto"
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def model_label(model: str | None, weights: str | None) -> str:
    """Name used for ``{model}`` in output names: the weights file's stem when weights are given."""
    if weights is None:
        return (model or DEFAULT_MODEL).strip().lower()
    return Path(weights.split("@", 1)[0]).stem or model or DEFAULT_MODEL


def show(path: Path | None) -> str:
    """A path relative to the working folder when it lies below it, else as given."""
    if path is None:
        return "-"
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return relative if not relative.startswith("..") else str(path)


def _validate(
    *,
    overwrite: bool,
    skip_existing: bool,
    quality: int,
    format: str | None,
    tile: str,
    tile_overlap: int | None,
    batch: int,
    max_memory: str | None,
    alpha: str,
    outscale: float | None,
    max_pixels: int,
    precision: str,
    attention: str,
    scale: int | None,
    weights: str | None,
    config: str | None,
    model: str | None,
) -> tuple[int | Literal["auto"], int | None]:
    """Check every option before anything is loaded; return the parsed tile and memory budget."""
    if overwrite and skip_existing:
        raise fail("--overwrite and --skip-existing exclude each other: replace existing outputs, or keep them", 2)
    if not 1 <= quality <= 100:
        raise fail(f"--quality must be between 1 and 100, got {quality}", 2)
    if format is not None:
        try:
            normalise_format(format)
        except ConfigError:
            raise fail(f"unknown --format {format!r}; choose png, jpg, webp or tiff", 2) from None
    try:
        parsed_tile = parse_tile(tile)
    except ValueError:
        raise fail(f"--tile must be auto, 0 (whole image) or a tile size in pixels, got {tile!r}", 2) from None
    if tile_overlap is not None and tile_overlap < 0:
        raise fail(f"--tile-overlap must be 0 or more, got {tile_overlap}", 2)
    if batch < 1:
        raise fail(f"--batch must be at least 1, got {batch}", 2)
    memory = None
    if max_memory is not None:
        try:
            memory = parse_size(max_memory)
        except ValueError:
            raise fail(f"--max-memory must be a size such as 4G or 512M, got {max_memory!r}", 2) from None
    if alpha not in ALPHA_MODES:
        raise fail(f"unknown --alpha {alpha!r}; choose one of {', '.join(ALPHA_MODES)}", 2)
    if outscale is not None and not (math.isfinite(outscale) and outscale > 0):
        raise fail(f"--outscale must be a positive number, got {outscale}", 2)
    if max_pixels < 0:
        raise fail(f"--max-pixels must be 0 (no limit) or a pixel count, got {max_pixels}", 2)
    if precision not in PRECISIONS:
        raise fail(f"unknown --precision {precision!r}; choose one of {', '.join(PRECISIONS)}", 2)
    if attention not in BACKENDS:
        raise fail(f"unknown --attention {attention!r}; choose one of {', '.join(BACKENDS)}", 2)
    if config is not None and weights is None:
        raise fail("--config describes an architecture; give the weights to load into it with --weights", 2)
    if scale is not None and scale < 1:
        raise fail(f"--scale must be a positive integer, got {scale}", 2)
    if config is None and model is not None:
        get_variant(model)  # ConfigError (exit 2) naming the zoo models
        if scale is not None:
            check_scale(scale)
    return parsed_tile, memory


class Reporter:
    """All printing of one run: rich progress and tables on the terminal, or JSON lines on stdout."""

    def __init__(self, *, quiet: bool, json_log: bool, debug: bool) -> None:
        self.quiet, self.json_log, self.debug = quiet, json_log, debug
        self.out: Console = err_console if json_log else console  # keep stdout pure JSON with --json-log
        self.progress: Progress | None = None
        self.files_task: TaskID | None = None
        self.tiles_task: TaskID | None = None

    def emit(self, event: str, **fields: Any) -> None:
        print(json.dumps({"event": event, **fields}), flush=True)

    def note(self, text: str) -> None:
        """A one-line remark for the user (stderr), or a message event."""
        if self.json_log:
            self.emit("message", message=text)
        elif not self.quiet:
            err_console.print(text, soft_wrap=True, markup=False)

    def message(self, text: str) -> None:
        """Upscaler messages (out-of-memory retries) are warnings the user should see."""
        if self.json_log:
            self.emit("message", message=text)
        elif not self.quiet:
            err_console.print(f"[yellow]warning:[/] {text}", soft_wrap=True)

    @contextmanager
    def running(self, total: int) -> Iterator[None]:
        """Overall files bar plus a per-file tiles bar with ETA, on a terminal only."""
        if self.quiet or not err_console.is_terminal:
            yield
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(
            *columns, console=err_console, transient=True, redirect_stdout=False, redirect_stderr=False
        ) as progress:
            self.progress = progress
            self.files_task = progress.add_task("files", total=total)
            self.tiles_task = progress.add_task("tiles", total=None)
            try:
                yield
            finally:
                self.progress = None

    def file_start(self, job: Job, index: int, total: int) -> None:
        if self.json_log:
            self.emit("file_start", index=index + 1, total=total, input=str(job.source))
        if self.progress is not None and self.tiles_task is not None:
            self.progress.update(self.tiles_task, description=f"  {job.source.name}", completed=0, total=None)

    def tile(self, done: int, total: int) -> None:
        if self.progress is not None and self.tiles_task is not None:
            self.progress.update(self.tiles_task, completed=done, total=total)

    def file_done(self, record: FileResult, index: int, total: int) -> None:
        if self.json_log:
            self.emit("file_done", index=index + 1, total=total, **_record_fields(record))
        elif not self.quiet:
            where = f"[{index + 1}/{total}]"
            if record.status == "done":
                line = f"{where} {show(record.source)} -> {show(record.output)} ({record.seconds:.1f} s)"
            elif record.status == "skipped":
                line = f"{where} skipped {show(record.source)}: {show(record.output)} exists"
            else:
                line = f"{where} failed {show(record.source)}: {record.reason}"
            err_console.print(line, soft_wrap=True, markup=False)
        if self.debug and record.traceback is not None:
            err_console.print(record.traceback, markup=False, highlight=False)
        if self.progress is not None and self.files_task is not None:
            self.progress.advance(self.files_task)

    def summary(self, result: BatchResult, *, interrupted: bool, exit_code: int) -> None:
        """Totals table and the failures; or one summary JSON object."""
        if self.json_log:
            self.emit(
                "summary",
                done=result.done,
                skipped=result.skipped,
                failed=result.failed,
                seconds=round(result.seconds, 3),
                megapixels=round(result.megapixels, 4),
                megapixels_per_second=round(result.megapixels_per_second, 4),
                interrupted=interrupted,
                exit_code=exit_code,
                failures=[{"input": str(r.source), "reason": r.reason} for r in result.failures],
            )
            return
        if not self.quiet:
            table = Table(title="sst upscale")
            for column in ("done", "skipped", "failed", "time", "megapixels/s"):
                table.add_column(column, justify="right")
            table.add_row(
                str(result.done),
                str(result.skipped),
                str(result.failed),
                f"{result.seconds:.1f} s",
                f"{result.megapixels_per_second:.3f}",
            )
            self.out.print(table)
        if result.failures:
            err_console.print(f"[bold red]{result.failed} failed:[/]")
            for record in result.failures:
                err_console.print(f"  {show(record.source)}: {record.reason}", soft_wrap=True, markup=False)
            if any("already exists" in (r.reason or "") for r in result.failures):
                err_console.print("existing outputs were kept: add --overwrite to replace them or --skip-existing")


def upscaler_messages(reporter: Reporter, verbose: bool) -> Callable[[str], None]:
    """Route the Upscaler's messages: the kernel line only with -v, fallback notices always, the rest as warnings."""

    def on_message(text: str) -> None:
        if text.startswith(KERNEL_LINE_PREFIX):
            if verbose:
                reporter.note(text)
        elif text.startswith(NOTICE_PREFIX):
            reporter.note(text)
        else:
            reporter.message(text)

    return on_message


def _record_fields(record: FileResult) -> dict[str, Any]:
    return {
        "input": str(record.source),
        "output": None if record.output is None else str(record.output),
        "status": record.status,
        "reason": record.reason,
        "error": record.error_type,
        "megapixels": round(record.megapixels, 4),
        "seconds": round(record.seconds, 3),
        "tile": record.tile,
    }


@handle_errors
def upscale(
    inputs: Annotated[list[str], typer.Argument(metavar="INPUT", help="Image files, folders or quoted globs.")],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Output file (one input file, image extension) or folder. Default: beside each input file; "
            "for a folder input, a sibling folder named <folder>_sst.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help=f"Zoo model name (sst-light, sst, sst-l, ...); default {DEFAULT_MODEL}. With --weights: "
            "the architecture to load them into.",
        ),
    ] = None,
    weights: WeightsOption = None,
    config: ConfigOption = None,
    scale: Annotated[int | None, typer.Option("--scale", "-s", help=f"Upscaling factor (default {DEFAULT_SCALE}).")] = (
        None
    ),
    hub_repo: HubRepoOption = None,
    recursive: Annotated[bool, typer.Option("--recursive", "-r", help="Search folder inputs' sub-folders too.")] = (
        False
    ),
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="Output name template; fields {stem} {model} {scale} {outscale} {ext}. "
            "Default {stem}_{model}_x{scale}.{ext} ({outscale} instead of {scale} with --outscale).",
        ),
    ] = None,
    format: Annotated[
        str | None, typer.Option("--format", "-f", help="png, jpg, webp or tiff (default: as the input when it fits).")
    ] = None,
    quality: Annotated[int, typer.Option("--quality", help="JPEG/WebP quality, 1-100.")] = 95,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace existing output files.")] = False,
    skip_existing: Annotated[
        bool, typer.Option("--skip-existing", help="Leave existing outputs alone (resume a batch).")
    ] = False,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    attention: AttentionOption = "auto",
    tile: Annotated[str, typer.Option("--tile", help="auto, 0 (whole image) or tile side in pixels.")] = "auto",
    tile_overlap: Annotated[int | None, typer.Option("--tile-overlap", help="Context pixels around each tile.")] = None,
    exact: Annotated[
        bool, typer.Option("--exact", help="Overlap tiles by the full receptive field (tiling leaves no trace).")
    ] = False,
    batch: Annotated[int, typer.Option("--batch", help="Tiles per forward pass.")] = 1,
    max_memory: Annotated[
        str | None, typer.Option("--max-memory", help="Memory budget for a tile's activations, e.g. 4G or 512M.")
    ] = None,
    alpha: Annotated[
        str, typer.Option("--alpha", help="Transparency: model (through the network) or resize (bicubic).")
    ] = "model",
    outscale: Annotated[
        float | None, typer.Option("--outscale", help="Final scale: native model output resized with antialiasing.")
    ] = None,
    max_pixels: Annotated[
        int, typer.Option("--max-pixels", help="Refuse larger inputs (decompression bombs); 0 = no limit.")
    ] = DEFAULT_MAX_PIXELS,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no per-file lines.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also say which attention kernel runs, and in what precision.")
    ] = False,
    json_log: Annotated[
        bool, typer.Option("--json-log", help="One JSON object per line on stdout per file and a final summary.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Upscale images, files or whole folders, with one model loaded once for the batch.

    Exit status: 0 when every file was written or skipped, 1 when any failed, 2 for invalid options,
    130 when interrupted (rerun with --skip-existing to resume).
    """
    if debug:
        os.environ["SST_DEBUG"] = "1"  # handle_errors then re-raises with the traceback
    parsed_tile, memory = _validate(
        overwrite=overwrite,
        skip_existing=skip_existing,
        quality=quality,
        format=format,
        tile=tile,
        tile_overlap=tile_overlap,
        batch=batch,
        max_memory=max_memory,
        alpha=alpha,
        outscale=outscale,
        max_pixels=max_pixels,
        precision=precision,
        attention=attention,
        scale=scale,
        weights=weights,
        config=config,
        model=model,
    )
    resolve_device(device)  # an unusable device is a usage error, found before the inputs are read
    exclude = [Path(output)] if output is not None and not is_image_file(output) else []
    jobs = discover_inputs(inputs, recursive, exclude=exclude)
    label = model_label(model, weights)
    naming = plan_output(
        jobs, output, model=label, scale=scale or DEFAULT_SCALE, outscale=outscale, template=name, format=format
    )
    reporter = Reporter(quiet=quiet, json_log=json_log, debug=debug)
    upscaler = Upscaler(
        model,
        scale,
        weights=weights,
        config=config,
        hub_repo=hub_repo,
        device=device,
        precision=precision,
        attention=attention,
        tile=parsed_tile,
        tile_overlap=tile_overlap,
        exact=exact,
        batch=batch,
        max_memory=memory,
        alpha=alpha,
        outscale=outscale,
        on_message=upscaler_messages(reporter, verbose),
    )
    naming = replace(naming, scale=upscaler.scale)
    if outscale is not None and outscale != upscaler.scale:
        reporter.note(
            f"the model runs at its native x{upscaler.scale}; the result is then resized to x{outscale:g} "
            "with an antialiasing (bicubic) filter"
        )
    with reporter.running(len(jobs)):
        try:
            result = run_batch(
                jobs,
                upscaler,
                naming=naming,
                format=format,
                quality=quality,
                overwrite=overwrite,
                skip_existing=skip_existing,
                max_pixels=max_pixels or None,
                on_file_start=reporter.file_start,
                on_tile=reporter.tile,
                on_file_done=reporter.file_done,
            )
        except BatchInterrupted as stop:
            interrupted: BatchInterrupted | None = stop
            result = stop.result
        else:
            interrupted = None
    if interrupted is not None:
        reporter.summary(result, interrupted=True, exit_code=130)
        where = f" while upscaling {show(interrupted.current.source)}" if interrupted.current else ""
        raise fail(f"interrupted{where} after {len(result.files)} of {len(jobs)} files; {_RESUME_HINT}", 130)
    code = 1 if result.failed else 0
    reporter.summary(result, interrupted=False, exit_code=code)
    if code:
        raise typer.Exit(code)
