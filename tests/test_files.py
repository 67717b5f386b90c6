"""The atomic writer (sst_cli.files): what other processes and threads see while it works."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from conftest import GOLDEN, needs_golden

from sst_cli import files
from sst_cli.errors import WriteError
from sst_cli.inuse import holding, in_use


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux shows the umask in /proc/self/status")
def test_the_umask_is_read_without_being_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Setting it to read it (it was set to 0 for that moment) made other threads' new files world-writable."""

    def changed(_mask: int) -> int:
        raise AssertionError("the umask was changed to be read")

    real = os.umask(0o027)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(os, "umask", changed)
            assert files._default_mode() == 0o640
    finally:
        os.umask(real)


def test_where_only_setting_tells_the_umask_is_read_once_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "_proc_umask", lambda: None)
    files._umask_by_setting.cache_clear()
    real = os.umask(0o022)
    try:
        assert files._default_mode() == 0o644
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(real)
        files._umask_by_setting.cache_clear()


def test_a_long_name_that_passed_the_check_is_written(tmp_path: Path) -> None:
    """80 CJK characters (244 bytes) passed the 255-byte check, but their temporary name, cut at 200 characters,
    was 262 bytes: the write failed with "File name too long" after all the computing."""
    target = tmp_path / ("写" * 80 + ".png")
    files.check_file_target(target, "the output")
    for tag in ("", ".old"):  # a file's temporary, and the name a replaced folder is moved aside to
        name = files.temp_name(target, tag).name
        assert len(os.fsencode(name)) <= files.name_max(tmp_path) and name.endswith(f"{tag}{files.TEMP_SUFFIX}")
    files.atomic_write(target, lambda fh: fh.write(b"x"), overwrite=False)
    assert target.read_bytes() == b"x"
    report = tmp_path / ("报" * 84)  # 252 bytes
    for text in ("old", "new"):  # the second build moves the first aside under a ".old" temporary name
        with files.atomic_folder(report, may_replace=lambda _path: True) as folder:
            (folder / "index.html").write_text(text)
    assert (report / "index.html").read_text() == "new" and sorted(tmp_path.iterdir()) == sorted([target, report])


def _age(path: Path) -> None:
    """As if untouched for two minutes (a video's encoder between two flushes)."""
    os.utime(path, (time.time() - 120, time.time() - 120))


def _cleaned_while_writing(folder: Path, write: Callable[[Callable[[], None]], None]) -> list[str]:
    """Run ``write(paused)`` in a thread; while it is paused in the middle, clean ``folder`` as a second run
    starting there would. Returns what the clean-up said."""
    paused, resume = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def pause() -> None:
        paused.set()
        assert resume.wait(10)

    def writer() -> None:
        try:
            write(pause)
        except BaseException as exc:  # failed in the thread: said by the test
            failed.append(exc)
            paused.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert paused.wait(10)
    notes: list[str] = []
    files.clean_stale_temporaries(folder, notes.append)
    resume.set()
    thread.join(10)
    assert not failed, failed
    return notes


def _abandoned(folder: Path) -> Path:
    """What a killed run leaves: an old temporary file that no one holds."""
    left = folder / f".gone.png.0123abcd{files.TEMP_SUFFIX}"
    left.write_bytes(b"half")
    _age(left)
    return left


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no advisory locks here: the age rule alone")
def test_a_second_run_leaves_the_old_unfinished_file_of_a_running_writer(tmp_path: Path) -> None:
    """A video's temporary file goes minutes untouched: a second run's clean-up deleted it, and the first failed
    at its rename, hours later. The writer's lock keeps it; a killed run's leftover (no lock) still goes."""
    left = _abandoned(tmp_path)

    def write(pause: Callable[[], None]) -> None:
        def encode(fh: IO[bytes]) -> None:
            fh.write(b"header")
            _age(next(tmp_path.glob(f".clip.mkv.*{files.TEMP_SUFFIX}")))
            pause()
            fh.write(b"frames")

        files.atomic_write(tmp_path / "clip.mkv", encode, overwrite=False)

    notes = _cleaned_while_writing(tmp_path, write)
    assert (tmp_path / "clip.mkv").read_bytes() == b"headerframes" and not left.exists()
    assert notes == [
        f"removed 1 unfinished file(s) that an interrupted run left in '{tmp_path}'",
        f"'{tmp_path}' holds 1 unfinished file(s) of another run that may still be writing; left alone",
    ]


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no advisory locks here: the age rule alone")
def test_a_second_run_leaves_the_staging_folder_of_a_report_being_built(tmp_path: Path) -> None:
    def write(pause: Callable[[], None]) -> None:
        with files.atomic_folder(tmp_path / "report") as folder:
            (folder / "index.html").write_text("done")
            _age(folder)
            pause()

    _cleaned_while_writing(tmp_path, write)
    assert (tmp_path / "report" / "index.html").read_text() == "done"


def test_the_lock_is_the_files_not_its_names(tmp_path: Path) -> None:
    """Held from making to renaming: the renamed file is released when the block ends, nothing is left held."""
    temp = tmp_path / "temp"
    temp.write_bytes(b"")
    unknown = (None,) if sys.platform == "win32" else ()  # Windows: no lock, the age rule alone
    with holding(temp):
        assert in_use(temp) in (True, *unknown)
        temp.rename(tmp_path / "done")
    assert in_use(tmp_path / "done") in (False, *unknown)


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no advisory locks here: the age rule alone")
def test_a_writer_takes_its_lock_though_a_clean_up_holds_it_for_a_moment(tmp_path: Path) -> None:
    """A clean-up's in_use() holds the lock for a moment: a writer starting then gave up and wrote unprotected."""
    import fcntl
    import threading

    temp = tmp_path / "temp"
    temp.write_bytes(b"")
    fd = os.open(temp, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(0.05, os.close, (fd,)).start()  # released 50 ms later, as a clean-up does
    with holding(temp):
        time.sleep(0.2)  # the clean-up's moment is over: the lock must be the writer's now
        assert in_use(temp) is True


def test_a_folder_to_replace_that_is_an_input_itself_is_named_once(tmp_path: Path) -> None:
    """``--report Set5`` (the dataset read) said "'Set5' is inside the --report folder 'Set5'"."""
    data = tmp_path / "Set5"
    (data / "HR").mkdir(parents=True)
    with pytest.raises(files.WriteError, match=rf"^the --report folder '{data}' is what this run reads \(or"):
        files.check_spared(data, [data], "the --report folder")
    with pytest.raises(files.WriteError, match=rf"^'{data / 'HR'}' is inside the --report folder '{data}'"):
        files.check_spared(data, [data / "HR"], "the --report folder")
    files.check_spared(tmp_path / "report", [data], "the --report folder")


def test_a_replaced_folder_left_aside_by_a_killed_run_is_cleaned_up(tmp_path: Path) -> None:
    """A run killed between moving the old report aside and deleting it left a whole report ('.old') that no
    clean-up recognised: hidden, and kept for ever."""
    aside = tmp_path / f".report.0123abcd.old{files.TEMP_SUFFIX}"
    aside.mkdir()
    (aside / "index.html").write_text("old")
    _age(aside)
    notes: list[str] = []
    files.clean_stale_temporaries(tmp_path, notes.append)
    assert not aside.exists() and len(notes) == 1


def test_fresh_temporaries_of_files_this_run_holds_are_removed_at_once(tmp_path: Path) -> None:
    """sst train resumed within a minute of being killed mid-save left the half-written state behind ("left
    alone"), though it held --state's lock and no other run could be writing it."""
    held = tmp_path / "k.state.pth"
    mine = tmp_path / f".k.state.pth.0123abcd{files.TEMP_SUFFIX}"
    other = tmp_path / f".k.pth.0123abcd{files.TEMP_SUFFIX}"
    mine.write_bytes(b"half")
    other.write_bytes(b"half")
    notes: list[str] = []
    files.clean_stale_temporaries(tmp_path, notes.append, held=[held])
    assert not mine.exists() and other.exists()  # another file's, a minute old at most: maybe still written
    assert len(notes) == 2


@pytest.mark.parametrize("existed", [False, True])
def test_a_report_keeps_the_files_another_run_wrote_into_its_folder_meanwhile(tmp_path: Path, existed: bool) -> None:
    """An upscale writing into a report's folder while the report was built lost its output when the report was
    swapped in: now the folder is left as it is, and the new report is placed beside it under a visible name."""
    target = tmp_path / "report"
    if existed:
        target.mkdir()
        (target / "index.html").write_text("old")
    appeared = r"img0_x4\.png appeared there while this run worked"
    with (
        pytest.raises(files.WriteError, match=appeared) as caught,
        files.atomic_folder(target, may_replace=lambda folder: True) as folder,
    ):
        (folder / "index.html").write_text("new")
        target.mkdir(exist_ok=True)
        (target / "img0_x4.png").write_bytes(b"upscaled")  # another sst process, meanwhile
    assert (target / "img0_x4.png").read_bytes() == b"upscaled"
    assert (tmp_path / "report.new" / "index.html").read_text() == "new"
    assert "report.new" in str(caught.value)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report", "report.new"]


def test_a_report_replaces_its_own_earlier_report(tmp_path: Path) -> None:
    target = tmp_path / "report"
    target.mkdir()
    (target / "index.html").write_text("old")
    with files.atomic_folder(target, may_replace=lambda folder: True) as folder:
        (folder / "index.html").write_text("new")
    assert (target / "index.html").read_text() == "new" and sorted(tmp_path.iterdir()) == [target]


def _write_text(path: Path) -> None:
    files.atomic_write_text(path, "x")


def _build_folder(path: Path) -> None:
    with files.atomic_folder(path):
        pass


def _check_output(path: Path) -> None:
    files.check_output_file(path, overwrite=False)


def _unwritable(path: Path) -> None:
    why = files.unwritable(path.parent)
    if why is not None:
        raise WriteError(why)


@pytest.mark.parametrize("write", [_write_text, _build_folder, _check_output, _unwritable])
@pytest.mark.parametrize("below", ["x", "sub/x", "sub/deeper/x"])
def test_a_file_where_a_folder_goes_is_named(tmp_path: Path, write: Callable[[Path], None], below: str) -> None:
    """One level below the file the system says 'File exists', the checks said 'the folder does not exist':
    neither named the file in the way."""
    (tmp_path / "afile").write_text("hi")
    with pytest.raises(WriteError, match=re.escape(f"'{tmp_path / 'afile'}' is a file, not a folder")):
        write(tmp_path / "afile" / below)


def test_a_missing_folder_is_still_called_missing(tmp_path: Path) -> None:
    with pytest.raises(WriteError, match=r"the folder '.*none' does not exist"):
        files.atomic_write(tmp_path / "none" / "x.png", lambda fh: fh.write(b"x"))


def test_a_single_file_output_makes_its_folders_when_written_and_only_then(tmp_path: Path) -> None:
    """--json new/x.json was refused ('the folder does not exist') where --save-images, --report and train --out
    make theirs; the check makes none, so that a run refused later leaves no empty folder."""
    target = tmp_path / "new" / "sub" / "x.json"
    files.check_output_file(target, overwrite=False, option="--json")
    assert not (tmp_path / "new").exists()

    def fails(temp: Path) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(WriteError, match="no space left on device"):
        files.atomic_save(target, fails, parents=True)
    assert not (tmp_path / "new").exists()  # made for the write, removed when it failed
    files.atomic_write_text(target, "{}")
    assert target.read_text() == "{}"


_MINI = ["--weights", str(GOLDEN / "mini_x3.pth"), "--config", str(GOLDEN / "mini_x3.json"), "--device", "cpu"]
_EVAL = ["eval", "-d", "mine", "-m", "bicubic", "-s", "2"]


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([*_EVAL, "--report", "afile/sub"], id="eval-report"),
        pytest.param([*_EVAL, "--json", "afile/x.json"], id="eval-json"),
        pytest.param([*_EVAL, "--save-images", "afile/sub"], id="eval-save-images"),
        pytest.param(["compare", "tiny.png", "-m", "bicubic", "-o", "afile/sub"], id="compare-out"),
        pytest.param(["compare", "tiny.png", "-m", "bicubic", "--png", "afile/x.png"], id="compare-png"),
        pytest.param(["upscale", *_MINI, "tiny.png", "-o", "afile/out.png"], id="upscale-file", marks=needs_golden),
        pytest.param(["upscale", *_MINI, "tiny.png", "-o", "afile/sub/"], id="upscale-folder", marks=needs_golden),
        pytest.param(["train", "--data", "mine", "--iters", "1", "--out", "afile/x.safetensors"], id="train-out"),
    ],
)
def test_every_command_names_the_file_in_the_way_of_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """'File exists' (--report, -o) and 'the folder does not exist' (--json, --png) for a folder that is a file."""
    from PIL import Image
    from typer.testing import CliRunner

    from sst_cli.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine" / "HR").mkdir(parents=True)
    pixels = Image.new("RGB", (16, 16), (200, 100, 50))
    pixels.save(tmp_path / "mine" / "HR" / "a.png")
    pixels.save(tmp_path / "tiny.png")
    (tmp_path / "afile").write_text("hi")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert re.search(r"'[^']*afile' is a file, not a folder", " ".join(result.output.split())), result.output


def test_a_write_through_a_link_replaces_the_linked_file_and_keeps_the_link(tmp_path: Path) -> None:
    """The rename replaced the link itself with a plain file and left the file it led to as it was."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "r.json").write_text("old")
    (tmp_path / "link.json").symlink_to(tmp_path / "real" / "r.json")
    files.check_output_file(tmp_path / "link.json", overwrite=True)
    files.atomic_write_text(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real" / "r.json").read_text() == "new"
    assert sorted(os.listdir(tmp_path / "real")) == ["r.json"]  # the temporary was made beside the linked file


@pytest.mark.skipif(sys.platform == "win32", reason="no FIFOs on Windows")
@pytest.mark.parametrize("through_link", [False, True])
def test_a_pipe_is_never_replaced_by_a_file(tmp_path: Path, through_link: bool) -> None:
    """A FIFO (as /dev/null or /dev/stdout, a device) became a plain file under --overwrite."""
    os.mkfifo(tmp_path / "pipe")
    target = tmp_path / "pipe"
    if through_link:
        target = tmp_path / "link"
        target.symlink_to("pipe")
    for overwrite in (False, True):  # unasked, it said 'already exists; add --overwrite', which replaced it
        with pytest.raises(WriteError, match=r"--csv '.*': .*named pipe \(FIFO\)"):
            files.check_output_file(target, overwrite=overwrite, option="--csv")
    with pytest.raises(WriteError, match=r"named pipe \(FIFO\)"):
        files.atomic_write_text(target, "x")  # an API caller that made no check
    assert (tmp_path / "pipe").is_fifo() and target.is_symlink() == through_link


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux names its streams /dev/stdout, /proc/self/fd/N")
def test_standard_output_by_name_is_refused_as_dash_is(tmp_path: Path) -> None:
    """'/dev/stdout' was 'already exists; add --overwrite', and with it the device became a plain file.
    (Checked without --overwrite only: the old code would replace the machine's /dev/stdout.)"""
    for name in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/2"):
        with pytest.raises(WriteError, match="standard output is not supported"):
            files.check_output_file(Path(name), overwrite=False, option="--json")
    (tmp_path / "out").symlink_to("/dev/stdout")
    with pytest.raises(WriteError, match="standard output is not supported"):
        files.check_output_file(tmp_path / "out", overwrite=False, option="--json")
