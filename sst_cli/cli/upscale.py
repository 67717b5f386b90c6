"""``sst upscale``: declare the options, build the library's options objects, one library call, report."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

from ..errors import ConfigError
from ..phases import Phases, process_seconds
from ..zoo import check_model_choice
from ._options import (
    SCALE_HELP,
    AttentionOption,
    BatchOption,
    ConfigOption,
    ExactOption,
    HubRepoOption,
    IgLambdaOption,
    MaxMemoryOption,
    ModelOption,
    OverwriteOption,
    PrecisionOption,
    SeedOption,
    TileOverlapOption,
    WeightsOption,
    check_upscale_options,
    refuse_stdio,
    upscale_options,
)
from .output import (
    as_markup,
    console,
    count_progress,
    debug_enabled,
    err_console,
    fail,
    handle_errors,
    json_event,
    visible,
)
from .video_options import CodecOption, CrfOption, FramesPerPassOption, LosslessOption, PixFmtOption

if TYPE_CHECKING:
    from ..batch import BatchResult, FileResult, Job
    from ..inputs import NothingToUpscale
    from ..upscaler import Upscaler

_DEFAULT_MAX_PIXELS = 178_956_970  # image_io.DEFAULT_MAX_PIXELS, here so that --help needs no import of it


def show(path: Path | None) -> str:
    """A path relative to the working folder when it lies below it, else as given; control characters and
    line breaks written out, so that one file is one line."""
    if path is None:
        return "-"
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        relative = ".."
    return visible(relative if not relative.startswith("..") else str(path)).replace("\n", "\\n")


class Reporter:
    """All printing of one run: rich progress and tables on the terminal, or JSON lines on stdout."""

    def __init__(self, *, quiet: bool, json_log: bool) -> None:
        self.quiet, self.json_log = quiet, json_log
        self.out: Console = err_console if json_log else console  # keep stdout pure JSON with --json-log
        self.progress: Progress | None = None
        self.files_task: TaskID | None = None
        self.tiles_task: TaskID | None = None
        self.phases = Phases()  # the command's own phases (start-up, imports); the upscaler keeps the rest
        self.upscaler: Upscaler | None = None
        self.indices: dict[str, int] = {}  # input -> its 1-based index in file_start, for an interrupted file

    def emit(self, event: str, **fields: Any) -> None:
        json_event(event, **fields)

    def note(self, text: str) -> None:
        """A one-line remark for the user (stderr), or a message event."""
        if self.json_log:
            self.emit("message", message=text)
        elif not self.quiet:
            err_console.print(text, soft_wrap=True, markup=False)

    def message(self, text: str) -> None:
        """Upscaler messages (out-of-memory retries, transparency dropped) are warnings the user should see, with
        --quiet too: it hides progress and remarks, not what went otherwise than asked."""
        if self.json_log:
            self.emit("message", message=text)
        else:
            err_console.print(f"[yellow]warning:[/] {text}", soft_wrap=True)

    def ready(self, upscaler: Upscaler, total: int, verbose: bool) -> None:
        """The model is loaded: say which attention kernel runs (fallbacks always, the line with -v), then
        show an overall files bar plus a per-file tiles bar with ETA, on a terminal only."""
        self.upscaler = upscaler
        report = upscaler.attention
        if report is not None:
            for notice in report.notices:
                self.note(notice)
            if verbose:
                self.note(report.line)
        if self.quiet or self.json_log or not err_console.is_terminal:
            return
        self.progress = count_progress(redirect_stdout=False, redirect_stderr=False)
        self.progress.start()
        self.files_task = self.progress.add_task("files", total=total)
        self.tiles_task = self.progress.add_task("tiles", total=None)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def file_start(self, job: Job, index: int, total: int) -> None:
        self.indices[str(job.source)] = index + 1
        if self.json_log:
            self.emit("file_start", index=index + 1, total=total, input=str(job.source))
        if self.progress is not None and self.tiles_task is not None:
            self.progress.update(
                self.tiles_task, description=f"  {as_markup(show(Path(job.source.name)))}", completed=0, total=None
            )

    def file_interrupted(self, job: Job, total: int) -> None:
        """The file running at an interrupt ends with a file_done of the same keys as every other: readers index
        by them. Nothing was written, so no output."""
        if self.json_log:
            fields = dict.fromkeys(("output", "reason", "error", "megapixels", "seconds", "tile"))
            fields.update(input=str(job.source), status="interrupted")
            self.emit("file_done", index=self.indices.get(str(job.source)), total=total, **fields)

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
                line = f"{where} skipped {show(record.source)}: {record.reason}"
            else:
                line = f"{where} failed {show(record.source)}: {record.reason}"
            err_console.print(line, soft_wrap=True, markup=False)
        if debug_enabled() and record.traceback is not None:
            err_console.print(record.traceback, markup=False, highlight=False)
        if self.progress is not None and self.files_task is not None:
            self.progress.advance(self.files_task)

    def timings(self) -> tuple[Phases, float] | None:
        """Where the command's time went, with the total, when this process did the upscaling (not workers)."""
        upscaler = self.upscaler
        if upscaler is None or not any(name.startswith("network") for name in upscaler.phases.seconds):
            return None
        return self.phases.merged(upscaler.phases), process_seconds()

    def summary(self, result: BatchResult, *, interrupted: bool, exit_code: int, verbose: bool = False) -> None:
        """Totals table and the failures (with ``verbose``, where the time went); or one summary JSON object."""
        timings = self.timings()
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
                skipped_files=[
                    {"input": str(r.source), "reason": r.reason} for r in result.files if r.status == "skipped"
                ],
                timings=None
                if timings is None
                else {
                    "seconds": {name: round(value, 3) for name, value in timings[0].seconds.items()},
                    "total": round(timings[1], 3),
                },
            )
            return
        if verbose and timings is not None and not self.quiet:
            err_console.print(f"time: {timings[0].line(timings[1])}", soft_wrap=True, markup=False)
        if not self.quiet:
            table = Table(title="sst upscale")
            for column in ("done", "skipped", "failed", "time", "input MP/s"):  # MP/s of the images read
                table.add_column(column, justify="right")
            table.add_row(
                str(result.done),
                str(result.skipped),
                str(result.failed),
                f"{result.seconds:.1f} s",
                f"{result.megapixels_per_second:.3g}",  # 3 figures: small images on a CPU are ~0.001
            )
            self.out.print(table)
        skipped = [r for r in result.files if r.status == "skipped"]
        if skipped and not self.quiet:
            err_console.print(f"{len(skipped)} skipped:")
            for record in skipped[:10]:
                err_console.print(f"  {show(record.source)}: {record.reason}", soft_wrap=True, markup=False)
            if len(skipped) > 10:
                err_console.print(f"  ... and {len(skipped) - 10} more (--json-log lists them all)")
        if result.failures and (self.quiet or len(result.files) > 1):  # else the file's own line said it
            err_console.print(f"[bold red]{result.failed} failed:[/]")
            for record in result.failures:
                err_console.print(f"  {show(record.source)}: {record.reason}", soft_wrap=True, markup=False)
        if any(r.error_type == "OutputExists" for r in result.failures):
            err_console.print("existing outputs were kept: add --overwrite to replace them or --skip-existing")


def _nothing_to_do(reporter: Reporter, nothing: NothingToUpscale) -> typer.Exit:
    """Folders holding nothing to upscale: every file was skipped (or there was none), so the run succeeded
    (exit 0); the note says why nothing was done, and each skipped file is reported and listed in the summary as
    in any batch (the note names a few)."""
    from ..filerun import BatchResult, FileResult

    reporter.note(str(nothing))
    result = BatchResult([FileResult(job.source, None, "skipped", job.skip) for job in nothing.skipped])
    for index, record in enumerate(result.files):
        reporter.file_done(record, index, len(result.files))
    reporter.summary(result, interrupted=False, exit_code=0)
    return typer.Exit(0)


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
    inputs: Annotated[list[str], typer.Argument(metavar="INPUT", help="Images or videos, folders, quoted globs.")],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="Output file (one input file: an image or video extension) or folder. Default: beside each input "
            "file; for a folder input, a sibling folder named <folder>_sst.",
        ),
    ] = None,
    model: ModelOption = None,
    weights: WeightsOption = None,
    config: ConfigOption = None,
    scale: Annotated[int | None, typer.Option("--scale", "-s", metavar="N", help=SCALE_HELP)] = (None),
    hub_repo: HubRepoOption = None,
    recursive: Annotated[bool, typer.Option("--recursive", "-r", help="Search folder inputs' sub-folders too.")] = (
        False
    ),
    include_outputs: Annotated[
        bool,
        typer.Option("--include-outputs", help="Also upscale files in folders that are named like sst-cli outputs."),
    ] = False,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            metavar="TEMPLATE",
            help="Output name template; fields {stem} {suffix} (input extension) {model} {scale} {outscale} {ext}. "
            "Default {stem}_{model}_x{scale}.{ext} ({outscale} instead of {scale} with --outscale).",
        ),
    ] = None,
    format: Annotated[
        str | None,
        typer.Option(
            "--format", "-f", metavar="EXT", help="png, jpg, webp or tiff (default: as the input when it fits)."
        ),
    ] = None,
    quality: Annotated[
        int | None, typer.Option("--quality", metavar="1-100", help="JPEG/WebP quality, 1-100 (default 95).")
    ] = None,
    overwrite: OverwriteOption = False,
    skip_existing: Annotated[
        bool, typer.Option("--skip-existing", help="Leave existing outputs alone (resume a batch).")
    ] = False,
    device: Annotated[
        str,
        typer.Option(
            "--device",
            metavar="DEVICE",
            help="auto, cpu, cuda, cuda:N or mps; a GPU list (cuda:0,cuda:1 or cuda:all): one worker process per GPU.",
        ),
    ] = "auto",
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            metavar="N",
            help="Worker processes on the device, each loading the model (CPU: sharing the cores).",
        ),
    ] = 1,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Compute on Ray actors (pip install 'ray>=2.9'): local (a Ray on this machine), auto (the "
            "running cluster) or ray://HEAD:10001. Paths must be ones every node sees.",
        ),
    ] = None,
    precision: PrecisionOption = "auto",
    attention: AttentionOption = "auto",
    tile: Annotated[
        str, typer.Option("--tile", metavar="auto|0|PX", help="auto, 0 (whole image) or tile side in input pixels.")
    ] = "auto",
    tile_overlap: TileOverlapOption = None,
    exact: ExactOption = False,
    batch: BatchOption = 1,
    max_memory: MaxMemoryOption = None,
    alpha: Annotated[
        str,
        typer.Option(
            "--alpha", metavar="model|resize", help="Transparency: model (through the network) or resize (bicubic)."
        ),
    ] = "model",
    outscale: Annotated[
        float | None,
        typer.Option("--outscale", metavar="X", help="Final scale: native model output resized with antialiasing."),
    ] = None,
    ig_lambda: IgLambdaOption = None,
    seed: SeedOption = None,
    compile: Annotated[
        str,
        typer.Option(
            "--compile",
            metavar="MODE",
            help="torch.compile the network (cached on disk; eager if it fails): on, off, or auto (on CUDA for "
            "batches of 50+ megapixels).",
        ),
    ] = "auto",
    max_pixels: Annotated[
        int, typer.Option("--max-pixels", metavar="N", help="Refuse larger inputs (decompression bombs); 0 = no limit.")
    ] = _DEFAULT_MAX_PIXELS,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="No progress, per-file lines, notes or summary (warnings and errors still show)."
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Also say which attention kernel runs, in what precision, and where the time went."
        ),
    ] = False,
    json_log: Annotated[
        bool, typer.Option("--json-log", help="One JSON object per line on stdout per file and a final summary.")
    ] = False,
    codec: CodecOption = None,
    crf: CrfOption = None,
    pix_fmt: PixFmtOption = None,
    lossless: LosslessOption = False,
    frames_per_pass: FramesPerPassOption = None,
) -> None:
    """Upscale images or videos, files or whole folders, with one model loaded once for the batch.

    Exit status: 0 when every file was written or skipped (folders with nothing to upscale too), 1 when any
    failed, 2 for invalid options or inputs (none of them exists; folders whose images lie in sub-folders,
    without --recursive),
    130 when interrupted (Ctrl-C), 143 on SIGTERM, 129 on SIGHUP (rerun with --skip-existing to resume; a run
    with --overwrite, with --overwrite again).
    """
    from ..checks import check_devices
    from ..inputs import NothingToUpscale, check_inputs_exist
    from ..naming import WriteOptions, check_existing_policy, resume_hint
    from ..video_io import VideoOptions

    # What can be refused without torch is refused before importing it, so that such an answer comes at once.
    refuse_stdio({"INPUT": inputs, "-o": output, "--weights": weights, "--config": config})
    running: dict[str, Any] = dict(
        precision=precision, attention=attention, tile=tile, tile_overlap=tile_overlap, exact=exact, batch=batch,
        max_memory=max_memory, alpha=alpha, outscale=outscale, ig_lambda=ig_lambda, seed=seed,
        compile=compile.strip().lower(),
    )  # fmt: skip
    check_devices(device, workers)
    check_upscale_options(**running)
    check_existing_policy(overwrite, skip_existing, cli=True)
    writing = WriteOptions(
        format=format,
        quality=quality,
        overwrite=overwrite,
        skip_existing=skip_existing,
        name=name,
        max_pixels=max_pixels,
    )
    video_options = VideoOptions(codec, crf, pix_fmt, lossless, frames_per_pass)
    check_model_choice(model, scale, weights, config, hub_repo, cli=True)
    check_inputs_exist(inputs)
    reporter = Reporter(quiet=quiet, json_log=json_log)
    reporter.phases.add("start-up", process_seconds())  # Python and sst-cli's light imports

    with reporter.phases.timed("imports"):  # torch and the engine
        from .. import hub
        from ..batch import BatchEvents, BatchInterrupted, upscale_files
        from ..loader import ModelSpec
        from ..parallel import plan_workers
        from .downloads import download_display
        from .upscale_video import split_videos, upscale_videos

    spec = ModelSpec(model, scale, weights, config, hub_repo, cli=True)
    worker_plan = plan_workers(device, workers)
    options = upscale_options(device=worker_plan.devices[0], **running)
    parallel = ray is not None or worker_plan.parallel
    try:
        videos, images = split_videos(
            inputs, spec, recursive, include_outputs, parallel=parallel, note=reporter.note, name=name, output=output,
            outscale=options.outscale,
        )  # sst-cli[video]  # fmt: skip
    except NothingToUpscale as nothing:
        raise _nothing_to_do(reporter, nothing) from None
    events = BatchEvents(
        note=reporter.note,
        warning=reporter.message,
        ready=lambda upscaler, total: reporter.ready(upscaler, total, verbose),
        file_start=reporter.file_start,
        tile=reporter.tile,
        file_done=reporter.file_done,
    )
    if ray is not None and worker_plan.parallel:
        raise ConfigError("--ray runs its own workers: leave out --workers and device lists")
    if not videos and video_options != VideoOptions():
        reporter.note("--codec, --crf, --pix-fmt, --lossless and --frames-per-pass apply to videos; no input is one")
    if videos and not images and (format is not None or quality is not None):
        reporter.note("--format and --quality apply to images; every input is a video (--codec and --crf encode it)")
    try:
        with hub.show_downloads(download_display(quiet=quiet, json_log=json_log)):
            if videos:
                result = upscale_videos(
                    videos, images, output, spec=spec, options=options, writing=writing, video=video_options,
                    recursive=recursive, include_outputs=include_outputs, events=events, reporter=reporter,
                    stop_bars=reporter.stop,
                )  # fmt: skip
            elif ray is not None:
                from ..cluster import RayOptions, upscale_files_ray

                result = upscale_files_ray(
                    images,  # as upscale_files below
                    output,
                    model=spec,
                    options=options,
                    writing=writing,
                    ray_options=RayOptions(address=None if ray.strip().lower() == "local" else ray),
                    recursive=recursive,
                    include_outputs=include_outputs,
                    events=events,
                    inputs_checked=True,
                )
            else:
                result = upscale_files(
                    images,  # the folders split_videos found empty are said once: not walked again
                    output,
                    model=spec,
                    options=options,
                    writing=writing,
                    recursive=recursive,
                    include_outputs=include_outputs,
                    events=events,
                    workers=worker_plan,
                    inputs_checked=True,  # split from the inputs checked above: one missing among them is a failure
                )
    except NothingToUpscale as nothing:
        reporter.stop()
        raise _nothing_to_do(reporter, nothing) from None
    except BatchInterrupted as stop:
        reporter.stop()
        if stop.current is not None:  # its file_start had no end: a reader would wait for it
            reporter.file_interrupted(stop.current, stop.total)
        reporter.summary(stop.result, interrupted=True, exit_code=stop.exit_code)
        where = f" while upscaling {show(stop.current.source)}" if stop.current else ""
        done = len(stop.result.files)
        how = "interrupted" if stop.exit_code == 130 else f"stopped by signal {stop.exit_code - 128}"
        message = f"{how}{where} after {done} of {stop.total} files; {resume_hint(overwrite)}"
        if json_log:  # the last event, as for an interrupt before the batch began
            json_event("error", message=message, exit_code=stop.exit_code, interrupted=True)
        raise fail(message, stop.exit_code) from None
    finally:
        reporter.stop()
    code = 1 if result.failed else 0
    reporter.summary(result, interrupted=False, exit_code=code, verbose=verbose)
    if code:
        raise typer.Exit(code)
