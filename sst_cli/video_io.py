"""Video files through PyAV (the optional ``video`` extra): what a clip holds, and how its result is encoded.

Nothing here runs a network or prints. ``probe_video`` opens a clip and decodes its first frame, so an
unreadable file, a file without video, a codec this FFmpeg cannot decode or a protected stream is refused
with one sentence before any computation. ``plan_encoding`` decides codec, pixel format, container and size
of the result from the input and the user's choices, before any frame is upscaled.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from .errors import ConfigError, VideoError

if TYPE_CHECKING:
    import av

#: Extensions taken for video; folders are searched for these (no PyAV needed to tell).
VIDEO_EXTENSIONS = frozenset(
    {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".ts", ".mts", ".m2ts", ".mpg", ".mpeg", ".wmv", ".flv", ".ogv",
     ".3gp", ".3g2"}
)  # fmt: skip
#: Containers written as themselves; anything else becomes Matroska (or MOV for the codecs it lacks: PNG, QTRLE).
_MUXERS = {"mp4": "mp4", "m4v": "mp4", "mov": "mov", "mkv": "matroska", "webm": "webm", "ts": "mpegts"}
#: Encoders of each codec (its name, not its decoder's: AV1 is read by libdav1d), in order of preference, used
#: when the wheel's FFmpeg has them.
_FAMILY = {
    "h264": ("libx264",),
    "hevc": ("libx265",),
    "vp9": ("libvpx-vp9",),
    "vp8": ("libvpx",),
    "av1": ("libsvtav1", "libaom-av1"),
    "mpeg4": ("mpeg4",),
    "prores": ("prores_ks",),
    "ffv1": ("ffv1",),
    "mjpeg": ("mjpeg",),
    "png": ("png",),  # PNG and QuickTime RLE in MOV: lossless, often with alpha
    "qtrle": ("qtrle",),
}
_FALLBACK = ("libx264", "mpeg4")  # families without an encoder here (e.g. mpeg2, wmv) are written as H.264
_TS_VIDEO = frozenset({"libx264", "libx265", "mpeg4"})  # MPEG-TS keeps KLV and other data streams; MKV cannot
#: MOV's muxer lists these, then refuses them as experimental.
_MOV_REFUSES = frozenset({"libvpx", "libvpx-vp9", "libsvtav1", "libaom-av1"})
#: Muxers that store the sample aspect ratio themselves; elsewhere only these encoders keep it, in their bitstream
#: (PyAV cannot set the stream's own ratio, which Matroska and WebM write).
_SAR_MUXERS = frozenset({"mp4", "mov"})
_SAR_ENCODERS = frozenset({"libx264", "libx265", "mpeg4", "mjpeg"})
#: Muxers that store a display rotation (MPEG-TS has no place for it).
_ROTATION_MUXERS = frozenset({"mp4", "mov", "matroska", "webm"})
#: Demuxers whose frame counts are upper bounds: a variable-rate AVI stores an empty packet per skipped tick.
UNCOUNTED_CONTAINERS = frozenset({"avi"})
#: FFmpeg's demuxers of single images: a picture named .mp4 opens through them as a one-frame "video".
_IMAGE_DEMUXERS = ("_pipe", "image2", "gif", "apng")
_CRF_MAX = {"libx264": 51, "libx265": 51, "libvpx-vp9": 63, "libvpx": 63, "libsvtav1": 63, "libaom-av1": 63}
LOSSLESS_CODEC = "ffv1"
#: Encoders that keep transparency, each checked here to write alpha that FFmpeg reads back (this wheel's libx265
#: lists yuva420p but refuses to open with it).
ALPHA_ENCODERS = ("ffv1", "prores_ks", "libvpx-vp9", "png", "qtrle")
#: FFmpeg's own VP8/VP9 decoders ignore the alpha that WebM keeps beside the picture; libvpx's decoders read it.
_ALPHA_DECODERS = {"vp9": "libvpx-vp9", "vp8": "libvpx"}


def is_video_file(path: str | os.PathLike[str]) -> bool:
    """True for names sst-cli treats as video (by extension, so folders can be sorted without opening files)."""
    return os.path.splitext(os.fspath(path))[1].lower() in VIDEO_EXTENSIONS


def require_av() -> Any:
    """The ``av`` module, or a ConfigError saying how to install it."""
    try:
        import av
    except ImportError:
        raise ConfigError("video needs PyAV: pip install 'av>=18' (sst-cli's video extra)") from None
    return av


@dataclass(frozen=True)
class VideoOptions:
    """How upscaled video is encoded, checked on construction.

    ``codec``: an FFmpeg encoder name (None: the input's family where this FFmpeg has an encoder, else
    H.264); ``crf``: constant-quality level for encoders that have one (None: the encoder's default);
    ``pix_fmt``: output pixel format (None: the input's, or the nearest the encoder takes at the same bit
    depth); ``lossless``: FFV1 in Matroska with RGB samples, so each frame is exactly the network's output.
    ``frames_per_pass``: at most this many consecutive frames in one forward pass (None: as many as memory
    allows, up to 8, but 1 with ``lossless``, whose frames then equal ``Upscaler.upscale`` of each frame bit for
    bit: float32 products round differently for another batch size, ~1e-7 of the range, which can move an
    8-bit sample by one level).
    """

    codec: str | None = None
    crf: int | None = None
    pix_fmt: str | None = None
    lossless: bool = False
    frames_per_pass: int | None = None

    def __post_init__(self) -> None:
        if self.lossless and (self.codec not in (None, LOSSLESS_CODEC) or self.crf is not None or self.pix_fmt):
            raise ConfigError("--lossless writes FFV1 with RGB samples: leave out --codec, --crf and --pix-fmt")
        if self.crf is not None and not 0 <= self.crf <= 63:
            raise ConfigError(f"crf must be between 0 and 63, got {self.crf}")
        if self.frames_per_pass is not None and self.frames_per_pass < 1:
            raise ConfigError(f"--frames-per-pass must be at least 1, got {self.frames_per_pass}")

    @property
    def most_per_pass(self) -> int:
        """The most frames one forward pass may take (memory may allow fewer)."""
        return self.frames_per_pass or (1 if self.lossless else 8)


@dataclass(frozen=True)
class VideoInfo:
    """What the first video stream of a clip is, read before any computation."""

    path: Path
    width: int
    height: int
    codec: str  # the codec's name (av1), not its decoder's (libdav1d): the key of its encoder family
    pix_fmt: str
    bit_depth: int  # 8, 10, 12 or 16: frames go through the network as 8- or 16-bit RGB accordingly
    frames: int  # from the container, or estimated from duration x rate; 0 when unknown
    time_base: Fraction
    rate: Fraction | None
    rotation: int  # display rotation in degrees (counter-clockwise), 0 when none
    container: str  # demuxer name(s), e.g. "mov,mp4,m4a,3gp,3g2,mj2"
    others: tuple[str, ...]  # the other streams: "audio aac", "subtitle mov_text", ...
    alpha: bool = False  # frames carry transparency
    frames_listed: bool = False  # ``frames`` is the container's own count (MP4, MOV): an upper bound (edit lists)
    seconds: float = 0.0  # the video's duration (``_seconds``), 0 when unknown
    aspect: Fraction | None = None  # sample (pixel) aspect ratio when not square, e.g. 4/3 for anamorphic video


def probe_video(path: str | os.PathLike[str]) -> VideoInfo:
    """Open a clip and decode its first frame; VideoError naming the file and the problem otherwise."""
    av = require_av()
    name = os.fspath(path)
    try:
        container = av.open(name)
    except FileNotFoundError:
        raise VideoError(f"cannot read '{name}': no such file") from None
    except (av.error.FFmpegError, OSError) as exc:
        raise VideoError(f"cannot read '{name}': {_unopened(name, exc)}") from None
    with container:
        if container.format.name.endswith(_IMAGE_DEMUXERS):
            kind = container.format.name.removesuffix("_pipe").upper()
            raise VideoError(f"cannot upscale '{name}': it is a {kind} image, not a video; give it its image extension")
        if not container.streams.video:
            raise _refusal(name, "it has no video stream")  # or an MP4 cut inside its index: it lists none
        stream = container.streams.video[0]
        ctx = stream.codec_context
        if ctx is None or ctx.codec is None or not ctx.codec.is_decoder:
            raise _refusal(name, "this FFmpeg has no decoder for its video codec")
        first = _first_frame(container, stream, name)
        rotation = int(first.rotation or 0)
        fmt = av.VideoFormat(first.format.name)
        depth = max(c.bits for c in fmt.components)
        alpha = any(c.is_alpha for c in fmt.components)
        rate = stream.average_rate or stream.guessed_rate
        frames = int(stream.frames or 0)
        listed = frames > 0
        seconds = _seconds(stream, container)
        if not frames and rate:
            frames = round(seconds * float(rate))
        elif listed and rate and seconds and round(seconds * float(rate)) < frames - 1:
            frames = round(seconds * float(rate))  # an edit list (``-ss ... -c copy``) hides the samples it skips
        others = tuple(f"{s.type} {stream_codec(s)}" for s in container.streams if s.index != stream.index)
        aspect = stream.sample_aspect_ratio  # the container's, else the codec's
        return VideoInfo(
            Path(name), first.width, first.height, stream_codec(stream), first.format.name, depth, frames,
            Fraction(stream.time_base), Fraction(rate) if rate else None, rotation, container.format.name, others,
            alpha, listed, seconds, Fraction(aspect) if aspect and aspect != 1 else None,
        )  # fmt: skip


def _unopened(name: str, exc: BaseException) -> str:
    """Why FFmpeg could not open a clip, in the words a user needs."""
    try:
        if os.path.getsize(name) == 0:
            return "the file is empty (0 bytes)"
    except OSError:
        pass
    reason = _reason(exc)
    damaged = _damaged_mp4(name)
    if damaged is None and "invalid data" in reason and _starts_like_mp4(name):
        damaged = f"a damaged or cut-short MP4 / MOV (its index is written last; {reason})"
    return damaged or f"not a video file FFmpeg can open ({reason})"


def _starts_like_mp4(name: str) -> bool:
    """Whether the file opens with an ISO media box (``ftyp``, ``mdat`` ...), as MP4 and MOV files do."""
    try:
        with open(name, "rb") as file:
            head = file.read(8)
    except OSError:
        return False
    return head[4:8] in (b"ftyp", b"mdat", b"moov", b"free", b"wide", b"skip")


#: Top-level boxes walked at most: a file of millions of empty boxes is not worth judging.
_MAX_BOXES = 10_000


def _refusal(name: str, why: str, verb: str = "upscale") -> VideoError:
    """The error for a clip FFmpeg opened but cannot upscale (no video stream, no decoder, no frame): an MP4 / MOV
    whose boxes show it cut short or damaged is said to be that, since FFmpeg then stumbles on what is missing."""
    damaged = _damaged_mp4(name)
    return VideoError(f"cannot read '{name}': {damaged}" if damaged else f"cannot {verb} '{name}': {why}")


def _damaged_mp4(name: str) -> str | None:
    """Why an MP4 / MOV is damaged or cut short, read from its top-level boxes (``_box_damage``), as a reason for
    the user; None when the file is no MP4 or its boxes are whole. FFmpeg's own errors do not say: a file cut
    inside its index opens, with no streams or only some of them."""
    if not _starts_like_mp4(name):
        return None
    try:
        with open(name, "rb") as file:
            damage = _box_damage(file, os.fstat(file.fileno()).st_size)
    except OSError:
        return None
    return f"a damaged or cut-short MP4 / MOV ({damage})" if damage else None


def _box_damage(file: IO[bytes], end: int) -> str | None:
    """What is wrong with an ISO media file's top-level boxes: one that runs past the end of the file or declares
    an impossible size, or no index (``moov``) at all; None when they are whole (or too many to judge)."""
    offset, indexed = 0, False
    for _ in range(_MAX_BOXES):
        if offset >= end:
            return None if indexed else _lost_index("the file ends before its 'moov' box")
        box = _box_header(file, offset)
        if box is None:
            damage = f"the file ends inside the header of its box at byte {offset:,}"
            return damage if indexed else _lost_index(damage)
        kind, size = box
        size = end - offset if size == 0 else size  # 0: the last box, up to the end of the file
        if size < 8:
            return f"its '{kind}' box at byte {offset:,} declares an impossible size ({size} bytes)"
        if offset + size > end:
            what = "its index, the 'moov' box" if kind == "moov" else f"its '{kind}' box"
            damage = f"the file ends {offset + size - end:,} bytes before the end of {what}"
            return damage if indexed or kind == "moov" else _lost_index(damage)
        indexed, offset = indexed or kind == "moov", offset + size
    return None


def _lost_index(damage: str) -> str:
    """``damage`` of a file cut before its index: most MP4s have it last, so that a file cut anywhere lacks it."""
    return f"its index is written last; {damage}"


def _box_header(file: IO[bytes], offset: int) -> tuple[str, int] | None:
    """The type and size of the box at ``offset``: a 32-bit size, the four-character type, and, where that size is
    1, a 64-bit one; None when the file ends inside them."""
    file.seek(offset)
    head = file.read(16)
    size = int.from_bytes(head[:4], "big")
    if len(head) < (16 if size == 1 else 8):
        return None
    kind = "".join(chr(byte) if 32 <= byte < 127 else "?" for byte in head[4:8])  # printable, even if random
    return kind, int.from_bytes(head[8:16], "big") if size == 1 else size


def _seconds(stream: Any, container: Any) -> float:
    """The video's duration: Matroska's per-stream DURATION tag, else the stream's own, else the container's
    (which covers every stream, so audio longer than the picture inflates it); 0 when none says. The tag comes
    first: for Matroska, FFmpeg fills the stream's duration in from the container's."""
    tag = stream.metadata.get("DURATION", "")  # "HH:MM:SS.nnnnnnnnn"
    try:
        hours, minutes, secs = tag.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(secs)
    except ValueError:
        pass
    if stream.duration:
        return float(stream.duration * stream.time_base)
    return container.duration / 1_000_000 if container.duration else 0.0


def frame_decoder(stream: Any, threads: int = 0) -> Callable[[Any], list[Any]]:
    """``decode(packet) -> frames`` for a video stream: its own decoder, or libvpx's for VP8/VP9 with alpha
    (``alpha_mode`` in WebM / Matroska), which FFmpeg's own decoder would silently make opaque."""
    av = require_av()
    name = _ALPHA_DECODERS.get(stream.codec_context.name)
    if name is None or stream.metadata.get("alpha_mode") != "1" or not has_decoder(name):
        return lambda packet: list(packet.decode())
    context = av.CodecContext.create(name, "r")
    context.thread_count = threads
    return lambda packet: list(context.decode(packet))


def has_decoder(name: str) -> bool:
    av = require_av()
    try:
        av.Codec(name, "r")
    except (av.error.FFmpegError, ValueError):
        return False
    return True


def _first_frame(container: Any, stream: Any, name: str) -> Any:
    """The first decodable frame; a stream none of whose first packets decode is damaged or encrypted."""
    av = require_av()
    errors = 0
    decode = frame_decoder(stream)
    try:
        for packet in container.demux(stream):
            if packet.size and _encrypted(packet):
                raise VideoError(f"cannot upscale '{name}': its video is encrypted (DRM), which sst-cli cannot decrypt")
            try:
                for frame in decode(packet):
                    return frame
            except av.error.InvalidDataError:
                errors += 1
                if errors >= 8:
                    break
    except av.error.FFmpegError as exc:
        raise _refusal(name, _reason(exc), verb="read") from None
    why = "its frames cannot be decoded (damaged, or protected by DRM)" if errors else "it holds no video frames"
    raise _refusal(name, why)


def _encrypted(packet: Any) -> bool:
    """True for a packet the demuxer marks as encrypted (CENC in MP4 / MOV: Widevine, PlayReady, ...)."""
    has = getattr(packet, "has_sidedata", None)  # absent from older PyAV
    try:
        return bool(has is not None and has("encryption_info"))
    except ValueError:  # an FFmpeg without that kind of side data
        return False


def stream_codec(stream: Any) -> str:
    """The codec's name; data streams have no codec context, only the codec id's name (``klv``; None: unknown)."""
    ctx = getattr(stream, "codec_context", None)
    if ctx is not None and ctx.codec is not None:
        return str(ctx.codec.canonical_name)
    return str(getattr(stream, "name", None) or "unknown")


def unreadable(path: str | os.PathLike[str], exc: BaseException) -> VideoError:
    """A clip failing part-way through reading (an input disk error, a demuxer or decoder fault), said as such."""
    return VideoError(f"cannot read '{os.fspath(path)}': {_reason(exc)}")


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return text.rstrip(".").lower() if text else type(exc).__name__


# --------------------------------------------------------------------------------------- encoding plan


@dataclass(frozen=True)
class EncodePlan:
    """How one result is written: encoder, pixel format, container, size (cropped to even where needed)."""

    codec: str
    pix_fmt: str
    muxer: str  # FFmpeg muxer name
    extension: str  # output file extension without the dot
    width: int
    height: int
    rgb_depth: int  # 8 or 16: frames go through the network as uint8 or uint16 RGB
    options: dict[str, str]
    notes: tuple[str, ...] = ()
    alpha: bool = False  # transparency is upscaled and kept (RGBA through the network)
    warnings: tuple[str, ...] = ()  # what the result loses (transparency)
    time_base: Fraction | None = None  # the encoder's where it cannot take the input's (``encoder_time_base``)
    matrix: int | None = None  # the YUV matrix (AVColorSpace) where the codec fixes one, else None: the input's


def output_extension(source: Path, options: VideoOptions, codec: str | None = None) -> str:
    """The container extension of the result: the input's when sst-cli writes it and it holds ``codec``, else
    Matroska, else the first container that does (MOV for PNG and QuickTime RLE)."""
    if options.lossless:
        return "mkv"
    ext = source.suffix.lower().lstrip(".")
    ext = ext if ext in _MUXERS else "mkv"
    if codec is None or _holds(ext, codec):
        return ext
    return next((other for other in ("mkv", "mov", "mp4") if _holds(other, codec)), "mkv")


def _holds(ext: str, codec: str) -> bool:
    """Whether sst-cli's container for ``ext`` takes video of this encoder (a .webm of H.264 would play nowhere)."""
    if ext == "ts":
        return codec in _TS_VIDEO  # MPEG-TS's muxer lists only its default codecs
    if ext == "mov" and codec in _MOV_REFUSES:
        return False
    return codec in _muxer_codecs(_MUXERS[ext])


@functools.cache
def _muxer_codecs(muxer: str) -> frozenset[str]:
    with require_av().open(io.BytesIO(), "w", format=muxer) as probe:
        return frozenset(probe.supported_codecs)


def target_container(target: Path, options: VideoOptions, codec: str) -> str:
    """The container a named output file asks for by its extension, refused in one sentence where sst-cli does
    not write that container or it cannot hold ``codec``, saying which extension would."""
    ext = target.suffix.lower().lstrip(".")
    if ext not in _MUXERS:
        names = ", ".join(f".{e}" for e in _MUXERS)
        raise ConfigError(f"cannot write '{target}': sst-cli writes video as {names}")
    fitting = output_extension(target, options, codec)  # what a clip so named becomes when nothing is asked
    if fitting != ext:
        what = "--lossless (FFV1)" if options.lossless else codec
        other = " or pass a WebM codec (--codec libvpx-vp9)" if ext == "webm" and not options.lossless else ""
        raise ConfigError(f"cannot write '{target}': {what} does not go in .{ext}; name it .{fitting}{other}")
    return ext


def has_encoder(name: str) -> bool:
    av = require_av()
    try:
        av.Codec(name, "w")
    except (av.error.FFmpegError, ValueError):
        return False
    return True


def check_video_options(options: VideoOptions) -> None:
    """Refuse, before any clip is probed or image upscaled, what the options alone make impossible: an encoder
    this FFmpeg lacks, ``--crf`` or ``--pix-fmt`` that ``--codec`` does not take, an unknown pixel format."""
    if options.lossless:
        return
    if options.codec is not None:
        _check_codec(options.codec, options)
    elif options.pix_fmt is not None:
        _known_format(options.pix_fmt)


def choose_codec(info: VideoInfo, options: VideoOptions) -> str:
    """``--codec``, else an encoder of the input's family, else H.264 (MPEG-4 Part 2 without libx264); with
    ``--crf`` and ``--pix-fmt`` checked against it, before any frame is computed."""
    if options.lossless:
        return LOSSLESS_CODEC
    codec = options.codec or next((n for n in _FAMILY.get(info.codec, ()) + _FALLBACK if has_encoder(n)), None)
    if codec is None:
        raise ConfigError("this FFmpeg has no video encoder sst-cli knows; pass --codec")
    _check_codec(codec, options)
    return codec


def _check_codec(codec: str, options: VideoOptions) -> None:
    if options.codec is not None:
        if not has_encoder(codec):
            raise ConfigError(f"this FFmpeg has no encoder '{codec}' (try libx264, libx265, libvpx-vp9, ffv1)")
        if require_av().Codec(codec, "w").type != "video":
            raise ConfigError(f"--codec {codec} is not a video encoder (try libx264, libx265, libvpx-vp9, ffv1)")
    if options.crf is not None:
        if codec not in _CRF_MAX:
            raise ConfigError(f"--crf applies to x264, x265, VP8/VP9 and AV1 encoders, not {codec}")
        if options.crf > _CRF_MAX[codec]:
            raise ConfigError(f"{codec} takes --crf 0 to {_CRF_MAX[codec]}, not {options.crf}")
    if options.pix_fmt is not None:
        _known_format(options.pix_fmt)
        formats = [f.name for f in (require_av().Codec(codec, "w").video_formats or ())]
        if formats and options.pix_fmt not in formats:
            raise ConfigError(f"{codec} cannot write pixel format {options.pix_fmt}; it takes {', '.join(formats)}")


def _known_format(pix_fmt: str) -> None:
    try:
        require_av().VideoFormat(pix_fmt)
    except ValueError:
        raise ConfigError(f"--pix-fmt {pix_fmt} is not a pixel format FFmpeg knows") from None


def plan_encoding(
    info: VideoInfo, out_width: int, out_height: int, options: VideoOptions, target: Path | None = None
) -> EncodePlan:
    """Codec, pixel format, container and final size of the result of ``info`` upscaled to ``out_width`` x
    ``out_height``; the container is ``target``'s (``target_container``), else ``output_extension``'s. More than
    8 bits stay more than 8 bits where the encoder allows; chroma-subsampled formats need even sides, so an odd
    side loses its last row or column (said in ``notes``)."""
    av = require_av()
    codec = choose_codec(info, options)
    ext = (
        target_container(target, options, codec) if target is not None else output_extension(info.path, options, codec)
    )
    deep = info.bit_depth > 8
    formats = [f.name for f in (av.Codec(codec, "w").video_formats or ())]
    alpha = info.alpha and codec in ALPHA_ENCODERS
    if options.lossless:
        pix_fmt = ("gbrap16le" if alpha else "gbrp16le") if deep else ("bgra" if alpha else "bgr0")
    elif options.pix_fmt is not None:  # checked by choose_codec
        pix_fmt = options.pix_fmt
    else:
        pix_fmt = _nearest_format(info.pix_fmt, info.bit_depth, formats, alpha)
    alpha = alpha and has_alpha(pix_fmt)
    warnings = []
    if info.alpha and not alpha:
        why = f"{codec} cannot store it" if codec not in ALPHA_ENCODERS else f"{pix_fmt} has no alpha"
        warnings.append(
            f"'{info.path}' has an alpha channel (transparency), which is dropped: {why} (--codec ffv1, prores_ks, "
            "libvpx-vp9, png or qtrle, or --lossless, keep it)"
        )
    muxer = _MUXERS.get(ext, "matroska")
    warnings.extend(_lost_geometry(info, codec, muxer, ext))
    notes: list[str] = []
    if deep and _depth(pix_fmt) <= 8 and options.pix_fmt is None:  # a --pix-fmt chose 8 bits: nothing to say
        notes.append(f"{codec} cannot store {info.bit_depth}-bit samples: writing 8-bit {pix_fmt}")
    opts: dict[str, str] = {}
    if options.crf is not None:  # checked by choose_codec
        opts["crf"] = str(options.crf)
        if codec in ("libvpx-vp9", "libvpx"):
            opts["b"] = "0"  # constant quality, not a bitrate cap
    if codec == LOSSLESS_CODEC:
        opts.update(level="3", slicecrc="1")
    if codec == "mjpeg" and not pix_fmt.startswith("yuvj"):
        opts["strict"] = "unofficial"  # FFmpeg's MJPEG encoder takes limited-range YUV only when told to
    if codec == "libx265":
        opts["x265-params"] = "log-level=error"  # x265 otherwise prints its own summary on stderr
    if codec == "libsvtav1":
        os.environ.setdefault("SVT_LOG", "1")  # errors only: SVT-AV1 prints ~20 lines of its settings otherwise
    depth = 16 if deep and (options.lossless or _depth(pix_fmt) > 8) else 8
    time_base, rate = encoder_time_base(codec, info), output_rate(info)
    width, height = _stored_size(codec, pix_fmt, out_width, out_height, opts, notes, time_base, rate)
    _try_encoder(codec, pix_fmt, width, height, opts, time_base, rate)
    # JPEG is BT.601: FFmpeg's MJPEG decoder tags every frame so, whatever the file says (a BT.709 result read
    # back 5 levels off), so an MJPEG result is converted with BT.601 and tagged so
    return EncodePlan(
        codec, pix_fmt, muxer, ext, width, height, depth, opts, tuple(notes), alpha, tuple(warnings),
        time_base if time_base != info.time_base else None, _BT470BG if codec == "mjpeg" else None,
    )  # fmt: skip


def _lost_geometry(info: VideoInfo, codec: str, muxer: str, ext: str) -> list[str]:
    """Warnings for a display rotation or non-square pixels that the result cannot store, so that a picture shown
    turned or stretched differently from its source is never a surprise."""
    lost = []
    if info.rotation and muxer not in _ROTATION_MUXERS:
        lost.append(
            f"'{info.path}' is displayed rotated by {info.rotation} degrees, which .{ext} cannot store: the result "
            "plays unrotated (.mp4, .mov or .mkv keep it)"
        )
    if info.aspect and muxer not in _SAR_MUXERS and codec not in _SAR_ENCODERS:
        lost.append(
            f"'{info.path}' has non-square pixels (aspect ratio {info.aspect}), which {codec} in .{ext} cannot store: "
            "the result plays with square pixels (.mp4 or .mov keep it)"
        )
    return lost


def _stored_size(
    codec: str,
    pix_fmt: str,
    width: int,
    height: int,
    opts: dict[str, str],
    notes: list[str],
    time_base: Fraction,
    rate: Fraction,
) -> tuple[int, int]:
    """The result's size as ``codec`` stores it: sides that are no multiple of ``pix_fmt``'s chroma block (2 for
    4:2:0, 4 for yuv411p / yuv410p) are cropped only when the encoder refuses them (x264 and x265 do; FFV1, VP9,
    AV1 store any size), with a note of what is lost."""
    av = require_av()
    fmt = av.VideoFormat(pix_fmt)
    block_w, block_h = 64 // fmt.chroma_width(64), 64 // fmt.chroma_height(64)
    cropped = width - width % block_w, height - height % block_h
    if cropped == (width, height) or _encoder_error(codec, pix_fmt, width, height, opts, time_base, rate) is None:
        return width, height
    cuts = (("column", width % block_w), ("row", height % block_h))
    lost = " and ".join(side if n == 1 else f"{n} {side}s" for side, n in cuts if n)
    sides = "even sides" if (block_w, block_h) in ((2, 2), (2, 1)) else f"sides in multiples of {block_w}x{block_h}"
    notes.append(
        f"{codec} {pix_fmt} needs {sides}: the {width}x{height} result loses its last {lost} "
        f"({cropped[0]}x{cropped[1]}); --pix-fmt yuv444p or --lossless keep every pixel"
    )
    return cropped


def _encoder_error(
    codec: str, pix_fmt: str, width: int, height: int, opts: dict[str, str], time_base: Fraction, rate: Fraction
) -> str | None:
    """Why the encoder cannot open as the result will (milliseconds), in the result's time base and frame rate
    (without one, encoders that check it, as SVT-AV1 does, read 1/time base: 1000 frames/s); None when it can.
    What the encoder prints itself is kept off the terminal (a refused size is then cropped, and the run goes
    on); its first error line is the reason, where it said one."""
    av = require_av()
    context = av.CodecContext.create(codec, "w")
    context.width, context.height, context.pix_fmt = width, height, pix_fmt
    context.time_base, context.framerate = time_base, rate
    context.options = dict(opts)
    said: list[str] = []
    try:
        with _stderr_into(said):
            context.open()
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        error = next((line.split("]: ", 1)[-1].strip() for line in said if "error" in line.lower()), "")
        return error[:1].lower() + error[1:].rstrip(".") if error else _reason(exc)
    return None


@contextlib.contextmanager
def _stderr_into(lines: list[str]) -> Iterator[None]:
    """The process's stderr (fd 2) into ``lines`` meanwhile: x265 and SVT-AV1 write their errors there
    themselves, past FFmpeg's log level. Nothing is caught where fd 2 cannot be redirected."""
    try:
        if sys.stderr is not None:
            sys.stderr.flush()  # what Python wrote before stays where it was going
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2, or a closed sys.stderr
        saved = -1
    if saved < 0:
        yield
        return
    with tempfile.TemporaryFile() as caught:
        try:
            os.dup2(caught.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines.extend(caught.read().decode(errors="replace").splitlines())


def _try_encoder(
    codec: str, pix_fmt: str, width: int, height: int, opts: dict[str, str], time_base: Fraction, rate: Fraction
) -> None:
    """Open the encoder as the result will, so that one that cannot start (a GPU encoder without its GPU, a size
    it refuses) fails in one sentence before any frame is computed."""
    reason = _encoder_error(codec, pix_fmt, width, height, opts, time_base, rate)
    if reason is not None:
        raise VideoError(f"the encoder {codec} cannot start for {width}x{height} {pix_fmt}: {reason}")


#: Encoders whose time base must fit 16 bits (MPEG-4 part 2 and H.263 store it so): MPEG-TS's 1/90000 does not.
_SHORT_TIME_BASE = frozenset({"mpeg4", "h263", "h263p", "msmpeg4", "msmpeg4v2", "flv"})
#: Encoders that store a frame rate from a fixed list, one tick a frame, in place of timestamps.
_LISTED_RATES = frozenset({"mpeg1video", "mpeg2video"})
_MPEG_RATES = tuple(
    Fraction(n, d)
    for n, d in ((24000, 1001), (24, 1), (25, 1), (30000, 1001), (30, 1), (50, 1), (60000, 1001), (60, 1))
)


def encoder_time_base(codec: str, info: VideoInfo) -> Fraction:
    """The time base ``codec`` encodes in: the input's (timestamps copied as they are); for encoders that take
    denominators up to 65535 only, the nearest coarser one that divides it evenly (1/90000 -> 1/45000); for MPEG-1/2,
    one frame of the clip's rate, which must be one of the rates they store."""
    time_base = info.time_base
    if codec in _LISTED_RATES:
        rate = next((r for r in _MPEG_RATES if info.rate and abs(info.rate / r - 1) < 1e-3), None)  # 29.97 is NTSC's
        if rate is None:
            listed = ", ".join(f"{float(r):g}" for r in _MPEG_RATES)
            shown = f"{float(info.rate):g} frames/s" if info.rate else "no constant frame rate"
            raise VideoError(
                f"{codec} stores only the frame rates {listed}; '{info.path}' has {shown}: choose another --codec"
            )
        return 1 / rate
    if codec not in _SHORT_TIME_BASE or time_base.denominator <= 65535:
        return time_base
    for step in range(2, time_base.denominator):
        if time_base.denominator % step == 0 and time_base.denominator // step <= 65535:
            return Fraction(time_base.numerator, time_base.denominator // step)
    return time_base.limit_denominator(65535)


def output_rate(info: VideoInfo) -> Fraction:
    """The frame rate the encoder is told (rate control, and checks such as SVT-AV1's 240 frames/s at most): the
    clip's, else 25 where it has no constant one."""
    return info.rate or Fraction(25)


def has_alpha(pix_fmt: str) -> bool:
    av = require_av()
    return any(c.is_alpha for c in av.VideoFormat(pix_fmt).components)


def _depth(pix_fmt: str) -> int:
    av = require_av()
    return int(max(c.bits for c in av.VideoFormat(pix_fmt).components))


def _nearest_format(source: str, depth: int, formats: list[str], alpha: bool = False) -> str:
    """The input's pixel format if the encoder takes it, else one with its depth and chroma, else 8-bit 4:2:0;
    with ``alpha``, formats with an alpha channel first (the deepest when none has the input's depth)."""
    if not formats or source in formats:
        return source
    chroma = next((c for c in ("444", "422", "420") if c in source), "420")
    if alpha:
        with_alpha = [f for f in formats if has_alpha(f) and not f.startswith("ya")]  # not gray + alpha
        if with_alpha:
            same = [f for f in with_alpha if _depth(f) == depth] or [max(with_alpha, key=_depth)]
            return next((f for f in same if chroma in f), same[0])
    same_depth = [f for f in formats if _depth(f) == depth and not f.startswith(("gbr", "yuva"))]
    for candidate in same_depth:
        if chroma in candidate:
            return candidate
    if same_depth:
        return same_depth[0]
    return "yuv420p" if "yuv420p" in formats else formats[0]


def open_output_stream(output: Any, info: VideoInfo, source_stream: Any, plan: EncodePlan, threads: int = 0) -> Any:
    """The encoder stream of the result: the input's time base (timestamps are copied, so variable frame rates
    stay), colour description and display rotation; ``threads`` encoder threads (0: FFmpeg's choice)."""
    stream = output.add_stream(plan.codec, rate=output_rate(info), options=plan.options)
    stream.width, stream.height, stream.pix_fmt = plan.width, plan.height, plan.pix_fmt
    stream.time_base = plan.time_base or info.time_base
    ctx = stream.codec_context
    ctx.time_base = plan.time_base or info.time_base
    ctx.thread_count = threads
    if info.aspect:
        ctx.sample_aspect_ratio = info.aspect  # unchanged by upscaling: both sides grow alike
    source = source_stream.codec_context
    if not _is_rgb(plan.pix_fmt):
        for key in ("color_primaries", "color_trc", "colorspace", "color_range"):
            setattr(ctx, key, getattr(source, key))
        if _is_rgb(info.pix_fmt) and _matrix(source) is None:
            ctx.colorspace = _BT601  # RGB names no YUV matrix: array_to_frame used its default, BT.601
        if plan.matrix is not None:
            ctx.colorspace = plan.matrix
    else:
        for key in ("color_primaries", "color_trc"):
            setattr(ctx, key, getattr(source, key))
    if info.rotation:
        stream.set_display_rotation(info.rotation)
    return stream


def frame_to_array(frame: Any, rgb_depth: int, alpha: bool = False) -> Any:
    """A decoded frame as (H, W, 3) uint8 or uint16 RGB (RGBA with ``alpha``), converted with the frame's own
    matrix and range. YUV is converted here, exactly (``_yuv_to_rgb``): swscale's fixed-point matrix was up to 3.7
    levels off (10-bit to RGB24; 2.7 for 8-bit 4:2:0 to RGB48); it only upsamples the chroma to 4:4:4 of the same
    depth."""
    twin = _yuv444(frame.format.name)
    if twin is None:  # RGB, gray, palette: no matrix
        fmt = ("rgba64le" if alpha else "rgb48le") if rgb_depth > 8 else ("rgba" if alpha else "rgb24")
        return frame.to_ndarray(format=fmt, src_colorspace=_matrix(frame), src_color_range=frame.color_range or None)
    matrix, full = _matrix(frame), _full_range(frame)
    color_range = 2 if full else 1
    frame = frame.reformat(format=twin, src_colorspace=matrix, dst_colorspace=matrix,
                           src_color_range=color_range, dst_color_range=color_range)  # fmt: skip
    planes = _planes(frame)
    out = np.empty((frame.height, frame.width, 4 if alpha else 3), np.uint16 if rgb_depth > 8 else np.uint8)
    _yuv_to_rgb(planes[:3], _depth(twin), full, matrix, out)
    if alpha:
        peak = np.iinfo(out.dtype).max
        out[..., 3] = _rescaled(planes[3], _depth(twin), peak) if len(planes) == 4 else peak
    return out


def array_to_frame(array: Any, plan: EncodePlan, like: Any) -> av.VideoFrame:
    """(H, W, 3) RGB or (H, W, 4) RGBA back into a frame of the plan's pixel format, with the source frame's
    matrix and range. YUV is computed here, exactly (``_rgb_to_yuv``), as 4:4:4 of the plan's depth: swscale's own
    matrix was up to 1.2 levels off (8-bit full range; 0.9 level at 10 or 16 bits); it only subsamples the chroma
    and repacks."""
    import av as _av

    array = array[: plan.height, : plan.width]
    matrix = _matrix(like) if plan.matrix is None else plan.matrix
    twin = _yuv444(plan.pix_fmt)
    if twin is None:
        four = array.shape[2] == 4
        fmt = ("rgba64le" if four else "rgb48le") if array.dtype.itemsize == 2 else ("rgba" if four else "rgb24")
        frame = _av.VideoFrame.from_ndarray(array, format=fmt)
        if _is_rgb(plan.pix_fmt):
            return frame.reformat(format=plan.pix_fmt)
        return frame.reformat(format=plan.pix_fmt, dst_colorspace=matrix, dst_color_range=like.color_range or 1)
    full = like.color_range == 2 or plan.pix_fmt.startswith("yuvj")  # unspecified means limited for YUV
    color_range = 2 if full else 1
    frame = _av.VideoFrame(array.shape[1], array.shape[0], twin)
    frame.colorspace, frame.color_range = plan.matrix or int(like.colorspace or 2), color_range
    planes = _planes(frame)
    _rgb_to_yuv(array[..., :3], _depth(twin), full, matrix, planes[:3])
    if len(planes) == 4:
        peak = (1 << _depth(twin)) - 1
        planes[3][...] = _rescaled(array[..., 3], 8 * array.dtype.itemsize, peak) if array.shape[2] == 4 else peak
    return frame.reformat(format=plan.pix_fmt, src_colorspace=matrix, dst_colorspace=matrix,
                          src_color_range=color_range, dst_color_range=color_range)  # fmt: skip


@functools.cache
def _yuv444(pix_fmt: str) -> str | None:
    """The planar 4:4:4 YUV format of ``pix_fmt``'s depth (with alpha where it has it), which swscale converts
    ``pix_fmt`` to and from with no matrix, only resampling the chroma; None for formats that are not YUV (RGB,
    gray, XYZ, palette) or have no such twin (14-bit with alpha, float)."""
    av = require_av()
    parts = av.VideoFormat(pix_fmt).components
    if _is_rgb(pix_fmt) or len(parts) < 3 or pix_fmt.startswith("xyz"):
        return None
    depth = max(c.bits for c in parts)
    twin = ("yuva444p" if any(c.is_alpha for c in parts) else "yuv444p") + (f"{depth}le" if depth > 8 else "")
    try:
        av.VideoFormat(twin)
    except ValueError:
        return None
    return twin


def _full_range(frame: Any) -> bool:
    """Whether a YUV frame is full (JPEG) range: tagged so, or a yuvj format; untagged means limited."""
    return bool(frame.color_range == 2 or frame.format.name.startswith("yuvj"))


def _planes(frame: Any) -> list[Any]:
    """The planes of a planar frame as (H, W) views of its memory (writable: new frames are filled through them)."""
    dtype = np.dtype("<u2") if _depth(frame.format.name) > 8 else np.dtype(np.uint8)
    return [
        np.frombuffer(p, dtype).reshape(p.height, p.line_size // dtype.itemsize)[:, : p.width] for p in frame.planes
    ]


def _rescaled(samples: Any, depth: int, peak: int) -> Any:
    """``depth``-bit samples (alpha) as 0..``peak``, rounded."""
    if (1 << depth) - 1 == peak:
        return samples
    return np.rint(samples * (peak / ((1 << depth) - 1)))


#: Kr and Kb of the matrices ``_matrix`` gives: BT.709, FCC, BT.601, SMPTE 240M, BT.2020 (non-constant luminance).
_KR_KB = {1: (0.2126, 0.0722), 4: (0.30, 0.11), 5: (0.299, 0.114), 7: (0.212, 0.087), 9: (0.2627, 0.0593)}


def _yuv_levels(depth: int, full: bool) -> tuple[float, float, float, float]:
    """Black, luma span, neutral chroma and chroma span of ``depth``-bit YUV (BT.601 / BT.709 / BT.2020 levels)."""
    if full:
        peak = (1 << depth) - 1
        return 0.0, peak, 1 << (depth - 1), peak
    step = 1 << (depth - 8)
    return 16.0 * step, 219.0 * step, 128.0 * step, 224.0 * step


def _float_for(peak: int) -> Any:
    """float32 where its rounding error (~1e-7 of the result) cannot move a result of 0..``peak`` past its
    rounding; float64 for 16-bit results, where float32 could be 0.02 off."""
    return np.float32 if peak < 1 << 12 else np.float64


def _yuv_to_rgb(yuv: list[Any], depth: int, full: bool, matrix: int | None, out: Any) -> None:
    """Exact YUV -> RGB into ``out``'s first three channels, rounded to its integer type."""
    kr, kb = _KR_KB[matrix or 5]
    kg = 1 - kr - kb
    black, y_span, grey, c_span = _yuv_levels(depth, full)
    peak = int(np.iinfo(out.dtype).max)
    to_y, to_c = peak / y_span, peak / c_span
    luma = yuv[0].astype(_float_for(peak))
    luma *= to_y
    cb, cr = (c.astype(luma.dtype) for c in yuv[1:])
    value, term = np.empty_like(luma), np.empty_like(luma)
    weights = ((0.0, 2 * (1 - kr)), (-2 * kb * (1 - kb) / kg, -2 * kr * (1 - kr) / kg), (2 * (1 - kb), 0.0))
    for channel, (wb, wr) in enumerate(weights):
        # offsets folded into one constant; + 0.5 because the cast into ``out`` truncates, so that it rounds
        np.add(luma, 0.5 - black * to_y - (wb + wr) * grey * to_c, out=value)
        for chroma, weight in ((cb, wb), (cr, wr)):
            if weight:
                value += np.multiply(chroma, weight * to_c, out=term)
        out[..., channel] = np.clip(value, 0, peak, out=value)


def _rgb_to_yuv(rgb: Any, depth: int, full: bool, matrix: int | None, yuv: list[Any]) -> None:
    """Exact RGB -> ``depth``-bit YUV, rounded, into the planes ``yuv``."""
    kr, kb = _KR_KB[matrix or 5]
    black, y_span, grey, c_span = _yuv_levels(depth, full)
    top = (1 << depth) - 1
    scale = 1 / np.iinfo(rgb.dtype).max
    r, g, b = (rgb[..., i].astype(_float_for(top)) for i in range(3))
    luma = np.multiply(r, kr)
    luma += np.multiply(g, 1 - kr - kb, out=g)
    luma += np.multiply(b, kb, out=g)
    b -= luma
    b *= scale * c_span / (2 * (1 - kb))
    r -= luma
    r *= scale * c_span / (2 * (1 - kr))
    luma *= scale * y_span
    for plane, value, offset in ((yuv[0], luma, black), (yuv[1], b, grey), (yuv[2], r, grey)):
        value += offset + 0.5  # the cast into ``plane`` truncates: + 0.5 rounds
        plane[...] = np.clip(value, 0, top, out=value)


#: Colour matrices (AVColorSpace) -> the matrix converted with (_KR_KB; swscale's ids); others (unspecified) are BT.601.
_MATRICES = {1: 1, 4: 4, 5: 5, 6: 5, 7: 7, 9: 9, 10: 9}
_BT601 = 6  # AVCOL_SPC_SMPTE170M: the tag PyAV gives its BT.601 conversions
_BT470BG = 5  # BT.601 as JPEG names it: FFmpeg's MJPEG decoder tags its frames so


def _is_rgb(pix_fmt: str) -> bool:
    av = require_av()
    return bool(av.VideoFormat(pix_fmt).is_rgb)


def _matrix(frame: Any) -> int | None:
    """The swscale matrix of a frame's (or codec context's) colour matrix; None: swscale's default, BT.601."""
    return _MATRICES.get(int(frame.colorspace or 2))
