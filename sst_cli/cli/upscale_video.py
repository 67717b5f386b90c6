"""``sst upscale`` on video files: the video options, a frames progress bar, and the call into video_batch."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn
from rich.progress import TimeRemainingColumn as EtaColumn
from rich.text import Text

from .output import err_console
from .upscale import Reporter

if TYPE_CHECKING:
    from ..batch import BatchEvents, BatchResult, Job, WriteOptions
    from ..loader import ModelSpec
    from ..upscaler import UpscaleOptions, Upscaler
    from ..video_io import VideoOptions


class _Fps(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:.2f} frames/s")


class VideoReporter(Reporter):
    """The image reporter, counting frames (with frames/s and ETA) per clip and over all clips."""

    def __init__(self, *, quiet: bool, json_log: bool) -> None:
        super().__init__(quiet=quiet, json_log=json_log)
        self.expected = 0
        self.all_task: Any = None
        self.before = 0  # frames of the clips already finished
        self.current = 0
        self.last_event = 0.0
        self.started = time.perf_counter()

    def expect(self, frames: int) -> None:
        self.expected = frames

    def ready(self, upscaler: Upscaler, total: int, verbose: bool) -> None:
        super().ready(upscaler, total, verbose)
        if self.progress is None:
            return
        self.progress.stop()
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _Fps(), EtaColumn())
        self.progress = Progress(*columns, console=err_console, transient=True)
        self.progress.start()
        self.files_task = self.progress.add_task("clips", total=total)
        self.all_task = self.progress.add_task("all frames", total=self.expected or None)
        self.tiles_task = self.progress.add_task("frames", total=None)

    def file_start(self, job: Job, index: int, total: int) -> None:
        self.before += self.current
        self.current = 0
        if self.progress is not None and self.tiles_task is not None:
            self.progress.reset(self.tiles_task, description=f"  {job.source.name}", total=None)
        if self.json_log:
            self.emit("file_start", index=index + 1, total=total, input=str(job.source))

    def tile(self, done: int, total: int) -> None:
        """Frames done in the current clip (the image reporter's tiles callback)."""
        self.current = done
        if self.progress is not None and self.tiles_task is not None:
            self.progress.update(self.tiles_task, completed=done, total=total or None)
            if self.all_task is not None:
                self.progress.update(self.all_task, completed=self.before + done)
        now = time.perf_counter()
        if self.json_log and now - self.last_event >= 1.0:
            self.last_event = now
            fps = (self.before + done) / max(now - self.started, 1e-9)
            left = max(self.expected - self.before - done, 0)
            eta = round(left / fps, 1) if fps > 0 and self.expected else None
            self.emit("progress", frames=done, frames_expected=total, frames_all=self.before + done,
                      frames_all_expected=self.expected, frames_per_second=round(fps, 3), eta_seconds=eta)  # fmt: skip


def upscale_videos(
    videos: list[Job],
    images: list[str],
    output: str | None,
    *,
    spec: ModelSpec,
    options: UpscaleOptions,
    writing: WriteOptions,
    video: VideoOptions,
    recursive: bool,
    include_outputs: bool,
    events: BatchEvents,
    reporter: VideoReporter,
) -> BatchResult:
    """The images among the inputs first (the usual batch), then the clips; one result for both."""
    from ..batch import BatchInterrupted, BatchResult, upscale_files
    from ..video_batch import upscale_video_files

    done = BatchResult()
    if images:
        done = upscale_files(images, output, model=spec, options=options, writing=writing, recursive=recursive,
                             include_outputs=include_outputs, events=events)  # fmt: skip
        reporter.stop()
    try:
        clips = upscale_video_files(videos, output, model=spec, options=options, writing=writing, video=video,
                                    events=events, on_expected=reporter.expect)  # fmt: skip
    except BatchInterrupted as stop:
        stop.result.files[:0] = done.files
        stop.total += len(done.files)
        raise
    return BatchResult(done.files + clips.files, done.seconds + clips.seconds)
