"""End-to-end tests of ``sst upscale`` with the small golden x3 checkpoint (random weights, tiny images)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import GOLDEN, needs_golden
from PIL import Image
from typer.testing import CliRunner

from sst_cli.archs.sst import SST
from sst_cli.cli import app
from sst_cli.errors import WeightsNotFound
from sst_cli.image_io import Picture, read_image, write_image
from sst_cli.upscaler import Upscaler

pytestmark = [needs_golden, pytest.mark.usefixtures("one_thread")]

RNG = np.random.default_rng(11)
MODEL = ["--weights", str(GOLDEN / "mini_x3.pth"), "--config", str(GOLDEN / "mini_x3.json"), "--device", "cpu"]
runner = CliRunner()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SST_DEBUG", raising=False)


def image(path: str | Path, size: tuple[int, int] = (16, 12), mode: str = "RGB") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    channels = {"RGB": 3, "RGBA": 4}[mode]
    Image.fromarray(RNG.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8), mode).save(path)
    return path


def sst(*args: str) -> object:
    return runner.invoke(app, ["upscale", *MODEL, *args])  # later options win


def files_under(folder: str | Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in Path(folder).rglob("*") if p.is_file())


@pytest.fixture
def count_upscales(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the size of every picture the network is asked to upscale."""
    calls: list[int] = []
    real = Upscaler.upscale_picture

    def spy(self: Upscaler, picture: Picture, on_tile: object = None) -> Picture:
        calls.append(picture.color.shape[1])
        return real(self, picture, on_tile)  # type: ignore[arg-type]

    monkeypatch.setattr(Upscaler, "upscale_picture", spy)
    return calls


def test_single_file_with_output_file_writes_exactly_that(tmp_path: Path) -> None:
    image("a.png")
    result = sst("a.png", "-o", "result.png", "--quiet")
    assert result.exit_code == 0, result.output
    assert files_under(tmp_path) == ["a.png", "result.png"]
    with Image.open("result.png") as im:
        assert (im.size, im.mode) == ((48, 36), "RGB")


def test_folder_batch_with_broken_files_reports_them_and_exits_1() -> None:
    image("in/a.png")
    image("in/c.jpg")
    Path("in/empty.png").write_bytes(b"")
    Path("in/text.png").write_text("hello")
    Path("in/truncated.png").write_bytes(Path("in/a.png").read_bytes()[:70])
    result = sst("in", "-o", "out")
    assert result.exit_code == 1, result.output
    assert files_under("out") == ["a_mini_x3_x3.png", "c_mini_x3_x3.jpg"]
    failures = result.stderr
    assert "3 failed" in failures
    for name, reason in (("empty.png", "empty"), ("text.png", "not a PNG"), ("truncated.png", "truncated")):
        assert any(f"in/{name}" in line and reason in line for line in failures.splitlines()), failures
    assert "done" in result.stdout and "input MP/s" in result.stdout  # the summary table


def test_default_output_folder_and_recursive_tree() -> None:
    image("photos/a.png")
    image("photos/x/y/b.png")
    image("photos/.thumbs/c.png")
    result = sst("photos", "--recursive", "-q")
    assert result.exit_code == 0, result.output
    assert files_under("photos_sst") == ["a_mini_x3_x3.png", "x/y/b_mini_x3_x3.png"]


def test_name_template_and_format() -> None:
    image("a.png")
    result = sst("a.png", "-o", "out", "--name", "{model}-{stem}-x{scale}.{ext}", "--format", "webp", "-q")
    assert result.exit_code == 0, result.output
    assert files_under("out") == ["mini_x3-a-x3.webp"]


def test_existing_outputs_are_refused_and_skip_existing_resumes(count_upscales: list[int]) -> None:
    image("in/a.png", (16, 12))
    image("in/b.png", (17, 12))
    Path("out").mkdir()
    Path("out/a_mini_x3_x3.png").write_bytes(b"old")
    refused = sst("in", "-o", "out", "-q")
    assert refused.exit_code == 1
    assert "already exists" in refused.stderr and "--skip-existing" in refused.stderr
    assert Path("out/a_mini_x3_x3.png").read_bytes() == b"old"
    Path("out/b_mini_x3_x3.png").unlink()
    count_upscales.clear()
    resumed = sst("in", "-o", "out", "--skip-existing", "--json-log")
    assert resumed.exit_code == 0, resumed.output
    assert count_upscales == [17]  # only the missing output was computed
    summary = json.loads(resumed.stdout.splitlines()[-1])
    assert (summary["done"], summary["skipped"], summary["failed"]) == (1, 1, 0)
    replaced = sst("in", "-o", "out", "--overwrite", "-q")
    assert replaced.exit_code == 0
    assert Image.open("out/a_mini_x3_x3.png").size == (48, 36)


def test_a_batch_with_nothing_to_compute_never_loads_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed batch that is done answers without the weights (a zoo model may need the network for them)."""
    image("in/a.png")
    assert sst("in", "-o", "out", "-q").exit_code == 0

    def unavailable(*args: object, **kwargs: object) -> None:
        raise WeightsNotFound("the weights are not reachable")

    monkeypatch.setattr(Upscaler, "__init__", unavailable)
    resumed = sst("in", "-o", "out", "--scale", "3", "--skip-existing", "--json-log")
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout.splitlines()[-1])
    assert (summary["done"], summary["skipped"], summary["failed"]) == (0, 1, 0)
    refused = sst("in", "-o", "out", "--scale", "3")
    assert refused.exit_code == 1 and "already exists" in refused.stderr and "not reachable" not in refused.stderr
    image("in/b.png")  # now there is work: the model is needed, and its error is said
    needed = sst("in", "-o", "out", "--scale", "3", "--skip-existing")
    assert needed.exit_code == 1 and "the weights are not reachable" in needed.stderr


def test_a_trailing_slash_makes_an_image_name_a_folder() -> None:
    image("a.png")
    assert sst("a.png", "-o", "up.png/", "-q").exit_code == 0
    assert files_under("up.png") == ["a_mini_x3_x3.png"]


def test_a_rerun_over_a_folder_holding_its_outputs_resumes() -> None:
    image("in/a.png")
    assert sst("in", "-o", "in", "-q").exit_code == 0  # the results beside the inputs
    again = sst("in/*.png", "-o", "in", "--skip-existing", "--json-log")  # the glob lists the result too
    assert again.exit_code == 0, again.output
    summary = json.loads(again.stdout.splitlines()[-1])
    assert (summary["done"], summary["skipped"], summary["failed"]) == (0, 2, 0)
    assert files_under("in") == ["a.png", "a_mini_x3_x3.png"]
    refused = sst("in", "-o", "in", "-q")
    assert refused.exit_code == 1 and "already exists" in refused.stderr and "is an input" not in refused.stderr


def test_a_rerun_with_a_name_template_leaves_its_outputs_out(count_upscales: list[int]) -> None:
    """Outputs named by --name beside their inputs were upscaled again by each rerun (a-4x.png, a-4x-4x.png)."""
    image("in/a.png")
    image("in/b-4x.png", (17, 12))  # the user's own picture: no b.* beside it
    name = ["--name", "{stem}-4x.{ext}"]
    assert sst("in", "-o", "in", *name, "-q").exit_code == 0
    assert files_under("in") == ["a-4x.png", "a.png", "b-4x-4x.png", "b-4x.png"]
    count_upscales.clear()
    again = sst("in", "-o", "in", *name, "--skip-existing", "--json-log")
    assert again.exit_code == 0, again.output
    events = [json.loads(line) for line in again.stdout.splitlines()]
    reasons = {Path(e["input"]).name: e.get("reason") for e in events if e.get("event") == "file_done"}
    assert "named like an sst-cli output" in reasons["a-4x.png"] and "--include-outputs" in reasons["a-4x.png"]
    assert "named like an sst-cli output" in reasons["b-4x-4x.png"]
    assert (events[-1]["done"], events[-1]["skipped"], events[-1]["failed"]) == (0, 4, 0)
    assert count_upscales == [] and len(files_under("in")) == 4


def test_a_name_template_leaves_out_only_names_of_this_runs_scale_in_the_folder_it_writes(
    count_upscales: list[int],
) -> None:
    """photo_2.jpg was skipped as an output of --name '{stem}_{scale}.{ext}' by an x3 run into another folder,
    and IMG1.png beside IMG.png by an x3 run into the folder with --name '{stem}{scale}.{ext}'."""
    for name in ("photo.jpg", "photo_2.jpg", "photo_3.jpg", "IMG.png", "IMG1.png"):
        image(f"in/{name}")
    elsewhere = sst("in", "-o", "out", "--name", "{stem}_{scale}.{ext}", "-q")
    assert elsewhere.exit_code == 0, elsewhere.output
    assert "photo_2_3.jpg" in files_under("out") and "photo_3_3.jpg" in files_under("out")
    assert len(count_upscales) == 5
    beside = sst("in", "-o", "in", "--name", "{stem}{scale}.{ext}", "--scale", "3", "--json-log")
    assert beside.exit_code == 0, beside.output
    events = [json.loads(line) for line in beside.stdout.splitlines()]
    skipped = {Path(e["input"]).name for e in events if e.get("event") == "file_done" and e.get("reason")}
    assert skipped == set() and "IMG13.png" in files_under("in")
    again = sst("in", "-o", "in", "--name", "{stem}{scale}.{ext}", "--scale", "3", "--skip-existing", "--json-log")
    events = [json.loads(line) for line in again.stdout.splitlines()]
    reasons = {Path(e["input"]).name: e.get("reason") or "" for e in events if e.get("event") == "file_done"}
    assert "named like an sst-cli output" in reasons["IMG3.png"] and "named like" not in reasons["IMG1.png"]


def test_an_output_named_on_the_command_line_is_upscaled_whatever_the_order() -> None:
    """'in in/h_mini_x3_x3.png' skipped the file named (as found in the folder); the other order upscaled it."""
    image("in/h.png")
    image("in/h_mini_x3_x3.png")
    for order, out in ((["in", "in/h_mini_x3_x3.png"], "o1"), (["in/h_mini_x3_x3.png", "in"], "o2")):
        result = sst(*order, "-o", out, "-q")
        assert result.exit_code == 0, result.output
        assert files_under(out) == ["h_mini_x3_x3.png", "h_mini_x3_x3_mini_x3_x3.png"], order


def test_skip_existing_keeps_an_output_that_is_another_input(count_upscales: list[int]) -> None:
    """With --include-outputs, a.png's output a-4x.png is an input too: --skip-existing kept it only by failing
    a.png ('is an input file'), exit 1; it is an existing output like any, and --overwrite still refuses it."""
    image("in/a.png")
    name = ["--name", "{stem}-4x.{ext}", "--include-outputs"]
    assert sst("in", "-o", "in", *name, "-q").exit_code == 0
    count_upscales.clear()
    resumed = sst("in", "-o", "in", *name, "--skip-existing", "--json-log")
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout.splitlines()[-1])
    assert (summary["done"], summary["skipped"], summary["failed"]) == (1, 1, 0)
    assert count_upscales == [48] and files_under("in") == ["a-4x-4x.png", "a-4x.png", "a.png"]
    Path("in/a-4x-4x.png").unlink()
    refused = sst("in", "-o", "in", *name, "-q")
    assert refused.exit_code == 1 and "'in/a-4x.png' already exists" in refused.stderr, refused.output
    assert "is an input" not in refused.stderr
    replacing = sst("in", "-o", "in", *name, "--overwrite", "-q")
    assert replacing.exit_code == 1 and "'in/a-4x.png' is an input file; refusing" in replacing.stderr
    assert sst("in", "-o", "in", "--name", "{stem}.{ext}", "--skip-existing", "-q").exit_code == 1  # its own file


@pytest.mark.parametrize(
    ("inputs", "name", "pair", "cure"),
    [
        (["in/a.png", "in/a.bmp"], [], "in/a.png and in/a.bmp", '--name "{stem}.{suffix}_{model}_x{scale}.{ext}"'),
        (["in/a.png", "d2/a.png"], ["--name", "{stem}.{suffix}_{model}_x{scale}.{ext}"], "in/a.png and d2/a.png",
         "separate -o folders, or in separate runs"),
        (["in/a.png", "in/b.png"], ["--name", "same.{ext}"], "in/a.png and in/b.png",
         '--name "{stem}_{model}_x{scale}.{ext}"'),
        (["in/a.png", "in/a.bmp"], ["--outscale", "2"], "in/a.png and in/a.bmp",
         '--name "{stem}.{suffix}_{model}_x{outscale}.{ext}"'),  # not _x3 on 2x results
        (["in/a.png", "in/b.png"], ["--name", "same.{ext}", "--outscale", "2"], "in/a.png and in/b.png",
         '--name "{stem}_{model}_x{outscale}.{ext}"'),
    ],
)  # fmt: skip
def test_the_name_clash_note_names_a_pair_of_this_run_and_what_parts_them(
    inputs: list[str], name: list[str], pair: str, cure: str
) -> None:
    """The note was one fixed sentence (a.png and a.bmp; the {suffix} template), even where that template was in
    use already, or the inputs differed by folder only."""
    for path in ("in/a.png", "in/b.png", "d2/a.png"):
        image(path)
    Image.open("in/a.png").save("in/a.bmp")
    result = sst(*inputs, "-o", "out", *name)
    assert result.exit_code == 1, result.output
    note = next(line for line in result.output.splitlines() if "share an output name" in line)
    assert f"(e.g. {pair})" in note and note.endswith(cure), note


def test_odd_image_names_for_o_and_in_folders(tmp_path: Path) -> None:
    import os

    image("a.png")
    heic = sst("a.png", "-o", "out.heic")
    assert heic.exit_code == 2 and "cannot write 'out.heic': name it .png, .jpg, .webp or .tif" in heic.stderr
    assert not Path("out.heic").exists()
    image("in/b.png")
    Path("in/b.png").rename("in/b.jfif")  # a JPEG's other name: read, not passed over
    Image.open("a.png").save("in/c.jfif", format="JPEG")
    Path("in/d.ico").write_bytes(b"\0\0\1\0")  # not read by sst-cli: said, not passed over silently
    os.mkfifo("in/pipe.png")
    result = sst("in", "-o", "out", "--json-log")
    events = [json.loads(line) for line in result.stdout.splitlines()]
    summary = events[-1]
    assert (summary["done"], summary["skipped"], summary["failed"]) == (2, 1, 1), result.output
    assert files_under("out") == ["b_mini_x3_x3.png", "c_mini_x3_x3.jpg"]  # b is a PNG, whatever its name says
    reasons = {Path(f["input"]).name: f["reason"] for f in summary["failures"] + summary["skipped_files"]}
    assert "not a regular file" in reasons["pipe.png"] and "d.ico" in reasons


def test_video_options_without_a_video_are_said_not_ignored() -> None:
    image("a.png")
    result = sst("a.png", "--crf", "18", "-o", "out")
    assert result.exit_code == 0
    assert "--crf, --pix-fmt, --lossless and --frames-per-pass apply to videos" in result.stderr
    quiet = sst("a.png", "-o", "out2")
    assert "apply to videos" not in quiet.stderr


def test_library_remarks_about_skipped_metadata_stay_off_the_terminal() -> None:
    import subprocess
    import sys

    Image.new("RGB", (8, 8)).save("j.png", exif=b"Exif\0\0MM\0*\0\0\0\x08\xff\xff" + b"\x01" * 40)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "PYTHONWARNINGS": "default"}
    for flags, shown in (([], False), (["--debug"], True)):  # a real process: pytest would catch warnings itself
        command = [sys.executable, "-m", "sst_cli", *flags, "upscale", "j.png", "-o", f"out{len(flags)}", *MODEL]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert ("Corrupt EXIF" in done.stderr) is shown, done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full (Linux)")
@pytest.mark.parametrize("log", [[], ["--json-log"]])
def test_a_full_standard_output_is_one_warning_not_a_traceback(log: list[str]) -> None:
    """A table or a JSON log written to a full disk (or a closed pipe) ended in a traceback and exit 1, after the
    file had been written (with --json-log: before anything was done)."""
    import subprocess
    import sys

    image("a.png")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    command = [sys.executable, "-m", "sst_cli", "upscale", "a.png", "-o", "out", *log, *MODEL]
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    said = " ".join(done.stderr.split())
    assert "warning: could not write to standard output (no space left on device)" in said
    assert os.listdir("out") == ["a_mini_x3_x3.png"]


@pytest.mark.skipif(os.name != "posix", reason="a pipe whose reader is gone (POSIX)")
def test_a_reader_that_stopped_reading_is_no_warning() -> None:
    """`sst models info X | head -1` warned that standard output could not be written: the reader chose to stop."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    read, write = os.pipe()
    os.close(read)  # every write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sst_cli", "models", "info", "sst-light-291"], stdout=write,
            stderr=subprocess.PIPE, text=True, env=env, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.skipif(os.name != "posix", reason="closes the child's standard output before it starts (POSIX)")
def test_a_closed_standard_output_is_no_traceback() -> None:
    """Closed at start (``>&-``), Python sets sys.stdout to None, which the guarded console wrote to."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-m", "sst_cli", "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env, timeout=120, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_never_writes_over_an_input() -> None:
    image("in/a.png")
    before = Path("in/a.png").read_bytes()
    result = sst("in", "-o", "in", "--name", "{stem}.{ext}", "--overwrite", "-q")
    assert result.exit_code == 1
    assert "is an input file" in result.stderr
    assert Path("in/a.png").read_bytes() == before


@pytest.fixture
def interrupt_the_second_file(monkeypatch: pytest.MonkeyPatch, count_upscales: list[int]) -> Callable[[], None]:
    """Ctrl-C while the second file of a run is upscaled; the function returned lets every file run again."""
    spy = Upscaler.upscale_picture

    def second_file_interrupts(self: Upscaler, picture: Picture, on_tile: object = None) -> Picture:
        if len(count_upscales) == 1:
            raise KeyboardInterrupt
        return spy(self, picture, on_tile)  # type: ignore[arg-type]

    monkeypatch.setattr(Upscaler, "upscale_picture", second_file_interrupts)
    return lambda: monkeypatch.setattr(Upscaler, "upscale_picture", spy)


def test_interrupt_exits_130_without_partial_files_and_skip_existing_finishes(
    interrupt_the_second_file: Callable[[], None], count_upscales: list[int]
) -> None:
    for name in ("a.png", "b.png", "c.png"):
        image(Path("in", name))

    stopped = sst("in", "-o", "out", "-q")
    assert stopped.exit_code == 130, stopped.output
    assert "interrupted" in stopped.stderr and "--skip-existing" in stopped.stderr
    assert files_under("out") == ["a_mini_x3_x3.png"]  # nothing partial, no .sst-tmp
    count_upscales.clear()
    logged = sst("in", "-o", "logged", "--json-log")  # b.png had a file_start and no end; no error event
    events = [json.loads(line) for line in logged.stdout.splitlines()]
    assert logged.exit_code == 130 and [e["event"] for e in events][-3:] == ["file_done", "summary", "error"]
    done = [e for e in events if e["event"] == "file_done"]
    assert [sorted(e) for e in done[:-1]] == [sorted(done[-1])]  # the same keys as every other file_done
    assert events[-3] == {
        "event": "file_done", "index": 2, "total": 3, "input": str(Path("in", "b.png")), "output": None,
        "status": "interrupted", "reason": None, "error": None, "megapixels": None, "seconds": None, "tile": None,
    }  # fmt: skip
    assert events[-1]["interrupted"] is True and events[-1]["exit_code"] == 130
    interrupt_the_second_file()  # files run again
    count_upscales.clear()
    resumed = sst("in", "-o", "out", "--skip-existing", "-q")
    assert resumed.exit_code == 0, resumed.output
    assert len(count_upscales) == 2
    assert files_under("out") == ["a_mini_x3_x3.png", "b_mini_x3_x3.png", "c_mini_x3_x3.png"]


def test_an_interrupted_overwrite_says_to_rerun_with_overwrite(
    interrupt_the_second_file: Callable[[], None], count_upscales: list[int]
) -> None:
    """It said to rerun with --skip-existing instead of --overwrite, which kept the earlier outputs of the files
    the interrupt left undone: b's and c's old results stayed, as if upscaled."""
    for name in ("a", "b", "c"):
        image(Path("in", f"{name}.png"))
        Path("out", f"{name}_mini_x3_x3.png").parent.mkdir(exist_ok=True)
        Path("out", f"{name}_mini_x3_x3.png").write_bytes(b"an earlier result")

    stopped = sst("in", "-o", "out", "--overwrite", "-q")
    said = " ".join(stopped.stderr.split())
    assert stopped.exit_code == 130, stopped.output
    assert said.endswith("after 1 of 3 files; rerun with --overwrite (not --skip-existing: it would keep the "
                         "earlier outputs of the files not done)"), said  # fmt: skip
    interrupt_the_second_file()  # files run again
    assert sst("in", "-o", "out", "--overwrite", "-q").exit_code == 0  # as it says: no earlier result is left
    assert all(Path("out", f"{n}_mini_x3_x3.png").read_bytes() != b"an earlier result" for n in "abc")


def test_a_result_too_large_for_memory_is_refused_before_the_network(count_upscales: list[int]) -> None:
    image("a.png")
    result = sst("a.png", "--outscale", "1e5", "-q")
    assert result.exit_code == 1 and count_upscales == []
    assert "the result would be 1600000x1200000 px, more than the memory this process may use" in result.stderr
    assert "lower --outscale" in result.stderr and files_under(".") == ["a.png"]


def test_jpeg_takes_an_opaque_rgba_and_refuses_transparency_before_the_network(count_upscales: list[int]) -> None:
    """A screenshot (RGBA, opaque everywhere) was refused as JPEG from its header alone."""
    opaque = RNG.integers(0, 256, (12, 16, 4), dtype=np.uint8)
    opaque[..., 3] = 255
    Image.fromarray(opaque, "RGBA").save("shot.png")
    see_through = opaque.copy()
    see_through[3, 4, 3] = 128
    Image.fromarray(see_through, "RGBA").save("logo.png")
    result = sst("shot.png", "logo.png", "--format", "jpg", "-o", "out", "-q")
    assert result.exit_code == 1 and count_upscales == [16], result.output  # only the screenshot reached it
    assert "logo.png: JPEG cannot store transparency, which this image has; choose png, webp or tiff" in result.stderr
    assert files_under("out") == ["shot_mini_x3_x3.jpg"]
    with Image.open("out/shot_mini_x3_x3.jpg") as im:
        assert (im.mode, im.size) == ("RGB", (48, 36))


def test_a_fatal_error_is_a_json_event_too() -> None:
    image("a.png")
    result = sst("a.png", "--tile", "big", "--json-log")
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {
        "event": "error", "message": "--tile must be auto, 0 (whole image) or a tile size in pixels, got 'big'",
        "exit_code": 2,
    }  # fmt: skip


def test_an_interrupt_before_the_batch_is_a_json_event_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped while the model loaded, a --json-log run printed nothing at all on stdout."""
    image("a.png")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Upscaler, "__init__", interrupted)
    result = sst("a.png", "--json-log")
    assert result.exit_code == 130 and "interrupted" in result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()][-1] == {
        "event": "error", "message": "interrupted", "exit_code": 130, "interrupted": True,
    }  # fmt: skip


def test_a_resume_with_nothing_left_still_clears_a_killed_runs_temporaries() -> None:
    image("a.png")
    assert sst("a.png", "-q").exit_code == 0
    stale = Path(".a_mini_x3_x3.png.deadbeef.sst-tmp")
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    resumed = sst("a.png", "--skip-existing")
    assert resumed.exit_code == 0 and not stale.exists()
    assert "removed 1 unfinished file(s)" in resumed.stderr


def test_json_log_lines_parse() -> None:
    image("a.png")
    Path("bad.png").write_text("no")
    result = sst("a.png", "bad.png", "missing.png", "-o", "out", "--json-log")
    assert result.exit_code == 1
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["event"] for e in events] == ["file_start", "file_done"] * 3 + ["summary"]
    done = [e for e in events if e["event"] == "file_done"]
    assert [e["status"] for e in done] == ["done", "failed", "failed"]
    assert done[0]["output"].endswith("a_mini_x3_x3.png") and done[0]["tile"] == 0
    assert events[-1]["failed"] == 2 and events[-1]["exit_code"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--overwrite", "--skip-existing"], "exclude each other"),
        (["--quality", "0"], "quality must be between 1 and 100"),
        (["--format", "gif"], "unknown output format 'gif'"),
        (["--tile", "-8"], "--tile"),
        (["--tile", "big"], "--tile"),
        (["--max-memory", "4X"], "--max-memory"),
        (["--precision", "fp16"], "unknown precision 'fp16'"),  # the library's checks (test_upscaler) reach here
        (["--name", "{stem}_{size}.{ext}"], "unknown field"),
        (["-o", "x.png", "--format", "jpg"], "--format jpg does not match the extension of 'x.png'"),
        (["-o", "x.mp4"], "'x.mp4' names a video file, but the input is not a video (.mp4, .mkv"),
        (["-o", ""], "-o: an empty name"),
    ],
)
def test_invalid_options_exit_2_with_a_message(args: list[str], message: str) -> None:
    """Parsing and combinations checked by the CLI; the option values themselves are the library's."""
    image("a.png")
    result = sst("a.png", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_config_without_weights_and_unknown_model_exit_2() -> None:
    image("a.png")
    result = runner.invoke(app, ["upscale", "a.png", "--config", str(GOLDEN / "mini_x3.json")])
    assert result.exit_code == 2 and "--weights" in result.stderr
    result = runner.invoke(app, ["upscale", "a.png", "--model", "nope"])
    assert result.exit_code == 2 and "unknown model" in result.stderr


def test_folders_with_nothing_to_upscale_are_said_and_succeed() -> None:
    """They exited 2, 'invalid options': a scheduled run over an inbox folder with nothing new failed."""
    Path("empty").mkdir()
    result = sst("empty")
    said = " ".join(result.stderr.split())  # videos in folders are upscaled too: their endings were not listed
    assert result.exit_code == 0 and "no image or video files found in 'empty' (looked for .bmp" in said
    assert "error" not in said
    assert ".jfif" in said and "; videos .3g2 .3gp .avi" in said and ".mp4" in said and ".webm .wmv)" in said
    Path("nested", "archive").mkdir(parents=True)
    inbox = sst("empty", "nested")  # an empty sub-folder is no forgotten -r
    assert inbox.exit_code == 0 and "--recursive" not in inbox.stderr
    image("nested/deeper/b.png")
    both = sst("empty", "nested")  # a forgotten -r stays a mistake: exit 2
    assert both.exit_code == 2 and "no image or video files found in 'empty', 'nested'" in both.stderr
    assert "their sub-folders hold image or video files: add --recursive" in " ".join(both.stderr.split())
    image("a.png")
    among = sst("empty", "nested", "a.png", "-o", "out")  # the folders were passed over without a word
    assert among.exit_code == 0 and files_under("out") == ["a_mini_x3_x3.png"]
    said = " ".join(among.stderr.split())
    assert "'empty' holds no image or video files: nothing comes from it" in said
    hint = "its sub-folders hold image or video files: add --recursive"
    assert f"'nested' holds no image or video files: nothing comes from it; {hint}" in said


@pytest.mark.parametrize("beside", [[], ["e7/a_mini_x3_x3.png"]])
def test_a_folder_whose_images_lie_in_sub_folders_without_recursive_is_refused(beside: list[str]) -> None:
    """It exited 0 with the hint to add --recursive: a forgotten -r read as a run that succeeded."""
    for path in ("e7/2024/jan/beach.jpg", *beside):
        image(path)
    result = sst("e7", "--json-log")
    assert result.exit_code == 2, result.output
    assert "its sub-folders hold image or video files: add --recursive to search them" in result.stdout
    assert sst("e7", "-r", "-o", "out", "-q").exit_code == 0 and files_under("out") == ["2024/jan/beach_mini_x3_x3.jpg"]


def test_an_empty_folder_among_other_inputs_is_said_once() -> None:
    """It was said twice: 'holds no image or video files' (looking for videos), then 'holds no image files'."""
    Path("empty").mkdir()
    image("in/a.png")
    result = sst("empty", "in", "-o", "out")
    assert result.exit_code == 0 and files_under("out") == ["a_mini_x3_x3.png"]
    said = " ".join(result.stderr.split())
    assert said.count("'empty' holds no") == 1 and "'empty' holds no image or video files" in said


def test_a_missing_file_beside_an_empty_folder_is_a_failed_file_not_a_refusal() -> None:
    """The image batch checked its share of the inputs again, the empty folder taken out: 'missing.png does not
    exist' refused the command (exit 2), where a missing file among others is reported and the batch goes on."""
    Path("empty").mkdir()
    result = sst("empty", "missing.png", "--json-log")
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["failed"] == 1 and summary["failures"][0]["input"] == "missing.png"


def test_a_folder_of_outputs_alone_succeeds_but_a_named_file_with_nothing_to_upscale_is_refused() -> None:
    image("inbox/a_mini_x3_x3.png")
    result = sst("inbox", "--json-log")
    assert result.exit_code == 0, result.output
    assert "nothing to upscale in 'inbox': a_mini_x3_x3.png: named like an sst-cli output" in result.stdout
    assert '"event": "summary"' in result.stdout and '"exit_code": 0' in result.stdout
    Path("notes.txt").write_text("not a picture")
    assert sst("notes.txt").exit_code == 1  # named, so it fails as a file
    assert sst("missing.png").exit_code == 2


def test_a_folder_with_nothing_to_upscale_lists_every_skipped_file_in_the_summary() -> None:
    """The note named 3 of them and the summary none ("skipped": 0): skipped files are never passed over
    silently, and a batch with something to do lists them all."""
    image("e5/h_mini_x3_x3.png")
    for n in range(1, 6):
        Path(f"e5/p{n}.heic").write_bytes(b"not read")
    result = sst("e5", "--json-log")
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    names = ["h_mini_x3_x3.png", *(f"p{n}.heic" for n in range(1, 6))]
    done = [e for e in events if e["event"] == "file_done"]
    assert [(Path(e["input"]).name, e["status"], e["index"], e["total"]) for e in done] == [
        (name, "skipped", index, 6) for index, name in enumerate(names, 1)
    ]
    summary = events[-1]
    assert summary["event"] == "summary" and (summary["skipped"], summary["done"], summary["failed"]) == (6, 0, 0)
    assert [Path(s["input"]).name for s in summary["skipped_files"]] == names
    assert "HEIC is not a format sst-cli reads" in summary["skipped_files"][1]["reason"]
    assert events[0]["message"].endswith("; and 3 more")  # the note names 3
    plain = sst("e5")
    assert plain.exit_code == 0 and "6 skipped:" in plain.stderr and "p5.heic: HEIC is not" in plain.stderr


def test_debug_shows_the_traceback() -> None:
    image("a.png")
    args = ["upscale", "a.png", "--weights", "nowhere.pth", "--model", "sst-light"]
    plain = runner.invoke(app, args)
    assert plain.exit_code == 1 and "weights file not found: nowhere.pth" in plain.stderr
    assert isinstance(plain.exception, SystemExit) and "Traceback" not in plain.output
    debug = runner.invoke(app, ["--debug", *args])  # exited 1 with the traceback alone, no JSON event
    assert debug.exit_code == 1 and "Traceback" in debug.stderr and "WeightsNotFound" in debug.stderr
    assert debug.stderr.rstrip().endswith("error: weights file not found: nowhere.pth")
    missing = runner.invoke(app, ["--debug", "upscale", "gone.png", "--json-log"])
    assert missing.exit_code == 2 and "Traceback" in missing.stderr  # a usage error stays one (it was 1)
    assert json.loads(missing.stdout.splitlines()[-1])["event"] == "error"
    assert runner.invoke(app, args).exit_code == 1  # --debug does not stick to later commands


def test_nan_output_fails_that_file_with_the_fp32_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    image("a.png")

    def nan_forward(self: SST, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        return torch.full((n, c, h * self.scale, w * self.scale), float("nan"), dtype=x.dtype)

    monkeypatch.setattr(SST, "forward", nan_forward)
    result = sst("a.png", "--precision", "bf16", "-q")
    assert result.exit_code == 1
    assert "NaN" in result.stderr and "try --precision fp32" in result.stderr
    assert files_under(".") == ["a.png"]


def test_outscale_gives_the_requested_size() -> None:
    image("a.png", (16, 12))
    result = sst("a.png", "--outscale", "2")
    assert result.exit_code == 0, result.output
    assert "native x3" in result.stderr and "antialias" in result.stderr
    with Image.open("a_mini_x3_x2.png") as im:
        assert im.size == (32, 24)


def test_rgba_input_keeps_alpha() -> None:
    rgba = RNG.integers(0, 256, (12, 16, 4), dtype=np.uint8)
    rgba[..., 3] = np.linspace(0, 255, 16, dtype=np.uint8)[None, :]
    Image.fromarray(rgba, "RGBA").save("a.png")
    result = sst("a.png", "-o", "b.png", "-q")
    assert result.exit_code == 0, result.output
    with Image.open("b.png") as im:
        assert (im.mode, im.size) == ("RGBA", (48, 36))
        alpha = np.asarray(im)[..., 3].astype(int)
    assert alpha[:, :6].mean() < 40 and alpha[:, -6:].mean() > 215  # the gradient survived


def test_16_bit_png_stays_16_bit() -> None:
    color = RNG.random((12, 16, 3), dtype=np.float32)
    write_image("deep.png", Picture(color, None, False, 16, None, None, "png"))
    result = sst("deep.png", "-q")
    assert result.exit_code == 0, result.output
    out = read_image("deep_mini_x3_x3.png")
    assert out.bit_depth == 16 and out.color.shape == (36, 48, 3)


def test_weights_without_model_or_config_say_which_architectures_fit(tmp_path: Path) -> None:
    image = tmp_path / "in.png"
    Image.new("RGB", (8, 8)).save(image)
    result = runner.invoke(app, ["upscale", str(image), "--weights", str(GOLDEN / "light_x2.pth")])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "window sizes cannot be read" in text and "sst-light or sst-light+" in text
    assert not (tmp_path / "in_light_x2_x2.png").exists()


def _srgb_icc() -> bytes:
    from PIL import ImageCms

    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def test_gray_la_and_palette_keep_their_kind() -> None:
    gray = RNG.integers(0, 256, (12, 16), dtype=np.uint8)
    Image.fromarray(gray, "L").save("l.png")
    Image.fromarray(np.dstack([gray, gray[::-1]]), "LA").save("la.png")
    palette = Image.fromarray(RNG.integers(0, 256, (12, 16, 3), dtype=np.uint8)).quantize(16)
    palette.info["transparency"] = 0
    palette.save("p.png", transparency=0)
    assert sst("l.png", "la.png", "p.png", "--quiet").exit_code == 0
    assert Image.open("l_mini_x3_x3.png").mode == "L"
    assert Image.open("la_mini_x3_x3.png").mode == "LA"
    out = Image.open("p_mini_x3_x3.png")
    assert out.mode == "RGBA" and out.size == (48, 36)


def test_exif_rotation_is_applied_and_icc_and_exif_are_kept() -> None:
    pixels = RNG.integers(0, 256, (12, 16, 3), dtype=np.uint8)  # stored landscape, shown portrait
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    exif[0x010F] = "sst-cli test camera"
    icc = _srgb_icc()  # made once: the profile carries its creation time
    Image.fromarray(pixels).save("rot.jpg", exif=exif.tobytes(), icc_profile=icc, quality=95)
    assert sst("rot.jpg", "--quiet").exit_code == 0
    out = Image.open("rot_mini_x3_x3.jpg")
    assert out.size == (36, 48)  # upright (12 wide, 16 tall) times 3
    assert out.info.get("icc_profile") == icc
    tags = out.getexif()
    assert tags.get(0x0112, 1) == 1 and tags.get(0x010F) == "sst-cli test camera"


def test_verbose_and_the_json_log_say_where_the_time_went() -> None:
    image("a.png")
    image("b.png", (18, 12))
    shown = sst("a.png", "b.png", "-o", "out", "-v")
    assert shown.exit_code == 0, shown.output
    line = next(text for text in shown.stderr.splitlines() if text.startswith("time: "))
    for phase in ("start-up", "imports", "device", "model", "read", "network (first pass)", "network", "write"):
        assert f"{phase} " in line, line
    events = [json.loads(text) for text in sst("a.png", "-o", "json", "--json-log").stdout.splitlines()]
    assert events[-1]["event"] == "summary"
    timings = events[-1]["timings"]
    seconds = timings["seconds"]
    assert {"start-up", "model", "network (first pass)", "write"} <= set(seconds) and "network" not in seconds
    assert all(value >= 0 for value in seconds.values())
    assert seconds["network (first pass)"] > 0 and sum(seconds.values()) <= timings["total"]


def test_the_library_batch_takes_one_path_as_one_input() -> None:
    """A str is a Sequence[str]: it was walked letter by letter ('.' upscaled the whole folder)."""
    from sst_cli.batch import upscale_files
    from sst_cli.loader import ModelSpec
    from sst_cli.naming import WriteOptions
    from sst_cli.upscaler import UpscaleOptions

    image("holiday.png")
    image("other.png")
    spec = ModelSpec(weights=str(GOLDEN / "mini_x3.pth"), config=str(GOLDEN / "mini_x3.json"))
    result = upscale_files("holiday.png", "out", model=spec, options=UpscaleOptions(device="cpu"),
                           writing=WriteOptions())  # fmt: skip
    assert [r.source.name for r in result.files] == ["holiday.png"] and files_under("out") == ["holiday_mini_x3_x3.png"]


def test_an_output_no_file_can_take_is_refused_before_the_network(count_upscales: list[int]) -> None:
    """A folder in the way (--overwrite replaces files, not folders) and a name longer than the file system
    allows were found only when the result was written, after the network had run."""
    image("a.png")
    Path("out/a_mini_x3_x3.png").mkdir(parents=True)
    folder = sst("a.png", "-o", "out", "--overwrite", "-q")
    assert folder.exit_code == 1 and count_upscales == []
    assert "cannot write 'out/a_mini_x3_x3.png': it is a folder" in folder.stderr
    long = image("b" * 245 + ".png")  # its output name, + "_mini_x3_x3.png", is 260 bytes
    named = sst(long.name, "-o", "long", "-q")
    assert named.exit_code == 1 and count_upscales == []
    assert "its file name is 260 bytes long, more than the 255 its file system allows" in named.stderr
    assert not Path("long").exists()
    folder_named = sst("a.png", "-o", "d" * 300 + "/", "-q")  # a traceback when -o was looked up
    assert folder_named.exit_code == 1 and count_upscales == [] and "File name too long" in folder_named.stderr


def test_an_output_folder_the_run_made_is_not_left_empty() -> None:
    image("a.png")
    Path("cut.png").write_bytes(Path("a.png").read_bytes()[:300])  # a whole header, a truncated body
    failed = sst("cut.png", "-o", "new/sub/", "-q")
    assert failed.exit_code == 1 and "cut.png" in failed.stderr
    assert not Path("new").exists()  # made when the output was planned, removed with nothing written into it
    Path("kept").mkdir()
    assert sst("cut.png", "-o", "kept", "-q").exit_code == 1
    assert Path("kept").is_dir()  # a folder that was there before stays, empty or not
    assert sst("cut.png", "a.png", "-o", "some", "-q").exit_code == 1
    assert files_under("some") == ["a_mini_x3_x3.png"]


def test_an_outscale_that_leaves_no_pixel_is_refused_before_the_network(count_upscales: list[int]) -> None:
    image("a.png", (16, 12))
    result = sst("a.png", "--outscale", "0.04", "-q")
    assert result.exit_code == 1 and count_upscales == []
    said = " ".join(result.stderr.split())
    assert "'a.png' (16x12 px) at --outscale 0.04 would give a 1x0 px result, less than 1 px on a side" in said
    assert "use --outscale 0.0417 or more" in said and files_under(".") == ["a.png"]  # 1/12 was the hint
    assert sst("a.png", "--outscale", "0.0417", "-q").exit_code == 0  # the smallest suggested works (1x1 px)
    assert Image.open("a_mini_x3_x0.0417.png").size == (1, 1)


def test_control_characters_in_file_names_are_shown_not_sent_to_the_terminal() -> None:
    """A file name carried escape sequences (colours, a cleared screen) and line breaks raw to the terminal."""
    image("in/esc\x1b[2Jred.png")
    image("in/new\nline.png")
    result = sst("in", "-o", "out")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stderr
    assert "in/esc\\x1b[2Jred.png -> out/esc\\x1b[2Jred_mini_x3_x3.png" in result.stderr
    assert "in/new\\nline.png -> out/new\\nline_mini_x3_x3.png" in result.stderr
    missing = sst("\x1b]0;title\x07gone.png")
    assert missing.exit_code == 2 and "'\\x1b]0;title\\x07gone.png' does not exist" in missing.stderr
    assert "\x1b" not in missing.stderr and "\x07" not in missing.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="no FIFOs on Windows")
def test_overwrite_writes_through_a_link_and_refuses_a_pipe_before_the_network(count_upscales: list[int]) -> None:
    """-o FILE --overwrite renamed the result over the name: a link became a plain file (its target kept the old
    image) and a FIFO became a plain file too, after the network had run."""
    image("a.png")
    image("old.png", size=(4, 4))
    os.symlink("old.png", "link.png")
    assert sst("a.png", "-o", "link.png", "--overwrite", "-q").exit_code == 0
    assert Path("link.png").is_symlink() and Image.open("old.png").size == (48, 36)
    os.mkfifo("pipe.png")
    os.symlink("pipe.png", "to-pipe.png")
    count_upscales.clear()
    for name in ("pipe.png", "to-pipe.png"):
        result = sst("a.png", "-o", name, "--overwrite", "-q")
        assert result.exit_code == 1 and count_upscales == [], result.output
        assert "named pipe (FIFO)" in result.stderr and f"cannot write '{name}'" in result.stderr
    assert Path("pipe.png").is_fifo() and Path("to-pipe.png").is_symlink()
