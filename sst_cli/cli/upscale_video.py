"""``sst upscale`` on video files: frames counted with frames/s and ETA, and the call into video_batch."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.text import Text

if TYPE_CHECKING:
    from ..filerun import BatchEvents, BatchResult, FileResult, FileStart
    from ..inputs import Job
    from ..loader import ModelSpec
    from ..naming import WriteOptions
    from ..upscaler import UpscaleOptions, Upscaler
    from ..video_io import VideoOptions


class _Rate(ProgressColumn):
    """Frames/s as ``FrameCounter`` computed it (frames done over the time since the clip or run started): rich's
    own estimate saw the frames of a pass arrive microseconds apart and showed tens of thousands a second."""

    def render(self, task: Task) -> Text:
        rate = task.fields.get("fps")
        return Text("" if rate is None else f"{rate:.2f} frames/s", style="progress.data.speed")


class _Eta(ProgressColumn):
    """Time left as ``FrameCounter`` computed it; blank on rows it does not time (the clips)."""

    def render(self, task: Task) -> Text:
        if "fps" not in task.fields:
            return Text("")
        left = task.fields.get("eta")
        if left is None:
            return Text("-:--:--", style="progress.remaining")
        minutes, seconds = divmod(int(left), 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"{hours:d}:{minutes:02d}:{seconds:02d}", style="progress.remaining")


def frame_columns() -> tuple[ProgressColumn, ...]:
    """The columns of the clip bars: description, bar, done/total, frames/s, time left."""
    return TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _Rate(), _Eta()


class Bars(Protocol):
    """What of ``upscale.Reporter`` the frame counter uses (its progress bars and JSON events)."""

    json_log: bool
    progress: Progress | None
    files_task: TaskID | None
    tiles_task: TaskID | None

    def emit(self, event: str, **fields: Any) -> None: ...


@dataclass(frozen=True)
class Rates:
    """Speed and time left of the current clip and of the whole run, each as frames done over the time since it
    started (frames arrive a pass at a time, so the gaps between them say nothing)."""

    clip_fps: float
    clip_eta: float | None
    fps: float
    eta: float | None


class FrameCounter:
    """Counts frames per clip and over all clips, with frames/s and ETA: on the reporter's terminal bars (which
    it rebuilds with a frames/s column) or as JSON ``progress`` events, at most one a second. ``clock`` (seconds)
    is replaceable for tests."""

    def __init__(self, reporter: Bars, clock: Callable[[], float] = time.perf_counter) -> None:
        self.reporter = reporter
        self.clock = clock
        self.expected = 0  # frames in all clips, as their containers say (0: unknown)
        self.all_task: TaskID | None = None
        self.before = 0  # frames of the clips already finished
        self.current = 0
        self.last_event = 0.0
        self.started = self.clip_started = clock()

    def hook(self, events: BatchEvents) -> BatchEvents:
        """``events`` with the bars rebuilt once the model is ready and frames counted instead of tiles."""
        return replace(events, ready=self._ready(events.ready), file_start=self._start(events.file_start),
                       tile=self.frame)  # fmt: skip

    def expect(self, frames: int) -> None:
        self.expected = frames

    def _ready(self, ready: Callable[[Upscaler, int], None] | None) -> Callable[[Upscaler, int], None]:
        def run(upscaler: Upscaler, total: int) -> None:
            self.started = self.clock()  # the run's speed counts from here, not from before the model was loaded
            if ready is not None:
                ready(upscaler, total)
            r = self.reporter
            if r.progress is None:
                return
            r.progress.stop()
            r.progress = Progress(*frame_columns(), console=r.progress.console, transient=True)
            r.progress.start()
            r.files_task = r.progress.add_task("clips", total=total)
            self.all_task = r.progress.add_task("all frames", total=self.expected or None)
            r.tiles_task = r.progress.add_task("frames", total=None)

        return run

    def _start(self, start: FileStart | None) -> FileStart:
        def run(job: Job, index: int, total: int) -> None:
            self.before += self.current
            self.current = 0
            self.clip_started = self.clock()
            r = self.reporter
            if r.progress is not None and r.tiles_task is not None:  # a fresh row: no total or speed carried over
                r.progress.remove_task(r.tiles_task)
                r.tiles_task = r.progress.add_task("frames", total=None)
            if start is not None:
                start(job, index, total)

        return run

    def rates(self, done: int, total: int, now: float) -> Rates:
        """The current clip's and the run's speed and time left at ``now``, ``done`` of its ``total`` frames done."""
        clip_fps = done / max(now - self.clip_started, 1e-9)
        fps = (self.before + done) / max(now - self.started, 1e-9)
        return Rates(clip_fps, _eta(total - done, clip_fps, total), fps,
                     _eta(self.expected - self.before - done, fps, self.expected))  # fmt: skip

    def frame(self, done: int, total: int) -> None:
        """Frames done in the current clip, of ``total`` expected."""
        self.current = done
        now = self.clock()
        rates = self.rates(done, total, now)
        r = self.reporter
        if r.progress is not None and r.tiles_task is not None:
            r.progress.update(r.tiles_task, completed=done, total=total or None, fps=rates.clip_fps,
                              eta=rates.clip_eta)  # fmt: skip
            if self.all_task is not None:
                r.progress.update(self.all_task, completed=self.before + done, fps=rates.fps, eta=rates.eta)
        if r.json_log and now - self.last_event >= 1.0:
            self.last_event = now
            r.emit("progress", frames=done, frames_expected=total, frames_all=self.before + done,
                   frames_all_expected=self.expected, frames_per_second=round(rates.fps, 3), eta_seconds=rates.eta,
                   clip_frames_per_second=round(rates.clip_fps, 3), clip_eta_seconds=rates.clip_eta)  # fmt: skip


def _eta(left: int, fps: float, expected: int) -> float | None:
    """Seconds left at this speed; None when the total is unknown (0) or nothing is done yet."""
    return round(max(left, 0) / fps, 1) if fps > 0 and expected else None


def split_videos(
    inputs: list[str],
    spec: ModelSpec,
    recursive: bool,
    include_outputs: bool,
    *,
    parallel: bool,
    note: Callable[[str], None],
    name: str | None = None,
    output: str | None = None,
    outscale: float | None = None,
) -> tuple[list[Job], list[str]]:
    """The video clips among the inputs (for ``upscale_videos``) and the items left for the image batch; ``note``
    says which folders held nothing; ``name``, the --name template, whose earlier outputs in the folders written
    into (``output``, at ``outscale``) folders leave out."""
    from ..batch import own_skips
    from ..errors import ConfigError
    from ..inputs import Skips
    from ..video_batch import find_videos

    skips = Skips() if include_outputs else own_skips(spec, name, output=output, outscale=outscale)
    videos, images = find_videos(inputs, recursive, skips, note)
    if videos and parallel:
        raise ConfigError("video files run on one device: leave out --ray, --workers and device lists")
    return videos, images


def _counted(events: BatchEvents, before: int, after: int) -> BatchEvents:
    """``events`` numbering files over the whole command: ``before`` files ran earlier, ``after`` run later
    (the images, then the clips: "[1/1]" twice for a photo and a clip)."""
    start, finish = events.file_start, events.file_done

    def on_start(job: Job, index: int, total: int) -> None:
        if start is not None:
            start(job, before + index, before + total + after)

    def on_done(record: FileResult, index: int, total: int) -> None:
        if finish is not None:
            finish(record, before + index, before + total + after)

    return replace(events, file_start=on_start, file_done=on_done)


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
    reporter: Bars,
    stop_bars: Callable[[], None],
) -> BatchResult:
    """The images among the inputs first (the usual batch), then the clips, counted in frames; one result."""
    from ..batch import upscale_files
    from ..errors import ConfigError
    from ..filerun import BatchInterrupted, BatchResult
    from ..image_io import is_image_file
    from ..video_batch import check_encoders, upscale_video_files
    from ..video_io import is_video_file

    check_encoders(videos, video)  # before the images run: a wrong --codec or --crf is one error, not one per clip
    if images and output and not os.path.isdir(output) and (is_image_file(output) or is_video_file(output)):
        raise ConfigError(f"'{output}' names one file, but the inputs are images and videos: give a folder with -o")
    done = BatchResult()
    if images:
        done = upscale_files(images, output, model=spec, options=options, writing=writing, recursive=recursive,
                             include_outputs=include_outputs, events=_counted(events, 0, len(videos)),
                             inputs_checked=True)  # fmt: skip
        stop_bars()
    counter = FrameCounter(reporter)
    try:
        clips = upscale_video_files(videos, output, model=spec, options=options, writing=writing, video=video,
                                    events=counter.hook(_counted(events, len(done.files), 0)),
                                    on_expected=counter.expect)  # fmt: skip
    except BatchInterrupted as stop:
        stop.result.files[:0] = done.files
        stop.total += len(done.files)
        raise
    return BatchResult(done.files + clips.files, done.seconds + clips.seconds)
