"""``sst eval`` end to end: tables, JSON/CSV reports, saved images, and clear failures."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DATASETS, GOLDEN, needs_datasets, needs_golden
from PIL import Image
from typer.testing import CliRunner

from sst_cli.cli import app
from sst_cli.hub import sha256_of

runner = CliRunner()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SST_DEBUG", raising=False)
    monkeypatch.delenv("SST_DATA_ROOT", raising=False)


def _crop_dataset(root: Path, size: int = 48) -> Path:
    """Two small crops of Set5 HR images, so a network evaluates in seconds."""
    for name in ("baby", "bird"):
        hr = Image.open(DATASETS / "Set5" / "HR" / f"{name}.png").crop((100, 100, 100 + size, 100 + size))
        (root / "HR").mkdir(parents=True, exist_ok=True)
        hr.save(root / "HR" / f"{name}.png")
    return root


@needs_datasets
def test_bicubic_set5_table_json_and_csv(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["eval", "--model", "bicubic", "-d", "Set5", "-s", "2", "-s", "4", "--data-root", str(DATASETS),
         "--json", "r.json", "--csv", "r.csv", "--rgb", "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "33.6" in result.output and "28.4" in result.output and "Protocol" in result.output
    report = json.loads(Path("r.json").read_text())
    assert [(r["dataset"], r["scale"]) for r in report["results"]] == [("Set5", 2), ("Set5", 4)]
    x4 = report["results"][1]
    assert x4["model"] == "bicubic" and x4["n_images"] == 5 and len(x4["images"]) == 5
    assert abs(x4["psnr_y"] - 28.42) <= 0.02 and abs(x4["ssim_y"] - 0.8104) <= 0.001
    assert x4["published"]["psnr_y"] == 28.42 and "psnr_rgb" in x4
    assert "crop_border" in report["protocol"]
    assert report["protocol"]["models"] == {} and report["protocol"]["sst_cli"] and report["protocol"]["torch"]
    rows = list(csv.DictReader(Path("r.csv").read_text().splitlines()))
    assert len(rows) == 10 and rows[0]["image"] == "baby" and float(rows[0]["psnr_y"]) > 30


@needs_datasets
def test_a_folder_named_like_a_benchmark_is_compared_only_when_it_is_that_set(tmp_path: Path) -> None:
    """A copy of Set5 holding two of its images was shown beside the whole set's published figure."""
    _crop_dataset(tmp_path / "mine" / "Set5")
    result = runner.invoke(app, ["eval", "-m", "bicubic", "-d", "mine/Set5", "-s", "2", "--json", "r.json", "-q"])
    assert result.exit_code == 0, result.output
    assert "33.66" not in result.output and "published" not in json.loads(Path("r.json").read_text())["results"][0]


def test_a_table_sent_to_a_pipe_keeps_its_cells_whole(tmp_path: Path) -> None:
    """At 80 columns in a pipe or a log, names were cut ("experimen…"): two models could not be told apart."""
    name = "an_experiment_with_a_long_descriptive_name"
    (tmp_path / name / "HR").mkdir(parents=True)
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(
        tmp_path / name / "HR" / "a.png"
    )
    result = runner.invoke(app, ["eval", "-m", "bicubic", "-d", name, "-s", "2", "--rgb", "-q"])
    assert result.exit_code == 0 and name in result.output and "…" not in result.output, result.output


def test_an_infinite_psnr_is_written_as_valid_json(tmp_path: Path) -> None:
    """A flat image scores PSNR = inf, which Python wrote as Infinity: not JSON, other readers failed."""
    (tmp_path / "flat" / "HR").mkdir(parents=True)
    Image.new("RGB", (64, 64), (120, 120, 120)).save(tmp_path / "flat" / "HR" / "a.png")
    args = ["eval", "-m", "bicubic", "-d", "flat", "-s", "4", "--json", "r.json", "--report", "rep", "-q"]
    assert runner.invoke(app, args).exit_code == 0
    for path in ("r.json", "rep/report.json"):
        text = Path(path).read_text()
        assert "Infinity" not in text and "NaN" not in text, path
    assert json.loads(Path("r.json").read_text())["results"][0]["psnr_y"] is None


@needs_golden
@needs_datasets
def test_network_eval_self_ensemble_saved_images_and_scale_from_weights(tmp_path: Path) -> None:
    data = _crop_dataset(tmp_path / "tiny", size=30)
    model = ["--weights", str(GOLDEN / "mini_x3.pth"), "--config", str(GOLDEN / "mini_x3.json"), "--device", "cpu"]
    args = ["eval", "-d", str(data), *model, "--self-ensemble", "--save-images", "sr", "--json", "r.json", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    written = json.loads(Path("r.json").read_text())
    entry = written["results"][0]
    assert entry["scale"] == 3 and entry["model"] == "mini_x3" and entry["n_images"] == 2
    provenance = written["protocol"]  # enough to rerun it: which file, which device and precision
    assert provenance["models"] == {
        "mini_x3": {"weights": str(GOLDEN / "mini_x3.pth"), "sha256": sha256_of(GOLDEN / "mini_x3.pth")}
    }
    assert provenance["device"] == "cpu" and provenance["precision"] == "auto"
    assert np.asarray(Image.open(Path("sr") / "tiny" / "x3" / "baby.png")).shape == (30, 30, 3)


def _one_image_set(folder: Path) -> None:
    """A dataset of one 30x30 HR image (``folder/HR/a.png``): LR made from it."""
    (folder / "HR").mkdir(parents=True)
    pixels = np.random.default_rng(2).integers(0, 256, (30, 30, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "HR" / "a.png")


@needs_golden
def test_json_records_the_device_and_precision_each_model_ran_on(tmp_path: Path) -> None:
    """The protocol said "auto", as asked: on a GPU that is bf16, so a file did not say which precision made it."""
    _one_image_set(tmp_path / "tiny")
    model = ["--weights", str(GOLDEN / "mini_x3.pth"), "--config", str(GOLDEN / "mini_x3.json"), "-m", "bicubic"]
    args = ["eval", "-d", "tiny", *model, "--device", "cpu", "--precision", "auto", "--json", "r.json", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    written = json.loads(Path("r.json").read_text())
    assert written["protocol"]["device"] == "cpu" and written["protocol"]["precision"] == "auto"  # as asked
    ran = {r["model"]: r["ran_on"] for r in written["results"]}
    assert ran == {"mini_x3": {"device": "cpu", "precision": "fp32"}, "bicubic": {"device": "cpu", "precision": "fp64"}}


@needs_golden
def test_report_and_csv_record_where_each_model_ran_as_json_does(tmp_path: Path) -> None:
    """``--json`` said which device and precision made each result; report.json and the CSV did not."""
    _one_image_set(tmp_path / "tiny")
    model = ["--weights", str(GOLDEN / "mini_x3.pth"), "--config", str(GOLDEN / "mini_x3.json"), "--device", "cpu"]
    outputs = ["--json", "r.json", "--csv", "r.csv", "--report", "rep", "--rgb"]
    result = runner.invoke(app, ["eval", "-d", "tiny", *model, *outputs, "-q"])
    assert result.exit_code == 0, result.output
    ran = json.loads(Path("r.json").read_text())["results"][0]["ran_on"]
    assert ran == {"device": "cpu", "precision": "fp32"}
    summary = json.loads(Path("rep/report.json").read_text())["summary"]
    assert {row["method"]: row["ran_on"] for row in summary} == {
        "mini_x3": ran,
        "bicubic": {"device": "cpu", "precision": "fp64"},  # the report's own baseline
    }
    lines = Path("r.csv").read_text().splitlines()
    assert lines[0] == "dataset,scale,model,image,psnr_y,ssim_y,psnr_rgb,ssim_rgb,device,precision"
    assert [(row["device"], row["precision"]) for row in csv.DictReader(lines)] == [("cpu", "fp32")]


@needs_golden
@needs_datasets
def test_two_checkpoints_with_one_name_are_told_apart_by_their_folders(tmp_path: Path) -> None:
    import shutil

    data = _crop_dataset(tmp_path / "tiny", size=18)
    for run in ("run1", "run2"):  # training runs name their checkpoints alike
        Path(run).mkdir()
        shutil.copy(GOLDEN / "mini_x3.pth", Path(run) / "net_g.pth")
    model = ["--weights", "run1/net_g.pth", "--weights", "run2/net_g.pth", "--config", str(GOLDEN / "mini_x3.json")]
    args = ["eval", "-d", str(data), *model, "--device", "cpu", "--save-images", "sr", "--json", "r.json", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    results = json.loads(Path("r.json").read_text())["results"]
    assert [r["model"] for r in results] == ["run1/net_g", "run2/net_g"]
    assert results[0]["psnr_y"] == results[1]["psnr_y"]  # the same weights twice: the same scores
    assert (Path("sr") / "run1" / "net_g" / "tiny" / "x3" / "baby.png").is_file()
    same = runner.invoke(app, ["eval", "-d", str(data), "--weights", "run1/net_g.pth", "--weights", "run1/net_g.pth"])
    assert same.exit_code == 2 and "two models share a name (net_g, net_g)" in same.output
    assert "give each once, or rename one" in " ".join(same.output.split())


def test_bad_datasets_and_options_fail_cleanly(tmp_path: Path) -> None:
    def run(*args: str) -> tuple[int, str]:
        result = runner.invoke(app, ["eval", *args, "--json", "r.json"])
        return result.exit_code, result.output

    code, out = run("-d", "Set5")
    assert code == 2 and "--data-root" in out
    (tmp_path / "flat").mkdir()
    code, out = run("-d", "flat", "--model", "bicubic")
    assert code == 2 and "has no HR/ folder" in out
    code, out = run("-d", "flat", "--model", "bicubic", "--self-ensemble")
    assert code == 2 and "needs a network" in out
    code, out = run("-d", "flat", "--model", "sst-xxl")
    assert code == 2 and "unknown model" in out
    code, out = run("-d", "flat", "--model", "sst", "--scale", "5")
    assert code == 2 and "sst exists at x2 / x3 / x4, not x5" in out
    (tmp_path / "ds" / "HR").mkdir(parents=True)
    Image.new("RGB", (20, 20)).save(tmp_path / "ds" / "HR" / "a.png")
    (tmp_path / "ds" / "LR_bicubic" / "X2").mkdir(parents=True)
    Image.new("RGB", (9, 9)).save(tmp_path / "ds" / "LR_bicubic" / "X2" / "ax2.png")
    code, out = run("-d", "ds", "--model", "bicubic", "--scale", "2")
    assert code == 1 and "ax2.png" in out and "Traceback" not in out
    assert not Path("r.json").exists()


def test_json_and_csv_never_replace_a_dataset_file_nor_an_existing_file_unasked(tmp_path: Path) -> None:
    data = tmp_path / "mine"
    for name in ("a", "b"):
        (data / "HR").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(
            data / "HR" / f"{name}.png"
        )
    before = (data / "HR" / "a.png").read_bytes()
    args = ["eval", "-m", "bicubic", "-d", str(data), "-s", "2", "-q"]
    over_input = runner.invoke(app, [*args, "--csv", str(data / "HR" / "a.png"), "--overwrite"])
    assert over_input.exit_code == 1 and "is one of the inputs" in over_input.output
    assert (data / "HR" / "a.png").read_bytes() == before
    Path("r.json").write_text("mine")
    kept = runner.invoke(app, [*args, "--json", "r.json"])
    assert kept.exit_code == 1 and "--json 'r.json' already exists; add --overwrite" in kept.output
    assert Path("r.json").read_text() == "mine"
    folder = runner.invoke(app, [*args, "--csv", "."])
    assert folder.exit_code == 1 and "it is a folder" in folder.output
    replaced = runner.invoke(app, [*args, "--json", "r.json", "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert json.loads(Path("r.json").read_text())["results"][0]["model"] == "bicubic"


def test_saved_images_and_names_are_checked_before_the_first_forward_pass(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for folder, names in (("p1/test", ("a.png", "b.png")), ("p2/test", ("a.png",)), ("dup", ("a.png", "a.bmp"))):
        (tmp_path / folder / "HR").mkdir(parents=True)
        for name in names:
            Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(tmp_path / folder / "HR" / name)
    args = ["eval", "-m", "bicubic", "-s", "2", "-q"]
    same = runner.invoke(app, [*args, "-d", "p1/test", "-d", "p2/test"])
    assert same.exit_code == 2 and "two datasets are both called 'test'" in same.output
    stems = runner.invoke(app, [*args, "-d", "dup"])
    assert stems.exit_code == 2 and "share the name 'a'" in " ".join(stems.output.split())
    assert runner.invoke(app, [*args, "-d", "p1/test", "--save-images", "sr"]).exit_code == 0
    again = runner.invoke(app, [*args, "-d", "p1/test", "--save-images", "sr"])
    assert again.exit_code == 1 and "add --overwrite to replace them" in " ".join(again.output.split())
    assert runner.invoke(app, [*args, "-d", "p1/test", "--save-images", "sr", "--overwrite"]).exit_code == 0
    twice = runner.invoke(app, [*args, "-d", "p1/test", "-d", "p1/test/", "--json", "r.json", "--csv", "r.json"])
    assert twice.exit_code == 2 and "--json and --csv name the same file" in twice.output
    once = runner.invoke(app, [*args, "-d", "p1/test", "-d", "p1/test/", "--json", "r.json"])
    assert once.exit_code == 0 and len(json.loads(Path("r.json").read_text())["results"]) == 1


def test_a_truncated_image_fails_before_the_first_image_is_scored(tmp_path: Path) -> None:
    """Only headers were read up front: a PNG cut after a sound header failed midway, earlier outputs saved."""
    rng = np.random.default_rng(1)
    (tmp_path / "cut" / "HR").mkdir(parents=True)
    for name in ("a.png", "b.png"):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp_path / "cut" / "HR" / name)
    whole = (tmp_path / "cut" / "HR" / "b.png").read_bytes()
    (tmp_path / "cut" / "HR" / "b.png").write_bytes(whole[: len(whole) // 2])
    result = runner.invoke(app, ["eval", "-m", "bicubic", "-d", "cut", "-s", "2", "--save-images", "sr", "-q"])
    assert result.exit_code == 1 and "b.png" in result.output and "Traceback" not in result.output
    assert not Path("sr").exists()  # nothing scored, nothing saved


def test_save_images_into_a_folder_that_cannot_be_made_is_refused_first(tmp_path: Path) -> None:
    data = tmp_path / "mine"
    (data / "HR").mkdir(parents=True)
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(data / "HR" / "a.png")
    Path("sfile").write_text("a file where the folder goes")
    result = runner.invoke(
        app, ["eval", "-d", str(data), "--model", "bicubic", "-s", "2", "--save-images", "sfile/sub"]
    )
    assert result.exit_code == 1, result.output
    assert "--save-images: cannot write into 'sfile/sub/mine/x2': 'sfile' is a file, not a folder" in " ".join(
        result.output.split()
    )


def test_files_another_run_wrote_meanwhile_are_not_replaced_unasked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `sst eval --json r.json` at once: the later silently replaced the earlier's file, both exiting 0.
    Now the file that appeared while this run worked is kept and the run fails; --overwrite replaces it."""
    from sst_cli import evaluate

    data = tmp_path / "mine"
    (data / "HR").mkdir(parents=True)
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(data / "HR" / "a.png")
    original = evaluate.score

    def racing(*args: object, **kwargs: object) -> object:  # another run writes its files meanwhile
        for name in ("r.json", "r.csv", "sr/mine/x2/a.png"):
            Path(name).parent.mkdir(parents=True, exist_ok=True)
            Path(name).write_text("theirs")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(evaluate, "score", racing)
    base = ["eval", "-m", "bicubic", "-d", str(data), "-s", "2", "-q"]
    for option, name in (("--json", "r.json"), ("--csv", "r.csv"), ("--save-images", "sr")):
        for leftover in ("r.json", "r.csv", "sr/mine/x2/a.png"):
            Path(leftover).unlink(missing_ok=True)
        result = runner.invoke(app, [*base, option, name])
        assert result.exit_code == 1 and "refusing to overwrite" in result.output, result.output
        assert Path(name if option != "--save-images" else "sr/mine/x2/a.png").read_text() == "theirs"
    assert runner.invoke(app, [*base, "--json", "r.json", "--overwrite"]).exit_code == 0
    assert json.loads(Path("r.json").read_text())["results"][0]["model"] == "bicubic"


@pytest.mark.skipif(sys.platform == "win32", reason="no FIFOs on Windows")
def test_overwrite_writes_through_a_link_and_refuses_what_is_no_file(tmp_path: Path) -> None:
    """--csv/--json FILE --overwrite renamed a new file over the name: a link became a plain file (its target
    unchanged), and a FIFO or device (/dev/stdout, as root) became a plain file too."""
    (tmp_path / "mine" / "HR").mkdir(parents=True)
    Image.new("RGB", (16, 16), (200, 100, 50)).save(tmp_path / "mine" / "HR" / "a.png")
    args = ["eval", "-m", "bicubic", "-d", "mine", "-s", "2", "-q", "--overwrite"]
    Path("old.csv").write_text("old")
    Path("link.csv").symlink_to("old.csv")
    assert runner.invoke(app, [*args, "--csv", "link.csv"]).exit_code == 0
    assert Path("link.csv").is_symlink() and Path("old.csv").read_text().startswith("dataset,scale,model")
    os.mkfifo("pipe")
    Path("to-pipe").symlink_to("pipe")
    Path("dangling.json").symlink_to("nowhere.json")
    for option, name, said in (
        ("--csv", "pipe", "it is a named pipe (FIFO), not a file"),
        ("--json", "to-pipe", f"it is a symbolic link to a named pipe (FIFO) ('{tmp_path / 'pipe'}'), not to a file"),
        ("--json", "dangling.json", f"it is a symbolic link to '{tmp_path / 'nowhere.json'}', which does not exist"),
    ):
        result = runner.invoke(app, [*args, option, name])
        assert result.exit_code == 1 and f"cannot write {option} '{name}': {said}" in result.output, result.output
    assert Path("pipe").is_fifo() and Path("to-pipe").is_symlink() and Path("dangling.json").is_symlink()
    assert not Path("nowhere.json").exists()


@needs_golden
def test_save_images_help_shows_the_folders_several_models_are_saved_in(tmp_path: Path) -> None:
    """--help said DIR/<dataset>/x<scale>/<name>.png, but with several models each has its own DIR/<model>/."""
    shown = " ".join(runner.invoke(app, ["eval", "--help"]).output.split())
    assert "DIR/[<model>/]<dataset>/x<scale>/<name>.png (the <model>/ level only when several models" in shown
    (tmp_path / "mine" / "HR").mkdir(parents=True)
    Image.new("RGB", (18, 18), (200, 100, 50)).save(tmp_path / "mine" / "HR" / "a.png")
    mini = ["--weights", str(GOLDEN / "mini_x3.pth"), "--config", str(GOLDEN / "mini_x3.json"), "--device", "cpu"]
    args = ["eval", "-d", "mine", "-s", "3", "-q", "--save-images"]
    assert runner.invoke(app, [*args, "one", "-m", "bicubic"]).exit_code == 0
    assert runner.invoke(app, [*args, "two", "-m", "bicubic", *mini]).exit_code == 0
    saved = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.png") if "HR" not in p.parts)
    assert saved == ["one/mine/x3/a.png", "two/bicubic/mine/x3/a.png", "two/mini_x3/mine/x3/a.png"]


def test_json_and_csv_in_a_new_folder_make_it_only_when_written(tmp_path: Path) -> None:
    """--json new/x.json said 'the folder does not exist', while --save-images and --report make theirs."""
    (tmp_path / "mine" / "HR").mkdir(parents=True)
    Image.new("RGB", (16, 16), (200, 100, 50)).save(tmp_path / "mine" / "HR" / "a.png")
    args = ["eval", "-m", "bicubic", "-d", "mine", "-s", "2", "-q"]
    result = runner.invoke(app, [*args, "--json", "new/r.json", "--csv", "other/sub/r.csv"])
    assert result.exit_code == 0, result.output
    assert json.loads(Path("new/r.json").read_text())["results"] and Path("other/sub/r.csv").is_file()
    (tmp_path / "mine" / "LR_bicubic" / "X2").mkdir(parents=True)  # the wrong size: the run fails after the checks
    Image.new("RGB", (9, 9)).save(tmp_path / "mine" / "LR_bicubic" / "X2" / "ax2.png")
    failed = runner.invoke(app, [*args, "--json", "gone/r.json"])
    assert failed.exit_code == 1 and "ax2.png" in failed.output and not Path("gone").exists()
