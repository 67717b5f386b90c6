"""Visual reports: crop placement, the report's files and numbers, atomic replacement, 16-bit and alpha
pictures, ``sst compare`` with ``--png``, ``sst eval --report`` with several models, and a hundred images.

Everything runs on tiny random SST networks (x2, a few thousand weights) and small pictures, on the CPU.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file
from typer.testing import CliRunner

from sst_cli import SST, SSTConfig
from sst_cli.cli import app
from sst_cli.compare import CompareSettings, run_compare
from sst_cli.errors import ConfigError, WriteError
from sst_cli.evaluate import bicubic
from sst_cli.files import TEMP_SUFFIX
from sst_cli.image_io import Picture, write_image
from sst_cli.loader import ModelSpec
from sst_cli.report import ReportBuilder, Score, choose_crop, is_report, open_report, write_sheet
from sst_cli.report.crops import CropBox, best_box, fit_box
from sst_cli.upscaler import UpscaleOptions

runner = CliRunner()
TINY = SSTConfig(
    dim=8, window_sizes=(4,), num_heads=(2,), n_blocks=1, exp_ratio=1.5, upscaling_factor=2,
    upsampler_type="pixelshuffle_direct", ranks=(2,), rib_hidden_dim=8, rib_n_freqs=2,
)  # fmt: skip
CPU = UpscaleOptions(device="cpu", tile=0)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SST_DATA_ROOT", raising=False)
    torch.set_num_threads(1)  # tiny tensors: one thread is faster than two on shared cores


def tiny_weights(path: Path, seed: int) -> Path:
    """A random tiny x2 SST saved as sst-cli's safetensors (its config in the metadata, so it loads alone)."""
    torch.manual_seed(seed)
    model = SST(**TINY.to_kwargs())
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    save_file(model.state_dict(), str(path), metadata={"sst_config": json.dumps(TINY.to_kwargs())})
    return path


def pattern(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Smooth colour ramps with hard-edged squares: pictures where models and bicubic differ visibly."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
    image = np.stack([xx, yy, 0.5 * (xx + yy)], axis=2)
    for _ in range(4):
        y, x = rng.integers(0, height - 6), rng.integers(0, width - 6)
        image[y : y + 6, x : x + 6] = rng.random(3)
    return (image * 255).round().astype(np.uint8)


# ------------------------------------------------------------------------------------------ crop placement
def test_crop_lands_where_the_model_differs_from_bicubic() -> None:
    scale = 2
    bic = np.full((96, 128, 3), 128, np.uint8)
    model = bic.copy()
    model[40:56, 70:86] = np.indices((16, 16)).sum(0)[..., None] % 2 * 255  # a checkerboard only the model drew
    box = choose_crop([model], bic, scale, side=(8, 8))
    assert box == CropBox(35, 20, 8, 8)  # input pixels: output (70..86, 40..56) / 2
    # The worst error instead: the HR has a feature elsewhere that neither method reproduces.
    hr = bic.copy()
    hr[4:20, 100:116] = 0
    assert choose_crop([model], bic, scale, hr=hr, by="error", side=(8, 8)) == CropBox(50, 2, 8, 8)
    # Two models: where they differ on average; the border (two input pixels) never counts.
    other = bic.copy()
    other[:4, :] = 0
    assert choose_crop([model, other], bic, scale, side=(8, 8)) == CropBox(35, 20, 8, 8)
    # Nothing differs: the centre. A requested box is moved inside the picture.
    assert best_box(np.zeros((48, 64)), 8, 8) == CropBox(28, 20, 8, 8)
    assert fit_box((60, -5, 10, 10), 48, 64) == CropBox(54, 0, 10, 10)
    with pytest.raises(ConfigError, match="ground truth"):
        choose_crop([model], bic, scale, by="error")


# ------------------------------------------------------------------------------------ the report itself
def _frames(seed: int, size: int = 32, scale: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lr, bicubic, model, hr) uint8 frames; the 'model' is the HR with a little noise (better than bicubic)."""
    hr = pattern(size * scale, size * scale, seed)
    lr = np.asarray(Image.fromarray(hr).resize((size, size), Image.Resampling.BICUBIC))
    noisy = hr.astype(int) + np.random.default_rng(seed).integers(-3, 4, hr.shape)
    return lr, bicubic(lr, scale), noisy.clip(0, 255).astype(np.uint8), hr


def _build(folder: Path, count: int = 2) -> None:
    with open_report(folder, title="two images", models=["good"], ground_truth=True) as report:
        for i in range(count):
            lr, bic, model, hr = _frames(i)
            report.add_image(f"k{i}", f"pic{i}", scale=2, lr=lr, bicubic=bic, hr=hr, dataset="Set5",
                             bicubic_score=Score(25.0 + i, 0.8))  # fmt: skip
            report.add_output(f"k{i}", "good", model, Score(30.0 + 2 * i, 0.9))


def test_report_files_numbers_and_crops(tmp_path: Path) -> None:
    _build(tmp_path / "r")
    folder = tmp_path / "r"
    html = (folder / "index.html").read_text()
    data = json.loads((folder / "report.json").read_text())
    assert is_report(folder) and data["methods"] == ["LR", "bicubic", "good", "HR"]
    # Summary: means per method, without a published figure: two images called Set5 are not Set5 (five are).
    rows = {r["method"]: r for r in data["summary"]}
    assert rows["good"]["psnr_y"] == pytest.approx(31.0) and rows["bicubic"]["psnr_y"] == pytest.approx(25.5)
    assert "published" not in rows["bicubic"] and "33.66" not in html
    _build(tmp_path / "five", count=5)
    five = json.loads((tmp_path / "five" / "report.json").read_text())
    assert {r["method"]: r for r in five["summary"]}["bicubic"]["published"]["psnr_y"] == 33.66
    assert "33.66 / 0.9299" in (tmp_path / "five" / "index.html").read_text()
    assert "<td>31.00</td>" in html and "<td>25.50</td>" in html
    # Per image: whole-image PSNR, gain over bicubic, sortable keys, and crops labelled with their own PSNR.
    assert ">32.00<" in html and "+5.00" in html and 'data-gain-m0="5.000000"' in html
    for i in range(2):
        image = data["images"][i]
        crop = image["crop_output_px"]
        assert crop == [2 * v for v in image["crop_input_px"]]
        files = {p.name for p in (folder / image["folder"]).iterdir()}
        assert files == {"lr.png", "bicubic.png", "m0.png", "hr.png", "thumb.jpg",
                         "crop-lr.png", "crop-bicubic.png", "crop-m0.png", "crop-hr.png"}  # fmt: skip
        tiles = {m: np.asarray(Image.open(folder / image["folder"] / f"crop-{m}.png")) for m in ("lr", "m0", "hr")}
        assert tiles["lr"].shape == tiles["hr"].shape == (crop[3], crop[2], 3)
        hr = np.asarray(Image.open(folder / image["folder"] / "hr.png"))
        assert np.array_equal(tiles["hr"], hr[crop[1] : crop[1] + crop[3], crop[0] : crop[0] + crop[2]])
        assert np.array_equal(tiles["lr"][::2, ::2], tiles["lr"][1::2, 1::2])  # nearest-neighbour blocks
        assert image["crop_psnr_y"]["good"] > image["crop_psnr_y"]["bicubic"]
        assert f"{image['crop_psnr_y']['good']:.2f} dB" in html
    # Self-contained: no network resource, no inlined image, full images only behind the slider (lazy).
    assert not re.search(r"(src|href)=\"(https?:)?//", html) and "data:image" not in html
    assert html.count('data-src="images/') == 4 and 'loading="lazy"' in html


@pytest.mark.parametrize(("crop", "moved"), [((4, 4, 8, 8), False), ((10_000, 2, 8, 8), True)])
def test_a_crop_that_does_not_fit_is_moved_and_the_report_says_so(tmp_path: Path, crop: tuple, moved: bool) -> None:
    with open_report(tmp_path / "r", title="t", models=["good"], ground_truth=True, crop=crop) as report:
        lr, bic, model, hr = _frames(0)
        report.add_image("k0", "pic0", scale=2, lr=lr, bicubic=bic, hr=hr)
        report.add_output("k0", "good", model)
    image = json.loads((tmp_path / "r" / "report.json").read_text())["images"][0]
    html = (tmp_path / "r" / "index.html").read_text()
    x, y, w, h = image["crop_output_px"]
    assert (w, h) == (8, 8) and x + w <= hr.shape[1]
    assert (f"pic0: the crop asked for does not fit its picture; shown at {x},{y},8,8" in html) is moved


@pytest.mark.parametrize("ground_truth", [True, False])
def test_the_report_says_the_crop_option_that_shows_its_crop_again(tmp_path: Path, ground_truth: bool) -> None:
    def build(folder: Path, crop: tuple | None) -> dict:
        with open_report(folder, title="t", models=["good"], ground_truth=ground_truth, crop=crop) as report:
            lr, bic, model, hr = _frames(1)
            report.add_image("k", "pic", scale=2, lr=lr, bicubic=bic, hr=hr if ground_truth else None)
            report.add_output("k", "good", model)
        return json.loads((folder / "report.json").read_text())["images"][0]

    first = build(tmp_path / "a", None)  # placed where the model differs most
    said = re.search(r"(--crop \d+,\d+,\d+,\d+) shows it again", (tmp_path / "a" / "index.html").read_text())
    assert said is not None
    again = build(tmp_path / "b", tuple(int(v) for v in said[1].split()[1].split(",")))
    assert again["crop_input_px"] == first["crop_input_px"]


def _s15(v: float) -> bytes:
    return struct.pack(">i", round(v * 65536))


def _xyz(x: float, y: float, z: float) -> bytes:
    return b"XYZ " + bytes(4) + _s15(x) + _s15(y) + _s15(z)


def _linear_rgb_profile() -> bytes:
    """A minimal ICC v2 RGB profile: sRGB's primaries (D50-adapted) with linear curves."""
    curve = b"curv" + bytes(4) + struct.pack(">I", 1) + struct.pack(">H", 256) + bytes(2)  # gamma 1.0, padded
    tags = [
        (b"wtpt", _xyz(0.9642, 1.0, 0.8249)),
        (b"rXYZ", _xyz(0.4361, 0.2225, 0.0139)),
        (b"gXYZ", _xyz(0.3851, 0.7169, 0.0971)),
        (b"bXYZ", _xyz(0.1431, 0.0606, 0.7141)),
        (b"rTRC", curve),
        (b"gTRC", curve),
        (b"bTRC", curve),
    ]
    table_size = 4 + 12 * len(tags)
    offset = 128 + table_size
    table, data = struct.pack(">I", len(tags)), b""
    for sig, body in tags:
        table += sig + struct.pack(">II", offset + len(data), len(body))
        data += body + bytes(-len(body) % 4)
    size = 128 + table_size + len(data)
    header = struct.pack(">I", size) + b"lcms" + bytes([2, 0x10, 0, 0]) + b"mntrRGB XYZ " + bytes(12) + b"acsp"
    header += bytes(4) + bytes(4) + bytes(8) + bytes(8) + bytes(4) + _s15(0.9642) + _s15(1.0) + _s15(0.8249)
    header += bytes(128 - len(header))
    return header + table + data


def test_previews_of_a_picture_with_its_own_colour_space_are_shown_in_srgb() -> None:
    """Report images carry no profile: a photo in another colour space is converted, or its colours shift."""
    from sst_cli.compare import frame
    from sst_cli.image_io import Picture

    grey = np.full((2, 2, 3), 0.5, np.float32)
    linear = Picture(grey, None, False, 8, _linear_rgb_profile(), None, "png")
    assert frame(linear)[0, 0].tolist() == [188, 188, 188]  # linear 0.5 is sRGB 0.735
    assert frame(Picture(grey, None, False, 8, None, None, "png"))[0, 0].tolist() == [128, 128, 128]
    assert frame(Picture(grey, None, False, 8, b"not a profile", None, "png"))[0, 0].tolist() == [128, 128, 128]


def test_a_failed_report_leaves_the_old_one_and_no_debris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "r"
    _build(folder)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    with pytest.raises(RuntimeError, match="mid-way"), open_report(folder, title="t", models=["good"],
                                                                    ground_truth=True) as report:  # fmt: skip
        lr, bic, _, hr = _frames(5)
        report.add_image("k", "x", scale=2, lr=lr, bicubic=bic, hr=hr)
        raise RuntimeError("the model crashed mid-way")

    import sst_cli.report.page as page

    def broken(_report: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(page, "render_page", broken)  # a failure while writing the page itself
    with pytest.raises(WriteError, match="no space left"):
        _build(folder, count=1)
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(TEMP_SUFFIX)]
    monkeypatch.undo()
    _build(folder, count=1)  # a successful run replaces it whole
    assert len(json.loads((folder / "report.json").read_text())["images"]) == 1
    assert not (folder / "images" / "k1").exists() and not list(tmp_path.glob(f".*{TEMP_SUFFIX}"))


def test_a_folder_that_is_not_a_report_is_never_replaced(tmp_path: Path) -> None:
    precious = tmp_path / "photos"
    precious.mkdir()
    (precious / "holiday.jpg").write_bytes(b"mine")
    with pytest.raises(WriteError, match="not empty and was not written by sst-cli"):
        _build(precious)
    assert [p.name for p in precious.iterdir()] == ["holiday.jpg"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(WriteError, match="not a folder"):
        _build(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    _build(tmp_path / "empty")
    assert is_report(tmp_path / "empty")
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    with pytest.raises(
        WriteError, match=r"'.*link': it is a symbolic link; name the folder it points to \('.*empty'\)"
    ):
        _build(tmp_path / "link")  # it said "not a folder", which a link to a folder is, for its user
    assert (tmp_path / "link").is_symlink() and is_report(tmp_path / "empty")


def test_many_images_stay_light(tmp_path: Path) -> None:
    """A hundred pictures: thumbnails and crops are small files, the page stays small, nothing is inlined."""
    folder = tmp_path / "many"
    hr = _frames(0, size=40)[3]
    big_hr = np.asarray(Image.fromarray(hr).resize((240, 200), Image.Resampling.NEAREST))
    big_lr = np.asarray(Image.fromarray(big_hr).resize((120, 100), Image.Resampling.BICUBIC))
    big_bicubic = bicubic(big_lr, 2)
    with open_report(folder, title="many", models=["m"], ground_truth=True) as report:
        for i in range(100):
            report.add_image(f"k{i}", f"image {i}", scale=2, lr=big_lr, bicubic=big_bicubic, hr=big_hr,
                             dataset="mine", bicubic_score=Score(20.0, None))  # fmt: skip
            report.add_output(f"k{i}", "m", big_hr, Score(20.0 + i / 10, None))
    html = (folder / "index.html").read_text()
    assert html.count('<tbody class="item"') == 100 and len(html) < 400_000
    thumbs = sorted(folder.glob("images/*/thumb.jpg"))
    assert len(thumbs) == 100 and all(max(Image.open(t).size) <= 160 for t in thumbs)
    assert max(t.stat().st_size for t in thumbs) < 20_000
    assert len(set(re.findall(r'id="img-([^"]+)"', html))) == 100  # every image its own folder
    # Loaded with the page: a thumbnail and four crops per image (the crops lazily, as they scroll into view);
    # the two full-size images of each slider only when it is opened.
    assert html.count(' src="images/') == 100 * 5 and html.count('loading="lazy"') == 100 * 4
    assert html.count('data-src="images/') == 100 * 2


# ------------------------------------------------------------------------------------ sst compare (library)
def _write(path: Path, values: np.ndarray, depth: int, alpha: np.ndarray | None = None, gray: bool = False) -> Path:
    color = values.astype(np.float32)
    if gray:
        color = np.repeat(color.mean(axis=2, keepdims=True), 3, axis=2)
    write_image(path, Picture(color, alpha, gray, depth, None, None, "png"))
    return path


def test_compare_16bit_gray_and_alpha_pictures(tmp_path: Path) -> None:
    weights = tiny_weights(tmp_path / "tiny_a.safetensors", 1)
    ramp = pattern(24, 32, 3).astype(np.float32) / 255.0
    alpha = np.zeros((24, 32), np.float32)
    alpha[4:20, 6:26] = 1.0
    deep = ramp + np.float32(1 / 65535)  # 16-bit values between 8-bit steps
    pics = [
        _write(tmp_path / "rgba16.png", deep, 16, alpha),
        _write(tmp_path / "gray16.png", ramp, 16, gray=True),
        _write(tmp_path / "rgba8.png", ramp, 8, alpha),
    ]
    settings = CompareSettings(tuple(pics), (ModelSpec(weights=weights),), options=CPU, report=tmp_path / "rep")
    result = run_compare(settings)
    assert result.scale == 2 and result.models == ("tiny_a",) and result.images == 3
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    first, gray, _ = data["images"]
    assert (first["bit_depth"], first["alpha"], gray["bit_depth"], gray["alpha"]) == (16, True, 16, False)
    assert data["summary"] == [] and "HR" not in data["methods"]
    folder = tmp_path / "rep" / first["folder"]
    for name in ("lr", "bicubic", "m0", "crop-m0", "crop-lr"):
        with Image.open(folder / f"{name}.png") as im:
            assert im.mode == "RGBA"  # 8-bit previews that keep the transparency
    bic = np.asarray(Image.open(folder / "bicubic.png"))
    assert bic[..., 3].max() == 255 and bic[..., 3].min() == 0 and bic.shape == (48, 64, 4)
    assert Image.open(tmp_path / "rep" / gray["folder"] / "m0.png").mode == "L"
    html = (tmp_path / "rep" / "index.html").read_text()
    assert html.count(">16-bit<") == 2 and html.count(">alpha<") == 2 and "checkerboard" in html
    assert "thumb.png" in html  # transparent thumbnails stay PNG


def test_compare_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    pic = _write(tmp_path / "p.png", pattern(16, 16).astype(np.float32) / 255, 8)
    with pytest.raises(ConfigError, match="a report folder, a PNG file, or both"):
        CompareSettings((pic,))
    with pytest.raises(ConfigError, match=r"name it \.png"):
        CompareSettings((pic,), png=tmp_path / "x.jpg")
    weights = tiny_weights(tmp_path / "w.safetensors", 0)
    with pytest.raises(ConfigError, match="share a name"):
        CompareSettings((pic,), (ModelSpec(weights=weights), ModelSpec(weights=weights)), report=tmp_path / "r")
    settings = CompareSettings((pic,), (ModelSpec(weights=weights),), scale=3, options=CPU, png=tmp_path / "x.png")
    with pytest.raises(Exception, match="x2"):
        run_compare(settings)
    assert not (tmp_path / "x.png").exists()


# ------------------------------------------------------------------------------------------ the CLI
def test_sst_compare_png_in_a_new_folder_makes_it(tmp_path: Path) -> None:
    """--png new/side.png said 'the folder does not exist', while -o makes its folder."""
    Image.fromarray(pattern(20, 24, 1)).save(tmp_path / "photo.png")
    result = runner.invoke(app, ["compare", "photo.png", "-m", "bicubic", "--png", "new/sub/side.png", "-q"])
    assert result.exit_code == 0, result.output
    assert Image.open("new/sub/side.png").format == "PNG"


def test_sst_compare_two_models_crop_and_png(tmp_path: Path) -> None:
    a, b = tiny_weights(tmp_path / "tiny_a.safetensors", 1), tiny_weights(tmp_path / "tiny_b.safetensors", 2)
    Image.fromarray(pattern(40, 48, 1)).save(tmp_path / "photo.png")
    args = ["compare", "photo.png", "--weights", str(a), "--weights", str(b), "--device", "cpu", "-q"]
    result = runner.invoke(app, [*args, "--crop", "10,6,12,10", "--png", "side.png", "-o", "rep"])
    assert result.exit_code == 0, result.output
    assert "compared bicubic, tiny_a, tiny_b on 1 image(s) at x2" in result.output
    data = json.loads(Path("rep/report.json").read_text())
    image = data["images"][0]
    assert image["crop_input_px"] == [10, 6, 12, 10] and image["crop_output_px"] == [20, 12, 24, 20]
    cpu32 = {"device": "cpu", "precision": "fp32"}  # a shared comparison says where each model ran
    assert data["ran_on"] == {"bicubic": {"device": "cpu", "precision": "fp64"}, "tiny_a": cpu32, "tiny_b": cpu32}
    assert set(image["mean_abs_change_from_bicubic"]) == {"tiny_a", "tiny_b"}
    # The sheet: one row of LR | bicubic | tiny_a | tiny_b, each 24x20 output pixels enlarged x11 (about 256 px).
    sheet = np.asarray(Image.open("side.png").convert("RGB"))
    crop_b = np.asarray(Image.open(Path("rep") / image["folder"] / "crop-m1.png").convert("RGB"))
    assert sheet.shape[1] == 2 * 12 + 4 * 24 * 11 + 3 * 8
    top = 12 + 17 + 8
    left_b = 12 + 3 * (24 * 11 + 8)
    assert np.array_equal(sheet[top : top + 220 : 11, left_b : left_b + 264 : 11], crop_b)
    assert (sheet[top + 220 + 4 :, :] < 128).any()  # labels drawn under the tiles

    only_png = runner.invoke(app, ["compare", "photo.png", "--weights", str(a), "--device", "cpu", "-q",
                                   "--png", "only.png"])  # fmt: skip
    assert only_png.exit_code == 0 and Path("only.png").is_file() and "report:" not in only_png.output
    bad = runner.invoke(app, ["compare", "photo.png", "--crop", "1,2,3", "--png", "x.png"])
    assert bad.exit_code == 2 and "x,y,width,height" in bad.output


def test_sst_compare_says_when_the_crop_asked_for_was_moved_to_fit(tmp_path: Path) -> None:
    """The moved crop was said only inside the report page and the sheet's label: a --png run printed nothing."""
    weights = tiny_weights(tmp_path / "tiny.safetensors", 1)
    Image.fromarray(pattern(24, 32, 1)).save(tmp_path / "photo.png")
    args = ["compare", "photo.png", "--weights", str(weights), "--device", "cpu", "--crop", "120,80,16,16"]
    result = runner.invoke(app, [*args, "--png", "side.png"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "note: photo.png: the crop asked for does not fit its picture; shown at 16,8,16,16" in said
    plain = runner.invoke(app, [*args[:-2], "--png", "plain.png"])
    assert plain.exit_code == 0 and plain.stderr == "", plain.stderr  # no empty line the progress bar left in logs


def test_compare_png_never_replaces_a_picture_nor_an_existing_file_unasked(tmp_path: Path) -> None:
    weights = tiny_weights(tmp_path / "tiny.safetensors", 1)
    Image.fromarray(pattern(24, 24, 1)).save(tmp_path / "photo.png")
    before = (tmp_path / "photo.png").read_bytes()
    args = ["compare", "photo.png", "--weights", str(weights), "--device", "cpu", "-q", "--png"]
    over_input = runner.invoke(app, [*args, "photo.png", "--overwrite"])
    assert over_input.exit_code == 1 and "--png 'photo.png' is one of the inputs" in over_input.output
    assert (tmp_path / "photo.png").read_bytes() == before
    (tmp_path / "side.png").write_bytes(b"mine")
    kept = runner.invoke(app, [*args, "side.png"])
    assert kept.exit_code == 1 and "already exists; add --overwrite" in kept.output
    assert (tmp_path / "side.png").read_bytes() == b"mine"
    replaced = runner.invoke(app, [*args, "side.png", "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert Image.open(tmp_path / "side.png").format == "PNG"


def _dataset(root: Path) -> Path:
    for i in range(2):
        (root / "HR").mkdir(parents=True, exist_ok=True)
        Image.fromarray(pattern(36, 44, i)).save(root / "HR" / f"img{i}.png")
    return root


def test_nothing_the_run_keeps_may_lie_in_the_report_folder_it_replaces(tmp_path: Path) -> None:
    """The report is swapped in whole at the end: a --png, a picture or saved images inside it were deleted."""
    Image.fromarray(pattern(24, 24, 1)).save(tmp_path / "photo.png")
    assert runner.invoke(app, ["compare", "photo.png", "-m", "bicubic", "-o", "rep", "-q"]).exit_code == 0
    shutil.copy(tmp_path / "photo.png", tmp_path / "rep" / "mine.png")
    for args, inside in [(["photo.png", "--png", "rep/side.png"], "rep/side.png"), (["rep/mine.png"], "rep/mine.png")]:
        result = runner.invoke(app, ["compare", *args, "-m", "bicubic", "-o", "rep", "-q"])
        assert result.exit_code == 1, result.output
        assert f"'{inside}' is inside the report folder 'rep', which is replaced whole" in " ".join(
            result.output.split()
        )
    assert (tmp_path / "rep" / "mine.png").is_file()
    data = _dataset(tmp_path / "mine")
    saved = runner.invoke(app, ["eval", "-d", str(data), "-m", "bicubic", "--report", "r2", "--save-images", "r2/sr"])
    assert saved.exit_code == 1 and "'r2/sr' is inside the --report folder 'r2'" in " ".join(saved.output.split())
    (tmp_path / "afile").write_text("x")
    a_file = runner.invoke(app, ["eval", "-d", str(data), "-m", "bicubic", "--save-images", "afile"])
    assert a_file.exit_code == 1 and "--save-images 'afile': it is a file, not a folder" in a_file.output


def test_compare_of_long_paths_files_images_by_their_names(tmp_path: Path) -> None:
    """A 280-character path failed with "cannot write '<report>': File name too long" (the whole path was the
    image's folder name) and put the user's folders into the report's folder names."""
    deep = tmp_path.joinpath(*["private-folder-" + "d" * 40] * 6)
    long_name = "holiday-" + "x" * 190 + ".png"
    inputs = [deep / "a" / "photo.png", deep / "b" / "photo.png", deep / long_name]
    for i, path in enumerate(inputs):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pattern(16, 16, i)).save(path)
    assert len(str(inputs[0])) > 280
    result = runner.invoke(app, ["compare", *map(str, inputs), "-m", "bicubic", "-o", "rep", "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "rep" / "report.json").read_text(encoding="utf-8"))
    folders = [image["folder"] for image in data["images"]]
    assert folders[:2] == ["images/photo.png", "images/photo.png-2"]
    assert folders[2].startswith("images/holiday-xxx") and len(folders[2]) <= len("images/") + 100
    assert [image["name"] for image in data["images"]] == ["a/photo.png", "b/photo.png", long_name]  # told apart
    page = (tmp_path / "rep" / "index.html").read_text(encoding="utf-8")
    assert "private-folder" not in page and "private-folder" not in json.dumps(data)
    assert all((tmp_path / "rep" / folder / "lr.png").is_file() for folder in folders)


def test_a_picture_named_twice_is_compared_once(tmp_path: Path) -> None:
    """``img.png $PWD/img.png`` (or a link to it) ran the picture twice, the copy labelled with its folder."""
    Image.fromarray(pattern(16, 16, 2)).save(tmp_path / "img.png")
    (tmp_path / "link.png").symlink_to(tmp_path / "img.png")
    args = ["compare", "img.png", str(tmp_path / "img.png"), "link.png", ".", "-m", "bicubic", "-o", "rep", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "rep" / "report.json").read_text(encoding="utf-8"))
    assert [image["name"] for image in data["images"]] == ["img.png"]


def test_inputs_of_one_name_are_shown_with_the_folders_that_tell_them_apart() -> None:
    from sst_cli.compare import shown_names

    paths = [Path("x/a/photo.png"), Path("y/a/photo.png"), Path("z/b/photo.png"), Path("c/cat.png"), Path("photo.png")]
    assert list(shown_names(paths).values()) == [
        "x/a/photo.png",
        "y/a/photo.png",
        "b/photo.png",
        "cat.png",
        "photo.png",
    ]


@pytest.mark.parametrize("command", ["compare", "eval"])
def test_config_and_model_together_are_refused_as_upscale_refuses_them(tmp_path: Path, command: str) -> None:
    """--config with --model sst-light compared (or scored) the --weights alone and dropped sst-light silently."""
    weights = tiny_weights(tmp_path / "tiny.safetensors", 1)
    (tmp_path / "tiny.json").write_text(json.dumps(TINY.to_kwargs()))
    Image.fromarray(pattern(16, 16, 1)).save(tmp_path / "photo.png")
    where = ["photo.png"] if command == "compare" else ["-d", str(_dataset(tmp_path / "mine"))]
    model = ["--weights", str(weights), "--config", str(tmp_path / "tiny.json"), "-m", "sst-light"]
    result = runner.invoke(app, [command, *where, *model, "-q"])
    assert result.exit_code == 2, result.output
    assert "--config and --model both say which architecture to build" in " ".join(result.output.split())


def test_compare_of_weights_at_two_scales_is_refused_before_any_model_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second file's scale was found only after the first model had run on every picture."""
    import sst_cli.compare as compare

    x2 = tiny_weights(tmp_path / "tiny_x2.safetensors", 1)
    x3 = tmp_path / "tiny_x3.safetensors"
    config = replace(TINY, upscaling_factor=3)
    save_file(SST(**config.to_kwargs()).state_dict(), str(x3), metadata={"sst_config": json.dumps(config.to_kwargs())})
    Image.fromarray(pattern(16, 16, 1)).save(tmp_path / "photo.png")
    monkeypatch.setattr(compare, "Upscaler", None)  # any model built or run fails the test
    both = runner.invoke(app, ["compare", "photo.png", "--weights", str(x2), "--weights", str(x3), "-q"])
    assert both.exit_code == 2, both.output
    assert "tiny_x2 upscales x2 and tiny_x3 x3: a comparison is at one scale" in " ".join(both.output.split())
    asked = runner.invoke(app, ["compare", "photo.png", "--weights", str(x2), "--scale", "4", "-q"])
    assert asked.exit_code == 2, asked.output
    said = " ".join(asked.output.split())
    assert "tiny_x2 upscales x2, the comparison is at x4: compare at x2, or models for x4" in said
    assert not (tmp_path / "sst-compare").exists()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=["offline", "unreachable"])
def no_hub(request: pytest.FixtureRequest, offline_cache: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Weights not in the cache cannot be had: HF_HUB_OFFLINE is set, or the run is online and the Hub (and the
    release) out of reach."""
    from huggingface_hub import constants

    if request.param == "unreachable":
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        endpoint = f"http://127.0.0.1:{_closed_port()}"
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setenv("SST_RELEASE_URL", "off")
    return request.param


def _refused_for_sst_l(result: Any, no_hub: str, scale: int) -> None:
    """The run stopped (exit 1) with the loader's own words for sst-l's weights at ``scale``."""
    text = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    expected = {
        "offline": f"sst-l x{scale} weights (SSTLarge_DFLIP_X{scale}.pth) are not in the cache and HF_HUB_OFFLINE is "
        f"set: run `sst models pull sst-l --scale {scale}` with network access, or pass --weights PATH",
        "unreachable": "no network: cannot reach 127.0.0.1:",
    }[no_hub]
    assert expected in text
    assert f"sst-l x{scale}" in text and f"sst models pull sst-l --scale {scale}" in text


@pytest.fixture
def looked_up(offline_cache: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every zoo file looked for (name, scale), in order: a look-up online is a request to the Hub."""
    import sst_cli.loader as loader

    found: list[tuple[str, int]] = []
    resolve = loader.hub.resolve_pretrained

    def counted(name: str, scale: int, *, repo_id: str | None = None) -> Path:
        found.append((name, scale))
        return resolve(name, scale, repo_id=repo_id)

    monkeypatch.setattr(loader.hub, "resolve_pretrained", counted)
    return found


def test_compare_of_zoo_weights_not_in_the_cache_is_refused_before_any_model_runs(
    tmp_path: Path, no_hub: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second model's weights were looked for only after the first model had run on every picture."""
    import sst_cli.compare as compare

    Image.fromarray(pattern(16, 16, 1)).save(tmp_path / "photo.png")
    monkeypatch.setattr(compare, "Upscaler", None)  # any model built or run fails the test
    result = runner.invoke(app, ["compare", "photo.png", "--model", "sst-light-291", "--model", "sst-l", "-q"])
    _refused_for_sst_l(result, no_hub, 4)
    assert not (tmp_path / "sst-compare").exists()


def test_compare_of_hf_weights_not_in_the_cache_is_refused_before_any_model_runs(
    tmp_path: Path, offline_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sst_cli.compare as compare

    mine = tiny_weights(tmp_path / "mine.safetensors", 1)
    Image.fromarray(pattern(16, 16, 1)).save(tmp_path / "photo.png")
    monkeypatch.setattr(compare, "Upscaler", None)  # any model built or run fails the test
    weights = ["--weights", str(mine), "--weights", "hf://someone/models/theirs.safetensors"]
    result = runner.invoke(app, ["compare", "photo.png", *weights, "--scale", "2", "-q"])
    assert result.exit_code == 1, result.output
    missing = "theirs.safetensors from someone/models is not in the Hugging Face cache (HF_HUB_OFFLINE is set)"
    assert missing in " ".join(result.output.split())


def test_compare_loads_the_zoo_weights_it_found_up_front_without_looking_again(
    tmp_path: Path, looked_up: list[tuple[str, int]]
) -> None:
    """Finding every model's weights first costs no second look-up (online, a request to the Hub) when each loads."""
    Image.fromarray(pattern(16, 16, 1)).save(tmp_path / "photo.png")
    settings = CompareSettings(
        (tmp_path / "photo.png",), (ModelSpec("sst-light-291"),), scale=2, options=CPU, png=tmp_path / "side.png"
    )
    result = run_compare(settings)
    assert result.models == ("sst-light-291",) and (tmp_path / "side.png").is_file()
    assert looked_up == [("sst-light-291", 2)]


def test_eval_of_zoo_weights_not_in_the_cache_is_refused_before_any_model_runs(
    tmp_path: Path, no_hub: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second model's weights were looked for only after the first model had been scored on every dataset."""
    import sst_cli.evaluate as evaluate

    data = _dataset(tmp_path / "mine")
    monkeypatch.setattr(evaluate, "Upscaler", None)  # any model built or run fails the test
    models = ["--model", "sst-light-291", "--model", "sst-l"]
    result = runner.invoke(app, ["eval", "-d", str(data), *models, "-s", "2", "-s", "4", "--json", "r.json", "-q"])
    _refused_for_sst_l(result, no_hub, 2)
    assert not Path("r.json").exists()


def test_eval_of_hf_weights_not_in_the_cache_is_refused_before_any_model_is_scored(
    tmp_path: Path, offline_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --scale the first weights are loaded to read their scale; the others are found before any scoring."""
    import sst_cli.evaluate as evaluate

    mine = tiny_weights(tmp_path / "mine.safetensors", 1)
    data = _dataset(tmp_path / "data")
    monkeypatch.setattr(evaluate, "evaluate_dataset", None)  # any model scored fails the test
    weights = ["--weights", str(mine), "--weights", "hf://someone/models/theirs.safetensors"]
    result = runner.invoke(app, ["eval", "-d", str(data), *weights, "--device", "cpu", "-q"])
    assert result.exit_code == 1, result.output
    missing = "theirs.safetensors from someone/models is not in the Hugging Face cache (HF_HUB_OFFLINE is set)"
    assert missing in " ".join(result.output.split())


def test_eval_finds_every_model_at_every_scale_first_and_loads_each_without_looking_again(
    tmp_path: Path, looked_up: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zoo model has a file per scale: each is found before the first model is built, and looked up only once."""
    import sst_cli.evaluate as evaluate
    from sst_cli.evaluate import EvalSettings, run_evaluation

    found_at_build: list[list[tuple[str, int]]] = []  # what had been looked up when each model was built
    build = evaluate.Upscaler

    def noted_build(*args: Any, **kwargs: Any) -> Any:
        found_at_build.append(list(looked_up))
        return build(*args, **kwargs)

    monkeypatch.setattr(evaluate, "Upscaler", noted_build)
    settings = EvalSettings(
        (str(_dataset(tmp_path / "data")),), (ModelSpec("sst-light-291"),), scales=(2, 3), options=CPU
    )
    results = run_evaluation(settings)
    assert [(r.model, r.scale, r.n_images) for r in results] == [("sst-light-291", 2, 2), ("sst-light-291", 3, 2)]
    assert found_at_build[0] == [("sst-light-291", 2), ("sst-light-291", 3)]
    assert looked_up == [("sst-light-291", 2), ("sst-light-291", 3)]


def test_a_spec_fetched_at_one_scale_and_copied_at_another_looks_again(looked_up: list[tuple[str, int]]) -> None:
    """``replace(spec, scale=3)`` of a spec fetched at x2 kept the x2 file: loaded as x3, it was refused and the
    good x2 file removed from the cache as damaged."""
    x2 = ModelSpec("sst-light-291", 2).fetched("sst-light-291", 4)
    x3 = replace(x2, scale=3)
    assert x3.fetched("sst-light-291", 4) is not x3  # looked for again, at x3
    network = x3.load("sst-light-291", 4, device=torch.device("cpu"), dtype=torch.float32)
    assert network.scale == 3
    assert x2.fetched("sst-light-291", 4) is x2  # found already
    assert looked_up == [("sst-light-291", 2), ("sst-light-291", 3), ("sst-light-291", 3)]


def test_eval_of_weights_at_two_scales_says_which_scale_ran(tmp_path: Path) -> None:
    x2 = tiny_weights(tmp_path / "tiny_x2.safetensors", 1)
    torch.manual_seed(3)
    x3 = tmp_path / "tiny_x3.safetensors"
    config = replace(TINY, upscaling_factor=3)
    save_file(SST(**config.to_kwargs()).state_dict(), str(x3), metadata={"sst_config": json.dumps(config.to_kwargs())})
    data = _dataset(tmp_path / "mine")
    result = runner.invoke(
        app, ["eval", "-d", str(data), "--weights", str(x2), "--weights", str(x3), "--device", "cpu"]
    )
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert (
        "the weights are for x3 but x2 was requested; they need --scale 3 (without --scale every model runs at the "
        "first weights' x2)" in text
    )


def test_sst_eval_report_with_two_models_and_bicubic(tmp_path: Path) -> None:
    a, b = tiny_weights(tmp_path / "tiny_a.safetensors", 1), tiny_weights(tmp_path / "tiny_b.safetensors", 2)
    data = _dataset(tmp_path / "mine")
    args = ["eval", "-d", str(data), "--weights", str(a), "--weights", str(b), "--model", "bicubic"]
    result = runner.invoke(app, [*args, "--device", "cpu", "--report", "rep", "--json", "r.json", "-q"])
    assert result.exit_code == 0, result.output
    assert "report: rep/index.html" in result.output and "tiny_b" in result.output
    scores = {(r["model"], s["name"]): s["psnr_y"] for r in json.loads(Path("r.json").read_text())["results"]
              for s in r["images"]}  # fmt: skip
    report = json.loads(Path("rep/report.json").read_text())
    assert report["methods"] == ["LR", "bicubic", "tiny_a", "tiny_b", "HR"]
    assert report["title"] == "bicubic, tiny_a, tiny_b on mine"  # the dataset's name, not the path to it
    html = Path("rep/index.html").read_text()
    assert str(tmp_path) not in html
    for image in report["images"]:
        for label in ("bicubic", "tiny_a", "tiny_b"):
            assert image["psnr_y"][label] == pytest.approx(scores[(label, image["name"])], abs=1e-6)
            assert f">{scores[(label, image['name'])]:.2f}<" in html
        assert image["crop_output_px"][2] == 2 * image["crop_input_px"][2]
    # Again, error-placed: the report is replaced; an unknown placement or a crop without report is refused.
    again = runner.invoke(app, ["eval", "-d", str(data), "--model", "bicubic", "--report", "rep", "-q",
                                "--crop-by", "error"])  # fmt: skip
    assert again.exit_code == 0, again.output
    assert json.loads(Path("rep/report.json").read_text())["methods"] == ["LR", "bicubic", "HR"]
    bad = runner.invoke(app, ["eval", "-d", str(data), "--model", "bicubic", "--crop", "0,0,8,8"])
    assert bad.exit_code == 2 and "give --report DIR too" in bad.output


def test_sheet_labels_fit_their_tile_and_accents_are_drawn() -> None:
    from PIL import ImageFont

    from sst_cli.report import sheet

    font = sheet._font(16)
    long = "my weights, iteration 200000, EMA, final.safetensors"
    cut = sheet.fitted(long, font, 120)
    assert cut.endswith("…") and font.getlength(cut) <= 120 and long.startswith(cut[:-1])  # ran over the next tile
    assert sheet.fitted("sst-l+", font, 120) == "sst-l+"
    installed = []
    for name in sheet.UNICODE_FONTS:
        with contextlib.suppress(OSError):
            installed.append(ImageFont.truetype(name, 16))
    if not installed:
        pytest.skip(f"none of {', '.join(sheet.UNICODE_FONTS)} is installed: the sheet falls back to ASCII-only")

    def glyph(text: str) -> bytes:
        return bytes(font.getmask(text))

    assert glyph("é") != glyph("\U0010fffd")  # a letter, not the box of a missing glyph ("caf□")


def test_sheet_of_a_report_without_models(tmp_path: Path) -> None:
    lr, bic, _, hr = _frames(3)
    report = ReportBuilder(tmp_path, title="t", models=[], ground_truth=True)
    report.add_image("k", "only", scale=2, lr=lr, bicubic=bic, hr=hr, bicubic_score=Score(20.0, 0.5))
    report.finish()
    sheet = write_sheet(report, tmp_path / "s.png")
    width = Image.open(sheet).width
    tiles = 3  # LR | bicubic | HR
    side = json.loads((tmp_path / "report.json").read_text())["images"][0]["crop_output_px"][2]
    assert width == 2 * 12 + tiles * side * round(256 / side) + (tiles - 1) * 8


def test_a_staging_folder_a_killed_run_left_is_removed_by_the_next_report(tmp_path: Path) -> None:
    import os
    import time

    stale = tmp_path / ".r.0123abcd.sst-tmp"
    (stale / "images").mkdir(parents=True)
    (stale / "images" / "big.png").write_bytes(b"x" * 1000)
    old = time.time() - 600
    os.utime(stale, (old, old))
    _build(tmp_path / "r")
    assert not stale.exists() and (tmp_path / "r" / "index.html").is_file()


def test_compare_keeps_a_png_another_run_wrote_meanwhile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two `sst compare --png side.png` at once: the later silently replaced the earlier's sheet, both exiting 0."""
    from sst_cli.report import sheet

    a = tiny_weights(tmp_path / "tiny_a.safetensors", 1)
    Image.fromarray(pattern(40, 48, 1)).save(tmp_path / "photo.png")
    original = sheet.render_sheet

    def racing(report: object) -> object:
        Path("side.png").write_text("theirs")  # another run, meanwhile
        return original(report)  # type: ignore[arg-type]

    monkeypatch.setattr(sheet, "render_sheet", racing)
    args = ["compare", "photo.png", "--weights", str(a), "--device", "cpu", "-q", "--png", "side.png"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "written while this run worked" in result.output, result.output
    assert Path("side.png").read_text() == "theirs"
