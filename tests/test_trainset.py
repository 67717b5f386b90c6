"""The device-side patch sampler against a plain numpy reference: same crops, flips and LR, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import lock
from PIL import Image

from sst_cli.errors import ConfigError
from sst_cli.resize import imresize
from sst_cli.trainset import PatchSampler, find_images, large_enough

pytestmark = pytest.mark.usefixtures("one_thread")


def _images() -> list[np.ndarray]:
    """Random uint8 pictures of different sizes (tall, wide, exactly the patch), so offsets and widths matter."""
    rng = np.random.default_rng(3)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((21, 34), (40, 17), (16, 16), (30, 30))]


def _reference(images: list[np.ndarray], params: list[int], size: int) -> np.ndarray:
    """The straightforward crop: slice, flip left-right, flip up-down, then transpose (H, W, 3)."""
    index, top, left, hflip, vflip, transpose = params
    crop = images[index][top : top + size, left : left + size]
    if hflip:
        crop = crop[:, ::-1]
    if vflip:
        crop = crop[::-1]
    if transpose:
        crop = crop.transpose(1, 0, 2)
    return np.ascontiguousarray(crop)


def test_device_crops_equal_the_numpy_reference_for_every_orientation() -> None:
    images = _images()
    sampler = PatchSampler(images, patch=4, scale=4, seed=5, device=torch.device("cpu"))
    params = sampler.draw(400)
    assert params.dtype == torch.int64 and params.shape == (400, 6) and params.device.type == "cpu"
    rows = params.tolist()
    hr = sampler.cut(params)
    assert hr.dtype == torch.uint8 and hr.shape == (400, 3, 16, 16)
    for row, got in zip(rows, hr, strict=True):
        want = _reference(images, row, 16)
        assert np.array_equal(got.permute(1, 2, 0).numpy(), want), row
    # Every image, every corner that fits (the 16x16 image has exactly one) and all 8 orientations are drawn.
    assert {r[0] for r in rows} == {0, 1, 2, 3}
    assert {tuple(r[3:]) for r in rows} == {(h, v, t) for h in (0, 1) for v in (0, 1) for t in (0, 1)}
    for index, top, left, *_ in rows:
        h, w = images[index].shape[:2]
        assert 0 <= top <= h - 16 and 0 <= left <= w - 16
    assert max(r[1] for r in rows if r[0] == 1) == 40 - 16 and max(r[2] for r in rows if r[0] == 0) == 34 - 16


def test_sample_pairs_are_the_matlab_bicubic_of_the_crop_and_follow_the_generator() -> None:
    images = _images()
    a = PatchSampler(images, patch=4, scale=3, seed=9, device=torch.device("cpu"))
    b = PatchSampler(images, patch=4, scale=3, seed=9, device=torch.device("cpu"))
    state = a.generator.get_state()
    params = a.draw(6)
    a.generator.set_state(state)
    lr, hr = a.sample(6)
    assert lr.shape == (6, 3, 4, 4) and hr.shape == (6, 3, 12, 12) and lr.dtype == hr.dtype == torch.float32
    for row, lr_one, hr_one in zip(params.tolist(), lr, hr, strict=True):
        want = _reference(images, row, 12)
        assert torch.equal(hr_one, torch.from_numpy(want).permute(2, 0, 1).float() / 255)
        small = imresize(want, size=(4, 4))  # the numpy path: MATLAB imresize of the uint8 crop
        assert torch.equal(lr_one, torch.from_numpy(small).permute(2, 0, 1).float() / 255)
    lr_b, hr_b = b.sample(6)  # the same seed gives the same pairs
    assert torch.equal(lr, lr_b) and torch.equal(hr, hr_b)
    assert not torch.equal(a.sample(6)[1], hr)  # and the stream moves on


def test_images_smaller_than_the_patch_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least 16x16"):
        PatchSampler([np.zeros((15, 40, 3), np.uint8)], patch=8, scale=2, seed=0, device=torch.device("cpu"))


def test_hidden_files_and_folders_are_left_out(tmp_path: Path) -> None:
    """A macOS ._photo.png (metadata, unreadable as an image) stopped the whole run."""
    for name in ("a.png", "sub/b.png", "._a.png", ".cache/c.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert [p.relative_to(tmp_path).as_posix() for p in find_images([tmp_path])] == ["a.png", "sub/b.png"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the crops cut there equal the CPU's")
def test_cuda_crops_equal_cpu_crops() -> None:
    images = _images()
    cpu = PatchSampler(images, patch=4, scale=4, seed=1, device=torch.device("cpu"))
    gpu = PatchSampler(images, patch=4, scale=4, seed=1, device=torch.device("cuda"))
    lr_c, hr_c = cpu.sample(32)
    lr_g, hr_g = gpu.sample(32)
    assert torch.equal(hr_c, hr_g.cpu()) and torch.equal(lr_c, lr_g.cpu())


def test_files_left_out_of_the_data_are_said(tmp_path: Path) -> None:
    """HEIC files and links to nothing were dropped without a word; a folder of HEIC only said 'no images (png,
    jpg, webp, tif, bmp)', leaving out GIF, which is read."""
    for name in ("a.png", "b.HEIC", "c.heic", "d.HEIC", "e.heic", "f.heif", "notes.txt"):
        (tmp_path / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / name).write_bytes(b"")
    (tmp_path / "data" / "gone.png").symlink_to(tmp_path / "nowhere.png")
    said: list[str] = []
    assert find_images([tmp_path / "data"], said.append) == [tmp_path / "data" / "a.png"]
    assert said == [
        f"data {tmp_path / 'data'}: skipped 6 file(s): HEIC is not a format sst-cli reads (convert it to PNG "
        "first): b.HEIC, c.heic, d.HEIC and 1 more; HEIF is not a format sst-cli reads (convert it to PNG first): "
        "f.heif; a link to nothing: gone.png"
    ]
    (tmp_path / "data" / "a.png").unlink()
    with pytest.raises(ConfigError, match=r"no images sst-cli reads \(png, jpeg, webp, tiff, bmp, gif\) in it or "
                       r"below it; skipped 6 file\(s\): HEIC is not"):  # fmt: skip
        find_images([tmp_path / "data"])


def test_a_folder_of_the_training_set_that_cannot_be_entered_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its images were left out without a word: a network trained on part of what was asked for."""
    for name in ("a.png", "locked/b.png"):
        (tmp_path / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / name).write_bytes(b"")
    lock(monkeypatch, str(tmp_path / "data" / "locked"))
    with pytest.raises(ConfigError, match=r"cannot read the folder '.*locked': permission denied; training reads"):
        find_images([tmp_path / "data"])


def test_the_data_folders_are_named_as_their_caller_wrote_them(tmp_path: Path) -> None:
    """``train(TrainConfig(data=...))`` was told about ``--data`` and ``--patch``, options an API caller never
    typed; ``sst train`` (``cli=True``) still says them so."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"^data .*empty: no images sst-cli reads"):
        find_images([empty])
    with pytest.raises(ConfigError, match=r"^--data .*empty: no images sst-cli reads"):
        find_images([empty], cli=True)
    picture = tmp_path / "small.png"
    Image.new("RGB", (8, 8)).save(picture)
    with pytest.raises(ConfigError, match=r"\(the HR patch, patch x scale\) in .*: give a smaller patch$"):
        large_enough([picture], 16)
    with pytest.raises(ConfigError, match=r"\(the HR patch, --patch x scale\) in .*: give a smaller --patch$"):
        large_enough([picture], 16, cli=True)
