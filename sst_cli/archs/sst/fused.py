"""A 1x1 convolution's output added to the residual stream inside the matrix product, not by a separate add.

In a channels-last network a 1x1 convolution is a (pixels, C_in) x (C_in, C_out) product, and ``addmm_``
accumulates it into the residual in place: the residual is read and written once, where ``x + conv(a)``
writes the convolution's output and then the sum. The bias rides along as a column of ones in the input
buffer (one multiple of 8 wide, so the rows stay 16-byte aligned for the GPU's matrix kernels), with the bias
appended to the weight. Used where the stream may be overwritten and autograd is off; elsewhere the plain
``x + conv(a)`` runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_EXTRA = 8  # ones column + zeros: keeps the row length a multiple of 8 elements


def projection_buffer(like: torch.Tensor, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, image): a (pixels, channels + 8) buffer with the ones column set, and its first ``channels``
    as a (B, channels, H, W) channels-last image for the layer to write the conv's input into."""
    b, _, h, w = like.shape
    rows = like.new_empty((b * h * w, channels + _EXTRA))
    rows[:, channels:].copy_(_ones_column(like))  # one launch (a fill and a zero took two)
    return rows, rows[:, :channels].view(b, h, w, channels).permute(0, 3, 1, 2)


_COLUMNS: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def _ones_column(like: torch.Tensor) -> torch.Tensor:
    """``[1, 0, ..., 0]`` (``_EXTRA`` long) on ``like``'s device and dtype, made there once."""
    key = (like.device, like.dtype)
    column = _COLUMNS.get(key)
    if column is None:
        with torch.inference_mode(False):  # an ordinary tensor, whatever mode the first forward ran in
            column = torch.zeros(_EXTRA, device=like.device, dtype=like.dtype)
            column[0] = 1
        _COLUMNS[key] = column
    return column


def add_projection(residual: torch.Tensor, rows: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """``residual += conv(image written into rows)``, in place (see ``fusable``); returns ``residual``."""
    residual.permute(0, 2, 3, 1).view(-1, conv.weight.shape[0]).addmm_(rows, _augmented_weight(conv).t())
    return residual


def _augmented_weight(conv: nn.Conv2d) -> torch.Tensor:
    """(C_out, C_in + 8): the 1x1 weight, the bias, then zeros. Kept on the module until its weight or bias
    changes (storage or version), so a forward does not rebuild it (two launches per projection on a GPU)."""
    params = (conv.weight,) if conv.bias is None else (conv.weight, conv.bias)
    key = tuple((p.data_ptr(), p._version, p.dtype) for p in params)
    cached = conv.__dict__.get("_sst_augmented")
    if cached is not None and cached[0] == key:
        return cached[1]
    c_out, c_in = conv.weight.shape[:2]
    with torch.no_grad():
        weight = F.pad(conv.weight.view(c_out, c_in), (0, _EXTRA))
        if conv.bias is not None:
            weight[:, c_in] = conv.bias
    conv.__dict__["_sst_augmented"] = (key, weight)
    return weight


def fusable() -> bool:
    """Whether the ``out=`` / in-place forms run: not under autograd (training), which cannot differentiate
    them, nor while torch.compile traces, which fuses the plain steps itself."""
    return not torch.is_grad_enabled() and not torch.compiler.is_compiling()


def owned_stream(x: torch.Tensor, owned: bool) -> torch.Tensor:
    """``x`` itself when it may be overwritten and is channels-last, else a channels-last copy of it."""
    if owned and x.permute(0, 2, 3, 1).is_contiguous():
        return x
    return x.clone(memory_format=torch.channels_last)
