"""Video through PyAV: probing and refusals, timing / audio / metadata kept, lossless frames exact, damage counted."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_sst
from videoclips import CHAPTERS, LABELS, audio_packets, decoded, make_clip, resized_ts, seconds

from sst_cli import Upscaler
from sst_cli.errors import ConfigError, OutputExists, Terminated, VideoError
from sst_cli.signals import stop_on_signals

av = pytest.importorskip("av", reason="PyAV is not installed: pip install -e '.[video]' to run the video tests")

from sst_cli import video_io  # noqa: E402
from sst_cli.video import plan_video, upscale_video  # noqa: E402
from sst_cli.video_io import VideoOptions, frame_to_array, plan_encoding, probe_video, require_av  # noqa: E402
from sst_cli.video_tags import kept_tags  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def _tiny(scale: int = 2) -> Upscaler:
    """Random small SST (windows 4, 8, 16) on the CPU, whole frames."""
    return Upscaler(tiny_sst(scale), device="cpu", tile=0)


@pytest.fixture(scope="module")
def tiny() -> Upscaler:
    return _tiny()


def test_probe_reads_size_depth_rotation_and_other_streams(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "a.mp4", pix_fmt="yuv420p10le", rotation=90)
    info = probe_video(clip)
    assert (info.width, info.height, info.codec, info.bit_depth, info.frames) == (32, 24, "h264", 10, 6)
    assert info.rotation == 90 and info.others == ("audio aac",)


def test_an_av1_clip_is_encoded_as_av1(tmp_path: Path) -> None:
    """The probe kept the decoder's name (libdav1d), which no encoder family is listed under: AV1 became H.264."""
    if "libsvtav1" not in av.codecs_available:
        pytest.skip("this PyAV build has no libsvtav1 to make an AV1 clip")
    info = probe_video(make_clip(tmp_path / "a.mkv", codec="libsvtav1", pts_ms=(0, 40), audio=False))
    assert info.codec == "av1" and video_io.choose_codec(info, VideoOptions()) == "libsvtav1"


def test_frames_are_estimated_from_the_videos_own_duration(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "a.mkv", codec="mjpeg", pix_fmt="yuvj420p", pts_ms=(0, 40, 80))  # audio: 0.64 s
    with av.open(str(clip)) as c:  # Matroska counts no frames; the container's duration is the audio's
        assert (c.streams.video[0].frames, c.duration) == (0, 640_000)
    assert probe_video(clip).frames == 3  # 0.12 s x 25 frames/s, not 0.64 s x 25


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(b"not a video at all") and p, "not a video file FFmpeg can open"),
        (lambda p: make_clip(p, video=False), "it has no video stream"),
        (lambda p: p, "no such file"),
    ],
)
def test_bad_inputs_are_one_sentence_naming_the_file(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.mp4"
    make(path)
    with pytest.raises(VideoError, match=message) as caught:
        probe_video(path)
    assert f"'{path}'" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.skipif(not video_io.has_encoder("libx264"), reason="this FFmpeg has no libx264 to make the clip with")
@pytest.mark.parametrize(("faststart", "into"), [(False, 60), (False, 200), (True, 60), (True, 400)])
def test_an_mp4_cut_inside_its_index_is_said_to_be_cut_short(tmp_path: Path, faststart: bool, into: int) -> None:
    """Cut inside its moov box, an MP4 opens with no video stream (or a broken one): it was refused as having none."""
    options = {"movflags": "faststart"} if faststart else None  # the index first, else last
    whole = make_clip(tmp_path / "whole.mp4", audio=False, options=options).read_bytes()
    index = whole.find(b"moov") - 4
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole[: index + into])
    size = int.from_bytes(whole[index : index + 4], "big")
    with pytest.raises(VideoError) as caught:
        probe_video(cut)
    assert str(caught.value) == (
        f"cannot read '{cut}': a damaged or cut-short MP4 / MOV (the file ends {size - into:,} bytes before the end of "
        "its index, the 'moov' box)"
    )


@pytest.mark.parametrize(
    ("boxes", "damage"),
    [
        (b"moov" + b"\0" * 8, None),  # whole
        (b"mdat", "its index is written last; the file ends before its 'moov' box"),
        (b"moov\0\0\0\x20moov", "the file ends 24 bytes before the end of its index, the 'moov' box"),
        (b"mdat\0\0\0\x01mdat" + (1 << 40).to_bytes(8, "big"), "its index is written last; the file ends "
         f"{(1 << 40) - 16:,} bytes before the end of its 'mdat' box"),  # a 64-bit size
        (b"moov\0\0\0\x04\xffee\x01", "its '?ee?' box at byte 16 declares an impossible size (4 bytes)"),
        (b"moov\0\0\0\x01mdat\0\0", "the file ends inside the header of its box at byte 16"),
    ],
)  # fmt: skip
def test_damage_is_read_from_the_top_level_boxes(tmp_path: Path, boxes: bytes, damage: str | None) -> None:
    """Each box: a 32-bit size and a type; after an 8-byte ``ftyp`` and an 8-byte box of the first type named."""
    path = tmp_path / "a.mp4"
    path.write_bytes(b"\0\0\0\x08ftyp\0\0\0\x08" + boxes)
    found = video_io._damaged_mp4(str(path))
    assert found == (None if damage is None else f"a damaged or cut-short MP4 / MOV ({damage})")


def test_undecodable_first_frames_are_refused(tmp_path: Path) -> None:
    clip = tmp_path / "broken.mkv"
    make_clip(clip, codec="mjpeg", pix_fmt="yuvj420p", corrupt=range(6), audio=False)  # as if encrypted
    with pytest.raises(VideoError, match="cannot be decoded"):
        probe_video(clip)


def test_missing_pyav_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(ConfigError, match=r"video needs PyAV: pip install 'av>=18'"):
        require_av()


def test_default_codec_keeps_family_timing_audio_rotation_and_colour(tmp_path: Path, tiny: Upscaler) -> None:
    clip = make_clip(tmp_path / "a.mp4", rotation=90)
    out = tmp_path / "a_x2.mp4"
    result = upscale_video(tiny, clip, out)
    assert result.frames == 6 and result.copied == ["audio aac"] and not result.dropped
    assert seconds(out) == seconds(clip)  # variable frame rate: every timestamp kept
    frames, time_base = decoded(out)
    assert time_base == decoded(clip)[1]
    assert audio_packets(out) == audio_packets(clip)  # copied, not re-encoded
    with av.open(str(out)) as c:
        ctx = c.streams.video[0].codec_context
        assert (ctx.name, ctx.pix_fmt, ctx.width, ctx.height) == ("h264", "yuv420p", 64, 48)
        assert (ctx.color_primaries, ctx.color_trc, ctx.colorspace, ctx.color_range) == (1, 1, 1, 1)
    assert frames[0].rotation == 90


def _video_timing(path: Path) -> tuple[Fraction | None, list[Fraction]]:
    """The video stream's duration and its packets' durations in presentation order, in seconds."""
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        base = stream.time_base
        packets = sorted((p.pts, p.duration * base) for p in c.demux(stream) if p.size)
        return None if stream.duration is None else stream.duration * base, [d for _, d in packets]


@pytest.mark.skipif(not video_io.has_encoder("libx264"), reason="this FFmpeg has no libx264 to make the clip with")
def test_each_frame_keeps_its_duration_the_last_one_too(tmp_path: Path, tiny: Upscaler) -> None:
    """The encoders set no packet durations: MP4 gave the last frame the mean frame time (65 ms, not 40), so the
    picture lasted 0.545 s against 0.52 s of sound; Matroska gave every frame 65 ms."""
    times = (0, 40, 80, 200, 240, 400, 440, 480)  # the last frame lasts 40 ms, the mean is 65
    clip = make_clip(tmp_path / "vfr.mp4", size=(16, 12), pts_ms=times)
    assert _video_timing(clip)[0] == Fraction(52, 100)
    upscale_video(tiny, clip, tmp_path / "vfr_x2.mp4")
    assert _video_timing(tmp_path / "vfr_x2.mp4")[0] == Fraction(52, 100)
    upscale_video(tiny, clip, tmp_path / "vfr_x2.mkv")  # Matroska writes each frame's duration as it is given
    gaps = [Fraction(b - a, 1000) for a, b in zip(times, (*times[1:], 520), strict=True)]
    assert _video_timing(tmp_path / "vfr_x2.mkv")[1] == gaps


def test_a_last_frame_without_a_duration_ends_where_the_stream_does(tmp_path: Path, tiny: Upscaler) -> None:
    """AVI keeps no frame durations; in millisecond ticks the muxer's guess showed the last picture for 1 ms. The
    stream's own length (300 ms here) says how long it lasts, else the frame before it (60 ms) does."""
    times = (0, 40, 100, 120, 200, 260)
    clip = make_clip(tmp_path / "a.avi", codec="mpeg4", size=(16, 12), pts_ms=times, audio=False)
    upscale_video(tiny, clip, tmp_path / "a_x2.mkv")
    gaps = [Fraction(b - a, 1000) for a, b in zip(times, (*times[1:], 300), strict=True)]
    assert _video_timing(tmp_path / "a_x2.mkv")[1] == gaps
    from sst_cli.video import _last_frame_time

    no_duration = type("Frame", (), {"duration": 0})()
    assert _last_frame_time(no_duration, 260, 200, end=300) == 40
    assert _last_frame_time(no_duration, 260, 200, end=9000) == 60  # audio outlasting the picture: not its end
    assert _last_frame_time(no_duration, 260, 200) == 60 and _last_frame_time(no_duration, 260, None) == 0


class _Nearest(torch.nn.Module):
    """Pixel replication: what comes out is what went in, so colour conversions can be checked."""

    def __init__(self, scale: int = 2) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, scale_factor=self.scale, mode="nearest")


def test_a_matroska_clip_whose_audio_outlasts_the_picture_is_timed_by_the_picture(tmp_path: Path) -> None:
    """FFmpeg fills a Matroska video stream's duration in from the container's, so 0.3 s of picture beside 2 s of
    audio was taken for 2 s: 'ends early: 3 frame(s) where its duration suggests about 20 (a truncated file?)'."""
    path = tmp_path / "long_audio.mkv"
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=10)  # with FFV1 the stream's duration stays unset
        video.width, video.height, video.pix_fmt = 32, 24, "yuv420p"
        sound = out.add_stream("pcm_s16le", rate=8000)
        sound.layout = "mono"
        for i in range(3):
            grey = av.VideoFrame.from_ndarray(np.full((24, 32, 3), 90, np.uint8), format="rgb24")
            frame = grey.reformat(format="yuv420p")
            frame.pts, frame.time_base = i, Fraction(1, 10)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        for i in range(16):  # 2 s in 1/8 s blocks
            block = av.AudioFrame.from_ndarray(np.zeros((1, 1000), np.int16), format="s16", layout="mono")
            block.sample_rate, block.pts, block.time_base = 8000, i * 1000, Fraction(1, 8000)
            out.mux(sound.encode(block))
        out.mux(sound.encode(None))
    info = probe_video(path)
    assert info.seconds == pytest.approx(0.3, abs=0.06) and info.frames == 3, (info.seconds, info.frames)


@pytest.mark.parametrize(
    ("pix_fmt", "full"), [("yuv420p", False), ("yuv422p", False), ("yuvj420p", True), ("nv12", False)]
)
def test_subsampled_8bit_frames_decode_to_their_colour(pix_fmt: str, full: bool) -> None:
    """swscale's direct 4:2:0 -> RGB path gave a flat BT.601 colour 1 to 2.4 levels dark (Y 100, Cb 90, Cr 180:
    179, 68, 20 for 180.8, 70.4, 21.2), so each pass through sst-cli darkened a clip."""
    frame = av.VideoFrame(32, 24, "yuv420p")
    for plane, value in zip(frame.planes, (100, 90, 180), strict=True):
        plane.update(np.full(plane.buffer_size, value, np.uint8).tobytes())
    frame.color_range = 2 if full else 1
    frame = frame.reformat(format=pix_fmt) if pix_fmt != "yuv420p" else frame  # flat: any layout holds the same
    frame.color_range = 2 if full else 1
    y, cb, cr = (100.0, -38.0, 52.0) if full else ((100 - 16) * 255 / 219, -38 * 255 / 224, 52 * 255 / 224)
    exact = np.array([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb])
    got = frame_to_array(frame, 8).reshape(-1, 3).astype(float)
    assert np.abs(got - exact).max() <= 0.5 + 1e-9, (got.mean(0), exact)


#: Kr, Kb of the AVColorSpace tags used below: BT.709, BT.601 (SMPTE 170M), BT.2020 non-constant luminance.
_KR_KB = {1: (0.2126, 0.0722), 6: (0.299, 0.114), 9: (0.2627, 0.0593)}


def _levels(depth: int, full: bool) -> tuple[float, float, float, float]:
    """Black, luma span, neutral chroma, chroma span of ``depth``-bit YUV."""
    if full:
        return 0.0, 2**depth - 1, 2 ** (depth - 1), 2**depth - 1
    step = 2 ** (depth - 8)
    return 16 * step, 219 * step, 128 * step, 224 * step


def _flat_yuv(pix_fmt: str, depth: int, codes: tuple[int, ...], full: bool, matrix: int) -> av.VideoFrame:
    """A 64x48 frame of one YUV(A) colour in ``pix_fmt`` (flat: any layout holds the same codes), tagged."""
    planar = ("yuva444p" if len(codes) == 4 else "yuv444p") + (f"{depth}le" if depth > 8 else "")
    frame = av.VideoFrame(64, 48, planar)
    for plane, code in zip(frame.planes, codes, strict=True):
        plane.update(np.full(plane.buffer_size // (2 if depth > 8 else 1), code, "<u2" if depth > 8 else np.uint8))
    rng = 2 if full else 1
    frame = frame.reformat(format=pix_fmt, src_color_range=rng, dst_color_range=rng)
    frame.colorspace, frame.color_range = matrix, rng
    return frame


@pytest.mark.parametrize(
    ("pix_fmt", "full", "matrix"),
    [("yuv420p", False, 6), ("yuvj420p", True, 1), ("nv12", False, 1), ("yuv422p10le", False, 1),
     ("yuv420p10le", True, 9), ("yuv444p12le", False, 1), ("p010le", False, 9)],
)  # fmt: skip
@pytest.mark.parametrize("rgb_depth", [8, 16])
def test_yuv_frames_decode_to_their_exact_colour(pix_fmt: str, full: bool, matrix: int, rgb_depth: int) -> None:
    """swscale's fixed-point matrix put a flat colour up to 3.5 levels off outside 8-bit YUV to RGB24 (yuv420p10le to
    RGB24, yuv420p to RGB48), so a 10-bit clip changed colour on each pass; frame_to_array is exact to the rounding."""
    depth = max(c.bits for c in av.VideoFormat(pix_fmt).components)
    kr, kb = _KR_KB[matrix]
    black, y_span, grey, c_span = _levels(depth, full)
    peak = 2**rgb_depth - 1
    for shares in ((0.40, 0.35, 0.70), (0.75, 0.62, 0.31), (0.12, 0.81, 0.46), (0.93, 0.5, 0.5)):
        codes = tuple(round(f * (2**depth - 1)) for f in shares)
        frame = _flat_yuv(pix_fmt, depth, codes, full, matrix)
        y, cb, cr = (codes[0] - black) / y_span, (codes[1] - grey) / c_span, (codes[2] - grey) / c_span
        r, b = y + 2 * (1 - kr) * cr, y + 2 * (1 - kb) * cb
        exact = np.clip(np.array([r, (y - kr * r - kb * b) / (1 - kr - kb), b]) * peak, 0, peak)
        got = frame_to_array(frame, rgb_depth)
        assert got.dtype == (np.uint16 if rgb_depth > 8 else np.uint8)
        error = np.abs(got.reshape(-1, 3).astype(float) - exact).max()
        assert error <= 0.5 + 1e-9, (pix_fmt, codes, got.reshape(-1, 3).mean(0), exact)


@pytest.mark.parametrize("rgb_depth", [8, 16])
def test_alpha_is_decoded_beside_the_exact_colour(rgb_depth: int) -> None:
    frame = _flat_yuv("yuva420p10le", 10, (500, 300, 700, 1000), False, 1)
    got = frame_to_array(frame, rgb_depth, alpha=True)
    assert got.shape == (48, 64, 4)
    peak = 2**rgb_depth - 1
    assert np.abs(got[..., 3].astype(float) - 1000 * peak / 1023).max() <= 0.5 + 1e-9
    assert np.array_equal(got[..., :3], frame_to_array(frame, rgb_depth))


@pytest.mark.parametrize(
    ("pix_fmt", "full", "matrix"),
    [("yuv420p", False, 6), ("yuv420p", True, 6), ("yuvj420p", True, 1), ("nv12", False, 1),
     ("yuv420p10le", False, 9), ("yuv420p10le", True, 9), ("yuv444p16le", False, 1)],
)  # fmt: skip
@pytest.mark.parametrize("rgb_depth", [8, 16])
def test_rgb_encodes_to_its_exact_yuv(pix_fmt: str, full: bool, matrix: int, rgb_depth: int) -> None:
    """swscale's RGB -> YUV matrix put a flat colour up to 1.2 code values off in full range, 3.9 at 10 bits and
    200 at 16 bits; array_to_frame is exact to the rounding (swscale only subsamples the chroma)."""
    depth = max(c.bits for c in av.VideoFormat(pix_fmt).components)
    planar = "yuv444p" + (f"{depth}le" if depth > 8 else "")
    kr, kb = _KR_KB[matrix]
    black, y_span, grey, c_span = _levels(depth, full)
    plan = video_io.EncodePlan("ffv1", pix_fmt, "matroska", "mkv", 64, 48, rgb_depth, {})
    like = av.VideoFrame(64, 48, pix_fmt)
    like.colorspace, like.color_range = matrix, 2 if full else 1
    peak = 2**rgb_depth - 1
    for colour in ((200, 40, 60), (31, 221, 118), (255, 255, 0), (16, 17, 250)):
        rgb = np.minimum(np.array(colour) * peak / 255 + (np.array([97, 11, 203]) if rgb_depth > 8 else 0), peak)
        frame = video_io.array_to_frame(np.full((48, 64, 3), rgb, np.uint16 if rgb_depth > 8 else np.uint8), plan, like)
        assert frame.format.name == pix_fmt
        r, g, b = rgb / peak
        y = kr * r + (1 - kr - kb) * g + kb * b
        exact = [black + y * y_span, grey + (b - y) / (2 - 2 * kb) * c_span, grey + (r - y) / (2 - 2 * kr) * c_span]
        rng = 2 if full else 1
        planes = frame.reformat(format=planar, src_color_range=rng, dst_color_range=rng).planes
        got = np.stack([np.frombuffer(p, "<u2" if depth > 8 else np.uint8)[: p.width] for p in planes], -1)
        error = np.abs(got.astype(float) - exact).max()
        assert error <= 0.5 + 1e-9, (pix_fmt, colour, got.mean(0), exact)


#: Packed and semi-planar YUV, laid out by hand: (depth, each plane's samples in the order of one repeat, samples
#: a row): no swscale between the test's codes and the frame's memory, so a swapped or shifted sample shows.
_PACKED = {
    "yuyv422": (8, (("YUYV", 32),)),
    "uyvy422": (8, (("UYVY", 32),)),
    "nv12": (8, (("Y", 16), ("UV", 16))),
    "nv21": (8, (("Y", 16), ("VU", 16))),
    "vuya": (8, (("VUYA", 64),)),
    "p010le": (10, (("Y", 16), ("UV", 16))),
    "y210le": (10, (("YUYV", 32),)),
}


def _packed_rows(frame: av.VideoFrame, depth: int) -> list[np.ndarray]:
    """Each plane's rows as samples: bytes, or 16-bit words holding ``depth`` bits at the top (p010, y210)."""
    dtype = np.dtype("<u2") if depth > 8 else np.dtype(np.uint8)
    return [np.frombuffer(p, dtype).reshape(p.height, -1) for p in frame.planes]


@pytest.mark.parametrize("pix_fmt", sorted(_PACKED))
@pytest.mark.parametrize(("full", "matrix"), [(False, 1), (True, 6)])
def test_packed_yuv_decodes_and_encodes_to_its_exact_colour(pix_fmt: str, full: bool, matrix: int) -> None:
    """Packed and semi-planar YUV goes through the same exact conversion (swscale only repacks to planar 4:4:4),
    checked against frames packed and unpacked here, byte by byte, in a flat colour of known codes."""
    depth, layout = _PACKED[pix_fmt]
    shift = 16 - depth if depth > 8 else 0
    kr, kb = _KR_KB[matrix]
    black, y_span, grey, c_span = _levels(depth, full)
    rng = 2 if full else 1
    for shares in ((0.40, 0.35, 0.70), (0.75, 0.62, 0.31), (0.12, 0.81, 0.46)):
        codes = dict(zip("YUVA", (*(round(f * (2**depth - 1)) for f in shares), 2**depth - 1), strict=True))
        frame = av.VideoFrame(16, 16, pix_fmt)
        for rows, (order, _) in zip(_packed_rows(frame, depth), layout, strict=True):
            rows[...] = np.resize(np.array([codes[c] << shift for c in order], rows.dtype), rows.shape[1])
        frame.colorspace, frame.color_range = matrix, rng
        y, cb, cr = (codes["Y"] - black) / y_span, (codes["U"] - grey) / c_span, (codes["V"] - grey) / c_span
        r, b = y + 2 * (1 - kr) * cr, y + 2 * (1 - kb) * cb
        exact = np.clip(np.array([r, (y - kr * r - kb * b) / (1 - kr - kb), b]), 0, 1)
        for rgb_depth in (8, 16):
            got = frame_to_array(frame, rgb_depth).reshape(-1, 3).astype(float)
            error = np.abs(got - exact * (2**rgb_depth - 1)).max()
            assert error <= 0.5 + 1e-9, (pix_fmt, codes, rgb_depth, got.mean(0), exact)
        rgb = np.full((16, 16, 3), np.rint(exact * 65535), np.uint16)  # back: RGB48 of that colour
        r, g, b = rgb[0, 0] / 65535
        y = kr * r + (1 - kr - kb) * g + kb * b
        want = {"Y": black + y * y_span, "U": grey + (b - y) / (2 - 2 * kb) * c_span}
        want |= {"V": grey + (r - y) / (2 - 2 * kr) * c_span, "A": 2**depth - 1}
        plan = video_io.EncodePlan("rawvideo", pix_fmt, "matroska", "mkv", 16, 16, 16, {})
        encoded = video_io.array_to_frame(rgb, plan, frame)
        assert encoded.format.name == pix_fmt
        for rows, (order, samples) in zip(_packed_rows(encoded, depth), layout, strict=True):
            for at, component in enumerate(order):
                got_codes = rows[:, at : samples : len(order)].astype(float) / 2**shift
                error = np.abs(got_codes - want[component]).max()
                assert error <= 0.5 + 1e-9, (pix_fmt, component, got_codes.mean(), want[component])


@pytest.mark.parametrize("bt709", [True, False])
def test_colours_survive_the_yuv_round_trip(tmp_path: Path, bt709: bool) -> None:
    clip = make_clip(tmp_path / "red.mp4", colour=(200, 40, 60), bt709=bt709, pts_ms=(0, 40), audio=False)
    out = tmp_path / "red_x2.mp4"
    upscale_video(Upscaler(_Nearest(), device="cpu", tile=0), clip, out)
    before = decoded(clip)[0][1].to_ndarray(format="rgb24").astype(int)
    after = decoded(out)[0][1].to_ndarray(format="rgb24").astype(int)
    assert np.abs(after[::2, ::2] - before).max() <= 3  # BT.601 against BT.709 would be off by tens of levels


def test_full_range_bt2020_pq_ten_bit_keeps_its_tags_depth_and_colours(tmp_path: Path) -> None:
    tags = (9, 16, 9, 2)  # BT.2020 primaries, PQ (SMPTE 2084) transfer, BT.2020 matrix, full (JPEG) range
    clip = make_clip(tmp_path / "hdr.mp4", pix_fmt="yuv420p10le", colour=(200, 40, 60), tags=tags, pts_ms=(0, 40),
                     audio=False)  # fmt: skip
    out = tmp_path / "hdr_x2.mp4"
    upscale_video(Upscaler(_Nearest(), device="cpu", tile=0), clip, out)
    with av.open(str(out)) as c:
        ctx = c.streams.video[0].codec_context
        kept = (ctx.color_primaries, ctx.color_trc, ctx.colorspace, ctx.color_range)
        assert (ctx.pix_fmt, kept) == ("yuv420p10le", tags)
    before = decoded(clip)[0][1].to_ndarray(format="rgb48le").astype(int)
    after = decoded(out)[0][1].to_ndarray(format="rgb48le").astype(int)
    assert np.abs(after[::2, ::2] - before).max() <= 3 * 257  # limited against full range: ~25 8-bit levels off


def test_data_streams_are_copied_where_the_container_holds_them_and_named_where_not(tmp_path: Path) -> None:
    up = Upscaler(_Nearest(), device="cpu", tile=0)
    clip = make_clip(tmp_path / "drone.ts", data="klv", pts_ms=(0, 40, 80), audio=False)  # KLV: drone telemetry
    info = probe_video(clip)
    assert plan_encoding(info, 64, 48, VideoOptions()).extension == "ts"
    result = upscale_video(up, clip, tmp_path / "drone_x2.ts")
    assert (result.copied, result.dropped, result.frames) == (["data klv"], [], 3)
    assert audio_packets(tmp_path / "drone_x2.ts", "data") == [b"data 0", b"data 1", b"data 2"]
    assert seconds(tmp_path / "drone_x2.ts") == seconds(clip)
    vp9 = VideoOptions(codec="libvpx-vp9")  # MPEG-TS cannot hold VP9: the result is MKV, which has no data streams
    assert plan_encoding(info, 64, 48, vp9).extension == "mkv"
    result = upscale_video(up, clip, tmp_path / "drone_x2.mkv", options=vp9)
    assert (result.copied, result.dropped) == ([], ["data klv"])


def test_a_timecode_track_is_kept(tmp_path: Path) -> None:
    up = Upscaler(_Nearest(), device="cpu", tile=0)
    clip = make_clip(tmp_path / "cam.mov", timecode="01:02:03:04", pts_ms=(0, 40), audio=False)
    with av.open(str(clip)) as c:
        assert [s.type for s in c.streams] == ["video", "data"]  # the tmcd track
    for options, ext in ((VideoOptions(), "mov"), (VideoOptions(lossless=True), "mkv")):
        result = upscale_video(up, clip, tmp_path / f"cam_x2.{ext}", options=options)
        assert (result.copied, result.dropped) == (["timecode 01:02:03:04"], [])
        with av.open(str(tmp_path / f"cam_x2.{ext}")) as c:
            tags = {k.lower(): v for k, v in c.streams.video[0].metadata.items()}
            assert tags["timecode"] == "01:02:03:04"
            assert [s.type for s in c.streams] == (["video", "data"] if ext == "mov" else ["video"])
    again = upscale_video(up, tmp_path / "cam_x2.mkv", tmp_path / "again.mkv")  # Matroska's TIMECODE tag, no track
    with av.open(str(tmp_path / "again.mkv")) as c:
        assert c.streams.video[0].metadata["TIMECODE"] == "01:02:03:04" and again.copied == []


def test_tags_flags_and_chapters_of_the_container_and_streams_are_kept(tmp_path: Path) -> None:
    up = Upscaler(_Nearest(), device="cpu", tile=0)
    clip = make_clip(tmp_path / "film.mkv", labels=True, subtitles=True, pts_ms=(0, 40, 80))
    upscale_video(up, clip, tmp_path / "film_x2.mkv")
    with av.open(str(tmp_path / "film_x2.mkv")) as c:
        assert LABELS["container"].items() <= {k.lower(): v for k, v in c.metadata.items()}.items()
        for kind in ("video", "audio", "subtitle"):
            (stream,) = [s for s in c.streams if s.type == kind]
            assert LABELS[kind].items() <= stream.metadata.items(), kind
        assert c.streams.audio[0].disposition & av.stream.Disposition.default
        assert c.streams.subtitles[0].disposition & av.stream.Disposition.forced
        chapters = [(ch["metadata"]["title"], ch["start"] * ch["time_base"], ch["end"] * ch["time_base"])
                    for ch in c.chapters()]  # fmt: skip
        assert chapters == [
            (ch["metadata"]["title"], Fraction(ch["start"], 1000), Fraction(ch["end"], 1000)) for ch in CHAPTERS
        ]
    upscale_video(up, clip, tmp_path / "film_x2.mp4")  # MP4: the audio keeps its language, subtitles are dropped
    with av.open(str(tmp_path / "film_x2.mp4")) as c:
        assert c.streams.audio[0].metadata["language"] == "jpn" and c.metadata["title"] == "A film"
    ts = upscale_video(up, clip, tmp_path / "film_x2.ts")  # MPEG-TS wrote SubRip as an unlabelled data stream
    assert ts.dropped == ["subtitle subrip"]
    with av.open(str(tmp_path / "film_x2.ts")) as c:
        assert [s.type for s in c.streams] == ["video", "audio"]


def test_statistics_of_the_old_bytes_and_tags_the_muxer_writes_are_not_copied() -> None:
    tags = {"language": "jpn", "BPS-eng": "96000", "NUMBER_OF_FRAMES": "300", "_STATISTICS_TAGS-eng": "BPS",
            "DURATION": "00:00:10.0", "encoder": "Lavc", "major_brand": "isom", "title": "Main"}  # fmt: skip
    assert kept_tags(tags, reencoded=True) == {"language": "jpn", "title": "Main"}
    assert kept_tags(tags) == {
        "language": "jpn",
        "BPS-eng": "96000",
        "NUMBER_OF_FRAMES": "300",
        "_STATISTICS_TAGS-eng": "BPS",
        "title": "Main",
    }  # fmt: skip  (same packets: still true)


def test_a_codec_without_a_decoder_is_refused(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "a.avi", codec="mpeg4", pts_ms=(0, 40), audio=False)
    data = clip.read_bytes()
    assert data.count(b"FMP4") == 2  # the stream's FOURCC, in its header and its format
    clip.write_bytes(data.replace(b"FMP4", b"QQQQ"))  # a codec FFmpeg does not know
    with pytest.raises(VideoError) as caught:
        probe_video(clip)
    assert str(caught.value) == f"cannot upscale '{clip}': this FFmpeg has no decoder for its video codec"


def test_lossless_frames_are_exactly_the_upscalers(tmp_path: Path, tiny: Upscaler) -> None:
    clip = make_clip(tmp_path / "a.mp4")
    out = tmp_path / "a.mkv"
    upscale_video(tiny, clip, out, options=VideoOptions(lossless=True))
    source, _ = decoded(clip)
    result, _ = decoded(out)
    assert result[0].format.name == "bgr0" and len(result) == len(source) == 6
    assert seconds(out) == seconds(clip) and audio_packets(out) == audio_packets(clip)
    for before, after in zip(source, result, strict=True):  # --lossless runs one frame per pass by default
        expected = tiny.upscale(frame_to_array(before, 8))
        np.testing.assert_array_equal(after.to_ndarray(format="rgb24"), expected)


def test_ten_bit_stays_ten_bit_and_lossless_keeps_sixteen(tmp_path: Path, tiny: Upscaler) -> None:
    clip = make_clip(tmp_path / "deep.mp4", pix_fmt="yuv420p10le", pts_ms=(0, 40, 100), audio=False)
    upscale_video(tiny, clip, tmp_path / "deep_x2.mp4")
    frames, _ = decoded(tmp_path / "deep_x2.mp4")
    assert frames[0].format.name == "yuv420p10le"
    upscale_video(tiny, clip, tmp_path / "deep.mkv", options=VideoOptions(lossless=True))
    exact, _ = decoded(tmp_path / "deep.mkv")
    source, _ = decoded(clip)
    assert exact[0].format.name == "gbrp16le"
    expected = tiny.upscale(frame_to_array(source[1], 16))
    assert expected.dtype == np.uint16
    np.testing.assert_array_equal(exact[1].to_ndarray(format="rgb48le"), expected)


def test_odd_sizes_lose_a_row_for_420_or_keep_it_in_444(tmp_path: Path) -> None:
    info = probe_video(make_clip(tmp_path / "odd.mp4", size=(12, 10), pts_ms=(0,), audio=False))
    plan = plan_encoding(info, 36, 27, VideoOptions())
    assert (plan.width, plan.height, plan.pix_fmt) == (36, 26, "yuv420p") and "loses its last row" in plan.notes[0]
    plan = plan_encoding(info, 37, 27, VideoOptions(pix_fmt="yuv444p"))
    assert (plan.width, plan.height, plan.notes) == (37, 27, ())
    plan = plan_encoding(info, 37, 27, VideoOptions(lossless=True))
    assert (plan.width, plan.height, plan.codec, plan.extension) == (37, 27, "ffv1", "mkv")


def test_odd_result_sides_are_cropped_for_420_and_kept_in_444(tmp_path: Path) -> None:
    up = Upscaler(_Nearest(3), device="cpu", tile=0)
    clip = make_clip(tmp_path / "odd.mp4", size=(11, 9), pix_fmt="yuv444p", pts_ms=(0, 40, 100), audio=False)
    for pix_fmt, size in (("yuv420p", (32, 26)), (None, (33, 27))):
        out = tmp_path / f"odd_{pix_fmt}.mp4"
        upscale_video(up, clip, out, options=VideoOptions(pix_fmt=pix_fmt))
        frames, _ = decoded(out)
        assert [(f.width, f.height) for f in frames] == [size] * 3 and seconds(out) == seconds(clip)


def test_odd_sides_are_kept_by_encoders_that_store_them_and_cropped_to_the_chroma_block(tmp_path: Path) -> None:
    up = Upscaler(_Nearest(3), device="cpu", tile=0)
    clip = make_clip(tmp_path / "odd.mkv", size=(15, 9), codec="ffv1", pts_ms=(0, 40), audio=False)
    out = tmp_path / "odd_x3.mkv"
    upscale_video(up, clip, out, options=VideoOptions(codec="ffv1"))
    assert [(f.width, f.height, f.format.name) for f in decoded(out)[0]] == [(45, 27, "yuv420p")] * 2
    info = probe_video(clip)
    assert plan_video(up, info, VideoOptions(codec="ffv1")).notes == ()
    plan = plan_encoding(info, 45, 27, VideoOptions(codec="libx264"))  # x264 refuses odd 4:2:0 sides
    assert (plan.width, plan.height) == (44, 26) and "loses its last column and row (44x26)" in plan.notes[0]
    plan = plan_encoding(info, 45, 27, VideoOptions(codec="libx264", pix_fmt="yuv444p"))
    assert (plan.width, plan.height, plan.notes) == (45, 27, ())


def test_a_refused_size_is_cropped_to_the_formats_chroma_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = video_io._encoder_error

    def in_blocks_only(codec: str, pix_fmt: str, width: int, height: int, opts: dict, *rest: Fraction) -> str | None:
        return "size refused" if width % 4 or height % 4 else real(codec, pix_fmt, width, height, opts, *rest)

    monkeypatch.setattr(video_io, "_encoder_error", in_blocks_only)  # as an encoder of whole chroma blocks would
    info = probe_video(make_clip(tmp_path / "a.mkv", size=(15, 9), codec="ffv1", pts_ms=(0,), audio=False))
    plan = plan_encoding(info, 45, 27, VideoOptions(codec="ffv1", pix_fmt="yuv410p"))  # 4x4 chroma blocks
    assert (plan.width, plan.height) == (44, 24) and "loses its last column and 3 rows (44x24)" in plan.notes[0]


def test_encoder_probes_keep_what_the_encoder_prints_off_the_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """x265 printed its refusal of an odd size on runs that then cropped it and succeeded; where the encoder
    cannot start, its own words are the reason given."""
    info = probe_video(make_clip(tmp_path / "a.mkv", size=(15, 9), codec="ffv1", pts_ms=(0,), audio=False))
    capfd.readouterr()
    plan = plan_encoding(info, 45, 27, VideoOptions(codec="libx265"))
    assert (plan.width, plan.height) == (44, 26)
    assert capfd.readouterr().err == ""
    with pytest.raises(VideoError, match="45x27 yuv420p: picture width must be an integer multiple of the spec"):
        video_io._try_encoder("libx265", "yuv420p", 45, 27, {}, Fraction(1, 1000), Fraction(25))
    assert capfd.readouterr().err == ""


def test_frames_that_must_be_tiled_go_one_by_one_through_the_tiles(tmp_path: Path) -> None:
    up = Upscaler(tiny_sst(), device="cpu", tile=16, tile_overlap=0)  # 32x24 frames in 16 px tiles (with 16 px of
    # context each would see the whole frame, which then runs whole)
    assert up.images_per_pass(24, 32) == 1
    clip = make_clip(tmp_path / "a.mp4", pts_ms=(0, 40, 100), audio=False)
    upscale_video(up, clip, tmp_path / "a.mkv", options=VideoOptions(lossless=True, frames_per_pass=8))
    for before, after in zip(decoded(clip)[0], decoded(tmp_path / "a.mkv")[0], strict=True):
        np.testing.assert_array_equal(after.to_ndarray(format="rgb24"), up.upscale(frame_to_array(before, 8)))


def test_codec_choices_are_checked_before_computing(tmp_path: Path) -> None:
    info = probe_video(make_clip(tmp_path / "a.mp4", pts_ms=(0,), audio=False))
    assert plan_encoding(info, 64, 48, VideoOptions(codec="libx265", crf=20)).options["crf"] == "20"
    with pytest.raises(ConfigError, match="no encoder 'nonsense'"):
        plan_encoding(info, 64, 48, VideoOptions(codec="nonsense"))
    with pytest.raises(ConfigError, match="cannot write pixel format"):
        plan_encoding(info, 64, 48, VideoOptions(codec="mpeg4", pix_fmt="yuv444p"))
    with pytest.raises(ConfigError, match="--crf applies"):
        plan_encoding(info, 64, 48, VideoOptions(codec="mpeg4", crf=3))
    with pytest.raises(ConfigError, match="--lossless"):
        VideoOptions(lossless=True, codec="libx264")
    # What FFmpeg itself used to answer, late and in its own words ("audio stream `rate` must be: int | None",
    # an x265 error dump, "not a pixel format"): one sentence each, before any frame.
    with pytest.raises(ConfigError, match="--codec aac is not a video encoder"):
        plan_encoding(info, 64, 48, VideoOptions(codec="aac"))
    with pytest.raises(ConfigError, match="libx265 takes --crf 0 to 51, not 60"):
        plan_encoding(info, 64, 48, VideoOptions(codec="libx265", crf=60))
    with pytest.raises(ConfigError, match="--pix-fmt nonsense is not a pixel format"):
        plan_encoding(info, 64, 48, VideoOptions(codec="rawvideo", pix_fmt="nonsense"))
    with pytest.raises(VideoError, match=r"the encoder libx265 cannot start for 64x48 yuv420p"):  # refusing to open
        video_io._try_encoder("libx265", "yuv420p", 64, 48, {"crf": "60"}, Fraction(1, 25), Fraction(25))


def test_damaged_frames_are_counted_and_the_rest_keep_their_time_and_subtitles(tmp_path: Path, tiny: Upscaler) -> None:
    clip = make_clip(tmp_path / "hurt.mkv", codec="mjpeg", pix_fmt="yuvj420p", corrupt={2}, subtitles=True)
    out = tmp_path / "hurt_x2.mkv"
    result = upscale_video(tiny, clip, out)
    assert (result.frames, result.lost, result.copied) == (5, 1, ["audio aac", "subtitle subrip"])
    assert (
        audio_packets(out, "subtitle")
        == audio_packets(clip, "subtitle")
        == [b"line 0", b"line 1", b"line 2", b"line 3", b"line 4", b"line 5"]
    )
    expected = [Fraction(ms, 1000) for i, ms in enumerate((0, 40, 100, 120, 200, 260)) if i != 2]
    assert seconds(clip) == seconds(out) == expected
    assert audio_packets(out) == audio_packets(clip)


def test_interrupt_leaves_no_file_and_existing_outputs_are_kept(tmp_path: Path, tiny: Upscaler,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    clip = make_clip(tmp_path / "a.mp4", audio=False)
    out = tmp_path / "a_x2.mp4"

    def stop(done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        upscale_video(tiny, clip, out, on_frame=stop)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4"]  # no output, no temporary
    out.write_bytes(b"mine")
    with pytest.raises(OutputExists):
        upscale_video(tiny, clip, out)
    assert out.read_bytes() == b"mine"


def _no_video_threads() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith("sst-video")]


def test_frames_are_stacked_as_memory_allows_and_keep_their_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = _tiny()
    up = Upscaler(tiny_sst(), device="cpu", tile="auto", max_memory=4 * probe.planner.activation_bytes(24, 32))
    passes: list[int] = []
    real = Upscaler.upscale_batch

    def upscale_batch(self: Upscaler, images: list) -> list:  # type: ignore[type-arg]
        passes.append(len(images))
        return real(self, images)

    monkeypatch.setattr(Upscaler, "upscale_batch", upscale_batch)
    clip = make_clip(tmp_path / "a.mp4")
    out = tmp_path / "a.mkv"
    upscale_video(up, clip, out, options=VideoOptions(lossless=True, frames_per_pass=8))
    assert passes == [4, 2] and seconds(out) == seconds(clip) and audio_packets(out) == audio_packets(clip)
    source = [frame_to_array(frame, 8) for frame in decoded(clip)[0]]
    expected = real(up, source[:4]) + real(up, source[4:])
    for after, image, alone in zip(decoded(out)[0], expected, map(up.upscale, source), strict=True):
        np.testing.assert_array_equal(after.to_ndarray(format="rgb24"), image)
        # against one frame per pass: float32 products round differently for another batch size (~1e-7 of the
        # range), so a sample on a rounding boundary may move by one level
        assert np.abs(after.to_ndarray(format="rgb24").astype(int) - alone).max() <= 1
    assert (VideoOptions().most_per_pass, VideoOptions(lossless=True).most_per_pass) == (8, 1)
    with pytest.raises(ConfigError, match="at least 1"):
        VideoOptions(frames_per_pass=0)


@pytest.mark.parametrize(("where", "error", "said"), [
    ("frame_to_array", OSError(5, "Input/output error"), "cannot read '{clip}': input/output error"),
    ("array_to_frame", OSError(28, "No space left on device"), "cannot write '{out}': no space left on device"),
])  # fmt: skip
def test_a_failure_in_the_decoding_or_encoding_thread_is_the_usual_error(
    tmp_path: Path, tiny: Upscaler, where: str, error: OSError, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sst_cli.video as video

    real = getattr(video, where)
    calls: list[int] = []

    def broken(*args: object) -> object:
        calls.append(1)
        if len(calls) == 3:
            raise error
        return real(*args)

    monkeypatch.setattr(video, where, broken)
    clip = make_clip(tmp_path / "a.mp4")
    out = tmp_path / "a_x2.mp4"
    with pytest.raises(VideoError) as caught:
        upscale_video(tiny, clip, out)
    assert str(caught.value) == said.format(clip=clip, out=out)  # a failing input is not called a write error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4"] and _no_video_threads()


def test_an_upscaler_error_mid_clip_is_raised_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    upscaler = _tiny()
    real = upscaler.upscale_batch
    calls: list[int] = []

    def failing(images: list) -> list:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(images)

    monkeypatch.setattr(upscaler, "upscale_batch", failing)
    clip = make_clip(tmp_path / "a.mp4")
    with pytest.raises(RuntimeError, match="illegal memory access") as caught:
        upscale_video(upscaler, clip, tmp_path / "a_x2.mp4", options=VideoOptions(frames_per_pass=1))
    assert not isinstance(caught.value, VideoError)  # not "cannot write 'a_x2.mp4': ..."
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4"] and _no_video_threads()


def test_sigterm_stops_the_threads_and_leaves_no_file(tmp_path: Path, tiny: Upscaler) -> None:
    clip = make_clip(tmp_path / "a.mp4")

    def terminate(done: int, total: int) -> None:
        if done == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises Terminated here, in the main thread

    with stop_on_signals(), pytest.raises(Terminated):
        upscale_video(tiny, clip, tmp_path / "a_x2.mp4", on_frame=terminate)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4"] and _no_video_threads()


@pytest.mark.parametrize(
    ("codec", "pix_fmt", "ext", "exact"),
    [("png", "rgba", "mov", True), ("qtrle", "argb", "mov", True), ("prores_ks", "yuva444p10le", "mov", False),
     ("libvpx-vp9", "yuva420p", "webm", False)],
)  # fmt: skip
def test_alpha_is_upscaled_and_kept_where_the_codec_stores_it(tmp_path: Path, codec: str,
                                                              pix_fmt: str, ext: str, exact: bool) -> None:  # fmt: skip
    tiny = Upscaler(_Nearest(), device="cpu", tile=0)  # pixels replicated: transparency comes out as it went in
    clip = make_clip(tmp_path / f"a.{ext}", codec=codec, pix_fmt=pix_fmt, pts_ms=(0, 40, 100), audio=False)
    decoder = "libvpx-vp9" if codec == "libvpx-vp9" else None  # FFmpeg's own VP9 decoder drops the alpha
    info = probe_video(clip)
    assert info.alpha
    out = tmp_path / f"a_x2.{ext}"
    upscale_video(tiny, clip, out)
    source = [frame.to_ndarray(format="rgba") for frame in decoded(clip, decoder)[0]]
    result = [frame.to_ndarray(format="rgba") for frame in decoded(out, decoder)[0]]
    assert len(result) == 3 and seconds(out) == seconds(clip)
    expected = tiny.upscale_batch(source)
    for after, want in zip(result, expected, strict=True):
        assert len(np.unique(after[..., 3])) > 2  # transparency kept, not made opaque
        if exact:
            np.testing.assert_array_equal(after, want)
        else:  # lossy codecs (and ProRes' 10-bit path against this 8-bit reference): close, not equal
            assert np.abs(after[..., 3].astype(int) - want[..., 3]).mean() < 8  # measured 0.1 (ProRes), 4 (VP9)


def test_alpha_the_codec_cannot_store_is_dropped_with_a_warning_and_lossless_keeps_it(tmp_path: Path) -> None:
    tiny = Upscaler(_Nearest(), device="cpu", tile=0)  # pixels replicated: transparency comes out as it went in
    clip = make_clip(tmp_path / "a.mov", codec="png", pix_fmt="rgba", pts_ms=(0, 40), audio=False)
    info = probe_video(clip)
    plan = plan_encoding(info, 64, 48, VideoOptions(codec="libx264"))
    assert not plan.alpha and plan.pix_fmt == "yuv420p"
    assert plan.warnings == (
        f"'{clip}' has an alpha channel (transparency), which is dropped: libx264 cannot store it (--codec ffv1, "
        "prores_ks, libvpx-vp9, png or qtrle, or --lossless, keep it)",
    )
    assert (
        plan_encoding(info, 64, 48, VideoOptions(codec="ffv1", pix_fmt="yuv420p"))
        .warnings[0]
        .endswith(
            "which is dropped: yuv420p has no alpha (--codec ffv1, prores_ks, libvpx-vp9, png or qtrle, or --lossless, "
            "keep it)"
        )
    )
    upscale_video(tiny, clip, tmp_path / "a.mkv", options=VideoOptions(lossless=True))
    result = decoded(tmp_path / "a.mkv")[0]
    assert result[0].format.name == "bgra"
    source = [frame.to_ndarray(format="rgba") for frame in decoded(clip)[0]]
    for after, want in zip(result, tiny.upscale_batch(source), strict=True):
        np.testing.assert_array_equal(after.to_ndarray(format="rgba"), want)


def test_encrypted_video_is_refused_as_drm(tmp_path: Path) -> None:
    key = {"encryption_scheme": "cenc-aes-ctr", "encryption_key": "00112233445566778899aabbccddeeff",
           "encryption_kid": "ffeeddccbbaa99887766554433221100"}  # fmt: skip
    clip = make_clip(tmp_path / "locked.mp4", pts_ms=(0, 40), audio=False, options=key)  # CENC, as DRM services use
    with pytest.raises(VideoError) as caught:
        probe_video(clip)
    assert str(caught.value) == f"cannot upscale '{clip}': its video is encrypted (DRM), which sst-cli cannot decrypt"


def test_an_avi_frame_count_is_no_proof_of_truncation() -> None:
    """A variable-rate AVI lists an empty packet per skipped tick: 300 'frames' for 6 pictures is a whole file."""
    from sst_cli.video import VideoResult
    from sst_cli.video_batch import _damage
    from sst_cli.video_io import VideoInfo

    def info(container: str) -> VideoInfo:
        return VideoInfo(Path("x"), 32, 24, "mpeg4", "yuv420p", 8, 300, Fraction(1, 1000), Fraction(25), 0,
                         container, (), frames_listed=True)  # fmt: skip

    assert _damage(Path("x.avi"), VideoResult(frames=6), info("avi")) == []
    assert "ends early: 6 frame(s)" in _damage(Path("x.mp4"), VideoResult(frames=6), info("mov,mp4,m4a,3gp,3g2,mj2"))[0]


def test_a_chosen_8_bit_format_is_not_called_a_loss(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "ten.mkv", size=(16, 12), pix_fmt="yuv420p10le", pts_ms=(0, 40), audio=False)
    info = probe_video(clip)
    asked = plan_encoding(info, 32, 24, VideoOptions(codec="libx264", pix_fmt="yuv420p"))
    assert asked.pix_fmt == "yuv420p" and asked.notes == ()
    forced = plan_encoding(info, 32, 24, VideoOptions(codec="mpeg4"))  # MPEG-4 Part 2 has no 10-bit format
    assert forced.notes == ("mpeg4 cannot store 10-bit samples: writing 8-bit yuv420p",)


def test_mjpeg_takes_the_inputs_limited_range_format(tmp_path: Path) -> None:
    """``--codec mjpeg`` on an ordinary (yuv420p) clip failed to start its encoder."""
    clip = make_clip(tmp_path / "a.mp4", size=(16, 12), pts_ms=(0, 40), audio=False)
    up = Upscaler(_Nearest(), device="cpu", tile=0)
    result = upscale_video(up, clip, tmp_path / "a_x2.mkv", options=VideoOptions(codec="mjpeg"))
    assert result.frames == 2
    with av.open(str(tmp_path / "a_x2.mkv")) as c:
        assert (c.streams.video[0].codec_context.name, c.streams.video[0].format.name) == ("mjpeg", "yuv420p")


def test_an_mjpeg_result_of_a_bt709_clip_reads_back_in_its_colours(tmp_path: Path) -> None:
    """FFmpeg's MJPEG decoder tags every frame BT.601 (JPEG's matrix), whatever the file says: a BT.709 clip
    written as MJPEG with BT.709 samples read back up to 5.5 levels off. It is converted with BT.601 now."""
    clip = make_clip(tmp_path / "a.mkv", colour=(150, 60, 200), tags=(1, 1, 1, 2), pts_ms=(0, 40), audio=False)
    up = Upscaler(_Nearest(), device="cpu", tile=0)
    upscale_video(up, clip, tmp_path / "a_x2.mkv", options=VideoOptions(codec="mjpeg"))
    before = frame_to_array(decoded(clip)[0][1], 8).astype(int)
    result = decoded(tmp_path / "a_x2.mkv")[0][1]
    assert int(result.colorspace) == 5  # BT.470BG: what the decoder says, and now what the samples are
    after = frame_to_array(result, 8).astype(int)
    assert np.abs(after[::2, ::2] - before).max() <= 2  # JPEG's own loss; BT.709 read as BT.601: 5.5 levels


def test_non_square_pixels_are_kept_and_said_where_they_cannot_be(tmp_path: Path) -> None:
    """An anamorphic clip (4/3 pixels) came out with square ones: a picture squeezed on playback."""
    up = Upscaler(_Nearest(), device="cpu", tile=0)
    clip = make_clip(tmp_path / "wide.mp4", aspect=Fraction(4, 3), pts_ms=(0, 40), audio=False)
    info = probe_video(clip)
    assert info.aspect == Fraction(4, 3)
    for ext in ("mp4", "mkv", "ts"):  # MP4's own box; H.264's bitstream in MKV and MPEG-TS
        upscale_video(up, clip, tmp_path / f"wide_x2.{ext}")
        with av.open(str(tmp_path / f"wide_x2.{ext}")) as c:
            assert c.streams.video[0].sample_aspect_ratio == Fraction(4, 3), ext
    assert plan_encoding(info, 64, 48, VideoOptions()).warnings == ()
    assert plan_encoding(info, 64, 48, VideoOptions(lossless=True)).warnings == (
        f"'{clip}' has non-square pixels (aspect ratio 4/3), which ffv1 in .mkv cannot store: the result plays with "
        "square pixels (.mp4 or .mov keep it)",
    )


def test_a_change_of_frame_size_fails_the_clip_and_leaves_nothing(tmp_path: Path) -> None:
    """Frames after a change of size were cropped to the first size, silently."""
    clip = resized_ts(tmp_path / "tv.ts")
    out = tmp_path / "tv_x2.ts"
    with pytest.raises(VideoError) as caught:
        upscale_video(Upscaler(_Nearest(), device="cpu", tile=0), clip, out)
    assert str(caught.value) == (
        f"cannot upscale '{clip}': its frame 4 is 48x32, but its first is 32x24 (sst-cli upscales clips of one frame "
        "size only)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tv.ts"] and _no_video_threads()


def test_a_rotation_the_container_cannot_store_is_said(tmp_path: Path) -> None:
    info = probe_video(make_clip(tmp_path / "phone.mp4", rotation=90, pts_ms=(0,), audio=False))
    assert plan_encoding(info, 64, 48, VideoOptions(), tmp_path / "up.mp4").warnings == ()
    assert plan_encoding(info, 64, 48, VideoOptions(), tmp_path / "up.ts").warnings == (
        f"'{info.path}' is displayed rotated by 90 degrees, which .ts cannot store: the result plays unrotated "
        "(.mp4, .mov or .mkv keep it)",
    )


def test_attachments_are_copied_into_matroska_and_other_video_streams_are_named(tmp_path: Path) -> None:
    """Fonts were left out of an MKV result, and they and a second video stream were said not to fit in it."""
    from sst_cli.video_batch import _damage

    up = Upscaler(_Nearest(), device="cpu", tile=0)
    font = ("sign.ttf", "font/ttf", b"\0\1 glyphs")
    clip = make_clip(tmp_path / "film.mkv", attachment=font, second_video=True, pts_ms=(0, 40), audio=False)
    info = probe_video(clip)
    result = upscale_video(up, clip, tmp_path / "film_x2.mkv", info=info)
    assert (result.copied, result.dropped, result.unused) == (["attachment sign.ttf"], [], ["video h264"])
    with av.open(str(tmp_path / "film_x2.mkv")) as c:
        (kept,) = c.streams.attachments
        assert (kept.name, kept.mimetype, bytes(kept.data)) == font
    assert _damage(clip, result, info) == [f"{clip}: left out video h264 (only the first video stream is upscaled)"]
    result = upscale_video(up, clip, tmp_path / "film_x2.mp4", info=info)
    assert (result.copied, result.dropped) == ([], ["attachment sign.ttf"])


def test_a_complete_variable_rate_clip_is_not_called_truncated(tmp_path: Path) -> None:
    """Six frames in 0.373 s at a nominal 25 frames/s were said to be a truncated file of about 9."""
    from sst_cli.video_batch import _damage

    clip = make_clip(tmp_path / "vfr.mkv", pts_ms=(0, 40, 120, 130, 300, 333), audio=False)
    info = probe_video(clip)
    assert info.frames == 9 and not info.frames_listed  # 0.373 s x 25
    result = upscale_video(Upscaler(_Nearest(), device="cpu", tile=0), clip, tmp_path / "vfr_x2.mkv", info=info)
    assert result.frames == 6 and result.seconds == pytest.approx(0.373)
    assert _damage(clip, result, info) == []


def test_an_rgb_source_encoded_as_yuv_is_tagged_with_the_matrix_used(tmp_path: Path) -> None:
    """PNG frames (matrix "RGB") written as H.264 kept that tag, which no YUV stream can have."""
    clip = make_clip(tmp_path / "art.mov", codec="png", pix_fmt="rgb24", colour=(200, 40, 60), pts_ms=(0, 40),
                     audio=False, bt709=False)  # fmt: skip
    with av.open(str(clip)) as c:
        assert c.streams.video[0].codec_context.colorspace == 0  # RGB
    out = tmp_path / "art_x2.mp4"
    upscale_video(Upscaler(_Nearest(), device="cpu", tile=0), clip, out, options=VideoOptions(codec="libx264"))
    with av.open(str(out)) as c:
        assert c.streams.video[0].codec_context.colorspace == 6  # SMPTE 170M: BT.601, swscale's default
    before = decoded(clip)[0][1].to_ndarray(format="rgb24").astype(int)
    after = decoded(out)[0][1].to_ndarray(format="rgb24", src_colorspace=5).astype(int)  # read as BT.601
    assert np.abs(after[::2, ::2] - before).max() <= 3


def test_video_globs_keep_the_tree_below_their_root_and_skip_linked_folders(tmp_path: Path) -> None:
    from sst_cli.video_batch import find_videos

    for name in ("clips/a/x.mkv", "clips/b/x.mkv", "clips/.hidden.mkv", "elsewhere/y.mkv"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "clips/link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    jobs, rest = find_videos([str(tmp_path / "clips/**/*.mkv")], recursive=False)
    assert [j.relative.as_posix() for j in jobs] == ["a/x.mkv", "b/x.mkv"] and rest == []
    jobs, _ = find_videos([str(tmp_path / "clips/*/x.mkv")], recursive=False)
    assert [j.relative.as_posix() for j in jobs] == ["a/x.mkv", "b/x.mkv"]


def test_a_clip_named_twice_or_through_a_link_is_one_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Named twice, it was upscaled twice (the second run failing on the first one's output)."""
    from sst_cli.video_batch import find_videos

    monkeypatch.chdir(tmp_path)
    Path("a.mkv").write_bytes(b"")
    Path("link.mkv").symlink_to("a.mkv")
    jobs, rest = find_videos(["a.mkv", "./a.mkv", "link.mkv"], recursive=False)
    assert [(j.source.as_posix(), j.skip) for j in jobs] == [
        ("a.mkv", None),
        ("link.mkv", "the same file as a.mkv, which is upscaled"),
    ]
    assert rest == []


def test_a_clip_and_a_link_to_it_name_one_output_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``a.mkv link.mkv -o one.mkv`` was refused as "2 clips", though the link is skipped as the same file."""
    from sst_cli.naming import WriteOptions
    from sst_cli.video_batch import _single_target, find_videos

    monkeypatch.chdir(tmp_path)
    Path("a.mkv").write_bytes(b"")
    Path("link.mkv").symlink_to("a.mkv")
    jobs, _ = find_videos(["a.mkv", "link.mkv"], recursive=False)
    assert _single_target("one.mkv", jobs, WriteOptions()) == Path("one.mkv")
    Path("b.mkv").write_bytes(b"")
    jobs, _ = find_videos(["a.mkv", "link.mkv", "b.mkv"], recursive=False)
    with pytest.raises(ConfigError, match="2 clips"):
        _single_target("one.mkv", jobs, WriteOptions())


def test_a_listed_count_the_timestamps_cover_is_no_early_end(tmp_path: Path) -> None:
    from dataclasses import replace

    from sst_cli.video import VideoResult
    from sst_cli.video_batch import _ends_early

    info = probe_video(make_clip(tmp_path / "a.mp4", size=(16, 12), pts_ms=tuple(range(0, 400, 40)), audio=False))
    listed = replace(info, frames=12)  # two samples more than play: those an edit list skips
    assert info.frames_listed and info.seconds == pytest.approx(0.4)
    assert not _ends_early(VideoResult(frames=10, seconds=0.4), listed)
    assert _ends_early(VideoResult(frames=3, seconds=0.12), listed)  # what a truncated file is


def test_mpeg4_encodes_an_mpeg_ts_clip_in_a_time_base_it_can_store(tmp_path: Path) -> None:
    up = Upscaler(_Nearest(2), device="cpu", tile=0)
    clip = make_clip(tmp_path / "a.ts", size=(16, 12), pts_ms=(0, 40, 100), audio=False)
    info = probe_video(clip)
    plan = plan_video(up, info, VideoOptions(codec="mpeg4"))
    assert info.time_base == Fraction(1, 90000) and plan.time_base == Fraction(1, 45000)  # 16 bits at most
    out = tmp_path / "a_x2.mkv"
    result = upscale_video(up, clip, out, options=VideoOptions(codec="mpeg4"), info=info, plan=plan)
    assert result.frames == 3 and seconds(out) == seconds(clip)
    with pytest.raises(VideoError, match="the encoder mpeg4 cannot start for 32x24 yuv420p"):  # before the model loads
        video_io._try_encoder("mpeg4", "yuv420p", 32, 24, {}, Fraction(1, 90000), Fraction(25))


def test_mpeg2_encodes_one_tick_a_frame_and_refuses_a_rate_it_cannot_store(tmp_path: Path) -> None:
    from dataclasses import replace

    up = Upscaler(_Nearest(2), device="cpu", tile=0)
    clip = make_clip(tmp_path / "a.mkv", size=(16, 12), pts_ms=(0, 40, 80), audio=False)
    info = probe_video(clip)
    plan = plan_video(up, info, VideoOptions(codec="mpeg2video"))
    assert info.time_base == Fraction(1, 1000) and plan.time_base == Fraction(1, 25)  # MPEG-2 stores 25 frames/s
    out = tmp_path / "a_x2.mkv"
    result = upscale_video(up, clip, out, options=VideoOptions(codec="mpeg2video"), info=info, plan=plan)
    assert result.frames == 3 and seconds(out) == seconds(clip)
    with pytest.raises(VideoError, match=r"mpeg2video stores only the frame rates 23\.976, 24, 25.*'.*a\.mkv' has 15 "):
        plan_video(up, replace(info, rate=Fraction(15)), VideoOptions(codec="mpeg2video"))  # before any frame runs
    assert plan_video(up, replace(info, rate=Fraction(2997, 100)), VideoOptions(codec="mpeg2video")).time_base == (
        Fraction(1001, 30000)
    )  # a rate rounded in its container is taken as the NTSC rate it stands for


def test_a_decoding_time_an_encoder_made_up_is_left_to_the_muxer() -> None:
    """libx265 gave a clip shorter than its lookahead dts = pts + an uninitialised value: Matroska refused the file
    at random ("Invalid argument"); B-frame reordering, a few frames, is kept as the encoder said."""
    from types import SimpleNamespace

    from sst_cli.video import _sane_dts

    tick = Fraction(1, 1000)
    made_up = SimpleNamespace(pts=0, dts=9187201950435737472, time_base=tick)
    reordered = SimpleNamespace(pts=5120, dts=0, time_base=Fraction(1, 1024))
    first = SimpleNamespace(pts=0, dts=-2048, time_base=Fraction(1, 1024))
    assert _sane_dts([made_up, reordered, first]) == [made_up, reordered, first]
    assert (made_up.dts, reordered.dts, first.dts) == (None, 0, -2048)


def test_once_a_clips_file_system_is_full_the_clips_bound_there_are_not_computed(
    tmp_path: Path, tiny: Upscaler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clip that fills the disk stopped nothing: every later clip was decoded and upscaled, then failed."""
    import errno

    from sst_cli import video_batch
    from sst_cli.filerun import BatchEvents
    from sst_cli.naming import WriteOptions
    from sst_cli.video import VideoResult

    clips = [make_clip(tmp_path / f"{name}.mkv", codec="mjpeg", pix_fmt="yuvj420p", audio=False) for name in "abc"]
    jobs, _ = video_batch.find_videos([str(clip) for clip in clips], recursive=False)
    plans = [video_batch._VideoPlan(job, tmp_path / "out" / job.source.name, probe_video(job.source)) for job in jobs]
    computed: list[str] = []

    def writing(upscaler: Upscaler, source: Path, target: Path, **kwargs: object) -> VideoResult:
        computed.append(source.name)
        if len(computed) == 1:
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError as exc:
                raise VideoError(f"cannot write '{target}': no space left on device") from exc
        return VideoResult(frames=6)

    monkeypatch.setattr(video_batch, "upscale_video", writing)
    result = video_batch._run(plans, tiny, VideoOptions(), WriteOptions(overwrite=True), BatchEvents())
    assert computed == ["a.mkv"] and [r.status for r in result.files] == ["failed"] * 3
    assert result.files[2].error_type == "DiskFull" and result.files[2].reason == (
        f"not computed: '{tmp_path / 'out'}' is full (no space left on device); free some space, then rerun with "
        "--overwrite (not --skip-existing: it would keep the earlier outputs of the files not done)"
    )
