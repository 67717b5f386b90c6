"""PSNR and SSIM exactly as SR papers measure them, so numbers compare with published tables.

The protocol: HR is modcropped to a multiple of the scale; SR output and HR are uint8 RGB images.
Both go to the luma channel Y of BT.601 studio range (MATLAB ``rgb2ycbcr`` on doubles, not rounded);
gray images are their own Y. ``scale`` pixels are shaved from every border of both (the "border"),
then PSNR = 10 log10(255^2 / MSE) on the float64 Y values, and SSIM (Wang et al. 2004) with an 11x11
Gaussian window of sigma 1.5, C1 = (0.01 * 255)^2, C2 = (0.03 * 255)^2, filtered without padding
('valid'), averaged over the map. Everything is float64.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ConfigError

__all__ = ["SSIM_WINDOW", "modcrop", "psnr", "psnr_ssim_y", "shave", "ssim", "to_y"]

SSIM_WINDOW = 11
_SIGMA = 1.5
_C1 = (0.01 * 255) ** 2
_C2 = (0.03 * 255) ** 2


def modcrop(image: np.ndarray, scale: int) -> np.ndarray:
    """Crop bottom/right so H and W are multiples of ``scale``: HR then matches an LR made by 1/scale."""
    if isinstance(scale, bool) or not isinstance(scale, (int, np.integer)) or scale < 1:
        raise ConfigError(f"modcrop scale must be a positive integer, got {scale!r}")
    _check_image(image, "modcrop")
    height, width = image.shape[0], image.shape[1]
    return image[: height - height % scale, : width - width % scale]


def shave(image: np.ndarray, border: int) -> np.ndarray:
    """Remove ``border`` pixels from every side: borders depend on how a method pads, so they are not scored."""
    if isinstance(border, bool) or not isinstance(border, (int, np.integer)) or border < 0:
        raise ConfigError(f"border must be a non-negative integer, got {border!r}")
    _check_image(image, "shave")
    height, width = image.shape[0], image.shape[1]
    if 2 * border >= min(height, width):
        raise ConfigError(f"cannot shave {border} pixels from each side of a {height}x{width} image")
    if border == 0:
        return image
    return image[border : height - border, border : width - border]


def to_y(image: np.ndarray) -> np.ndarray:
    """float64 luma (16..235) of a uint8 RGB image, or the values of a uint8 gray image.

    Gray images are used as they are, as the MATLAB evaluation scripts behind published numbers do:
    expanding gray to RGB first and applying the formula would map 0..255 to 16..235 and so raise PSNR
    by 20 log10(255/219) = 1.32 dB (that is what tools reading every image as RGB report for Set14 bridge).
    """
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        kind = image.dtype if isinstance(image, np.ndarray) else type(image).__name__
        raise ConfigError(f"to_y needs a uint8 image, got {kind}")
    if image.ndim == 2:
        return image.astype(np.float64)
    if image.ndim == 3 and image.shape[2] == 1:
        return image[..., 0].astype(np.float64)
    if image.ndim == 3 and image.shape[2] == 3:
        rgb = image.astype(np.float64)
        return 16.0 + (65.481 * rgb[..., 0] + 128.553 * rgb[..., 1] + 24.966 * rgb[..., 2]) / 255.0
    raise ConfigError(f"to_y needs an (H, W), (H, W, 1) or (H, W, 3) image, got shape {image.shape}")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB for values on the 0..255 scale; inf when the images are identical."""
    x, y = _pair(a, b, "psnr")
    mse = float(np.mean((x - y) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM of two 2D images on the 0..255 scale (Gaussian 11x11, sigma 1.5, no padding)."""
    x, y = _pair(a, b, "ssim")
    if x.ndim != 2:
        raise ConfigError(f"ssim needs 2D (H, W) images, got shape {x.shape}")
    if min(x.shape) < SSIM_WINDOW:
        side = SSIM_WINDOW
        raise ConfigError(f"ssim needs images of at least {side}x{side} pixels, got {x.shape[0]}x{x.shape[1]}")
    # Filter the five moment images in one go: mean of a, mean of b, and the means of a^2, b^2, ab.
    stats = _filter_valid(np.stack([x, y, x * x, y * y, x * y]))
    mu_x, mu_y = stats[0], stats[1]
    mu_xx, mu_yy, mu_xy = mu_x * mu_x, mu_y * mu_y, mu_x * mu_y
    var_x, var_y, cov = stats[2] - mu_xx, stats[3] - mu_yy, stats[4] - mu_xy
    ssim_map = ((2 * mu_xy + _C1) * (2 * cov + _C2)) / ((mu_xx + mu_yy + _C1) * (var_x + var_y + _C2))
    return float(ssim_map.mean())


def psnr_ssim_y(sr: np.ndarray, hr: np.ndarray, border: int) -> tuple[float, float]:
    """(PSNR, SSIM) on Y with ``border`` pixels shaved: the whole benchmark protocol for two uint8 images."""
    for name, image in (("sr", sr), ("hr", hr)):
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
            kind = image.dtype if isinstance(image, np.ndarray) else type(image).__name__
            raise ConfigError(f"psnr_ssim_y needs uint8 images, {name} is {kind}")
    if sr.shape != hr.shape:
        raise ConfigError(f"SR and HR shapes differ: {sr.shape} and {hr.shape} (modcrop HR to the scale?)")
    y_sr, y_hr = shave(to_y(sr), border), shave(to_y(hr), border)
    return psnr(y_sr, y_hr), ssim(y_sr, y_hr)


def _gaussian() -> np.ndarray:
    """The normalised 1D Gaussian; its outer product is MATLAB's fspecial('gaussian', 11, 1.5)."""
    offsets = np.arange(SSIM_WINDOW, dtype=np.float64) - (SSIM_WINDOW - 1) / 2
    taps = np.exp(-(offsets**2) / (2 * _SIGMA**2))
    return taps / taps.sum()


_TAPS = _gaussian()


def _filter_valid(stack: np.ndarray) -> np.ndarray:
    """Separable 'valid' Gaussian filtering of (N, H, W): a weighted sum of shifted views per axis."""
    height, width = stack.shape[1] - SSIM_WINDOW + 1, stack.shape[2] - SSIM_WINDOW + 1
    rows = _TAPS[0] * stack[:, :height]
    for k in range(1, SSIM_WINDOW):
        rows += _TAPS[k] * stack[:, k : k + height]
    out = _TAPS[0] * rows[:, :, :width]
    for k in range(1, SSIM_WINDOW):
        out += _TAPS[k] * rows[:, :, k : k + width]
    return out


def _check_image(image: np.ndarray, what: str) -> None:
    """modcrop and shave work on (H, W) or (H, W, C) arrays."""
    if not isinstance(image, np.ndarray) or image.ndim not in (2, 3):
        shape = image.shape if isinstance(image, np.ndarray) else type(image).__name__
        raise ConfigError(f"{what} needs an (H, W) or (H, W, C) array, got {shape}")


def _pair(a: np.ndarray, b: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Both as float64 arrays of one shape, or a ConfigError naming the two shapes."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ConfigError(f"{what} needs images of the same shape, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise ConfigError(f"{what} needs non-empty images")
    return x, y
