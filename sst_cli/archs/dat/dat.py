"""DAT: the Dual Aggregation Transformer (Chen et al., ICCV 2023), exact with the official checkpoints.

Shallow 3x3 conv -> LayerNorm'd tokens -> residual groups of alternating spatial / channel blocks ->
LayerNorm -> conv (``resi_connection``) plus a long skip -> reconstruction (``pixelshuffle``: conv,
LeakyReLU 0.01, (conv, PixelShuffle) steps, conv; ``pixelshuffledirect``: one conv and PixelShuffle).
Inputs are shifted by the DIV2K RGB mean (3 channels) and scaled by ``img_range`` around it.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from ..base import ModelDescriptor, SRNetwork, plain_layers
from .blocks import DATBlock, ResidualGroup, SpatialAttention, nchw, nhwc, residual_conv
from .config import NUM_FEAT, DATConfig

RGB_MEAN = (0.4488, 0.4371, 0.4040)


class _ToTokens(nn.Module):
    """NCHW -> (B, H, W, C) view (the official ``Rearrange`` slot, index 0 of ``before_RG``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nhwc(x)


def _upsample(scale: int, feat: int) -> nn.Sequential:
    """(conv to 4 * feat, PixelShuffle(2)) per factor 2, or one (conv to 9 * feat, PixelShuffle(3))."""
    layers: list[nn.Module] = []
    if scale == 3:
        layers += [nn.Conv2d(feat, 9 * feat, 3, padding=1), nn.PixelShuffle(3)]
    else:
        for _ in range(int(math.log2(scale))):
            layers += [nn.Conv2d(feat, 4 * feat, 3, padding=1), nn.PixelShuffle(2)]
    return nn.Sequential(*layers)


class DAT(SRNetwork):
    """Maps NCHW images in [0, 1] to NCHW images ``upscale`` times larger; any size down to 1x1, any batch."""

    repeated_block = DATBlock

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        cfg = DATConfig.from_kwargs(kwargs)
        self.config = cfg
        dim = cfg.embed_dim
        self.conv_first = nn.Conv2d(cfg.in_chans, dim, 3, padding=1)
        self.before_RG = nn.Sequential(_ToTokens(), nn.LayerNorm(dim))
        self.layers = nn.ModuleList(
            ResidualGroup(
                [
                    DATBlock(dim, heads, cfg.split_size, cfg.ffn_hidden, cfg.qkv_bias, cfg.qk_scale, cfg.img_size, g, i)
                    for i in range(depth)
                ],
                residual_conv(dim, cfg.resi_connection),
            )
            for g, (depth, heads) in enumerate(zip(cfg.depth, cfg.num_heads, strict=True))
        )
        self.norm = nn.LayerNorm(dim)
        self.conv_after_body = residual_conv(dim, cfg.resi_connection)
        if cfg.upsampler == "pixelshuffle":
            self.conv_before_upsample = nn.Sequential(nn.Conv2d(dim, NUM_FEAT, 3, padding=1), nn.LeakyReLU())
            self.upsample = _upsample(cfg.upscale, NUM_FEAT)
            self.conv_last = nn.Conv2d(NUM_FEAT, cfg.in_chans, 3, padding=1)
        else:
            self.upsample = nn.Sequential(
                nn.Conv2d(dim, cfg.upscale**2 * cfg.in_chans, 3, padding=1), nn.PixelShuffle(cfg.upscale)
            )

    # ----------------------------------------------------------------- what it says about itself
    def describe(self) -> ModelDescriptor:
        """Tiles aligned to the window grid, blended (never exact: see ``exact_context``)."""
        cfg = self.config
        return ModelDescriptor(
            architecture="DAT",
            scale=cfg.scale,
            size_multiple=cfg.window_multiple,
            exact_context=None,
            default_context=cfg.window_multiple,
            attention_head_sizes=(),
            bf16_safe=True,
            parameters=sum(p.numel() for p in self.parameters()),
            notes=(
                "receptive field: the whole image (channel attention and the interaction module's average "
                "pooling are global), so tiled output is blended and never identical to a whole-image run",
                "spatial window attention: PyTorch SDPA with the dynamic position bias as an additive mask",
            ),
        )

    @property
    def scale(self) -> int:
        return self.config.scale

    def activation_bytes(self, height: int, width: int, dtype: torch.dtype = torch.float32) -> int:
        """Rough peak of one forward pass (no grad): the SGFN's hidden width and a block's q/k/v and
        attention copies at the padded size, or the reconstruction at the output size."""
        cfg, elem = self.config, torch.finfo(dtype).bits // 8
        m = cfg.window_multiple
        padded = (height + m) * (width + m)
        s0, s1 = cfg.split_size
        scores = max(cfg.num_heads) // 2 * s0 * s1  # one window's scores per token (plain path)
        body = 12 * cfg.embed_dim + 2 * cfg.ffn_hidden + scores
        feat = NUM_FEAT if cfg.upsampler == "pixelshuffle" else cfg.embed_dim
        head = 2 * feat * cfg.scale**2 + 6 * cfg.scale**2
        return elem * max(body * padded, head * height * width)

    def reference_path(self) -> AbstractContextManager[nn.Module]:
        return plain_layers(self, SpatialAttention)  # the authors' matmul-softmax formulation

    # ----------------------------------------------------------------- forward
    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) shallow features -> (B, C, H, W) deep features (before ``conv_after_body``)."""
        tokens = self.before_RG(x)
        for group in self.layers:
            tokens = group(tokens)
        return nchw(self.norm(tokens))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        if cfg.in_chans == 3:
            mean = torch.tensor(RGB_MEAN, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        else:
            mean = torch.zeros(1, 1, 1, 1, device=x.device, dtype=x.dtype)
        x = (x - mean) * cfg.img_range
        x = self.conv_first(x)
        x = self.conv_after_body(self.forward_features(x)) + x
        if cfg.upsampler == "pixelshuffle":
            x = self.conv_last(self.upsample(self.conv_before_upsample(x)))
        else:
            x = self.upsample(x)
        return x / cfg.img_range + mean
