"""SST's depth-wise 3x3 convolutions, kept off cuDNN's slow kernel at widths that are not a multiple of 8.

Measured on an H100 (``../shared/measurements/gpu-h100-2026-11-25``, torch 2.11, cuDNN 9.19): SST-L x3 in
bf16 (427x240 LR) spends 165 of 338 ms in cuDNN's ``conv2d_grouped_direct_kernel``, while x2 (640x360) and x4
(320x180) at the same channel counts do not use it; ``cudnn.benchmark`` and channels-last change nothing, and
fp32 is not affected. The depth-wise convs get channels-last inputs (the layer norm's output), which PyTorch
always hands to cuDNN, and the odd width (427) is what sets x3 apart. So on CUDA, in 16-bit precision, an
input whose width is not a multiple of ``WIDTH_MULTIPLE`` is zero-padded on the right (and by one pixel on
each side, the conv's own padding) and the result cropped: the same sums over the same zeros, hence exact.
``benchmarks/gpu_depthwise.py`` measures it; until a GPU run confirms it, the rule rests on the profile above.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

WIDTH_MULTIPLE = 8
_SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def aligned_width(width: int, multiple: int = WIDTH_MULTIPLE) -> int:
    return -(-width // multiple) * multiple


def needs_alignment(x: torch.Tensor) -> bool:
    """Where the padding is applied: CUDA, 16-bit, a width that is not a multiple of ``WIDTH_MULTIPLE``."""
    return x.device.type == "cuda" and x.dtype in _SIXTEEN_BIT and x.shape[-1] % WIDTH_MULTIPLE != 0


def depthwise_aligned(x: torch.Tensor, conv: nn.Conv2d, multiple: int = WIDTH_MULTIPLE) -> torch.Tensor:
    """``conv(x)`` (3x3, padding 1, stride 1) computed on ``x`` zero-padded to a width of a multiple of
    ``multiple``, then cropped back: identical values, a cuDNN-friendly shape."""
    h, w = x.shape[-2:]
    assert isinstance(conv.padding, tuple), "explicit padding only"
    ph, pw = conv.padding
    extra = aligned_width(w, multiple) - w
    padded = F.pad(x, (pw, pw + extra, ph, ph))  # the conv's own zero padding, plus the alignment columns
    out = F.conv2d(padded, conv.weight, conv.bias, conv.stride, 0, conv.dilation, conv.groups)
    return out[..., :h, :w]


class DepthwiseConv2d(nn.Conv2d):
    """A depth-wise ``nn.Conv2d`` (same parameters and checkpoint keys) that aligns its input where cuDNN needs it."""

    def __init__(self, channels: int, kernel_size: int = 3) -> None:
        super().__init__(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if needs_alignment(x):
            return depthwise_aligned(x, self)
        return super().forward(x)
