"""Where to look: the crop box of a report, placed where the models differ most from bicubic (or err most).

Frames are uint8 arrays as a report shows them: (H, W) gray, (H, W, 3) RGB or (H, W, 4) RGBA. Crop boxes are
kept in input (LR) pixels, so that the same box times the scale cuts the outputs exactly, pixel for pixel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
from PIL import Image

from ..errors import ConfigError
from ..metrics import to_y

CropBy = Literal["difference", "error"]
CROP_BY: tuple[str, ...] = ("difference", "error")
MAX_CROP_LR = 64  # the automatic crop's side, in input pixels, at most ...
MIN_CROP_LR = 8  # ... and at least (unless the image is smaller)
EDGE = 2  # input pixels at each border left out of the placement (padding differs there, not the method)


class CropBox(NamedTuple):
    """A rectangle in input (LR) pixels: left, top, width, height."""

    x: int
    y: int
    width: int
    height: int

    def scaled(self, scale: int) -> CropBox:
        return CropBox(self.x * scale, self.y * scale, self.width * scale, self.height * scale)

    def cut(self, frame: np.ndarray) -> np.ndarray:
        return frame[self.y : self.y + self.height, self.x : self.x + self.width]


def default_side(height: int, width: int) -> int:
    """The automatic crop's side in input pixels: a quarter of the shorter side, within 8..64."""
    short = min(height, width)
    return min(short, max(MIN_CROP_LR, min(MAX_CROP_LR, short // 4)))


def fit_box(box: tuple[int, int, int, int], height: int, width: int) -> CropBox:
    """A requested box moved and shrunk as little as needed to lie inside a ``height`` x ``width`` image."""
    x, y, w, h = box
    if w < 1 or h < 1:
        raise ConfigError(f"a crop needs a positive width and height, got {w}x{h}")
    w, h = min(w, width), min(h, height)
    return CropBox(min(max(0, x), width - w), min(max(0, y), height - h), w, h)


def box_from_output_pixels(box: tuple[int, int, int, int], scale: int) -> tuple[int, int, int, int]:
    """A box given in output (HR) pixels as the input pixels that cover it."""
    x, y, w, h = box
    left, top = x // scale, y // scale
    return left, top, max(1, math.ceil((x + w) / scale) - left), max(1, math.ceil((y + h) / scale) - top)


def luma(frame: np.ndarray) -> np.ndarray:
    """float64 Y of a frame (BT.601 as the metrics use it; gray frames are their own Y; alpha ignored)."""
    return to_y(frame[..., :3] if frame.ndim == 3 else frame)


def alpha_of(frame: np.ndarray) -> np.ndarray | None:
    """The alpha plane of an RGBA frame in [0, 1], or None."""
    return frame[..., 3].astype(np.float64) / 255.0 if frame.ndim == 3 and frame.shape[2] == 4 else None


def change_map(outputs: Sequence[np.ndarray], reference: np.ndarray, scale: int) -> np.ndarray:
    """Per input pixel, how much the outputs differ from ``reference`` (mean |ΔY| summed over each s x s block).

    Transparent pixels count as much as they are visible; two input pixels at the border, where methods differ
    mostly in how they pad, count for nothing.
    """
    ref = luma(reference)
    diff = np.mean([np.abs(luma(out) - ref) for out in outputs], axis=0)
    visible = alpha_of(reference)
    if visible is not None:
        diff *= visible
    border = min(EDGE * scale, diff.shape[0] // 2, diff.shape[1] // 2)
    if border:
        diff[:border], diff[-border:], diff[:, :border], diff[:, -border:] = 0, 0, 0, 0
    h, w = diff.shape[0] // scale, diff.shape[1] // scale
    return diff[: h * scale, : w * scale].reshape(h, scale, w, scale).sum(axis=(1, 3))


def best_box(energy: np.ndarray, height: int, width: int) -> CropBox:
    """The ``height`` x ``width`` window of ``energy`` with the largest sum (the centre when all are equal)."""
    rows, cols = energy.shape
    height, width = min(height, rows), min(width, cols)
    integral = np.zeros((rows + 1, cols + 1))
    integral[1:, 1:] = energy.cumsum(0).cumsum(1)
    below = integral[height:]
    sums = below[:, width:] - integral[:-height, width:] - below[:, :-width] + integral[:-height, :-width]
    if not np.isfinite(sums).all() or sums.max() - sums.min() <= 1e-9 * max(1.0, abs(sums.max())):
        return CropBox((cols - width) // 2, (rows - height) // 2, width, height)
    top, left = np.unravel_index(int(np.argmax(sums)), sums.shape)
    return CropBox(int(left), int(top), width, height)


def choose_crop(
    outputs: Sequence[np.ndarray],
    bicubic: np.ndarray,
    scale: int,
    *,
    hr: np.ndarray | None = None,
    by: CropBy = "difference",
    side: tuple[int, int] | None = None,
) -> CropBox:
    """The crop (in input pixels) where ``outputs`` differ most from ``bicubic``, or, ``by="error"``, where they
    differ most from ``hr`` (the worst error). ``side`` = (width, height) in input pixels; default ``default_side``.
    Without outputs (bicubic alone), bicubic itself is compared with the reference.
    """
    if by not in CROP_BY:
        raise ConfigError(f"crop placement must be one of {', '.join(CROP_BY)}, not {by!r}")
    if by == "error" and hr is None:
        raise ConfigError("placing the crop at the worst error needs ground truth (HR); use difference")
    rows, cols = bicubic.shape[0] // scale, bicubic.shape[1] // scale
    if side is None:
        side = (default_side(rows, cols),) * 2
    if by == "error":
        assert hr is not None
        energy = change_map(list(outputs) or [bicubic], hr, scale)
    else:
        energy = change_map(list(outputs), bicubic, scale) if outputs else np.zeros((rows, cols))
    return best_box(energy, side[1], side[0])


def nearest(frame: np.ndarray, factor: int) -> np.ndarray:
    """Enlarge by an integer factor, every pixel a square: how an LR crop is shown next to the outputs."""
    if factor == 1:
        return frame
    return np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)


def to_pil(frame: np.ndarray) -> Image.Image:
    """A frame as a Pillow image (L, RGB or RGBA)."""
    return Image.fromarray(np.ascontiguousarray(frame))
