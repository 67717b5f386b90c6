"""Upscale video files: frames streamed through an ``Upscaler``, other streams copied, results written atomically.

Three threads share the work: one decodes ahead (frames to RGB arrays, copied packets passed along), the
caller's runs the network on several consecutive frames per forward pass where memory allows
(``Upscaler.upscale_batch``: tiling, precision and device apply as for images), and one encodes and muxes
behind it. The channels between them are bounded, so memory does not depend on the length, and no frame
images are ever written. Each upscaled frame keeps its source frame's timestamp in the source's time base,
and lasts until the next one (the last as its source did, else as the one before it), so frame counts and
variable frame rates survive; audio, subtitle and data packets are copied unchanged.
A frame that cannot be decoded is left out and counted: its neighbours keep their own timestamps, so the
picture stays in sync with the sound and the previous frame simply stays on screen a little longer.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from .errors import OutputExists, SstError, VideoError
from .files import atomic_save
from .pipeline import Channel, Worker, workers
from .upscaler import Upscaler
from .video_io import (
    EncodePlan,
    VideoInfo,
    VideoOptions,
    array_to_frame,
    frame_decoder,
    frame_to_array,
    open_output_stream,
    plan_encoding,
    probe_video,
    require_av,
    stream_codec,
    unreadable,
)
from .video_tags import keep_container_labels, keep_labels

FrameCallback = Callable[[int, int], None]  # (frames done, frames expected; 0 when unknown)
_COPIED = ("audio", "subtitle", "data")
_TS_SUBTITLES = ("dvb_subtitle", "dvb_teletext")  # the subtitles MPEG-TS carries as such


@dataclass
class VideoResult:
    """What one upscaled clip holds: frames written, frames lost to damage, streams copied or left out."""

    frames: int = 0
    lost: int = 0  # packets that failed to decode: their frames are missing from the result
    concealed: int = 0  # frames the decoder flagged as damaged but repaired: upscaled as they came
    copied: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # streams the output container cannot hold
    unused: list[str] = field(default_factory=list)  # video streams after the first, which is the one upscaled
    seconds: float = 0.0  # from the first frame read to the end of the last: what a truncated file lacks


def plan_video(
    upscaler: Upscaler, info: VideoInfo, options: VideoOptions, target: str | os.PathLike[str] | None = None
) -> EncodePlan:
    """The encoding of ``info``'s result by this upscaler (``--outscale`` included), in ``target``'s container."""
    width, height = upscaler.output_size(info.width, info.height)
    return plan_encoding(info, width, height, options, None if target is None else Path(target))


def upscale_video(
    upscaler: Upscaler,
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    options: VideoOptions | None = None,
    overwrite: bool = False,
    on_frame: FrameCallback | None = None,
    info: VideoInfo | None = None,
    plan: EncodePlan | None = None,
) -> VideoResult:
    """Upscale one clip into ``target`` (written atomically: an interrupted run leaves nothing there).

    ``info`` and ``plan`` (from ``probe_video`` and ``plan_video``) are computed here when not given.
    """
    options = options or VideoOptions()
    info = info or probe_video(source)
    plan = plan or plan_video(upscaler, info, options, target)
    if not overwrite and os.path.lexists(target):
        raise OutputExists(f"'{os.fspath(target)}' already exists")
    result = VideoResult()
    per_pass = upscaler.images_per_pass(info.height, info.width, limit=options.most_per_pass)
    save = lambda temp: _transcode(upscaler, info, plan, per_pass, temp, result, on_frame)  # noqa: E731
    try:
        atomic_save(target, save, error=VideoError, overwrite=overwrite)
    except _NotWriting as passed:
        raise passed.cause from None  # the upscaler's own error, as it was raised
    return result


class _NotWriting(SstError):
    """Carries an upscaler error through ``atomic_save``, which would call it a failure to write the output."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _transcode(
    upscaler: Upscaler,
    info: VideoInfo,
    plan: EncodePlan,
    per_pass: int,
    temp: Path,
    result: VideoResult,
    on_frame: FrameCallback | None,
) -> None:
    av = require_av()
    # Timestamps are written as they are: muxers otherwise shift a clip whose audio starts before 0 (AAC priming).
    keep = {"avoid_negative_ts": "disabled"}
    try:
        opened = av.open(os.fspath(info.path))
    except (OSError, av.error.FFmpegError) as exc:
        raise unreadable(info.path, exc) from exc
    with opened as source, av.open(os.fspath(temp), "w", format=plan.muxer, options=keep) as output:
        video = source.streams.video[0]
        # On the CPU the codecs get one thread each: background codec threads would take cores from the network's
        # threads, which wait for each other; beside a GPU they run in parallel with it.
        threads = 1 if upscaler.device.type == "cpu" else 0
        video.codec_context.thread_count = threads
        if threads != 1:
            video.thread_type = "AUTO"
        encoder = open_output_stream(output, info, video, plan, threads)
        copies = _copy_streams(source, video, output, encoder, result)
        output.start_encoding()  # header now: a muxer refusing a stream fails before any frame is computed
        stop = threading.Event()
        decoded, upscaled = Channel(2 * per_pass, stop), Channel(2 * per_pass, stop)
        streams = [video, *(source.streams[i] for i in copies)]

        def decode(stop: threading.Event) -> None:
            try:
                _decode(source, streams, frame_decoder(video, threads), info, plan, result, decoded)
            except (OSError, av.error.FFmpegError) as exc:
                if isinstance(exc, SstError):
                    raise
                raise unreadable(info.path, exc) from exc

        def write(stop: threading.Event) -> None:
            _write(upscaled, copies, info, plan, encoder, output)

        decoder, writer = Worker("sst-video-decode", decode, stop), Worker("sst-video-encode", write, stop)
        with workers(decoder, writer):
            pending: list[tuple[Any, int, Any]] = []  # (RGB array, pts, decoded frame) waiting for a full pass
            while (item := decoded.get(decoder)) is not _END:
                if item[0] == "packet":
                    upscaled.put(item, writer)
                    continue
                pending.append(item[1:])
                if len(pending) >= per_pass:
                    _upscale(upscaler, pending, upscaled, writer, result, on_frame, info.frames)
            _upscale(upscaler, pending, upscaled, writer, result, on_frame, info.frames)
            upscaled.put(_END, writer)
            while writer.is_alive():
                writer.join(0.05)
            writer.check()


_END = object()  # the last item on a channel


def _decode(source: Any, streams: list[Any], decode: Callable[[Any], list[Any]], info: VideoInfo, plan: EncodePlan,
            result: VideoResult, out: Channel) -> None:  # fmt: skip
    """Decoding thread: copied packets and decoded RGB frames, in file order, then ``_END``."""
    av = require_av()
    video = streams[0]
    step = _frame_step(info)
    first_pts: int | None = None
    last_pts: int | None = None
    count = 0
    for packet in source.demux(streams):
        if packet.stream.index != video.index:
            if packet.size and packet.dts is not None:
                out.put(("packet", packet))
            continue
        try:
            frames = decode(packet)
        except av.error.InvalidDataError:
            result.lost += 1
            continue
        for frame in frames:
            count += 1
            if (frame.width, frame.height) != (info.width, info.height):
                raise VideoError(
                    f"cannot upscale '{info.path}': its frame {count} is {frame.width}x{frame.height}, but its "
                    f"first is {info.width}x{info.height} (sst-cli upscales clips of one frame size only)"
                )
            pts = frame.pts
            if pts is None or (last_pts is not None and pts <= last_pts):
                pts = 0 if last_pts is None else last_pts + step  # containers without timestamps (raw, AVI)
            first_pts = pts if first_pts is None else first_pts
            shown = _last_frame_time(frame, pts, last_pts) or step
            last_pts = pts
            result.seconds = float((pts + shown - first_pts) * info.time_base)
            result.concealed += bool(frame.is_corrupt)
            out.put(("frame", frame_to_array(frame, plan.rgb_depth, plan.alpha), pts, frame))
    out.put(_END)


def _upscale(upscaler: Upscaler, pending: list[tuple[Any, int, Any]], out: Channel, writer: Worker,
             result: VideoResult, on_frame: FrameCallback | None, expected: int) -> None:  # fmt: skip
    """The pending frames through the network (several per pass where memory allows), on to the encoder."""
    if not pending:
        return
    try:
        images = upscaler.upscale_batch([array for array, _, _ in pending])
    except SstError:
        raise
    except Exception as exc:
        raise _NotWriting(exc) from exc
    for image, (_, pts, like) in zip(images, pending, strict=True):
        out.put(("frame", image, pts, like), writer)
        result.frames += 1
        if on_frame is not None:
            on_frame(result.frames, expected)
    pending.clear()


def _write(items: Channel, copies: dict[int, Any], info: VideoInfo, plan: EncodePlan, encoder: Any,
           output: Any) -> None:  # fmt: skip
    """Encoding thread: upscaled frames encoded and muxed, copied packets muxed, the encoder flushed at ``_END``.
    Each frame is held until the next one comes, whose timestamp ends it (``_Timing``)."""
    timing = _Timing(info.time_base, plan.time_base)
    held: tuple[Any, int, Any] | None = None  # (image, pts, source frame) waiting for the next frame's timestamp
    before: int | None = None  # the held frame's predecessor's timestamp
    end: int | None = None  # where the stream says it ends, from its first frame and its duration
    while (item := items.get()) is not _END:
        if item[0] == "packet":
            packet = item[1]
            packet.stream = copies[packet.stream.index]
            output.mux(packet)
            continue
        if held is not None:
            output.mux(timing.encode(encoder, plan, *held, end=item[2]))
            before = held[1]
        elif info.seconds:
            end = item[2] + round(Fraction(info.seconds) / info.time_base)
        held = item[1:]
    if held is not None:
        image, pts, like = held
        shown = _last_frame_time(like, pts, before, end)
        output.mux(timing.encode(encoder, plan, image, pts, like, end=pts + shown if shown else None))
    output.mux(timing.stamp(encoder.encode(None)))


def _last_frame_time(frame: Any, pts: int, before: int | None, end: int | None = None) -> int:
    """How long a clip's last frame is shown (time-base units, 0: unknown): as long as its source frame was, or,
    where the container keeps no frame durations (AVI, MPEG-TS), until the stream's stated ``end`` when that is
    near (not audio outlasting the picture, nor the end of a cut-short file), else as long as the frame before it.
    The muxer's own guess for an AVI with millisecond ticks was one tick: the last picture flashed for 1 ms."""
    if frame.duration:
        return int(frame.duration)
    gap = pts - before if before is not None else 0
    if end is not None and pts < end and (not gap or end - pts <= 2 * gap):
        return end - pts
    return gap


class _Timing:
    """Timestamps and durations of the encoded frames. Timestamps are kept, or rescaled to the encoder's own time
    base (``encoder_base``), never to one taken twice. A frame lasts until the next one's timestamp, the last as its
    source frame did; the encoders leave packet durations out, so they are set here: the MP4 muxer gave the last
    frame of a variable-rate clip the mean frame time instead, and the picture outlasted the sound."""

    def __init__(self, source_base: Fraction, encoder_base: Fraction | None) -> None:
        self.source_base, self.encoder_base = source_base, encoder_base
        self.last: int | None = None
        self.durations: dict[int, int] = {}  # encoder pts -> duration, for the packet that comes out

    def encode(self, encoder: Any, plan: EncodePlan, image: Any, pts: int, like: Any, end: int | None) -> list[Any]:
        """One frame shown from ``pts`` to ``end`` (source time base; None: unknown) through the encoder."""
        frame = array_to_frame(image, plan, like)
        if self.encoder_base is not None:
            end = None if end is None else round(end * self.source_base / self.encoder_base)
            pts = round(pts * self.source_base / self.encoder_base)
            pts = pts if self.last is None or pts > self.last else self.last + 1
            self.last = pts
        frame.pts, frame.time_base = pts, self.encoder_base or self.source_base
        if end is not None:
            self.durations[pts] = max(end - pts, 1)
        return self.stamp(encoder.encode(frame))

    def stamp(self, packets: list[Any]) -> list[Any]:
        """The encoder's packets with their frames' durations (and a sane decoding time: ``_sane_dts``)."""
        for packet in packets:
            if not packet.duration and packet.pts in self.durations:
                packet.duration = self.durations.pop(packet.pts)
        return _sane_dts(packets)


#: Further than this from its own presentation time, a packet's decoding time is not an encoder's reordering (a few
#: frames) but garbage: libx265 gave a clip of fewer frames than its lookahead dts = pts + an uninitialised value,
#: which Matroska refused at random ("pts (0) < dts (9187201950435737472)", seen as "Invalid argument").
_DTS_REACH_S = 60


def _sane_dts(packets: list[Any]) -> list[Any]:
    """The encoder's packets, a decoding time that cannot be right left for the muxer to fill in."""
    for packet in packets:
        known = packet.dts is not None and packet.pts is not None and packet.time_base is not None
        if known and abs(packet.dts - packet.pts) * packet.time_base > _DTS_REACH_S:
            packet.dts = None
    return packets


def _frame_step(info: VideoInfo) -> int:
    """One frame's duration in time-base units, for frames that come without a timestamp."""
    if info.rate is None or info.rate <= 0:
        return 1
    return max(1, round(1 / (info.rate * info.time_base)))


def _copy_streams(source: Any, video: Any, output: Any, encoder: Any, result: VideoResult) -> dict[int, Any]:
    """Output streams for the input's audio, subtitle and data streams that the output container can hold (and its
    attachments, in Matroska), with their tags and flags (and the container's and the video's: ``video_tags.py``);
    a timecode track (MOV / MP4 ``tmcd``) is kept as the video stream's timecode, which the muxer writes anew.
    Video streams after the first are left out (``result.unused``)."""
    copies: dict[int, Any] = {}
    keep_container_labels(source, output)
    keep_labels(video, encoder, reencoded=True)
    for stream in source.streams:
        if stream.index == video.index:
            continue
        timecode = stream.metadata.get("timecode")  # set on the tmcd track itself (and on the video)
        if stream.type == "data" and stream_codec(stream) == "unknown" and timecode:
            encoder.metadata["timecode"] = timecode
            result.copied.append(f"timecode {timecode}")
            continue
        label = f"{stream.type} {stream_codec(stream)}"
        if stream.type == "video":
            result.unused.append(label)
            continue
        if stream.type == "attachment" and output.format.name == "matroska":  # fonts of ASS subtitles, cover art
            output.add_attachment(stream.name, stream.mimetype or "application/octet-stream", stream.data)
            result.copied.append(label)
            continue
        if stream.type not in _COPIED or not _muxer_takes(output.format.name, stream):
            result.dropped.append(label)
            continue
        copies[stream.index] = output.add_stream_from_template(stream)
        keep_labels(stream, copies[stream.index])
        result.copied.append(label)
    own = video.metadata.get("timecode") or video.metadata.get("TIMECODE")  # Matroska's tag is upper case
    if own and "timecode" not in encoder.metadata:  # a timecode with no track of its own
        encoder.metadata["timecode"] = own
    return copies


def _muxer_takes(muxer: str, stream: Any) -> bool:
    """Whether this muxer writes a copy of ``stream``: asked of the muxer itself, by writing a header to memory
    (PyAV's ``supported_codecs`` lists only a muxer's default codecs when it has no codec table, as MPEG-TS)."""
    av = require_av()
    if stream_codec(stream) == "unknown":
        return False
    if muxer == "mpegts" and stream.type == "subtitle" and stream_codec(stream) not in _TS_SUBTITLES:
        return False  # written as an unlabelled private data stream that no player shows
    try:
        with av.open(io.BytesIO(), "w", format=muxer) as probe:
            probe.add_stream_from_template(stream)
            probe.start_encoding()
    except (av.error.FFmpegError, ValueError):
        return False
    return True


def expected_megapixels(info: VideoInfo) -> float:
    return info.width * info.height * max(info.frames, 1) / 1e6


def describe_plan(info: VideoInfo, plan: EncodePlan, copied: Sequence[str] = ()) -> str:
    """One line on what a clip becomes: codec, pixel format, size, container."""
    kept = f", copying {', '.join(copied)}" if copied else ""
    return (
        f"{info.path.name}: {info.codec} {info.pix_fmt} {info.width}x{info.height} -> {plan.codec} {plan.pix_fmt} "
        f"{plan.width}x{plan.height} in {plan.extension}{kept}"
    )
