"""``sst upscale`` for video files: name and check every output, probe every clip, then upscale them in turn.

Like the image batch, nothing prints, each file ends as a ``FileResult`` and one bad file never stops the
rest. Everything that can be refused is refused before the model loads: unreadable or protected clips,
clips without video, codecs this FFmpeg cannot decode, existing outputs, unwritable folders, encoders or
pixel formats this FFmpeg lacks, frame rates the encoder cannot store. Resuming is per file
(``skip_existing``): a clip that was interrupted is started again from its first frame, since its partial
output was never kept.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from .choices import DEFAULT_SCALE
from .diskfull import FullFileSystems
from .errors import ConfigError, SstError, VideoError
from .filerun import BatchEvents, BatchResult, FileResult, FileStep, run_in_turn
from .files import TEMP_SUFFIX, InputFiles, clean_stale_temporaries, removing_unused_folders, unwritable
from .image_io import is_image_file
from .inputs import (
    OWN_OUTPUT,
    Job,
    Skips,
    distinct_files,
    glob_matches,
    is_glob,
    is_hidden,
    is_image_like,
    nothing_found,
    nothing_from,
    one_job_per_file,
)
from .loader import ModelSpec
from .naming import Naming, WriteOptions, check_output_folder, model_label
from .preflight import claim_output
from .upscaler import UpscaleOptions, Upscaler, refuse_foreign_settings, result_size
from .video import VideoResult, describe_plan, expected_megapixels, plan_video, upscale_video
from .video_io import (
    UNCOUNTED_CONTAINERS,
    VIDEO_EXTENSIONS,
    VideoInfo,
    VideoOptions,
    check_video_options,
    choose_codec,
    encoder_time_base,
    is_video_file,
    output_extension,
    probe_video,
    require_av,
    target_container,
)


@dataclass
class _VideoPlan:
    job: Job
    target: Path | None = None
    info: VideoInfo | None = None
    failure: SstError | None = None
    skip: str | None = None


def find_videos(
    inputs: Iterable[str],
    recursive: bool,
    skips: Skips | None = None,
    on_note: Callable[[str], None] | None = None,
) -> tuple[list[Job], list[str]]:
    """Split INPUT items into video jobs (files named, or found in folders or globs) and the items left for the
    image batch: image files, and folders or globs that also hold images (or no video). Clips found (not named)
    that ``skips`` counts as sst-cli's outputs (``batch.own_skips``) become skipped jobs; a clip named twice
    (``a.mp4 ./a.mp4``) or reached through a link is upscaled once, as images are. Needs no PyAV.

    Folders holding neither videos nor images are settled here, since videos are looked for too: refused when
    they are all the inputs, else passed over with a note through ``on_note`` (handed to the image batch, one
    beside a clip failed the run, and one beside an image was said to hold "no image files")."""
    items = list(inputs)
    skips = skips or Skips()
    videos: list[Job] = []
    rest: list[str] = []
    empty: list[str] = []
    for item in items:
        path = Path(item)
        if os.path.isdir(item):  # False, not an error, where a folder on the way may not be entered
            found, images, anything = _scan(path, recursive)
            videos.extend(_own(Job(p, path, from_folder=True), skips) for p in found)
            if not anything:
                empty.append(item)
            elif images or not found:
                rest.append(item)  # the image batch also says which folders could not be read
        elif not os.path.exists(item) and is_glob(item):  # a glob: its videos here, the rest to the image batch
            root, matches = glob_matches(item)
            clips = [m for m in matches if is_video_file(m) and m.is_file() and not is_hidden(m.name)]
            videos.extend(_own(Job(p, root), skips) for p in clips)
            if not matches or any(not is_video_file(m) for m in matches):
                rest.append(item)
        elif is_video_file(path):
            videos.append(Job(path, path.parent))
        else:
            rest.append(item)
    if items and empty == items:
        raise nothing_found(items, recursive, videos=VIDEO_EXTENSIONS)
    for item in empty:
        if on_note is not None:
            on_note(nothing_from(item, recursive, videos=True))
    return one_job_per_file(videos), rest


def _own(job: Job, skips: Skips) -> Job:
    return replace(job, skip=OWN_OUTPUT) if skips.is_own(job) else job


def _scan(folder: Path, recursive: bool) -> tuple[list[Path], bool, bool]:
    """The clips in ``folder``; whether the image batch has something there too: images, or a folder that could
    not be read (it says so); and whether anything at all was found (clips, images read or skipped, unreadable
    folders)."""
    found: list[Path] = []
    unreadable: list[OSError] = []
    images = like = False
    for root, dirs, files in os.walk(folder, onerror=unreadable.append):
        dirs[:] = [d for d in dirs if not d.startswith(".")] if recursive else []
        for name in files:
            if name.startswith(".") or name.endswith(TEMP_SUFFIX):
                continue
            if is_video_file(name):
                found.append(Path(root, name))
            images = images or is_image_file(name)
            like = like or is_image_like(name)
    anything = bool(found) or like or bool(unreadable)
    return sorted(found, key=lambda p: p.as_posix()), images or bool(unreadable), anything


def upscale_video_files(
    jobs: Sequence[Job],
    output: str | os.PathLike[str] | None,
    *,
    model: ModelSpec,
    options: UpscaleOptions,
    writing: WriteOptions,
    video: VideoOptions,
    events: BatchEvents | None = None,
    on_expected: Callable[[int], None] | None = None,
) -> BatchResult:
    """Upscale the clips of ``jobs`` (``find_videos``) into ``output``: one file for one clip, or a folder;
    None: beside each clip, or in ``<folder>_sst`` for folder inputs.

    ``events.tile`` receives (frames done, frames expected) while a clip runs; ``on_expected`` the frames
    expected in all, once the clips are probed (0 for a clip whose container does not say). Raises BatchInterrupted on
    Ctrl-C or SIGTERM with what was finished; the clip in progress leaves no file behind.
    """
    require_av()
    refuse_foreign_settings(model, options)
    check_encoders(jobs, video)
    events = events or BatchEvents()
    label, scale = model_label(model), model.scale or DEFAULT_SCALE
    single = _single_target(output, jobs, writing)
    folder = None if output is None or single is not None else Path(output)
    naming = Naming(label, scale, options.outscale, writing.name, folder=folder, file=single)
    with removing_unused_folders(naming.folders(jobs)):  # made when planned: kept only if written into
        plans = [_VideoPlan(job, skip=job.skip) for job in jobs]
        claimed: dict[str, Path] = {}
        inputs = InputFiles(j.source for j in jobs if j.skip is None)  # earlier outputs are targets
        for plan in plans:  # probe and name everything before the model is loaded
            if plan.skip is not None:
                continue
            try:
                plan.info = probe_video(plan.job.source)
                _check_pixels(plan.info, writing.max_pixels)
                result_size(
                    plan.info.width, plan.info.height, scale, options.outscale, plan.job.source, cli=options.cli
                )
                codec = choose_codec(plan.info, video)
                encoder_time_base(codec, plan.info)  # MPEG-1/2 refuse a rate they cannot store: say so now
                if single is not None:
                    target_container(single, video, codec)
                plan.target = single or _target(naming, plan.job, output_extension(plan.job.source, video, codec))
                _claim(plan, claimed, inputs, writing)
            except ConfigError as exc:
                if single is not None:  # one clip to one named file: the options are what is wrong (exit 2)
                    raise
                plan.failure = exc
            except SstError as exc:
                plan.failure = exc
        for folder in sorted({p.target.parent for p in plans if p.target is not None and p.failure is None}):
            clean_stale_temporaries(folder, events.note or (lambda text: None))
        if all(p.failure is not None or p.skip is not None for p in plans):  # nothing to compute: no model needed
            return _run(plans, None, video, writing, events)
        if on_expected is not None:
            todo = [p for p in plans if p.failure is None and p.skip is None]
            on_expected(sum(p.info.frames for p in todo if p.info is not None))
        upscaler = Upscaler(model, options=options, on_message=events.warning)
        naming = replace(naming, scale=upscaler.scale)
        for plan in plans:  # the real scale is known now: rename, and plan each encoding
            if plan.failure is None and plan.skip is None and single is None and upscaler.scale != scale:
                assert plan.info is not None and plan.target is not None
                plan.target = _target(naming, plan.job, plan.target.suffix.lstrip("."))
                try:
                    _claim(plan, claimed, inputs, writing)
                except SstError as exc:
                    plan.failure = exc
        if events.ready is not None:
            events.ready(upscaler, len(plans))
        return _run(plans, upscaler, video, writing, events)


def check_encoders(jobs: Sequence[Job], video: VideoOptions) -> None:
    """Refuse, before anything runs, video options that cannot be: ``check_video_options``, and ``--crf`` /
    ``--pix-fmt`` without ``--codec`` that a clip's own encoder (chosen from its codec) does not take; that failed
    the clip alone, after the images of the same command had been upscaled. Clips that cannot be read are left to
    fail on their own."""
    check_video_options(video)
    if video.codec is not None or video.lossless or (video.crf is None and video.pix_fmt is None):
        return
    for job in jobs:
        if job.skip is not None:
            continue
        try:
            info = probe_video(job.source)
        except SstError:
            continue
        try:
            choose_codec(info, video)
        except ConfigError as exc:
            raise ConfigError(f"'{job.source}': {exc} (its encoder follows its codec; --codec chooses one)") from None


def _check_pixels(info: VideoInfo, max_pixels: int) -> None:
    pixels = info.width * info.height
    if max_pixels and pixels > max_pixels:
        raise VideoError(
            f"cannot upscale '{info.path}': its {info.width}x{info.height} frames are {pixels:,} pixels, more than "
            f"the limit of {max_pixels:,} (--max-pixels raises it, 0 lifts it)"
        )


def _single_target(output: str | os.PathLike[str] | None, jobs: Sequence[Job], writing: WriteOptions) -> Path | None:
    if output is not None and is_image_file(output) and not Path(output).is_dir():
        raise ConfigError(f"'{output}' names an image file, but the input is video: name it .mp4, .mkv ... or a folder")
    if output is None:
        return None
    if not is_video_file(output) or Path(output).is_dir():
        check_output_folder(Path(output), "a video")
        return None
    clips = distinct_files(jobs)
    if len(clips) != 1 or clips[0].from_folder:
        inputs = f"{len(clips)} clips" if len(clips) != 1 else f"'{clips[0].source}' was found in a folder"
        raise ConfigError(f"'{output}' names one video file, but {inputs}: give a folder with -o")
    if writing.name is not None:
        raise ConfigError("--name does not apply when -o names the output file itself")
    return Path(output)


def _target(naming: Naming, job: Job, ext: str) -> Path:
    return naming.folder_for(job) / naming.name(job, ext)


def _claim(plan: _VideoPlan, claimed: dict[str, Path], inputs: InputFiles, writing: WriteOptions) -> None:
    """Refuse outputs that are an input or another clip's output, then apply the existing-file policy."""
    assert plan.target is not None
    if claim_output(plan.target, plan.job.source, claimed, inputs, writing):
        plan.skip = f"'{plan.target}' already exists"
    why = unwritable(plan.target.parent)  # made if missing, and proved writable with a real file
    if why is not None:
        raise VideoError(f"cannot write into '{plan.target.parent}': {why}")


def _run(
    plans: Sequence[_VideoPlan],
    upscaler: Upscaler | None,
    video: VideoOptions,
    writing: WriteOptions,
    events: BatchEvents,
) -> BatchResult:
    full = FullFileSystems(writing.overwrite)  # a clip that fills its disk stops the clips bound there
    steps = [
        FileStep(
            p.job, p.target if p.skip is None else None, 0.0, partial(_one, p, upscaler, video, writing, events, full)
        )
        for p in plans
    ]
    return run_in_turn(steps, events.file_start, events.file_done)


def _one(plan: _VideoPlan, upscaler: Upscaler | None, video: VideoOptions, writing: WriteOptions,
         events: BatchEvents, full: FullFileSystems) -> FileResult:  # fmt: skip
    started = time.perf_counter()
    record = FileResult(plan.job.source, plan.target, "failed")
    if plan.skip is not None:
        record.status, record.reason = "skipped", plan.skip
        return record
    try:
        if plan.failure is not None:
            raise plan.failure
        assert plan.info is not None and plan.target is not None and upscaler is not None
        full.check(plan.target)
        record.megapixels = expected_megapixels(plan.info)
        encoding = plan_video(upscaler, plan.info, video, plan.target)
        say = events.note or (lambda text: None)
        say(describe_plan(plan.info, encoding))
        for note in encoding.notes:
            say(f"{plan.job.source.name}: {note}")
        for warning in encoding.warnings:
            (events.warning or say)(warning)
        with full.watching(plan.target):  # the clip is written as it is computed
            done = upscale_video(
                upscaler, plan.job.source, plan.target, options=video, overwrite=writing.overwrite,
                on_frame=events.tile, info=plan.info, plan=encoding,
            )  # fmt: skip
        record.megapixels = plan.info.width * plan.info.height * done.frames / 1e6
        for line in _damage(plan.job.source, done, plan.info):
            (events.warning or say)(line)
        record.status = "done"
    except (SstError, OSError, RuntimeError, MemoryError, ValueError) as exc:  # av errors are OSError/ValueError
        record.failed_with(exc)
    record.seconds = time.perf_counter() - started
    return record


def _damage(source: Path, done: VideoResult, info: VideoInfo) -> list[str]:
    lines = []
    decoded = done.frames + done.lost
    if _ends_early(done, info):
        how = "its container lists" if info.frames_listed else "its duration suggests about"
        lines.append(
            f"{source}: ends early: {decoded} frame(s) where {how} {info.frames} (a truncated file?); the result "
            "holds what could be read"
        )
    if done.lost:
        lines.append(
            f"{source}: {done.lost} damaged frame(s) could not be decoded and are missing; every other frame keeps "
            "its timestamp, so sound and picture stay in sync"
        )
    if done.concealed:
        lines.append(f"{source}: {done.concealed} damaged frame(s) were repaired by the decoder and upscaled as such")
    if done.dropped:
        lines.append(f"{source}: left out {', '.join(done.dropped)} (the output container cannot hold them)")
    if done.unused:
        lines.append(f"{source}: left out {', '.join(done.unused)} (only the first video stream is upscaled)")
    return lines


def _ends_early(done: VideoResult, info: VideoInfo) -> bool:
    """Whether fewer frames were read than the clip holds. The frames' own timestamps are compared with the
    video's duration, to within a tenth and two frames (a count estimated from duration x nominal rate would call
    a complete variable-frame-rate clip short). A listed count is only an upper bound: it includes the samples an
    MP4 edit list skips, so it must be short too (and is the whole test when the duration is unknown)."""
    if info.container in UNCOUNTED_CONTAINERS or info.frames <= 0:
        return False
    frame = 1 / float(info.rate) if info.rate else 0.0
    short = done.seconds < 0.9 * info.seconds - 2 * frame
    if info.frames_listed:
        return done.frames + done.lost < info.frames and (short or not info.seconds)
    return short
