"""``sst upscale`` on video files, end to end, with the small golden x3 checkpoint and clips of a few frames."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import GOLDEN, needs_golden
from PIL import Image
from typer.testing import CliRunner
from videoclips import audio_packets, make_clip, seconds

from sst_cli.cli import app
from sst_cli.upscaler import Upscaler

pytest.importorskip("av", reason="PyAV is not installed: pip install -e '.[video]' to run the video tests")
pytestmark = [needs_golden, pytest.mark.usefixtures("one_thread")]

MODEL = ["--weights", str(GOLDEN / "mini_x3.pth"), "--config", str(GOLDEN / "mini_x3.json"), "--device", "cpu"]
runner = CliRunner()
FEW = (0, 40, 100)  # three frames, variable rate


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SST_DEBUG", raising=False)


def sst(*args: str) -> object:
    return runner.invoke(app, ["upscale", *MODEL, *args])


def clip(path: str, **kwargs: object) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return make_clip(target, size=(16, 12), pts_ms=FEW, **kwargs)  # type: ignore[arg-type]


def test_clip_in_upscaled_clip_out_beside_it(tmp_path: Path) -> None:
    source = clip("a.mp4")
    result = sst("a.mp4")
    assert result.exit_code == 0, result.output
    out = tmp_path / "a_mini_x3_x3.mp4"
    assert seconds(out) == seconds(source) and audio_packets(out) == audio_packets(source)
    assert "h264 yuv420p 16x12 -> libx264 yuv420p 48x36 in mp4" in result.stderr


def test_a_missing_image_beside_a_clip_fails_alone_and_the_clip_runs() -> None:
    """The image batch checked its share of the inputs again, the clip taken out: 'missing.png does not exist'
    refused the command (exit 2) and the clip never ran."""
    clip("a.mp4")
    result = sst("a.mp4", "missing.png")
    assert result.exit_code == 1, result.output
    assert Path("a_mini_x3_x3.mp4").is_file() and "missing.png" in result.stderr


def test_folder_of_clips_and_images_recursive(tmp_path: Path) -> None:
    clip("media/a.mp4")
    clip("media/deep/b.mkv", codec="mjpeg", pix_fmt="yuvj420p")
    Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save("media/c.png")
    Path("media/old_sst-light-291_x4.mp4").write_bytes(b"earlier")  # named like an output: skipped, not read
    result = sst("media", "--recursive", "--json-log")
    assert result.exit_code == 0, result.output
    written = sorted(p.relative_to("media_sst").as_posix() for p in Path("media_sst").rglob("*") if p.is_file())
    assert written == ["a_mini_x3_x3.mp4", "c_mini_x3_x3.png", "deep/b_mini_x3_x3.mkv"]
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["event"] == "summary" and (events[-1]["done"], events[-1]["skipped"]) == (3, 1)
    numbered = [(e["index"], e["total"]) for e in events if e["event"] == "file_done"]  # images, then clips
    assert numbered == [(i, len(numbered)) for i in range(1, len(numbered) + 1)]
    progress = [e for e in events if e["event"] == "progress"]
    assert progress and {"frames", "frames_per_second", "eta_seconds", "clip_frames_per_second",
                         "clip_eta_seconds"} <= set(progress[0])  # fmt: skip
    first = progress[0]  # the first frame of the first clip (MP4: 3 frames; MKV: 0.14 s x 25 frames/s estimated)
    assert (first["frames"], first["frames_expected"], first["frames_all_expected"]) == (1, 3, 7)
    assert first["clip_eta_seconds"] == pytest.approx(2 / first["clip_frames_per_second"], abs=0.1)
    assert first["eta_seconds"] == pytest.approx(6 / first["frames_per_second"], abs=0.1)


def test_lossless_writes_mkv_and_option_errors_come_first(tmp_path: Path) -> None:
    clip("a.mp4", audio=False)
    assert sst("a.mp4", "--lossless").exit_code == 0
    assert Path("a_mini_x3_x3.mkv").is_file()
    assert sst("a.mp4", "--lossless", "-o", "named.mkv").exit_code == 0 and Path("named.mkv").is_file()
    clip("more/b.mp4", audio=False)
    result = sst("a.mp4", "more", "-o", "one.mp4")
    assert result.exit_code == 2 and "names one video file" in result.stderr
    result = sst("a.mp4", "--lossless", "--codec", "libx264")
    assert result.exit_code == 2 and "--lossless" in result.stderr


def test_bad_video_options_are_one_error_before_anything_runs(tmp_path: Path) -> None:
    """They failed every clip in turn (exit 1), after the images of the same command had been upscaled."""
    clip("in/a.mp4", audio=False)
    clip("in/b.mp4", audio=False)
    Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save("in/c.png")
    for args, message in [
        (["--codec", "nope"], "this FFmpeg has no encoder 'nope'"),
        (["--codec", "libx264", "--crf", "60"], "libx264 takes --crf 0 to 51, not 60"),
        (["--codec", "ffv1", "--crf", "20"], "--crf applies to x264, x265, VP8/VP9 and AV1 encoders, not ffv1"),
        (["--pix-fmt", "foo"], "--pix-fmt foo is not a pixel format FFmpeg knows"),
        (["--crf", "60"], "libx264 takes --crf 0 to 51, not 60 (its encoder follows its codec"),  # no --codec
        (["--pix-fmt", "rgb48le"], "libx264 cannot write pixel format rgb48le"),
    ]:
        result = sst("in", "-o", "out", *args)
        assert result.exit_code == 2 and message in result.stderr and result.stderr.count(message) == 1, args
        assert not Path("out").exists(), args  # not even the image


@pytest.mark.skipif(sys.platform == "win32", reason="/dev/null is POSIX")
def test_an_output_folder_that_is_a_device_or_a_file_is_one_error(tmp_path: Path) -> None:
    """Each clip failed on its own (exit 1): "cannot write into '/dev/null': '/dev/null' is a file, not a folder"."""
    clip("a.mp4", audio=False)
    Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save("c.png")
    Path("notes").write_text("mine")
    for args, message in [
        (["a.mp4", "-o", "/dev/null"], "-o '/dev/null': it is a character device, not a file"),
        (["c.png", "-o", "/dev/null"], "-o '/dev/null': it is a character device, not a file"),
        (["a.mp4", "-o", "notes"], "-o 'notes' is an existing file, not a folder or a video name"),
    ]:
        result = sst(*args)
        assert result.exit_code == 2 and message in result.stderr, args
    assert Path("notes").read_text() == "mine"


def test_what_is_no_video_is_said_as_such(tmp_path: Path) -> None:
    Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save("photo.mp4", format="PNG")
    Path("empty.mp4").write_bytes(b"")
    whole = clip("whole.mp4", audio=False).read_bytes()
    Path("cut.mp4").write_bytes(whole[: len(whole) // 2])  # MP4's index (moov) is written last
    result = sst("photo.mp4", "empty.mp4", "cut.mp4")
    assert result.exit_code == 1
    assert "'photo.mp4': it is a PNG image, not a video; give it its image extension" in result.stderr
    assert "'empty.mp4': the file is empty (0 bytes)" in result.stderr
    assert "'cut.mp4': a damaged or cut-short MP4 / MOV (its index is written last" in result.stderr


def test_max_pixels_applies_to_video_frames(tmp_path: Path) -> None:
    clip("a.mp4", audio=False)  # 16x12 = 192 pixels
    result = sst("a.mp4", "--max-pixels", "100")
    assert result.exit_code == 1
    assert "'a.mp4': its 16x12 frames are 192 pixels, more than the limit of 100" in result.stderr
    assert sst("a.mp4", "--max-pixels", "192", "-q").exit_code == 0


def test_a_named_output_file_gets_the_container_its_extension_names(tmp_path: Path) -> None:
    """``-o x.mkv`` wrote an MP4 under that name; names the codec cannot go in, or that are no video, are refused."""
    import av

    clip("a.mp4")
    assert sst("a.mp4", "-o", "x.mkv", "-q").exit_code == 0
    with av.open("x.mkv") as container:
        assert "matroska" in container.format.name
        assert [s.codec_context.name for s in container.streams] == ["h264", "aac"]
    for args, message in [
        (["-o", "x.webm"], "cannot write 'x.webm': libx264 does not go in .webm; name it .mkv or pass a WebM codec"),
        (["-o", "x.avi"], "cannot write 'x.avi': sst-cli writes video as .mp4, .m4v, .mov, .mkv, .webm, .ts"),
        (["--lossless", "-o", "x.mp4"], "--lossless (FFV1) does not go in .mp4; name it .mkv"),
        (["--codec", "png", "-o", "x.mkv"], "cannot write 'x.mkv': png does not go in .mkv; name it .mov"),
    ]:
        result = sst("a.mp4", *args, "-q")  # refused as options (exit 2), before the model loads
        assert result.exit_code == 2 and message in result.stderr, result.output
    image_name = sst("a.mp4", "-o", "x.png")
    assert image_name.exit_code == 2 and "'x.png' names an image file, but the input is video" in image_name.stderr
    Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save("b.png")
    mixed = sst("b.png", "a.mp4", "-o", "both.mp4")
    assert mixed.exit_code == 2 and "names one file, but the inputs are images and videos" in mixed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4", "b.png", "x.mkv"]


@pytest.mark.parametrize(("name", "kwargs", "how"), [
    ("cut.mp4", {"options": {"movflags": "faststart"}}, "its container lists 10"),  # the index first: still opens
    ("cut.mkv", {"codec": "mjpeg", "pix_fmt": "yuvj420p"}, "its duration suggests about 10"),
])  # fmt: skip
def test_a_truncated_clip_says_it_ends_early(tmp_path: Path, name: str, kwargs: dict, how: str) -> None:
    # 32x24: at 16x12 the cut falls inside the first frame, and the clip is refused as undecodable instead
    whole = make_clip(tmp_path / f"whole{Path(name).suffix}", size=(32, 24), pts_ms=tuple(range(0, 400, 40)),
                      audio=False, **kwargs)  # fmt: skip
    data = whole.read_bytes()
    (tmp_path / name).write_bytes(data[: len(data) // 2])
    result = sst(name)
    assert result.exit_code == 0, result.output
    assert f"warning: {name}: ends early:" in result.stderr and f"where {how} (a truncated file?)" in result.stderr


def test_an_mp4_cut_with_an_edit_list_is_not_called_truncated(tmp_path: Path) -> None:
    # 8 samples listed, the first 2 before the edit list's start: FFmpeg decodes 6, covering the whole 0.24 s
    make_clip(tmp_path / "cut.mp4", size=(16, 12), pts_ms=tuple(range(-80, 240, 40)), audio=False,
              options={"avoid_negative_ts": "disabled"})  # fmt: skip
    result = sst("cut.mp4", "--json-log")
    assert result.exit_code == 0, result.output
    assert "ends early" not in result.output
    progress = [e for e in map(json.loads, result.stdout.splitlines()) if e["event"] == "progress"]
    assert progress and {e["frames_expected"] for e in progress} == {6}


def test_bad_clip_is_one_sentence_before_the_model_loads(tmp_path: Path) -> None:
    Path("bad.mp4").write_bytes(b"nothing")
    config = str(GOLDEN / "mini_x3.json")  # read at once; the weights only when a clip needs them
    result = runner.invoke(app, ["upscale", "bad.mp4", "--weights", "nowhere.pth", "--config", config])
    assert result.exit_code == 1
    assert "bad.mp4': not a video file FFmpeg can open" in result.stderr and "nowhere" not in result.stderr


def test_existing_outputs_fail_or_are_skipped(tmp_path: Path) -> None:
    clip("a.mp4", audio=False)
    Path("a_mini_x3_x3.mp4").write_bytes(b"earlier")
    result = sst("a.mp4")
    assert result.exit_code == 1 and "already exists" in result.stderr
    result = sst("a.mp4", "--skip-existing")
    assert result.exit_code == 0 and "skipped" in result.stderr
    assert Path("a_mini_x3_x3.mp4").read_bytes() == b"earlier"


def test_sigterm_mid_clip_leaves_nothing_and_says_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clip("a.mp4")
    real = Upscaler.upscale_batch

    def upscale_batch(self: Upscaler, images: list) -> list:  # type: ignore[type-arg]
        done = real(self, images)
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal, while the decoding and encoding threads run
        time.sleep(5)  # the handler raises Terminated here, in the main thread
        return done

    monkeypatch.setattr(Upscaler, "upscale_batch", upscale_batch)
    result = sst("a.mp4")
    assert result.exit_code == 143 and "--skip-existing" in result.stderr
    assert sorted(p.name for p in Path(".").iterdir()) == ["a.mp4"]
    assert not [t for t in threading.enumerate() if t.name.startswith("sst-video")]


def test_a_signal_just_after_the_rename_counts_the_clip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sst_cli.video_batch as video_batch

    clip("a.mp4")
    clip("b.mp4")
    real = video_batch.upscale_video

    def upscale_then_signal(*args: object, **kwargs: object) -> object:
        done = real(*args, **kwargs)  # type: ignore[arg-type]
        os.kill(os.getpid(), signal.SIGTERM)  # the clip is renamed into place; its record is not made yet
        time.sleep(5)
        return done

    monkeypatch.setattr(video_batch, "upscale_video", upscale_then_signal)
    result = sst("a.mp4", "b.mp4", "--json-log")
    assert result.exit_code == 143, result.output
    summary = [json.loads(line) for line in result.stdout.splitlines() if '"summary"' in line]
    assert summary and summary[0]["done"] == 1 and summary[0]["interrupted"] is True
    assert sorted(p.name for p in Path(".").iterdir()) == ["a.mp4", "a_mini_x3_x3.mp4", "b.mp4"]


def test_without_pyav_a_clip_is_an_option_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clip("a.mp4")
    monkeypatch.setitem(sys.modules, "av", None)
    result = sst("a.mp4")
    assert result.exit_code == 2 and "video needs PyAV: pip install 'av>=18'" in result.stderr


def test_an_input_is_never_written_over_and_stale_temporaries_go(tmp_path: Path) -> None:
    clip("a.mp4", audio=False)
    before = Path("a.mp4").read_bytes()
    stale = Path(".a_mini_x3_x3.mp4.0123abcd.sst-tmp")
    stale.write_bytes(b"left by a killed run")
    os.utime(stale, (1, 1))
    result = sst("a.mp4", "-o", "a.mp4", "--overwrite")
    assert result.exit_code == 1 and "is an input file" in result.stderr
    assert Path("a.mp4").read_bytes() == before and stale.exists()  # nothing planned there: nothing cleaned
    assert sst("a.mp4").exit_code == 0 and not stale.exists()


def test_transparency_kept_by_default_and_a_warning_when_dropped(tmp_path: Path) -> None:
    clip("a.mov", codec="png", pix_fmt="rgba", audio=False)
    result = sst("a.mov")
    assert result.exit_code == 0, result.output
    assert "png rgba 16x12 -> png rgba 48x36 in mov" in result.stderr and "dropped" not in result.stderr
    for quiet in ([], ["--quiet"]):  # --quiet hides remarks, not a warning of what went otherwise than asked
        result = sst("a.mov", "--codec", "libx264", "--overwrite", *quiet)
        assert result.exit_code == 0, result.output
        said = " ".join(result.stderr.split())
        assert "warning: 'a.mov' has an alpha channel (transparency), which is dropped: libx264 cannot store it" in said


def test_frames_per_pass_is_checked_before_anything_runs(tmp_path: Path) -> None:
    result = sst("nowhere.mp4", "--frames-per-pass", "0")
    assert result.exit_code == 2 and "--frames-per-pass must be at least 1, got 0" in result.stderr


def test_damaged_frames_are_counted_in_one_line_and_the_clip_is_written(tmp_path: Path) -> None:
    source = clip("hurt.mkv", codec="mjpeg", pix_fmt="yuvj420p", corrupt={1})  # an intra-only codec: one frame lost
    result = sst("hurt.mkv")
    assert result.exit_code == 0, result.output
    assert "hurt.mkv: 1 damaged frame(s) could not be decoded and are missing; every other frame keeps its" in (
        " ".join(result.stderr.split())
    )
    assert seconds(tmp_path / "hurt_mini_x3_x3.mkv") == seconds(source)  # both without the damaged frame's time


def test_image_options_for_videos_only_are_said_and_the_resume_hint_fits_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip("a.mp4", audio=False)
    result = sst("a.mp4", "-f", "jpg", "--quality", "50")
    assert result.exit_code == 0 and "--format and --quality apply to images; every input is a video" in result.stderr
    from sst_cli import video

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(video, "_transcode", interrupted)
    stopped = sst("a.mp4", "--overwrite")
    assert stopped.exit_code == 130
    assert "rerun with --overwrite (not --skip-existing: it would keep the earlier outputs" in stopped.stderr


def test_a_folder_in_the_way_of_the_output_is_refused_before_the_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip("a.mp4", audio=False)
    Path("a_mini_x3_x3.mp4").mkdir()
    monkeypatch.setattr(Upscaler, "__init__", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    result = sst("a.mp4", "--overwrite", "--scale", "3")  # the scale known: the output is named before the model loads
    assert result.exit_code == 1 and "cannot write 'a_mini_x3_x3.mp4': it is a folder" in result.stderr


def test_an_outscale_that_leaves_no_pixel_is_refused_before_the_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip("a.mp4", audio=False)  # 16x12 frames
    monkeypatch.setattr(Upscaler, "__init__", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    result = sst("a.mp4", "-o", "out", "--outscale", "0.04", "--scale", "3")
    assert result.exit_code == 1 and not Path("out").exists()
    assert "'a.mp4' (16x12 px) at --outscale 0.04 would give a 1x0 px result" in " ".join(result.stderr.split())


def test_3gp_and_3g2_phone_clips_are_video(tmp_path: Path) -> None:
    """A 3GP clip was taken for an image ("not a PNG, JPEG, WebP, TIFF, BMP or GIF image")."""
    clip("phone.3gp", audio=False)
    clip("old.3g2", audio=False)
    result = sst("phone.3gp", "old.3g2")
    assert result.exit_code == 0, result.output
    assert Path("phone_mini_x3_x3.mkv").is_file() and Path("old_mini_x3_x3.mkv").is_file()  # MKV: sst-cli writes no 3GP


def test_svt_av1_encodes_a_clip_with_a_millisecond_time_base(tmp_path: Path) -> None:
    """The encoder probe had no frame rate, so SVT-AV1 read 1000 frames/s from 1/1000 and refused every clip."""
    import av

    if "libsvtav1" not in av.codecs_available:
        pytest.skip("this PyAV build has no libsvtav1")
    clip("a.mkv", audio=False)  # Matroska: a 1/1000 time base
    result = sst("a.mkv", "--codec", "libsvtav1", "-q")
    assert result.exit_code == 0, result.output
    assert Path("a_mini_x3_x3.mkv").is_file()


def test_a_frame_rate_mpeg2_cannot_store_is_refused_before_the_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal came from planning the encoding, after the model had loaded."""
    from sst_cli import video_batch

    clip("a.mkv", audio=False)
    real = video_batch.probe_video
    monkeypatch.setattr(video_batch, "probe_video", lambda path: replace(real(path), rate=Fraction(15)))
    monkeypatch.setattr(Upscaler, "__init__", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    result = sst("a.mkv", "--codec", "mpeg2video", "-o", "out")
    assert result.exit_code == 1 and not Path("out").exists()  # as for the other refusals of one clip
    assert "mpeg2video stores only the frame rates 23.976, 24, 25" in " ".join(result.stderr.split())
    assert "'a.mkv' has 15 frames/s" in " ".join(result.stderr.split())


def test_a_clip_named_twice_is_upscaled_once(tmp_path: Path) -> None:
    """The second job failed: its output already existed, written by the first."""
    clip("a.mp4", audio=False)
    result = sst("a.mp4", "./a.mp4", "-o", "out")
    assert result.exit_code == 0, result.output
    assert [p.name for p in Path("out").iterdir()] == ["a_mini_x3_x3.mp4"]


def test_an_empty_folder_beside_a_clip_is_passed_over_with_a_note(tmp_path: Path) -> None:
    """It went to the image batch, whose "no image files found in 'empty'" refused the whole run (exit 2)."""
    clip("a.mp4", audio=False)
    Path("empty").mkdir()
    result = sst("empty", "a.mp4", "-o", "out")
    assert result.exit_code == 0, result.output
    assert [p.name for p in Path("out").iterdir()] == ["a_mini_x3_x3.mp4"]
    assert "'empty' holds no image or video files: nothing comes from it" in " ".join(result.stderr.split())
