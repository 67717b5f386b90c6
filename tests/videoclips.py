"""Tiny clips made with PyAV at test time: a few random frames, variable timestamps, AAC audio, metadata."""

from __future__ import annotations

from collections.abc import Collection
from fractions import Fraction
from pathlib import Path

import numpy as np

VFR_MS = (0, 40, 100, 120, 200, 260)  # frame times in ms: gaps of 40, 60, 20, 80, 60 (variable frame rate)
LABELS = {  # make_clip(labels=True): what a film's file says about itself
    "container": {"title": "A film", "comment": "scanned from 16 mm"},
    "video": {"language": "fra", "title": "Main picture"},
    "audio": {"language": "jpn", "title": "Japanese"},
    "subtitle": {"language": "eng", "title": "Signs"},
}
CHAPTERS = [  # make_clip(labels=True): in ms
    {"id": 1, "start": 0, "end": 40, "metadata": {"title": "Opening"}},
    {"id": 2, "start": 40, "end": 120, "metadata": {"title": "Part A"}},
]


def make_clip(
    path: Path,
    *,
    size: tuple[int, int] = (32, 24),
    pts_ms: tuple[int, ...] = VFR_MS,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    audio: bool = True,
    video: bool = True,
    rotation: int = 0,
    bt709: bool = True,
    corrupt: Collection[int] = (),
    subtitles: bool = False,
    colour: tuple[int, int, int] | None = None,
    seed: int = 0,
    options: dict[str, str] | None = None,
    tags: tuple[int, int, int, int] | None = None,
    data: str | None = None,
    timecode: str | None = None,
    labels: bool = False,
    aspect: Fraction | None = None,
    attachment: tuple[str, str, bytes] | None = None,
    second_video: bool = False,
) -> Path:
    """Write a clip; ``corrupt`` replaces those frames' packets with garbage bytes (an intra-only codec keeps the
    damage to that one frame); a ``pix_fmt`` with alpha gets random transparency; ``options`` go to the muxer;
    ``tags``: colour primaries, transfer, matrix and range (instead of BT.709 limited); ``data``: a data stream
    of that codec (MPEG-TS: ``klv``) with one packet b"data i" per frame; ``timecode``: the video's start
    timecode (MOV / MP4 write it as a ``tmcd`` track); ``labels``: the tags and flags of ``LABELS`` on the container
    and streams; ``aspect``: the sample (pixel) aspect ratio; ``attachment``: (name, mimetype, data) of a Matroska
    attachment; ``second_video``: a second video stream of the same frames."""
    import av

    rng = np.random.default_rng(seed)
    alpha = any(c.is_alpha for c in av.VideoFormat(pix_fmt).components)
    with av.open(str(path), "w", options=options or {}) as out:
        if labels:
            out.metadata.update(LABELS["container"])
            out.set_chapters([dict(c, time_base=Fraction(1, 1000)) for c in CHAPTERS])
        streams = []
        extra = None
        if video:
            vs = out.add_stream(codec, rate=25)
            vs.width, vs.height, vs.pix_fmt = size[0], size[1], pix_fmt
            vs.time_base = vs.codec_context.time_base = Fraction(1, 1000)
            if bt709 or tags:
                ctx = vs.codec_context
                primaries, trc, matrix, full = tags or (1, 1, 1, 1)  # BT.709, limited (MPEG) range
                ctx.color_primaries, ctx.color_trc, ctx.colorspace, ctx.color_range = primaries, trc, matrix, full
            if timecode:
                vs.metadata["timecode"] = timecode
            if rotation:
                vs.set_display_rotation(rotation)
            if labels:
                vs.metadata.update(LABELS["video"])
            if aspect:
                vs.codec_context.sample_aspect_ratio = aspect
            streams.append(vs)
            if second_video:
                extra = out.add_stream(codec, rate=25)
                extra.width, extra.height, extra.pix_fmt = size[0], size[1], pix_fmt
                extra.time_base = extra.codec_context.time_base = Fraction(1, 1000)
                streams.append(extra)
        if attachment:
            out.add_attachment(*attachment)
        if audio:
            sound = out.add_stream("aac", rate=8000)
            sound.layout = "mono"
            if labels:
                sound.metadata.update(LABELS["audio"])
                sound.disposition = av.stream.Disposition.default
        if data:
            ds = out.add_data_stream(data)
            ds.time_base = Fraction(1, 1000)
        if subtitles:  # SubRip text, muxed as it is (Matroska)
            text = out.add_mux_stream("subrip")
            text.time_base = Fraction(1, 1000)
            if labels:
                text.metadata.update(LABELS["subtitle"])
                text.disposition = av.stream.Disposition.forced
            for i, pts in enumerate(pts_ms):
                line = av.Packet(f"line {i}".encode())
                line.pts, line.dts, line.duration, line.time_base, line.stream = pts, pts, 30, Fraction(1, 1000), text
                out.mux(line)
        if video:
            deep = "10" in pix_fmt or "16" in pix_fmt
            for i, pts in enumerate(pts_ms):
                if deep:
                    pixels = rng.integers(0, 65536, (size[1], size[0], 4 if alpha else 3), dtype=np.uint16)
                    if colour is not None:
                        pixels[:] = np.array(colour, np.uint16) * 257
                    frame = av.VideoFrame.from_ndarray(pixels, format="rgba64le" if alpha else "rgb48le")
                else:
                    pixels = rng.integers(0, 256, (size[1], size[0], 4 if alpha else 3), dtype=np.uint8)
                    if colour is not None:
                        pixels[:] = colour
                    frame = av.VideoFrame.from_ndarray(pixels, format="rgba" if alpha else "rgb24")
                matrix, full = (tags[2], tags[3]) if tags else (1 if bt709 else None, None)
                frame = frame.reformat(format=pix_fmt, dst_colorspace=matrix, dst_color_range=full)
                frame.pts, frame.time_base = pts, Fraction(1, 1000)
                if data:
                    blob = av.Packet(f"data {i}".encode())
                    blob.pts, blob.dts, blob.time_base, blob.stream = pts, pts, Fraction(1, 1000), ds
                    out.mux(blob)
                if extra is not None:
                    out.mux(extra.encode(frame))
                for packet in vs.encode(frame):
                    if i in corrupt:
                        bad = av.Packet(bytes(rng.integers(0, 256, packet.size, dtype=np.uint8)))
                        bad.pts, bad.dts, bad.time_base, bad.stream = packet.pts, packet.dts, packet.time_base, vs
                        packet = bad
                    out.mux(packet)
            out.mux(vs.encode(None))
            if extra is not None:
                out.mux(extra.encode(None))
        if audio:
            for i in range(4):
                wave = np.sin(np.arange(1024, dtype=np.float32)[None] * 0.05 * (i + 1))
                chunk = av.AudioFrame.from_ndarray(wave, format="fltp", layout="mono")
                chunk.sample_rate, chunk.pts = 8000, i * 1024
                out.mux(sound.encode(chunk))
            out.mux(sound.encode(None))
    return path


def resized_ts(path: Path) -> Path:
    """An MPEG-TS whose frames change size mid-stream: three 32x24 frames, then three 48x32 (as broadcast
    recordings do when the programme changes)."""
    first = make_clip(path.with_name("first.ts"), pts_ms=(0, 40, 80), audio=False)
    second = make_clip(path.with_name("second.ts"), size=(48, 32), pts_ms=(120, 160, 200), audio=False, seed=1)
    path.write_bytes(first.read_bytes() + second.read_bytes())
    first.unlink()
    second.unlink()
    return path


def decoded(path: Path, decoder: str | None = None) -> tuple[list, Fraction]:
    """The clip's video frames (those that decode) and its video time base; ``decoder``: another decoder than the
    stream's own (libvpx-vp9 reads VP9's alpha)."""
    import av

    frames = []
    with av.open(str(path)) as clip:
        stream = clip.streams.video[0]
        context = av.CodecContext.create(decoder, "r") if decoder else stream.codec_context
        for packet in clip.demux(stream):
            try:
                frames.extend(context.decode(packet))
            except av.error.InvalidDataError:
                continue  # a damaged packet: its frame is missing
        return frames, Fraction(stream.time_base)


def seconds(path: Path) -> list[Fraction]:
    """Presentation times of the video frames, exactly, in seconds."""
    frames, time_base = decoded(path)
    return [frame.pts * time_base for frame in frames]


def audio_packets(path: Path, kind: str = "audio") -> list[bytes]:
    """The packets of the clip's first stream of that kind (audio, subtitle), as bytes."""
    import av

    with av.open(str(path)) as clip:
        stream = next(s for s in clip.streams if s.type == kind)
        return [bytes(p) for p in clip.demux(stream) if p.size]
