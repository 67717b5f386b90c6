"""A new user's trial (issue 12): signals, checks before computing, inputs users have, the Python API.

The network is an instant x2 nearest-neighbour stand-in that counts its calls, so each test can say
whether anything was computed.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tifffile
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from sst_cli import diskfull, filerun
from sst_cli.archs import ModelDescriptor
from sst_cli.batch import (
    BatchInterrupted,
    Skips,
    WriteOptions,
    discover_inputs,
    is_own_output,
    own_name_pattern,
    own_skips,
    plan_output,
    run_batch,
)
from sst_cli.errors import ImageError, OutputExists
from sst_cli.files import atomic_write
from sst_cli.image_io import read_image, write_image
from sst_cli.loader import ModelSpec
from sst_cli.upscaler import Upscaler

RNG = np.random.default_rng(12)


class Counting(nn.Module):
    scale = 2

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return F.interpolate(x, scale_factor=2, mode="nearest")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def save(path: str, size: tuple[int, int] = (6, 5), mode: str = "RGB", **params: object) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    channels = {"RGB": 3, "RGBA": 4}[mode]
    Image.fromarray(RNG.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8), mode).save(target, **params)
    return target


def batch(inputs: list[str], output: str | None = "out", notes: list[str] | None = None, **writing: object):
    net = Counting()
    up = Upscaler(net, device="cpu")
    jobs = discover_inputs(inputs, skips=Skips(frozenset({"nn"})))
    naming = plan_output(jobs, output, model="nn", scale=2, template=writing.get("name"))  # type: ignore[arg-type]
    result = run_batch(
        jobs,
        up,
        naming=naming,
        writing=WriteOptions(**writing),
        on_note=None if notes is None else notes.append,  # type: ignore[arg-type]
    )
    return result, net


# ------------------------------------------------------------------------- 3: refused before computing
def test_existing_target_fails_before_any_computation() -> None:
    save("in/a.png")
    save("in/b.png")
    save("out/a_nn_x2.png")
    result, net = batch(["in"])
    assert [r.status for r in result.files] == ["failed", "done"]
    assert result.files[0].reason == "'out/a_nn_x2.png' already exists" and net.calls == 1


def test_unwritable_output_folder_is_one_sentence_and_nothing_is_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    save("in/a.png")
    real_mkdir = Path.mkdir

    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        if self.name == "out":
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", read_only)
    result, net = batch(["in"])
    assert result.files[0].status == "failed" and net.calls == 0
    assert result.files[0].reason == "cannot write into 'out': the file system is read-only"


def test_a_full_output_file_system_is_found_before_anything_is_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The write test made an empty file, which a full file system still allows: each file was upscaled, then
    failed to be written."""
    save("in/a.png")
    Path("out").mkdir()
    real_write, real_mkstemp = os.write, tempfile.mkstemp
    probes: set[int] = set()

    def probe(*args: Any, **kwargs: Any) -> tuple[int, str]:
        fd, name = real_mkstemp(*args, **kwargs)
        probes.add(fd)
        return fd, name

    def full(fd: int, data: bytes) -> int:  # what a full file system answers to the first byte of a file
        if fd in probes:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(tempfile, "mkstemp", probe)
    monkeypatch.setattr(os, "write", full)
    result, net = batch(["in"])
    assert result.files[0].status == "failed" and net.calls == 0
    assert result.files[0].reason == "cannot write into 'out': no space left on device"
    assert os.listdir("out") == []


def test_a_file_where_the_output_folder_should_be() -> None:
    save("in/a.png")
    Path("out").write_text("not a folder")
    result, net = batch(["in"], output="out/sub")
    assert net.calls == 0 and "cannot write into 'out/sub'" in (result.files[0].reason or "")


def test_webp_too_large_for_the_result_falls_back_to_png_with_a_notice() -> None:
    save("big.webp", size=(8200, 2), lossless=True)  # x2 = 16400 px wide: more than WebP's 16383
    notes: list[str] = []
    result, _ = batch(["big.webp"], output=None, notes=notes)
    assert result.files[0].status == "done" and result.files[0].output == Path("big_nn_x2.png")
    assert any("WebP stores at most 16383 px per side" in n for n in notes)


def test_output_file_named_webp_too_small_for_the_result_is_refused_first() -> None:
    save("big.webp", size=(8200, 2), lossless=True)
    result, net = batch(["big.webp"], output="result.webp")
    assert net.calls == 0 and "name the output .png" in (result.files[0].reason or "")


def test_two_inputs_sharing_an_output_name_are_said_before_computing() -> None:
    save("in/a.png")
    save("in/a.bmp")
    notes: list[str] = []
    result, net = batch(["in"], notes=notes, format="png")
    assert [r.status for r in result.files] == ["done", "failed"]  # a.bmp sorts first and claims the name
    assert net.calls == 1 and any("{suffix}" in n for n in notes)
    result, _ = batch(["in"], name="{stem}.{suffix}_{model}_x{scale}.{ext}", format="png")
    assert sorted(p.name for p in Path("out").iterdir()) == ["a.bmp_nn_x2.png", "a.png_nn_x2.png", "a_nn_x2.png"]


# ---------------------------------------------------------------------- 2: signals and stale temporaries
def test_sigterm_stops_like_ctrl_c_with_exit_143_and_no_temporary(tmp_path: Path) -> None:
    for name in "abc":
        save(f"in/{name}.png", size=(64, 64))
    code = (
        "import time, torch.nn.functional as F\n"
        "from sst_cli.upscaler import Upscaler\n"
        "def slow(self, x):\n"
        "    time.sleep(2.0)\n"  # slow enough that SIGTERM lands while b is running
        "    return F.interpolate(x, scale_factor=4)\n"
        "import sst_cli.upscaler as u; u.Upscaler._forward = slow\n"
        "from sst_cli.cli import main; main()\n"
    )
    args = [sys.executable, "-c", code, "upscale", "in", "-o", "out", "--model", "sst-light-291", "--scale", "4"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "out" / "a_sst-light-291_x4.png").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "stopped by signal 15" in err and "--skip-existing" in err
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".sst-tmp")]


def test_a_second_ctrl_c_during_the_clean_up_ends_the_process_quietly() -> None:
    """A second Ctrl-C pressed while the first one's clean-up ran broke Python's shutdown with a traceback."""
    code = (
        "import os, signal, time\n"
        "from sst_cli.signals import second_interrupt_exits_at_once\n"
        "second_interrupt_exits_at_once()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT); time.sleep(30)\n"
        "except KeyboardInterrupt:\n"
        "    print('cleaning up', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGINT); time.sleep(30)\n"
        "print('not reached')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (130, "cleaning up\n", "")
    assert time.monotonic() - started < 20


def test_stale_temporaries_of_a_killed_run_are_removed_with_a_notice() -> None:
    save("in/a.png")
    Path("out").mkdir()
    stale = Path("out/.a_nn_x2.png.0123abcd.sst-tmp")
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 120, time.time() - 120))
    fresh = Path("out/.b_nn_x2.png.0123abce.sst-tmp")  # another run may still be writing it
    fresh.write_bytes(b"busy")
    other = Path("out/.notes.sst-tmp")  # not our name pattern: left alone
    other.write_bytes(b"x")
    notes: list[str] = []
    batch(["in"], notes=notes)
    assert not stale.exists() and fresh.exists() and other.exists()
    assert any("removed 1 unfinished file" in n for n in notes)
    assert any("1 unfinished file(s) of another run" in n for n in notes)


def test_batch_interrupted_carries_the_signal_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from sst_cli.errors import Terminated

    save("in/a.png")

    def killed(self: object, x: torch.Tensor) -> torch.Tensor:
        raise Terminated(signal.SIGTERM)

    monkeypatch.setattr(Upscaler, "_forward", killed)
    with pytest.raises(BatchInterrupted) as info:
        batch(["in"])
    assert info.value.exit_code == 143 and not list(Path("out").glob("*.sst-tmp"))


@pytest.mark.parametrize("where", ["file_start", "file_done"])
def test_a_signal_between_two_files_still_reports_what_was_done(where: str) -> None:
    """The window around each file (progress display, reporting) is inside the interrupt handling too."""
    from sst_cli.errors import Terminated

    for name in "ab":
        save(f"in/{name}.png")
    up = Upscaler(Counting(), device="cpu")
    jobs = discover_inputs(["in"], skips=Skips(frozenset({"nn"})))
    naming = plan_output(jobs, "out", model="nn", scale=2, template=None)

    def on_file_start(job: object, index: int, total: int) -> None:
        if where == "file_start" and index == 1:
            raise Terminated(signal.SIGTERM)

    def on_file_done(record: object, index: int, total: int) -> None:
        if where == "file_done" and index == 0:
            raise Terminated(signal.SIGTERM)

    with pytest.raises(BatchInterrupted) as info:
        run_batch(jobs, up, naming=naming, on_file_start=on_file_start, on_file_done=on_file_done)
    stop = info.value
    assert stop.exit_code == 143 and [r.source.name for r in stop.result.files] == ["a.png"]
    assert (stop.current.source.name if stop.current else None) == ("b.png" if where == "file_start" else None)


# -------------------------------------------------------------------- 5: a full disk with TIFF output
def test_tiff_on_a_full_disk_says_so_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    picture = read_image(save("a.png"))
    real_fdopen = os.fdopen

    class Full(io.RawIOBase):
        def __init__(self, fh: io.BufferedWriter) -> None:
            self.fh = fh

        def writable(self) -> bool:
            return True

        def write(self, data: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self) -> None:
            self.fh.close()

    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r": Full(real_fdopen(fd, mode)))
    with pytest.raises(ImageError, match=r"cannot write 'a\.tif': no space left on device"):
        write_image("a.tif", picture)
    assert sorted(p.name for p in Path(".").iterdir()) == ["a.png"]


@pytest.mark.parametrize(
    ("overwrite", "hint"),
    [
        (False, "rerun with --skip-existing to resume"),
        (True, "rerun with --overwrite (not --skip-existing: it would keep the earlier outputs of the files not done)"),
    ],
)
def test_once_an_output_file_system_is_full_its_later_files_fail_without_being_computed(
    monkeypatch: pytest.MonkeyPatch, overwrite: bool, hint: str
) -> None:
    """The write test passes while there is a byte left; a disk that fills during the batch made every later
    file be upscaled first and then fail to be written (hours on a GPU batch). Files bound elsewhere go on.
    After --overwrite, the hint said to rerun with --skip-existing, which kept the failed files' old outputs."""
    for name in ("in/a.png", "in/b.png", "in/c.png", "other/d.png"):
        save(name)
    real_write = filerun.write_image

    def writer(path: Path, *args: Any, **kwargs: Any) -> None:
        if Path(path).parent.name == "in_sst":  # through the atomic writer, as a full disk fails a real write
            return atomic_write(path, lambda fh: _no_space(), error=ImageError)
        return real_write(path, *args, **kwargs)

    monkeypatch.setattr(filerun, "write_image", writer)
    monkeypatch.setattr(diskfull, "file_system", lambda target: Path(target).parent.name)  # two file systems
    result, net = batch(["in", "other"], output=None, overwrite=overwrite)
    assert [r.status for r in result.files] == ["failed", "failed", "failed", "done"]
    assert net.calls == 2  # a (whose write failed) and d
    assert result.files[0].reason == "cannot write 'in_sst/a_nn_x2.png': no space left on device"
    for record in result.files[1:3]:
        assert record.error_type == "DiskFull" and record.reason == (
            f"not computed: 'in_sst' is full (no space left on device); free some space, then {hint}"
        )
    assert os.listdir("in_sst") == [] and os.listdir("other_sst") == ["d_nn_x2.png"]


def _no_space() -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


# -------------------------------------------------------------------------- 6, 7: inputs users have
def test_float_and_half_tiffs_are_read_through_tifffile() -> None:
    values = RNG.random((5, 7, 3)).astype(np.float32)
    tifffile.imwrite("f32.tif", values, photometric="rgb")
    tifffile.imwrite("f16.tif", values.astype(np.float16), photometric="rgb")
    tifffile.imwrite("planar.tif", np.moveaxis(values, -1, 0), planarconfig="separate", photometric="rgb")
    for name, tol in (("f32.tif", 1e-7), ("f16.tif", 1e-3), ("planar.tif", 1e-7)):
        picture = read_image(name)
        assert picture.bit_depth == 16 and np.abs(picture.color - values).max() < tol, name


def test_animated_gif_upscales_its_first_frame_with_a_notice() -> None:
    frames = [Image.new("RGB", (6, 5), c) for c in ("red", "blue")]
    frames[0].save("anim.gif", save_all=True, append_images=frames[1:])
    notes: list[str] = []
    result, _ = batch(["anim.gif"], output=None, notes=notes)
    assert result.files[0].status == "done" and result.files[0].output == Path("anim_nn_x2.png")
    assert any("2 frames (an animation, or pages); only the first is upscaled" in n for n in notes)
    assert Image.open("anim_nn_x2.png").getpixel((0, 0)) == (255, 0, 0)


def test_a_file_whose_name_lies_about_its_format_gets_a_notice() -> None:
    Image.new("RGB", (6, 5), "red").save("photo.png", format="JPEG")
    notes: list[str] = []
    result, _ = batch(["photo.png"], output=None, notes=notes)
    assert result.files[0].output == Path("photo_nn_x2.jpg")
    assert any("photo.png: the file is a JPEG image, whatever its name says; the result is JPEG" in n for n in notes)
    notes.clear()
    Image.new("RGB", (6, 5), "red").save("b.jpg")  # named right: nothing to say
    batch(["b.jpg"], output=None, notes=notes)
    assert not any("whatever its name says" in n for n in notes)


def test_a_quality_no_output_uses_gets_a_notice() -> None:
    Image.new("RGB", (6, 5), "red").save("a.png")
    Image.new("RGB", (6, 5), "red").save("b.jpg")
    notes: list[str] = []
    batch(["a.png"], output="png", notes=notes, quality=80)
    assert any("--quality applies to JPEG and WebP; the outputs here are PNG" in n for n in notes), notes
    notes.clear()
    batch(["a.png", "b.jpg"], output="mixed", notes=notes, quality=80)  # the JPEG output uses it
    batch(["a.png"], output="default", notes=notes)  # not given: nothing to say
    assert not any("--quality" in n for n in notes), notes


def test_sixteen_bits_written_as_jpeg_are_said() -> None:
    Image.fromarray(np.full((5, 6), 40000, np.uint16)).save("deep.png")
    notes: list[str] = []
    batch(["deep.png"], output="jpg", notes=notes, format="jpg")
    assert any("deep.png: 16 bits per channel become 8 in JPEG" in n for n in notes), notes
    notes.clear()
    batch(["deep.png"], output="png", notes=notes)
    assert not any("become 8" in n for n in notes)


def test_sixteen_bit_values_in_a_32_bit_tiff_are_said_before_the_run() -> None:
    Image.fromarray(np.full((5, 6), 40000, np.int32), "I").save("scan.tif")  # reads nearly black: said, once
    notes: list[str] = []
    batch(["scan.tif"], output="png", notes=notes, format="png")
    said = [n for n in notes if "16-bit values stored in 32-bit integers" in n]
    assert len(said) == 1 and said[0].startswith("scan.tif: ") and "nearly black" in said[0], notes


def test_files_in_folders_are_never_silently_ignored() -> None:
    save("in/a.png")
    save("in/a_nn_x2.png")  # an earlier result of this tool
    Path("in/photo.heic").write_bytes(b"\0" * 10)
    Path("in/notes.txt").write_text("not an image")  # not an image at all: not counted
    result, net = batch(["in"])
    status = {r.source.name: (r.status, r.reason or "") for r in result.files}
    assert set(status) == {"a.png", "a_nn_x2.png", "photo.heic"}
    assert status["a_nn_x2.png"][0] == "skipped" and "--include-outputs" in status["a_nn_x2.png"][1]
    assert status["photo.heic"] == ("skipped", "HEIC is not a format sst-cli reads (convert it to PNG first)")
    assert net.calls == 1


def test_own_outputs_are_upscaled_when_asked_and_named_files_always() -> None:
    save("in/a_nn_x2.png")
    jobs = discover_inputs(["in"], skips=Skips())
    assert [j.skip for j in jobs] == [None]
    assert [j.skip for j in discover_inputs(["in/a_nn_x2.png"], skips=Skips(frozenset({"nn"})))] == [None]


def test_a_file_named_like_an_output_and_named_on_the_command_line_is_tried_in_either_order() -> None:
    """'in in/a_nn_x2.png' skipped the named file (the folder's skipped job came first); the other order tried it."""
    from sst_cli.video_batch import find_videos

    save("in/a.png")
    save("in/a_nn_x2.png")
    Path("in/c.mkv").write_bytes(b"clip")
    Path("in/c_nn_x2.mkv").write_bytes(b"clip")
    skips = Skips(frozenset({"nn"}))
    for items in (["in", "in/a_nn_x2.png"], ["in/a_nn_x2.png", "in"]):
        jobs = discover_inputs(items, skips=skips)
        assert {j.source.name: j.skip for j in jobs} == {"a.png": None, "a_nn_x2.png": None}, items
    for items in (["in", "in/c_nn_x2.mkv"], ["in/c_nn_x2.mkv", "in"]):
        clips, _ = find_videos(items, recursive=False, skips=skips)
        assert {j.source.name: j.skip for j in clips} == {"c.mkv": None, "c_nn_x2.mkv": None}, items


def test_own_outputs_are_recognised_when_the_label_holds_a_scale() -> None:
    labels = frozenset({"mini_x3", "sst-light"})
    assert is_own_output(Path("photo_mini_x3_x3.png"), labels)
    assert is_own_output(Path("Photo_SST-Light_x4.PNG"), labels)
    assert is_own_output(Path("a_b_sst-light_x2.5.png"), labels)
    assert not is_own_output(Path("mini_x3_x3.png"), labels)  # the label alone: no source stem before it
    assert not is_own_output(Path("photo_mini_x3.png"), labels)  # the label's own "_x3" is not a scale suffix
    assert not is_own_output(Path("photo_sst-light.png"), labels)
    assert not is_own_output(Path("photo_other_x4.png"), labels)


def test_names_the_runs_template_gives_an_input_beside_them_are_own_outputs() -> None:
    """A rerun into the input folder with --name upscaled its outputs again (a-4x.png, then a-4x-4x.png)."""
    for name in ("a.png", "a-4x.png", "a-4x-4x.png", "b-4x.png", "c.png", "c.png_nn.jpg", "d.bmp_nn.png"):
        save(f"in/{name}")
    skips = Skips(frozenset({"nn"}), own_name_pattern("{stem}-4x.{ext}", {"nn"}))
    skipped = {j.source.name for j in discover_inputs(["in"], skips=skips) if j.skip is not None}
    assert skipped == {"a-4x.png", "a-4x-4x.png"}  # b-4x.png has no b.* beside it: the user's own picture
    skips = Skips(frozenset({"nn"}), own_name_pattern("{stem}.{suffix}_{model}.{ext}", {"nn"}))
    skipped = {j.source.name for j in discover_inputs(["in"], skips=skips) if j.skip is not None}
    assert skipped == {"c.png_nn.jpg"}  # no d.bmp beside d.bmp_nn.png
    assert own_name_pattern("{stem}.{ext}", {"nn"}) is None  # every input is named so: never an output
    assert own_name_pattern("same.{ext}", {"nn"}) is None  # no stem to find the input by


def test_the_runs_template_counts_at_its_scale_and_only_in_the_folders_it_writes_into() -> None:
    """{scale} matched any number (IMG1.png beside IMG.png at x3), and files were left out of a walk even where
    the run wrote into another folder (photo_2.jpg with -o out --name '{stem}_{scale}.{ext}')."""
    for name in ("IMG.png", "IMG1.png", "IMG3.png", "photo.jpg", "photo_2.jpg", "photo_3.jpg"):
        save(f"in/{name}")
    spec = ModelSpec(scale=3)

    def skipped(items: list[str], template: str, output: str | None, outscale: float | None = None) -> set[str]:
        skips = own_skips(spec, template, output=output, outscale=outscale)
        return {j.source.name for j in discover_inputs(items, skips=skips) if j.skip is not None}

    assert skipped(["in"], "{stem}{scale}.{ext}", "in") == {"IMG3.png"}  # this run is x3
    assert skipped(["in"], "{stem}_{scale}.{ext}", "in/") == {"photo_3.jpg"}
    assert skipped(["in"], "{stem}_{outscale}.{ext}", "in", outscale=2) == {"photo_2.jpg"}
    assert skipped(["in"], "{stem}_{scale}.{ext}", "out") == set()  # not this run's outputs: inputs
    assert skipped(["in"], "{stem}_{scale}.{ext}", None) == set()  # a folder's outputs go to in_sst/
    assert skipped(["in/*.jpg"], "{stem}_{scale}.{ext}", None) == {"photo_3.jpg"}  # a glob's: beside each file
    unknown = own_name_pattern("{stem}{scale}.{ext}", {"nn"})  # weights whose scale only loading says
    assert unknown is not None and unknown.fullmatch("IMG1.png") is not None


# ------------------------------------------------------------------------------- 10: the Python API
def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = "TestCam"
    return exif.tobytes()


def test_upscale_file_keeps_icc_exif_and_applies_the_orientation() -> None:
    from PIL import ImageCms

    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    save("a.jpg", size=(6, 4), exif=_exif(6), icc_profile=profile, quality=95)  # 6: rotate 90 degrees
    up = Upscaler(Counting(), device="cpu")
    up.upscale_file("a.jpg", "b.png")
    with Image.open("b.png") as im:
        assert im.size == (8, 12)  # upright 4x6, x2
        assert im.info.get("icc_profile") == profile
        assert im.getexif().get(0x010F) == "TestCam" and im.getexif().get(0x0112, 1) == 1
    with pytest.raises(OutputExists, match="overwrite=True"):
        up.upscale_file("a.jpg", "b.png")


def test_upscale_of_a_pil_image_matches_the_file_path() -> None:
    save("a.jpg", size=(6, 4), exif=_exif(6))
    up = Upscaler(Counting(), device="cpu")
    with Image.open("a.jpg") as im:
        out = up.upscale(im)
    assert out.size == (8, 12) and out.mode == "RGB" and "exif" in out.info
    palette = Image.new("P", (3, 2))
    assert up.upscale(palette).mode == "RGB"  # no transparency: no alpha invented


def test_api_errors_do_not_mention_cli_flags() -> None:
    from sst_cli.errors import ConfigError

    for kwargs in ({"device": "tpu"}, {"precision": "fp8"}, {"tile": -1}):
        with pytest.raises(ConfigError) as info:
            Upscaler(Counting(), **kwargs)  # type: ignore[arg-type]
        assert "--" not in str(info.value), str(info.value)


# ------------------------------------------------------------------------------------ 4: honest tiling
class Windowed(Counting):
    """A stand-in that declares a window grid of 8 px, as SST declares 64."""

    def describe(self) -> ModelDescriptor:
        return ModelDescriptor(architecture="toy", scale=2, size_multiple=8, default_context=8)


def test_rounded_tiles_and_expensive_plans_are_said() -> None:
    from sst_cli.archs import SRNetwork

    class Net(Windowed, SRNetwork):
        pass

    said: list[str] = []
    up = Upscaler(Net(), device="cpu", tile=7, tile_overlap=5, on_message=said.append)
    assert said == []  # nothing is tiled yet
    up.run(torch.rand(3, 32, 32))
    up.run(torch.rand(3, 32, 32))
    assert said[:2] == [
        "tile 7 px becomes 8 px: toy's windows need multiples of 8 px",
        "tile overlap 5 px becomes 8 px: toy's windows need multiples of 8 px",
    ]
    assert len([s for s in said if "becomes" in s]) == 2  # once, not per image
    costly = [s for s in said if "compute each pixel" in s]
    # 4x4 tiles of 8 px; their contexts are 16, 24, 24, 16 px along each side: 80 * 80 / (32 * 32) = 6.25
    assert len(costly) == 1 and "8 px tiles with 8 px of context compute each pixel 6.2 times" in costly[0]


@pytest.mark.parametrize("tile", [7, "auto"])
def test_rounding_is_not_said_for_an_image_that_runs_whole(tile: int | str) -> None:
    """The window grid rounds tiles and overlaps; an image smaller than the tile runs whole and uses neither, yet
    'tile 7 px becomes 8 px' and 'tile overlap 5 px becomes 8 px' were said for it."""
    from sst_cli.archs import SRNetwork

    class Net(Windowed, SRNetwork):
        def activation_bytes(self, height: int, width: int, dtype: torch.dtype = torch.float32) -> int:
            return height * width * 64

    said: list[str] = []
    up = Upscaler(Net(), device="cpu", tile=tile, tile_overlap=5, max_memory=1 << 20, on_message=said.append)
    assert up.run(torch.rand(3, 6, 6)).tile == 0
    assert said == []
    up.run(torch.rand(3, 200, 200))  # auto: 2.4 MiB, over the budget; 7 px: tiled as 8 px tiles
    assert "tile overlap 5 px becomes 8 px: toy's windows need multiples of 8 px" in said
