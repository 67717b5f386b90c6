"""Tests for sst_cli.batch: input discovery, output naming, and the per-file policies of run_batch.

A nearest-neighbour module stands in for the network: these tests are about files, not pixels.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import lock
from PIL import Image
from torch import nn

from sst_cli import image_io
from sst_cli.batch import (
    BatchInterrupted,
    Job,
    Naming,
    WriteOptions,
    check_template,
    discover_inputs,
    plan_output,
    run_batch,
)
from sst_cli.errors import ConfigError
from sst_cli.upscaler import Upscaler

RNG = np.random.default_rng(7)


class Nearest(nn.Module):
    """x2 nearest-neighbour 'network': instant, and it has the ``scale`` attribute the Upscaler needs."""

    scale = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2, mode="nearest")


@pytest.fixture
def upscaler() -> Upscaler:
    return Upscaler(Nearest(), device="cpu")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative INPUT paths, as a user would type them


def png(path: Path, size: tuple[int, int] = (6, 5), mode: str = "RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    channels = {"RGB": 3, "RGBA": 4}[mode]
    Image.fromarray(RNG.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8), mode).save(path)
    return path


def naming(**kwargs: object) -> Naming:
    return Naming(**{"model": "nn", "scale": 2, **kwargs})  # type: ignore[arg-type]


def files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------------------- discovery


def test_folder_lists_images_sorted_and_skips_hidden_temp_and_other_files() -> None:
    for name in ("b.png", "a.JPG", "c.webp", ".hidden.png"):
        png(Path("in", name))
    Path("in/.a.png.1234abcd.sst-tmp").write_bytes(b"partial")
    Path("in/x.png.sst-tmp").write_bytes(b"partial")
    Path("in/notes.txt").write_text("x")
    png(Path("in/sub/d.png"))
    jobs = discover_inputs(["in"], recursive=False)
    assert [j.source.as_posix() for j in jobs] == ["in/a.JPG", "in/b.png", "in/c.webp"]
    assert all(j.from_folder and j.base == Path("in") and j.error is None for j in jobs)


def test_recursive_walks_the_tree_but_not_hidden_or_excluded_folders() -> None:
    png(Path("in/a.png"))
    png(Path("in/sub/deeper/b.png"))
    png(Path("in/.cache/c.png"))
    png(Path("in/out/old.png"))
    jobs = discover_inputs(["in"], recursive=True, exclude=[Path("in/out")])
    assert [j.relative.as_posix() for j in jobs] == ["a.png", "sub/deeper/b.png"]


def test_duplicates_are_dropped_and_argument_order_kept() -> None:
    png(Path("in/a.png"))
    png(Path("z.png"))
    jobs = discover_inputs(["z.png", "in", "in/a.png", "./z.png"], recursive=False)
    assert [j.source.as_posix() for j in jobs] == ["z.png", "in/a.png"]


def test_a_file_reached_through_a_link_is_upscaled_under_its_own_name_and_the_link_listed() -> None:
    """A link sorting before its file made the file vanish from the run: no output, no line, no count."""
    png(Path("in/zebra.png"))
    png(Path("in/other.png"))
    os.symlink("zebra.png", "in/alias.png")
    jobs = discover_inputs(["in"], recursive=False)
    assert [(j.source.name, j.skip) for j in jobs] == [
        ("alias.png", "the same file as in/zebra.png, which is upscaled"),
        ("other.png", None),
        ("zebra.png", None),
    ]


def test_a_file_reached_through_a_linked_folder_is_upscaled_by_its_own_path() -> None:
    png(Path("real/a.png"))
    os.symlink("real", "linked")
    jobs = discover_inputs(["linked", "real", str(Path("real/a.png").absolute())], recursive=False)
    assert [(j.source.as_posix(), j.skip) for j in jobs] == [
        ("linked/a.png", "the same file as real/a.png, which is upscaled"),
        ("real/a.png", None),
    ]  # the absolute spelling of real/a.png: the same path, dropped without a line


def test_a_file_and_a_link_to_it_name_one_output_file() -> None:
    """``a.png link.png -o one.png`` was refused as "2 inputs", though the link is skipped as the same file."""
    png(Path("a.png"))
    os.symlink("a.png", "link.png")
    jobs = discover_inputs(["a.png", "link.png"], recursive=False)
    assert plan_output(jobs, "one.png", model="nn", scale=2).file == Path("one.png")
    png(Path("b.png"))
    with pytest.raises(ConfigError, match="there are 2 inputs"):
        plan_output(discover_inputs(["a.png", "link.png", "b.png"], recursive=False), "one.png", model="nn", scale=2)


def test_glob_keeps_the_tree_below_its_literal_folder() -> None:
    png(Path("in/x/a.png"))
    png(Path("in/y/b.png"))
    jobs = discover_inputs(["in/**/*.png"], recursive=False)
    assert [(j.base.as_posix(), j.relative.as_posix()) for j in jobs] == [("in", "x/a.png"), ("in", "y/b.png")]
    assert not any(j.from_folder for j in jobs)


def test_glob_does_not_follow_linked_folders_as_the_folder_walk_does_not() -> None:
    """``**`` followed a link to a parent folder some 40 levels deep and kept the file under that path only."""
    png(Path("lp/sub/z.png"))
    png(Path("real/y.png"))
    os.symlink("..", "lp/sub/loop")
    os.symlink("../real", "lp/linked")
    for pattern in ("lp/**/*.png", "lp/**"):
        jobs = discover_inputs([pattern], recursive=True)
        assert [(j.base.as_posix(), j.relative.as_posix()) for j in jobs] == [("lp", "sub/z.png")], pattern
    assert [j.source.as_posix() for j in discover_inputs(["**/*.png"])] == ["lp/sub/z.png", "real/y.png"]


def test_missing_file_and_unmatched_glob_become_failed_jobs() -> None:
    png(Path("a.png"))
    jobs = discover_inputs(["a.png", "missing.png", "none/*.png"], recursive=False)
    assert [j.error is None for j in jobs] == [True, False, False]
    assert "no such file" in (jobs[1].error or "")
    assert "no image files match" in (jobs[2].error or "")


def test_nothing_found_is_a_clear_error_with_a_recursive_hint() -> None:
    png(Path("in/sub/a.png"))
    with pytest.raises(ConfigError, match=r"no image files found in 'in'.*--recursive"):
        discover_inputs(["in"], recursive=False)


def test_a_folder_that_cannot_be_entered_is_a_failed_job_not_a_crash_or_a_silence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It crashed with a PermissionError traceback named alone or beside other inputs (the 'has sub-folders' hint
    listed it), and was passed over without a word inside a --recursive tree, exit 0."""
    png(Path("in/a.png"))
    png(Path("in/locked/b.png"))
    lock(monkeypatch, "in/locked")
    for items, recursive in ((["in/locked"], False), (["in/a.png", "in/locked"], False), (["in"], True)):
        jobs = discover_inputs(items, recursive=recursive)
        failed = [j for j in jobs if j.error is not None]
        assert [(j.source, j.error) for j in failed] == [
            (Path("in/locked"), "cannot read the folder 'in/locked': permission denied")
        ], items
        found = [Path("in/a.png")] if len(items) > 1 or recursive else []
        assert [j.source for j in jobs if j.error is None] == found


def test_a_file_in_a_folder_that_cannot_be_entered_is_said_so_not_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    png(Path("in/locked/b.png"))
    lock(monkeypatch, "in/locked")
    (job,) = discover_inputs(["in/locked/b.png"])
    assert job.error == "cannot read 'in/locked/b.png': permission denied"  # it was "does not exist"
    with pytest.raises(ConfigError, match=r"'nope\.png' does not exist"):
        discover_inputs(["nope.png"])


# -------------------------------------------------------------------------------------------- naming


def test_default_output_folders() -> None:
    folder_job = Job(Path("photos/sub/a.png"), Path("photos"), from_folder=True)
    file_job = Job(Path("dir/b.jpg"), Path("dir"))
    n = naming()
    assert n.target(folder_job, "png") == Path("photos_sst/sub/a_nn_x2.png")  # spelt as the input was
    absolute = Job(Path.cwd() / "photos/a.png", Path.cwd() / "photos", from_folder=True)
    assert n.target(absolute, "png") == Path.cwd() / "photos_sst" / "a_nn_x2.png"
    here = Job(Path("a.png"), Path("."), from_folder=True)
    assert n.target(here, "png") == Path("..", f"{Path.cwd().name}_sst", "a_nn_x2.png")  # "." has no name
    assert n.target(file_job, "jpeg") == Path("dir/b_nn_x2.jpg")
    out = naming(folder=Path("out"))
    assert out.target(folder_job, "tiff") == Path("out/sub/a_nn_x2.tif")


def test_name_template_fields_and_outscale_default() -> None:
    job = Job(Path("a.png"), Path("."))
    assert naming(template="{model}-{stem}-{scale}-{outscale}.{ext}").name(job, "webp") == "nn-a-2-2.webp"
    assert naming(outscale=1.5).name(job, "png") == "a_nn_x1.5.png"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{stem}_{size}.{ext}", "unknown field"),
        ("sub/{stem}.{ext}", "no folders"),
        ("../../x.{ext}", "no folders"),  # folders first: it also starts with a dot
        (".{stem}.{ext}", "hidden files"),
    ],
)
def test_bad_templates_are_refused(template: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_template(template)


def test_plan_output_file_or_folder() -> None:
    one = [Job(Path("a.png"), Path("."))]
    assert plan_output(one, "x.webp", model="nn", scale=2).file == Path("x.webp")
    assert plan_output(one, "outdir", model="nn", scale=2).folder == Path("outdir")
    two = [*one, Job(Path("b.png"), Path("."))]
    with pytest.raises(ConfigError, match="names one image file"):
        plan_output(two, "x.png", model="nn", scale=2)
    with pytest.raises(ConfigError, match="does not match"):
        plan_output(one, "x.png", model="nn", scale=2, format="jpg")


# ------------------------------------------------------------------------------------------- running


def test_broken_files_fail_with_reasons_and_the_rest_is_written(upscaler: Upscaler) -> None:
    png(Path("in/a.png"))
    png(Path("in/z.png"))
    Path("in/empty.png").write_bytes(b"")
    Path("in/text.png").write_text("not an image")
    Path("in/truncated.png").write_bytes(Path("in/a.png").read_bytes()[:60])
    result = run_batch(discover_inputs(["in"]), upscaler, naming=naming(folder=Path("out")))
    status = {r.source.name: (r.status, r.reason or "") for r in result.files}
    assert status["a.png"][0] == status["z.png"][0] == "done"
    assert "empty" in status["empty.png"][1]
    assert "not a PNG" in status["text.png"][1]
    assert "truncated" in status["truncated.png"][1] or "damaged" in status["truncated.png"][1]
    assert (result.done, result.skipped, result.failed) == (2, 0, 3)
    assert files_under(Path("out")) == ["a_nn_x2.png", "z_nn_x2.png"]
    assert Image.open("out/a_nn_x2.png").size == (12, 10)
    assert result.megapixels == pytest.approx(2 * 30 / 1e6)


def test_existing_outputs_fail_are_skipped_or_overwritten(upscaler: Upscaler) -> None:
    png(Path("a.png"))
    png(Path("b.png"))
    Path("out").mkdir()
    Path("out/a_nn_x2.png").write_bytes(b"old")
    jobs = discover_inputs(["a.png", "b.png"])
    first = run_batch(jobs, upscaler, naming=naming(folder=Path("out")))
    assert [r.status for r in first.files] == ["failed", "done"]
    assert "already exists" in (first.files[0].reason or "") and first.files[0].error_type == "OutputExists"
    assert Path("out/a_nn_x2.png").read_bytes() == b"old"
    again = run_batch(jobs, upscaler, naming=naming(folder=Path("out")), writing=WriteOptions(skip_existing=True))
    assert [r.status for r in again.files] == ["skipped", "skipped"]
    forced = run_batch(jobs, upscaler, naming=naming(folder=Path("out")), writing=WriteOptions(overwrite=True))
    assert [r.status for r in forced.files] == ["done", "done"]
    assert Image.open("out/a_nn_x2.png").size == (12, 10)
    with pytest.raises(ConfigError, match=r"^overwrite and skip_existing exclude each other"):  # the keywords
        WriteOptions(overwrite=True, skip_existing=True)


def test_never_writes_over_an_input(upscaler: Upscaler) -> None:
    png(Path("in/a.png"))
    png(Path("in/b.png"))
    before = Path("in/a.png").read_bytes()
    jobs = discover_inputs(["in"])
    writing = WriteOptions(overwrite=True)
    result = run_batch(jobs, upscaler, naming=naming(folder=Path("in"), template="{stem}.{ext}"), writing=writing)
    assert [r.status for r in result.files] == ["failed", "failed"]
    assert "is an input file" in (result.files[0].reason or "")
    assert Path("in/a.png").read_bytes() == before


def test_an_input_named_with_other_case_is_never_written_over(upscaler: Upscaler) -> None:
    """On a case-insensitive file system (macOS, Windows) 'a.PNG' and 'a.png' are one file with two real paths:
    `--name '{stem}.{ext}' --overwrite` replaced the input. Simulated here with a hard link under the other case."""
    from sst_cli.files import InputFiles

    png(Path("in/a.PNG"))
    before = Path("in/a.PNG").read_bytes()
    os.link("in/a.PNG", "in/a.png")  # what a case-insensitive folder shows under the lower-case name
    os.link("in/a.PNG", "in/copy.png")  # another name for the file: replacing it leaves the input alone
    assert "in/a.png" in InputFiles(["in/a.PNG"]) and "in/copy.png" not in InputFiles(["in/a.PNG"])
    jobs = discover_inputs(["in/a.PNG"])
    writing = WriteOptions(overwrite=True)
    result = run_batch(jobs, upscaler, naming=naming(folder=Path("in"), template="{stem}.{ext}"), writing=writing)
    assert [r.status for r in result.files] == ["failed"] and "is an input file" in (result.files[0].reason or "")
    assert Path("in/a.PNG").read_bytes() == before


def test_outputs_differing_only_in_case_clash_where_names_ignore_case(upscaler: Upscaler) -> None:
    """IMG.png and img.png gave IMG_nn_x2.png and img_nn_x2.png: one file on macOS and Windows, so the second
    replaced the first (--overwrite) or failed after computing. Simulated: 'Out' is found again as 'oUT'."""
    from sst_cli.files import folds_case

    png(Path("in/IMG.png"))
    png(Path("in/img.png"))
    Path("Out").mkdir()
    Path("oUT").symlink_to("Out")
    folds_case.cache_clear()
    result = run_batch(discover_inputs(["in"]), upscaler, naming=naming(folder=Path("Out")), writing=WriteOptions())
    folds_case.cache_clear()
    assert [r.status for r in result.files] == ["done", "failed"]
    assert "already the output of" in (result.files[1].reason or "")
    Path("oUT").unlink()
    folds_case.cache_clear()
    assert not folds_case("Out")  # here, as on Linux, the two names are two files
    Path("Stick").mkdir()
    Path("sTICK").symlink_to("Stick")  # the parent folds case: a FAT stick mounted on it may not ...
    Path("Stick/Photo.png").write_bytes(b"")
    Path("Stick/pHOTO.PNG").write_bytes(b"")  # ... its own entries tell: two files, so it does not
    folds_case.cache_clear()
    assert not folds_case("Stick")
    Path("Stick/pHOTO.PNG").unlink()
    Path("Stick/pHOTO.PNG").symlink_to("Photo.png")  # and where they are one file, it does
    folds_case.cache_clear()
    assert folds_case("Stick")
    folds_case.cache_clear()
    again = run_batch(discover_inputs(["in"]), upscaler, naming=naming(folder=Path("Out2")), writing=WriteOptions())
    assert [r.status for r in again.files] == ["done", "done"]


def test_two_inputs_with_one_output_name_fail_the_second(upscaler: Upscaler) -> None:
    png(Path("in/a.png"))
    Image.open("in/a.png").save("in/a.tif")  # TIFF input, but --format png makes both a_nn_x2.png
    writing = WriteOptions(format="png")
    result = run_batch(discover_inputs(["in"]), upscaler, naming=naming(folder=Path("out")), writing=writing)
    assert [r.status for r in result.files] == ["done", "failed"]
    assert "already the output of 'in/a.png' (change --name or -o)" in (result.files[1].reason or "")
    png(Path("in/sub/a.png"))
    again = run_batch(discover_inputs(["in/a.png", "in/sub/a.png"]), upscaler, naming=naming(folder=Path("o2")))
    assert "(upscale them into separate -o folders)" in (again.files[1].reason or "")  # no --name tells them apart


def test_explicit_output_file_takes_its_format_from_the_extension(upscaler: Upscaler) -> None:
    png(Path("a.png"))
    jobs = discover_inputs(["a.png"])
    result = run_batch(jobs, upscaler, naming=plan_output(jobs, "b.jpg", model="nn", scale=2))
    assert result.done == 1
    with Image.open("b.jpg") as im:
        assert (im.format, im.size) == ("JPEG", (12, 10))


def test_missing_input_is_reported_and_the_batch_goes_on(upscaler: Upscaler) -> None:
    png(Path("a.png"))
    result = run_batch(discover_inputs(["missing.png", "a.png"]), upscaler, naming=naming())
    assert [r.status for r in result.files] == ["failed", "done"]
    assert "no such file" in (result.failures[0].reason or "")


def test_interrupt_while_writing_leaves_no_partial_or_temp_file(
    upscaler: Upscaler, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a.png", "b.png", "c.png"):
        png(Path("in", name))
    real_write = image_io.write_png
    calls = []

    def write(fh: IO[bytes], *args: Any, **kwargs: Any) -> None:  # sst-cli's PNG encoder, stopped in the 2nd file
        calls.append(fh)
        if len(calls) == 2:
            fh.write(b"\x89PNG partial")
            raise KeyboardInterrupt
        real_write(fh, *args, **kwargs)

    monkeypatch.setattr(image_io, "write_png", write)
    seen: list[str] = []
    with pytest.raises(BatchInterrupted) as info:
        run_batch(
            discover_inputs(["in"]),
            upscaler,
            naming=naming(folder=Path("out")),
            on_file_done=lambda record, index, total: seen.append(record.source.name),
        )
    assert isinstance(info.value, KeyboardInterrupt)
    assert info.value.current is not None and info.value.current.source.name == "b.png"
    assert [r.status for r in info.value.result.files] == ["done"] and seen == ["a.png"]
    assert files_under(Path("out")) == ["a_nn_x2.png"]  # no b output, no hidden .sst-tmp file


@pytest.mark.parametrize("overwrite", [False, True])
def test_interrupt_just_after_the_rename_counts_the_written_file(
    upscaler: Upscaler, monkeypatch: pytest.MonkeyPatch, overwrite: bool
) -> None:
    """A signal landing between the output's rename and its record: the file is whole, so it is done."""
    import sst_cli.filerun as filerun

    for name in ("a.png", "b.png", "c.png"):
        png(Path("in", name))
    if overwrite:
        png(Path("out", "b_nn_x2.png"), size=(3, 3))  # replaced by the run: a new file under the old name
    real_write = filerun.write_image
    written: list[Path] = []

    def write_then_interrupt(path: Path, *args: object, **kwargs: object) -> None:
        real_write(path, *args, **kwargs)  # type: ignore[arg-type]
        written.append(Path(path))
        if len(written) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(filerun, "write_image", write_then_interrupt)
    seen: list[str] = []
    with pytest.raises(BatchInterrupted) as info:
        run_batch(
            discover_inputs(["in"]),
            upscaler,
            naming=naming(folder=Path("out")),
            writing=WriteOptions(overwrite=overwrite),
            on_file_done=lambda record, index, total: seen.append(record.source.name),
        )
    assert info.value.current is None  # nothing was left half-done
    assert [(r.source.name, r.status) for r in info.value.result.files] == [("a.png", "done"), ("b.png", "done")]
    assert seen == ["a.png", "b.png"]
    assert files_under(Path("out")) == ["a_nn_x2.png", "b_nn_x2.png"]
    with Image.open("out/b_nn_x2.png") as picture:
        assert picture.size == (12, 10)


def test_a_worker_signalled_just_after_the_rename_finishes_its_file(
    upscaler: Upscaler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker process's handler interrupts a file being computed, but not one already renamed into place."""
    import queue
    import signal
    import threading

    import sst_cli.filerun as filerun
    from sst_cli import parallel
    from sst_cli.filerun import _BatchRun

    png(Path("a.png"))
    png(Path("b.png"))
    real_write = filerun.write_image

    def signalled_around_the_write(path: Path, *args: object, **kwargs: object) -> None:
        if Path(path).name.startswith("a"):
            parallel._on_signal(signal.SIGTERM, None)  # before the rename: the file is abandoned
        real_write(path, *args, **kwargs)  # type: ignore[arg-type]
        parallel._on_signal(signal.SIGTERM, None)  # after it: ignored, the file is whole

    monkeypatch.setattr(filerun, "write_image", signalled_around_the_write)
    run = _BatchRun(upscaler, naming(folder=Path("out")), WriteOptions(), None, lambda text: None)
    first, second = run.preflight(discover_inputs(["a.png", "b.png"]))
    state = {"events": queue.Queue(), "stop": threading.Event(), "run": run, "busy": False, "stopping": False}
    monkeypatch.setattr(parallel, "_state", state)
    assert parallel._work(0, first) == parallel._Stopped(143)
    state["stopping"] = False
    answer = parallel._work(1, second)
    assert isinstance(answer, parallel.FileResult) and answer.status == "done", answer
    assert files_under(Path("out")) == ["b_nn_x2.png"]


@pytest.mark.parametrize("skip_existing", [False, True])
def test_an_output_another_run_writes_meanwhile(
    upscaler: Upscaler, monkeypatch: pytest.MonkeyPatch, skip_existing: bool
) -> None:
    """Two runs over one folder: a target that appears while this run computes it is skipped under
    --skip-existing (both runs exited 1, calling valid outputs failed), and kept but failed without it."""
    import sst_cli.filerun as filerun

    png(Path("in", "a.png"))
    real_write = filerun.write_image

    def the_other_run_was_quicker(path: Path, *args: object, **kwargs: object) -> None:
        Path(path).write_bytes(b"theirs")
        real_write(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(filerun, "write_image", the_other_run_was_quicker)
    result = run_batch(discover_inputs(["in"]), upscaler, naming=naming(folder=Path("out")),
                       writing=WriteOptions(skip_existing=skip_existing))  # fmt: skip
    record = result.files[0]
    assert record.status == ("skipped" if skip_existing else "failed"), record
    assert Path("out/a_nn_x2.png").read_bytes() == b"theirs"


def test_callbacks_report_every_file_and_tiles(upscaler: Upscaler) -> None:
    png(Path("a.png"))
    png(Path("b.png"))
    events: list[tuple[str, object]] = []
    run_batch(
        discover_inputs(["a.png", "b.png"]),
        upscaler,
        naming=naming(folder=Path("out")),
        on_file_start=lambda job, i, n: events.append(("start", (job.source.name, i, n))),
        on_tile=lambda done, total: events.append(("tile", (done, total))),
        on_file_done=lambda record, i, n: events.append(("done", (record.status, i, n))),
    )
    assert events[0] == ("start", ("a.png", 0, 2)) and events[-1] == ("done", ("done", 1, 2))
    assert ("tile", (1, 1)) in events


def test_the_nothing_to_do_check_reads_headers_only_up_to_the_first_file_with_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first run (nothing written yet) pays one header for the check, not one per input."""
    from sst_cli import preflight
    from sst_cli.upscaler import ScaleOnly

    jobs = [Job(png(Path(f"in/{name}.png")), Path("in")) for name in "abcd"]
    Path("out").mkdir()
    png(Path("out/a_nn_x2.png"))  # an earlier run wrote the first output
    probed: list[Path] = []
    real = preflight.probe_image
    monkeypatch.setattr(preflight, "probe_image", lambda path, **kw: probed.append(path) or real(path, **kw))
    check = preflight.Preflight(ScaleOnly(2), naming(folder=Path("out")), WriteOptions(skip_existing=True),
                                lambda text: None, tidy=False)  # fmt: skip
    assert check.has_work(jobs)
    assert probed == [jobs[0].source, jobs[1].source]  # a is done; b needs computing: c and d are not read
    for job in jobs[1:]:
        png(Path(f"out/{job.source.stem}_nn_x2.png"))
    probed.clear()
    assert not check.has_work(jobs) and len(probed) == 4


def test_an_output_path_no_file_can_take_is_refused_up_front() -> None:
    from sst_cli.errors import WriteError
    from sst_cli.files import check_output_file

    Path("report.json").mkdir()
    with pytest.raises(WriteError, match=r"cannot write --json 'report\.json': it is a folder"):
        check_output_file(Path("report.json"), overwrite=True, option="--json")
    with pytest.raises(WriteError, match="its file name is 305 bytes long, more than the 255 its file system allows"):
        check_output_file(Path("r" * 300 + ".json"), overwrite=False, option="--json")


def test_folders_a_run_made_and_left_empty_are_removed_again() -> None:
    from sst_cli.files import removing_unused_folders

    Path("there").mkdir()
    with removing_unused_folders([Path("there/a/b"), Path("new/c"), Path("used/d")]):
        for folder in ("there/a/b", "new/c", "used/d"):
            Path(folder).mkdir(parents=True)
        Path("used/d/result.png").write_bytes(b"x")
    assert Path("there").is_dir() and not Path("there/a").exists()  # there existed: only what was made goes
    assert not Path("new").exists() and files_under(Path("used")) == ["d/result.png"]
    with pytest.raises(KeyboardInterrupt), removing_unused_folders([Path("stopped/e")]):
        Path("stopped/e").mkdir(parents=True)
        raise KeyboardInterrupt
    assert not Path("stopped").exists()


def test_a_planned_folder_another_run_removed_meanwhile_is_made_again(
    upscaler: Upscaler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run A made out/, wrote nothing and removed it again as unused while this run (out/ existed, so not its
    own) computed: the result then failed 'the folder does not exist' after all the work. Now it is written."""
    png(Path("in/a.png"))
    Path("out").mkdir()
    original = upscaler.upscale_picture

    def racing(*args: Any, **kwargs: Any) -> Any:
        Path("out").rmdir()  # the other run's clean-up, meanwhile
        return original(*args, **kwargs)

    monkeypatch.setattr(upscaler, "upscale_picture", racing)
    result = run_batch(discover_inputs(["in"]), upscaler, naming=naming(folder=Path("out")))
    assert (result.done, result.failed) == (1, 0), [r.reason for r in result.files]
    assert files_under(Path("out")) == ["a_nn_x2.png"]
