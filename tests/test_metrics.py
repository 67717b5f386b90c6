"""The SR evaluation protocol: SSIM checked against two independent implementations, PSNR and Y by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import DATASETS, needs_datasets
from PIL import Image

from sst_cli.errors import ConfigError
from sst_cli.metrics import modcrop, psnr, psnr_ssim_y, shave, ssim, to_y
from sst_cli.resize import imresize


def _skimage_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """skimage filters with padding then averages the map cropped by the radius (5): our 'valid' mean."""
    skimage_metrics = pytest.importorskip("skimage.metrics")  # in the test extra
    return float(
        skimage_metrics.structural_similarity(
            a, b, data_range=255, gaussian_weights=True, sigma=1.5, use_sample_covariance=False
        )
    )


def _torch_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Textbook SSIM with a 2D float64 conv2d, written independently of the module."""
    offsets = torch.arange(11, dtype=torch.float64) - 5
    window = torch.exp(-(offsets[:, None] ** 2 + offsets[None, :] ** 2) / (2 * 1.5**2))
    window = (window / window.sum())[None, None]
    x = torch.from_numpy(a)[None, None]
    y = torch.from_numpy(b)[None, None]

    def blur(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(t, window)

    mu_x, mu_y = blur(x), blur(y)
    var_x = blur(x * x) - mu_x**2
    var_y = blur(y * y) - mu_y**2
    cov = blur(x * y) - mu_x * mu_y
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    ssim_map = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    return float(ssim_map.mean())


def _noisy_pair(shape: tuple[int, int], seed: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    smooth = np.cumsum(np.cumsum(rng.normal(size=shape), axis=0), axis=1)
    a = (smooth - smooth.min()) / np.ptp(smooth) * 255
    return a, np.clip(a + rng.normal(0, noise, shape), 0, 255)


def _set5_bicubic_pair(name: str, scale: int) -> tuple[np.ndarray, np.ndarray]:
    hr = modcrop(np.asarray(Image.open(DATASETS / "Set5" / "HR" / f"{name}.png")), scale)
    return imresize(imresize(hr, 1 / scale), float(scale)), hr


# ------------------------------------------------------------------------------------------------- SSIM


@pytest.mark.parametrize(("shape", "seed", "noise"), [((64, 64), 0, 10.0), ((37, 90), 1, 40.0), ((11, 15), 2, 5.0)])
def test_ssim_matches_skimage_and_torch(shape: tuple[int, int], seed: int, noise: float) -> None:
    a, b = _noisy_pair(shape, seed, noise)
    value = ssim(a, b)
    assert 0 < value < 1
    assert value == pytest.approx(_skimage_ssim(a, b), abs=1e-10)
    assert value == pytest.approx(_torch_ssim(a, b), abs=1e-10)


def test_ssim_on_uniform_noise_matches_skimage() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random((50, 40)) * 255, rng.random((50, 40)) * 255
    assert ssim(a, b) == pytest.approx(_skimage_ssim(a, b), abs=1e-10)


@needs_datasets
def test_ssim_matches_references_on_a_real_pair() -> None:
    sr, hr = _set5_bicubic_pair("butterfly", 4)
    y_sr, y_hr = shave(to_y(sr), 4), shave(to_y(hr), 4)
    value = ssim(y_sr, y_hr)
    assert value == pytest.approx(_skimage_ssim(y_sr, y_hr), abs=1e-10)
    assert value == pytest.approx(_torch_ssim(y_sr, y_hr), abs=1e-10)


def test_ssim_of_identical_images_is_one() -> None:
    a, _ = _noisy_pair((30, 30), 4, 1.0)
    assert ssim(a, a) == pytest.approx(1.0, abs=1e-12)


# ------------------------------------------------------------------------------------------------- PSNR


@pytest.mark.parametrize("offset", [1.0, 5.0, 16.0])
def test_psnr_of_constant_offset(offset: float) -> None:
    a = np.random.default_rng(6).random((20, 30)) * 200
    assert psnr(a + offset, a) == pytest.approx(10 * math.log10(255**2 / offset**2), abs=1e-9)


def test_psnr_by_hand() -> None:
    a = np.zeros((2, 2))
    b = np.array([[0.0, 0.0], [0.0, 2.0]])  # MSE = 4 / 4 = 1
    assert psnr(a, b) == pytest.approx(20 * math.log10(255), abs=1e-12)
    assert psnr(a, a) == math.inf


# ----------------------------------------------------------------------------------------------- colour


def test_to_y_known_values() -> None:
    pixels = np.array([[[255, 255, 255], [0, 0, 0], [255, 0, 0], [0, 255, 0], [0, 0, 255]]], np.uint8)
    y = to_y(pixels)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y[0], [235.0, 16.0, 16 + 65.481, 16 + 128.553, 16 + 24.966], rtol=0, atol=1e-12)
    gray_level = to_y(np.full((1, 1, 3), 100, np.uint8))[0, 0]
    assert gray_level == pytest.approx(16 + 100 * 219 / 255, abs=1e-12)  # not rounded


def test_to_y_passes_gray_through() -> None:
    gray = np.random.default_rng(7).integers(0, 256, (6, 5), dtype=np.uint8)
    assert to_y(gray).dtype == np.float64
    assert np.array_equal(to_y(gray), gray)
    assert np.array_equal(to_y(gray[..., None]), gray)


def test_gray_as_rgb_inflates_psnr_by_the_studio_range_ratio() -> None:
    """The documented quirk: R=G=B through the formula squeezes 0..255 into 16..235 (PSNR +1.32 dB)."""
    rng = np.random.default_rng(8)
    a = rng.integers(0, 256, (16, 16), dtype=np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-9, 10, a.shape), 0, 255).astype(np.uint8)
    as_gray = psnr(to_y(a), to_y(b))
    as_rgb = psnr(to_y(np.repeat(a[..., None], 3, 2)), to_y(np.repeat(b[..., None], 3, 2)))
    assert as_rgb - as_gray == pytest.approx(20 * math.log10(255 / 219), abs=1e-9)
    assert 20 * math.log10(255 / 219) == pytest.approx(1.32, abs=0.005)


def test_psnr_ssim_y_composes_the_steps() -> None:
    rng = np.random.default_rng(9)
    hr = rng.integers(0, 256, (40, 36, 3), dtype=np.uint8)
    sr = np.clip(hr.astype(int) + rng.integers(-20, 21, hr.shape), 0, 255).astype(np.uint8)
    y_sr, y_hr = to_y(sr)[3:-3, 3:-3], to_y(hr)[3:-3, 3:-3]
    assert psnr_ssim_y(sr, hr, 3) == (psnr(y_sr, y_hr), ssim(y_sr, y_hr))
    same_psnr, same_ssim = psnr_ssim_y(hr, hr, 0)
    assert same_psnr == math.inf and same_ssim == pytest.approx(1.0, abs=1e-12)


# ------------------------------------------------------------------------------------------ crop, shave


def test_modcrop_and_shave_shapes() -> None:
    image = np.arange(361 * 250 * 3, dtype=np.int64).reshape(361, 250, 3) % 251
    cropped = modcrop(image.astype(np.uint8), 4)
    assert cropped.shape == (360, 248, 3)
    assert np.array_equal(cropped, image[:360, :248])  # bottom/right go, the origin stays
    assert modcrop(np.zeros((229, 344)), 3).shape == (228, 342)
    assert modcrop(np.zeros((12, 12)), 4).shape == (12, 12)
    assert shave(np.zeros((20, 30, 3)), 4).shape == (12, 22, 3)
    assert shave(np.zeros((20, 30)), 0).shape == (20, 30)
    grid = np.arange(25).reshape(5, 5)
    assert np.array_equal(shave(grid, 2), [[12]])


# ----------------------------------------------------------------------------------- bicubic baseline


@needs_datasets
def test_set5_x4_bicubic_baseline() -> None:
    """Published Set5 x4 bicubic: 28.42 dB / 0.8104 (the datasets README measures 28.43 / 0.8111)."""
    names = ["baby", "bird", "butterfly", "head", "woman"]
    scores = np.array([psnr_ssim_y(*_set5_bicubic_pair(name, 4), 4) for name in names])
    mean_psnr, mean_ssim = scores.mean(axis=0)
    assert mean_psnr == pytest.approx(28.42, abs=0.02)
    assert mean_ssim == pytest.approx(0.8104, abs=0.001)


# ----------------------------------------------------------------------------------------------- errors


def test_errors() -> None:
    rgb = np.zeros((20, 20, 3), np.uint8)
    with pytest.raises(ConfigError, match=r"\(20, 20, 3\) and \(20, 24, 3\)"):
        psnr_ssim_y(rgb, np.zeros((20, 24, 3), np.uint8), 2)
    with pytest.raises(ConfigError, match="uint8"):
        psnr_ssim_y(rgb.astype(np.float32), rgb, 2)
    with pytest.raises(ConfigError, match="uint8"):
        to_y(np.zeros((4, 4, 3), np.float64))
    with pytest.raises(ConfigError, match="shape"):
        to_y(np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(ConfigError, match="shape"):
        to_y(np.zeros(4, np.uint8))
    with pytest.raises(ConfigError, match="same shape"):
        psnr(np.zeros((4, 4)), np.zeros((4, 5)))
    with pytest.raises(ConfigError, match="2D"):
        ssim(np.zeros((20, 20, 3)), np.zeros((20, 20, 3)))
    with pytest.raises(ConfigError, match="at least 11x11"):
        ssim(np.zeros((10, 40)), np.zeros((10, 40)))
    with pytest.raises(ConfigError, match="positive integer"):
        modcrop(rgb, 0)
    with pytest.raises(ConfigError, match="non-negative"):
        shave(rgb, -1)
    with pytest.raises(ConfigError, match="cannot shave 10"):
        shave(rgb, 10)
    with pytest.raises(ConfigError, match=r"\(H, W\) or \(H, W, C\)"):
        modcrop(np.zeros(5), 2)
