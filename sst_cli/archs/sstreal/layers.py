"""SSTReal's building blocks, named and shaped like the official ``EDMUNet`` checkpoints (keys ``model.*``).

The attention is SST's own ``WindowAttention`` (RIB positional factors, DWC gate, the shared kernels of
``archs/attention.py``); what SSTReal adds around it is adaLN modulation from a noise-level embedding,
a SwiGLU feed-forward with a depth-wise conv, LR feature fusion and two nearest-neighbour x4 heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..sst.layers import LayerNorm2d, WindowAttention
from .config import SSTRealConfig


class NoiseLevelEmbedding(nn.Module):
    """Sinusoidal features of the noise level (cos half, then sin half), then an MLP with SiLU."""

    def __init__(self, channels: int, frequencies: int) -> None:
        super().__init__()
        self.frequencies = frequencies
        self.mlp = nn.Sequential(nn.Linear(frequencies, channels), nn.SiLU(), nn.Linear(channels, channels))

    def forward(self, level: torch.Tensor) -> torch.Tensor:
        half = self.frequencies // 2
        steps = torch.arange(half, dtype=torch.float32, device=level.device)
        angles = level.float()[:, None] * torch.exp(-math.log(10000.0) * steps / half)[None]
        features = torch.cat([angles.cos(), angles.sin()], dim=-1)
        if self.frequencies % 2:
            features = F.pad(features, (0, 1))
        return self.mlp(features.to(next(self.mlp.parameters()).dtype))


class ConvSwiGLU(nn.Module):
    """1x1 conv to two halves, depth-wise 3x3 on both, ``silu(a) * b``, 1x1 back."""

    def __init__(self, dim: int, hidden: int, drop: float) -> None:
        super().__init__()
        self.w12 = nn.Sequential(
            nn.Conv2d(dim, 2 * hidden, 1), nn.Conv2d(2 * hidden, 2 * hidden, 3, padding=1, groups=2 * hidden)
        )
        self.w3 = nn.Conv2d(hidden, dim, 1)
        self.ffn_dropout = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.w12(x).chunk(2, dim=1)
        return self.w3(self.ffn_dropout(F.silu(a) * b))


Modulation = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class ModulatedLayer(nn.Module):
    """Attention then feed-forward, each on a non-affine LayerNorm shifted and scaled by the embedding, and
    gated by it: ``x + gate * f(LN(x) * (1 + scale) + shift)``."""

    def __init__(self, dim: int, hidden: int, attn: WindowAttention, drop: float) -> None:
        super().__init__()
        self.norm_attn = LayerNorm2d(dim, affine=False)
        self.attn = attn
        self.norm_ffn = LayerNorm2d(dim, affine=False)
        self.ffn = ConvSwiGLU(dim, hidden, drop)

    def forward(self, x: torch.Tensor, mod: Modulation) -> torch.Tensor:
        a_shift, a_scale, a_gate, f_shift, f_scale, f_gate = mod
        x = x + self.attn(self.norm_attn(x) * (1 + a_scale) + a_shift) * a_gate
        return x + self.ffn(self.norm_ffn(x) * (1 + f_scale) + f_shift) * f_gate


class RealBlock(nn.Module):
    """Optional LR fusion (1x1 over [x, lr]), modulated layers, a 3x3 conv scaled by ``gamma``; one residual
    around the whole block, taken before the fusion."""

    def __init__(self, cfg: SSTRealConfig, fuse_lr: bool) -> None:
        super().__init__()
        dim = cfg.dim
        if fuse_lr:
            self.fuse_lr = nn.Conv2d(2 * dim, dim, 1)
        self.blocks = nn.ModuleList(
            ModulatedLayer(
                dim,
                cfg.ffn_hidden,
                WindowAttention(dim, heads, ws, rank, cfg.rib_hidden_dim, cfg.rib_n_freqs, shift),
                cfg.drop_p,
            )
            for ws, heads, rank, shift in zip(cfg.window_sizes, cfg.num_heads, cfg.ranks, cfg.shifted, strict=True)
        )
        self.out_conv = nn.Conv2d(dim, dim, 3, padding=1)
        self.adaLN_modulation = nn.Linear(cfg.emb_channels, 6 * dim)
        self.gamma = nn.Parameter(torch.full((1, dim, 1, 1), 1e-3))
        if not self.gamma.is_meta:  # the official start: modulation off, a small layer scale
            nn.init.zeros_(self.adaLN_modulation.weight)
            nn.init.zeros_(self.adaLN_modulation.bias)

    def forward(self, x: torch.Tensor, embed: torch.Tensor, lr: torch.Tensor | None) -> torch.Tensor:
        mod: Modulation = tuple(self.adaLN_modulation(embed)[:, :, None, None].chunk(6, dim=1))
        h = self.fuse_lr(torch.cat([x, lr], dim=1)) if lr is not None else x
        for layer in self.blocks:
            h = layer(h, mod)
        return x + self.out_conv(h) * self.gamma


class NearestX4Head(nn.Sequential):
    """conv, leaky ReLU 0.2, (nearest x2, conv, leaky ReLU) twice, conv to RGB: features to an x4 image."""

    def __init__(self, dim: int, inner: int) -> None:
        super().__init__(
            nn.Conv2d(dim, inner, 3, padding=1),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(inner, inner, 3, padding=1),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(inner, inner, 3, padding=1),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(inner, 3, 3, padding=1),
        )


class RealCore(nn.Module):
    """The official ``SSTReal`` module: (noisy HR input, noise level, LR) -> the two heads' outputs.

    The noisy input is folded to LR resolution (pixel unshuffle by 4) and everything runs there; the head
    ``up_i`` reads the features after block ``ig_idx``, ``up_f`` after the last block, both with the stem's
    features added back.
    """

    def __init__(self, cfg: SSTRealConfig) -> None:
        super().__init__()
        self.fuse_lr_till = cfg.fuse_lr_till
        self.ig_idx = cfg.ig_idx
        self.map_noise = NoiseLevelEmbedding(cfg.emb_channels, cfg.noise_channels)
        self.proj_in = nn.Conv2d(3 * 16, cfg.dim, 3, padding=1)
        self.proj_lr = nn.Conv2d(3, cfg.dim, 3, padding=1)
        self.proj_body = nn.ModuleList(RealBlock(cfg, fuse_lr=i <= cfg.fuse_lr_till) for i in range(cfg.num_blocks))
        self.up_i = NearestX4Head(cfg.dim, cfg.intermediate_dim)
        self.up_f = NearestX4Head(cfg.dim, cfg.intermediate_dim)

    def forward(self, x: torch.Tensor, level: torch.Tensor, lq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embed = self.map_noise(level)
        stem = self.proj_in(F.pixel_unshuffle(x, 4))
        lr = self.proj_lr(lq)
        h, out_i = stem, None
        for i, block in enumerate(self.proj_body):
            h = block(h, embed, lr if i <= self.fuse_lr_till else None)
            if i == self.ig_idx:
                out_i = self.up_i(h + stem)
        assert out_i is not None  # the config keeps ig_idx below num_blocks
        return out_i, self.up_f(h + stem)
