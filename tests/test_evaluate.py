"""The eval API: dataset discovery, pair checks, the SR wrappers and the bicubic baselines of the literature."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import DATASETS, needs_datasets
from PIL import Image

from sst_cli.errors import ConfigError, ImageError
from sst_cli.evaluate import (
    Dataset,
    bicubic,
    check_pairs,
    dihedral,
    evaluate_dataset,
    find_dataset,
    load_pair,
    network_sr,
)
from sst_cli.metrics import psnr_ssim_y

RNG = np.random.default_rng(3)

# The literature's bicubic baselines (issue #4): PSNR, SSIM on Y. B100 is tested at x4 only (100 images per
# scale take a while); `sst eval --model bicubic -d B100` reproduces x2 and x3 as well.
LITERATURE = {
    ("Set5", 2): (33.66, 0.9299),
    ("Set5", 3): (30.39, 0.8682),
    ("Set5", 4): (28.42, 0.8104),
    ("Set14", 2): (30.24, 0.8688),
    ("Set14", 3): (27.55, 0.7742),
    ("Set14", 4): (26.00, 0.7027),
    ("B100", 2): (29.56, 0.8431),
    ("B100", 3): (27.21, 0.7385),
    ("B100", 4): (25.96, 0.6675),
}


def _save(path: Path, values: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(values).save(path)


def _dataset(root: Path, sizes: dict[str, tuple[int, int]], lr: dict[str, str] | None = None, scale: int = 2) -> Path:
    """A folder in the EDSR layout; ``lr`` maps an HR stem to the LR file name to write for it."""
    for stem, (w, h) in sizes.items():
        _save(root / "HR" / f"{stem}.png", RNG.integers(0, 256, (h, w, 3), dtype=np.uint8))
        if lr and stem in lr:
            small = RNG.integers(0, 256, (h // scale, w // scale, 3), dtype=np.uint8)
            _save(root / "LR_bicubic" / f"X{scale}" / lr[stem], small)
    return root


# ----------------------------------------------------------------------------------------- datasets
def test_find_dataset_by_folder_name_alias_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _dataset(tmp_path / "BSD100", {"a": (8, 8)})
    by_path = find_dataset(str(tmp_path / "BSD100"))
    assert by_path.name == "B100" and [p.name for p in by_path.hr_files] == ["a.png"]
    assert find_dataset("b100", tmp_path).root == tmp_path / "BSD100"
    monkeypatch.setenv("SST_DATA_ROOT", str(tmp_path))
    assert find_dataset("B100").root == tmp_path / "BSD100"


def test_find_dataset_errors_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SST_DATA_ROOT", raising=False)
    with pytest.raises(ConfigError, match="neither a folder nor a known name"):
        find_dataset("Set99")
    with pytest.raises(ConfigError, match="--data-root"):
        find_dataset("Set5")
    with pytest.raises(ConfigError, match=rf"Urban100 not found in --data-root '{tmp_path}': no folder .*Urban100$"):
        find_dataset("urban100", tmp_path)
    with pytest.raises(ConfigError, match=r"B100 not found in .*: none of .*B100, .*BSD100, .*BSDS100 is a folder"):
        find_dataset("B100", tmp_path)
    # the root itself is what is wrong: said so, not "none of <root>/Set5 is a folder"
    with pytest.raises(ConfigError, match=rf"--data-root '{tmp_path / 'gone'}' does not exist: it should be the"):
        find_dataset("Set5", tmp_path / "gone")
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("SST_DATA_ROOT", str(tmp_path / "afile"))
    with pytest.raises(ConfigError, match=r"SST_DATA_ROOT '.*afile' is not a folder: it should be the folder holding"):
        find_dataset("Set5")
    monkeypatch.delenv("SST_DATA_ROOT")
    (tmp_path / "noHR").mkdir()
    with pytest.raises(ConfigError, match="has no HR/ folder"):
        find_dataset(str(tmp_path / "noHR"))
    (tmp_path / "empty" / "HR").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no images"):
        find_dataset(str(tmp_path / "empty"))


@pytest.mark.parametrize("name", ["ax2.png", "a_x2.png", "a.png"])
def test_lr_file_naming_conventions(tmp_path: Path, name: str) -> None:
    root = _dataset(tmp_path / "ds", {"a": (8, 6)}, lr={"a": name})
    ds = find_dataset(str(root))
    assert ds.lr_file(ds.hr_files[0], 2) == root / "LR_bicubic" / "X2" / name
    assert ds.lr_file(ds.hr_files[0], 3) is None


def test_an_lr_folder_missing_one_file_is_refused_not_filled_with_bicubic(tmp_path: Path) -> None:
    """The protocol of a set with LR files is theirs: making one LR ourselves mixed two protocols silently."""
    root = _dataset(tmp_path / "ds", {"a": (20, 20), "b": (20, 20)}, lr={"a": "ax2.png"})
    with pytest.raises(ImageError, match=r"X2' has no LR file for 'b\.png' \(looked for bx2, b_x2 or b,"):
        check_pairs(find_dataset(str(root)), 2)
    check_pairs(find_dataset(str(root)), 3)  # no X3 folder: every LR is made with MATLAB bicubic


def test_hidden_files_in_hr_are_left_out(tmp_path: Path) -> None:
    """macOS's ._a.png beside a.png stopped the whole evaluation ("cannot read ... ._a.png")."""
    root = _dataset(tmp_path / "ds", {"a": (8, 6)})
    (root / "HR" / "._a.png").write_bytes(b"\x00\x05\x16\x07 resource fork")
    assert [p.name for p in find_dataset(str(root)).hr_files] == ["a.png"]


def test_a_gray_hr_takes_the_luma_of_a_colour_lr(tmp_path: Path) -> None:
    """A gray HR paired with a colour LR file was scored on the LR's red channel."""
    root = tmp_path / "ds"
    _save(root / "HR" / "a.png", RNG.integers(0, 256, (20, 20), dtype=np.uint8))
    colour = RNG.integers(0, 256, (10, 10, 3), dtype=np.uint8)
    _save(root / "LR_bicubic" / "X2" / "ax2.png", colour)
    _, lr = load_pair(find_dataset(str(root)), root / "HR" / "a.png", 2)
    luma = colour @ np.array([0.299, 0.587, 0.114])
    assert lr.shape == (10, 10) and np.abs(lr - luma).max() <= 0.5 + 1e-9


def test_mismatched_lr_is_refused_naming_the_file(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", {"a": (20, 20)})
    _save(root / "LR_bicubic" / "X2" / "ax2.png", np.zeros((9, 10, 3), np.uint8))
    ds = find_dataset(str(root))
    with pytest.raises(ImageError, match=r"ax2\.png' is 10x9.*needs 10x10"):
        check_pairs(ds, 2)


def test_an_hr_turned_by_its_exif_is_checked_upright(tmp_path: Path) -> None:
    """The pair check compared an EXIF-turned HR's stored sides with its upright LR and refused a good pair (or
    passed a bad one that then failed midway); it checks the picture as it is scored."""
    root = tmp_path / "ds"
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 40 wide and 24 high: 24 wide and 40 high upright
    (root / "HR").mkdir(parents=True)
    Image.fromarray(RNG.integers(0, 256, (24, 40, 3), dtype=np.uint8)).save(root / "HR" / "a.png", exif=exif)
    _save(root / "LR_bicubic" / "X2" / "ax2.png", RNG.integers(0, 256, (20, 12, 3), dtype=np.uint8))
    check_pairs(find_dataset(str(root)), 2)
    hr, lr = load_pair(find_dataset(str(root)), root / "HR" / "a.png", 2)
    assert hr.shape[:2] == (40, 24) and lr.shape[:2] == (20, 12)


def test_unreadable_or_tiny_hr_is_refused_naming_the_file(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", {"a": (16, 16)})
    (root / "HR" / "b.png").write_bytes(b"not a png")
    with pytest.raises(ImageError, match=r"b\.png"):
        check_pairs(find_dataset(str(root)), 2)
    (root / "HR" / "b.png").unlink()
    check_pairs(find_dataset(str(root)), 2)
    with pytest.raises(
        ImageError,
        match=r"a\.png' is 16x16, 15x15 once cropped to a multiple of 3: too small to "
        r"score at x3 \(needs 17 px on each side\)",
    ):  # it said "16x16 ... needs 17 px"
        check_pairs(find_dataset(str(root)), 3)
    with pytest.raises(ImageError, match=r"a\.png' is 16x16: too small to score at x4 \(needs 19 px on each side\)"):
        check_pairs(find_dataset(str(root)), 4)


def test_missing_lr_is_made_with_matlab_bicubic(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", {"a": (13, 11)})
    ds = find_dataset(str(root))
    hr, lr = load_pair(ds, ds.hr_files[0], 3)
    assert hr.shape == (9, 12, 3) and lr.shape == (3, 4, 3) and lr.dtype == np.uint8


@needs_datasets
def test_generated_lr_equals_the_shared_lr_files() -> None:
    ds = find_dataset(str(DATASETS / "Set14"))
    without_lr = Dataset(ds.name, Path("/nonexistent"), ds.hr_files)
    for hr_path in ds.hr_files[:4]:
        _, stored = load_pair(ds, hr_path, 4)
        _, made = load_pair(without_lr, hr_path, 4)
        assert np.array_equal(stored, made), hr_path.name


# ---------------------------------------------------------------------------------- SR functions
@pytest.mark.parametrize("index", range(8))
def test_dihedral_inverse(index: int) -> None:
    x = torch.arange(2 * 3 * 5, dtype=torch.float32).reshape(2, 3, 5)
    assert torch.equal(dihedral(dihedral(x, index), index, inverse=True), x)


def test_the_eight_transforms_are_distinct() -> None:
    x = torch.arange(9, dtype=torch.float32).reshape(1, 3, 3)
    assert len({tuple(dihedral(x, i).flatten().tolist()) for i in range(8)}) == 8


def _nearest(scale: int):
    return lambda x: F.interpolate(x[None], scale_factor=scale, mode="nearest")[0]


def test_network_sr_gray_rgb_and_self_ensemble() -> None:
    gray = RNG.integers(0, 256, (5, 7), dtype=np.uint8)
    out = network_sr(_nearest(2))(gray, 2)
    assert out.dtype == np.uint8 and np.array_equal(out, gray.repeat(2, 0).repeat(2, 1))
    rgb = RNG.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    # Nearest upscaling commutes with flips and rotations, so the ensemble changes nothing ...
    assert np.array_equal(network_sr(_nearest(2), self_ensemble=True)(rgb, 2), rgb.repeat(2, 0).repeat(2, 1))

    # ... while a network that is not equivariant gets averaged over the 8 transforms.
    def shift(x: torch.Tensor) -> torch.Tensor:
        return torch.roll(_nearest(2)(x), 1, dims=-1)

    assert not np.array_equal(network_sr(shift, self_ensemble=True)(rgb, 2), network_sr(shift)(rgb, 2))


def test_evaluate_dataset_scores_and_saves(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", {"a": (32, 28), "b": (26, 30)})
    ds = find_dataset(str(root))
    seen = []
    result = evaluate_dataset(bicubic, ds, 2, "bicubic", rgb=True, save_dir=tmp_path / "out", on_image=seen.append)
    assert [s.name for s in result.images] == ["a", "b"] == [s.name for s in seen]
    saved = np.asarray(Image.open(tmp_path / "out" / "ds" / "x2" / "a.png"))
    assert saved.shape == (28, 32, 3)
    hr = np.asarray(Image.open(root / "HR" / "a.png"))
    assert result.images[0].psnr_y == pytest.approx(psnr_ssim_y(saved, hr, border=2)[0])  # scores what it saved
    assert result.psnr_y == pytest.approx((result.images[0].psnr_y + result.images[1].psnr_y) / 2)
    assert result.n_images == 2 and result.mean("ssim_rgb") is not None
    d = result.to_dict()
    assert set(d) >= {"dataset", "scale", "model", "psnr_y", "ssim_y", "n_images", "images"}
    assert set(d["images"][0]) >= {"name", "psnr_y", "ssim_y"}


# --------------------------------------------------------------------------------- the baselines
@needs_datasets
@pytest.mark.parametrize(("name", "scale"), [k for k in sorted(LITERATURE) if k[0] != "B100" or k[1] == 4])
def test_bicubic_reproduces_the_literature(name: str, scale: int) -> None:
    result = evaluate_dataset(bicubic, find_dataset(name, DATASETS), scale, "bicubic")
    psnr, ssim = LITERATURE[(name, scale)]
    assert abs(result.psnr_y - psnr) <= 0.02, result.psnr_y
    assert abs(result.ssim_y - ssim) <= 0.001, result.ssim_y


@needs_datasets
def test_gray_bridge_is_scored_on_its_gray_values() -> None:
    """Set14 bridge is stored gray; converting it to RGB first would add 20 log10(255/219) = 1.32 dB."""
    ds = find_dataset("Set14", DATASETS)
    bridge = Dataset(ds.name, ds.root, tuple(p for p in ds.hr_files if p.stem == "bridge"))
    hr, lr = load_pair(bridge, bridge.hr_files[0], 2)
    assert hr.ndim == 2 and lr.ndim == 2
    score = evaluate_dataset(bicubic, bridge, 2, "bicubic").images[0]
    assert 25.0 < score.psnr_y < 27.5  # about 26.6 dB; the RGB detour would give about 27.9
