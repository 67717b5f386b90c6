"""MATLAB-compatible bicubic ``imresize`` for numpy images and torch batches.

SR benchmarks (Set5, Set14, B100 ...) make their LR inputs with MATLAB ``imresize(hr, 1/s, 'bicubic')`` on
uint8 images, and published PSNR/SSIM numbers depend on reproducing it bit for bit. That needs MATLAB's
exact details: the a = -0.5 cubic kernel widened by 1/scale when shrinking (antialiasing), its pixel-centre
mapping, symmetric (mirror) padding, the dimension with the smaller factor resized first, and, for integer
images, rounding and clipping after *each* one-dimensional pass. Each pass adds its taps one at a time in
float64, in the same order for numpy arrays and torch tensors: a sum whose exact value is within a rounding
error of x.5 then rounds the same way everywhere (a BLAS product's order is its own, and such ties occur).
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache
from typing import NamedTuple, overload

import numpy as np
import torch

from sst_cli.errors import ConfigError

__all__ = ["imresize", "resize_matrix"]

_INT_MAX = {np.dtype(np.uint8): 255.0, np.dtype(np.uint16): 65535.0}
_KERNEL_WIDTH = 4.0  # support of the cubic kernel: [-2, 2]


def _cubic(x: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel with a = -0.5, written as MATLAB writes it (same float rounding)."""
    absx = np.abs(x)
    absx2 = absx * absx
    absx3 = absx2 * absx
    return (1.5 * absx3 - 2.5 * absx2 + 1) * (absx <= 1) + (-0.5 * absx3 + 2.5 * absx2 - 4 * absx + 2) * (
        (absx > 1) & (absx <= 2)
    )


@lru_cache(maxsize=64)
def _taps_bytes(in_size: int, out_size: int, scale: float) -> tuple[bytes, bytes]:
    """MATLAB's contributions: per output pixel, the input pixels it reads and their weights, as bytes."""
    if scale < 1:  # antialiasing: stretch the kernel so it low-passes at the output's Nyquist rate
        width = _KERNEL_WIDTH / scale

        def kernel(x: np.ndarray) -> np.ndarray:
            return scale * _cubic(scale * x)
    else:
        width = _KERNEL_WIDTH
        kernel = _cubic
    x = np.arange(1, out_size + 1, dtype=np.float64)  # MATLAB's 1-based output coordinates
    u = x / scale + 0.5 * (1 - 1 / scale)  # where each output pixel centre falls in the input
    left = np.floor(u - width / 2)
    indices = left[:, None] + np.arange(math.ceil(width) + 2, dtype=np.float64)[None, :]
    weights = kernel(u[:, None] - indices)
    weights = weights / weights.sum(axis=1, keepdims=True)
    # Symmetric boundary: index sequence 1..n, n..1 repeated, i.e. the edge pixel is repeated once.
    mirror = np.concatenate([np.arange(in_size), np.arange(in_size - 1, -1, -1)])
    columns = mirror[np.mod(indices.astype(np.int64) - 1, 2 * in_size)]
    used = np.any(weights != 0, axis=0)  # MATLAB drops the tap columns that are zero for every pixel
    return np.ascontiguousarray(columns[:, used]).tobytes(), np.ascontiguousarray(weights[:, used]).tobytes()


def _taps(in_size: int, out_size: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Read-only (out_size, taps) int64 input indices and float64 weights of one 1-D resize."""
    columns, weights = _taps_bytes(int(in_size), int(out_size), float(scale))
    return (
        np.frombuffer(columns, dtype=np.int64).reshape(out_size, -1),
        np.frombuffer(weights, dtype=np.float64).reshape(out_size, -1),
    )


@lru_cache(maxsize=64)
def _matrix_bytes(in_size: int, out_size: int, scale: float) -> bytes:
    """The taps summed into a dense matrix, as immutable bytes so a caller can never change the cached value."""
    columns, weights = _taps(in_size, out_size, scale)
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    np.add.at(matrix, (np.repeat(np.arange(out_size), columns.shape[1]), columns.ravel()), weights.ravel())
    return matrix.tobytes()


def resize_matrix(in_size: int, out_size: int, scale: float) -> np.ndarray:
    """Read-only (out_size, in_size) float64 matrix M with ``resized = M @ signal`` along one dimension.

    Entries that MATLAB applies as separate taps on a mirrored pixel are summed into one weight. imresize
    itself applies the taps one by one instead (see ``_resize_numpy``). Cached: each call returns a fresh
    view of shared memory.
    """
    if in_size < 1 or out_size < 1 or not scale > 0:
        raise ConfigError(f"resize_matrix needs positive sizes and scale, got {in_size}, {out_size}, {scale}")
    data = _matrix_bytes(int(in_size), int(out_size), float(scale))
    return np.frombuffer(data, dtype=np.float64).reshape(out_size, in_size)


@overload
def imresize(image: np.ndarray, scale: float | None = None, *, size: tuple[int, int] | None = None) -> np.ndarray: ...
@overload
def imresize(
    image: torch.Tensor, scale: float | None = None, *, size: tuple[int, int] | None = None
) -> torch.Tensor: ...
def imresize(
    image: np.ndarray | torch.Tensor, scale: float | None = None, *, size: tuple[int, int] | None = None
) -> np.ndarray | torch.Tensor:
    """Resize like MATLAB ``imresize(image, scale_or_size, 'bicubic')``, antialiasing included.

    numpy images are (H, W) or (H, W, C); tensors are channels-first (..., H, W) with any batch dims.
    Give ``scale`` (output size ``ceil(H*scale), ceil(W*scale)``) or ``size=(out_h, out_w)``, not both.
    That product is floating point (100 px at scale 1.1 gives 111: 110.00000000000001); pass ``size`` then.
    uint8 (and numpy uint16) stay integer and are rounded half away from zero and clipped after each pass,
    as MATLAB does, which is what makes the benchmark LR files reproducible. Float inputs keep their dtype,
    are neither rounded nor clipped, and are computed in float64 (torch: float32 unless given float64).
    """
    if isinstance(image, torch.Tensor):
        if image.ndim < 2:
            raise ConfigError(f"imresize needs a tensor shaped (..., H, W), got shape {tuple(image.shape)}")
        height, width = image.shape[-2], image.shape[-1]
    elif isinstance(image, np.ndarray):
        if image.ndim not in (2, 3):
            raise ConfigError(f"imresize needs an array shaped (H, W) or (H, W, C), got shape {image.shape}")
        height, width = image.shape[0], image.shape[1]
    else:
        raise ConfigError(f"imresize needs a numpy array or a torch tensor, got {type(image).__name__}")
    if height < 1 or width < 1:
        raise ConfigError(f"cannot resize an empty image of {height}x{width} pixels")
    passes = _plan(height, width, scale, size)
    if isinstance(image, torch.Tensor):
        return _resize_torch(image, passes)
    return _resize_numpy(image, passes)


class _Pass(NamedTuple):
    """One 1-D resize: along ``axis`` (0 = height, 1 = width) from ``in_size`` to ``out_size`` pixels."""

    axis: int
    in_size: int
    out_size: int
    scale: float

    @property
    def taps(self) -> tuple[np.ndarray, np.ndarray]:
        return _taps(self.in_size, self.out_size, self.scale)


def _plan(height: int, width: int, scale: float | None, size: tuple[int, int] | None) -> list[_Pass]:
    """The 1-D passes in MATLAB's order: the smaller factor first, rows first on a tie (a stable sort)."""
    if (scale is None) == (size is None):
        raise ConfigError("imresize needs exactly one of scale and size")
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale) or scale <= 0:
            raise ConfigError(f"imresize scale must be a positive finite number, got {scale!r}")
        factors = (float(scale), float(scale))
        out = (math.ceil(height * scale), math.ceil(width * scale))
    else:
        if (
            not isinstance(size, (tuple, list))
            or len(size) != 2
            or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) for n in size)
            or min(size) < 1
        ):
            raise ConfigError(f"imresize size must be two positive integers (out_h, out_w), got {size!r}")
        out = (int(size[0]), int(size[1]))
        factors = (out[0] / height, out[1] / width)
    inputs = (height, width)
    order = (0, 1) if factors[0] <= factors[1] else (1, 0)
    return [
        _Pass(axis, inputs[axis], out[axis], factors[axis])
        for axis in order
        if not (out[axis] == inputs[axis] and factors[axis] == 1)  # an identity pass: skip the work
    ]


def _resize_numpy(image: np.ndarray, passes: list[_Pass]) -> np.ndarray:
    """float64 tap by tap along axes 0/1, with MATLAB's per-pass rounding for integer images."""
    dtype = image.dtype
    top = _INT_MAX.get(dtype)
    if top is None and not np.issubdtype(dtype, np.floating):
        raise ConfigError(f"imresize supports uint8, uint16 and float arrays, not {dtype}")
    work = image.astype(np.float64)
    for step in passes:
        columns, weights = step.taps
        front = np.ascontiguousarray(np.moveaxis(work, step.axis, 0))  # gathers whole rows
        extra = (1,) * (front.ndim - 1)
        out = np.zeros((step.out_size, *front.shape[1:]), dtype=np.float64)
        term = np.empty_like(out)
        for k in range(columns.shape[1]):  # one multiply and one add per tap, in MATLAB's order
            np.take(front, columns[:, k], axis=0, out=term)
            term *= weights[:, k].reshape(-1, *extra)
            out += term
        work = np.moveaxis(out, 0, step.axis)
        if top is not None:  # in place: ``out`` is ours. Values are >= 0 then, so this rounds half away
            np.clip(out, 0.0, top, out=out)
            out += 0.5
            np.floor(out, out=out)
    return work.astype(dtype, order="C", copy=False)


def _resize_torch(image: torch.Tensor, passes: list[_Pass]) -> torch.Tensor:
    """The numpy path's operations in the same order, so uint8 results equal numpy's on any device."""
    if image.dtype == torch.uint8:
        work_dtype, top = torch.float64, 255.0
    elif image.dtype.is_floating_point:
        work_dtype, top = (torch.float64 if image.dtype == torch.float64 else torch.float32), None
    else:
        raise ConfigError(f"imresize supports uint8 and floating-point tensors, not {image.dtype}")
    if not passes:
        return image.clone()  # never hand back the caller's own tensor
    work = image.to(work_dtype)
    for step in passes:
        columns, weights = _torch_taps(step.in_size, step.out_size, step.scale, work_dtype, image.device)
        dim = step.axis - 2
        shape = [-1, 1] if step.axis == 0 else [-1]
        out = None
        for k in range(columns.shape[1]):
            term = weights[:, k].reshape(shape) * work.index_select(dim, columns[:, k])
            out = term if out is None else out + term
        assert out is not None  # every pixel has at least one tap
        work = out
        if top is not None:
            work = torch.floor(work.clamp(0.0, top) + 0.5)
    return work.to(image.dtype)


@lru_cache(maxsize=32)
def _torch_taps(
    in_size: int, out_size: int, scale: float, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The taps on the image's device, kept so a training loop does not re-upload them."""
    columns, weights = _taps(in_size, out_size, scale)
    return (
        torch.tensor(columns, dtype=torch.int64, device=device),
        torch.tensor(weights, dtype=dtype, device=device),
    )
