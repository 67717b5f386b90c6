"""SST: the Scalable SR Transformer (Lee et al., 2026), exact with the official checkpoints."""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ConfigError
from ..base import ModelDescriptor, OfficialKeywords, SRNetwork
from .layers import (
    DirectUpsampler,
    LayerNorm2d,
    ResidualGroup,
    ShuffleUpsampler,
    TransformerLayer,
    WindowAttention,
    reference_path,
)

UPSAMPLERS = ("pixelshuffle_direct", "pixelshuffle")


def _per_layer(value: int | Sequence[int], layers: int, name: str) -> tuple[int, ...]:
    values = (value,) * layers if isinstance(value, int) else tuple(int(v) for v in value)
    if len(values) != layers:
        raise ConfigError(f"{name} has {len(values)} entries but there are {layers} window sizes")
    return values


def check_rib_layers(config: Any) -> None:
    """The window-attention part of a config (SST's and SSTReal's, which shares these layers): window sizes,
    heads and ranks per layer (an int means every layer; normalised to tuples on the frozen dataclass), RIB
    attention, the DWC gate, and a width that the heads divide."""
    if not isinstance(config.window_sizes, (list, tuple)):  # the one list that says how many layers there are
        raise ConfigError(f"window_sizes must be a list (one window per layer), got {config.window_sizes!r}")
    windows = tuple(int(w) for w in config.window_sizes)
    if not windows or min(windows) < 1:
        raise ConfigError(f"window_sizes must be positive integers, got {list(config.window_sizes)}")
    object.__setattr__(config, "window_sizes", windows)
    object.__setattr__(config, "num_heads", _per_layer(config.num_heads, len(windows), "num_heads"))
    object.__setattr__(config, "ranks", _per_layer(config.ranks, len(windows), "ranks"))
    for name in ("num_heads", "ranks"):
        if min(getattr(config, name)) < 1:
            raise ConfigError(f"{name} must be positive integers, got {list(getattr(config, name))}")
    for name in ("dim", "rib_hidden_dim", "rib_n_freqs"):
        if getattr(config, name) < 1:
            raise ConfigError(f"{name} must be a positive integer, got {getattr(config, name)}")
    if not (math.isfinite(config.exp_ratio) and config.ffn_hidden >= 1):
        raise ConfigError(f"exp_ratio {config.exp_ratio} gives no feed-forward channels for dim {config.dim}")
    if config.attn_type != "RIB":
        raise ConfigError(f"attn_type {config.attn_type!r} is not supported (only 'RIB')")
    if config.gate_type != "DWC":
        raise ConfigError(f"gate_type {config.gate_type!r} is not supported (only 'DWC')")
    for heads in config.num_heads:
        if config.dim % heads:
            raise ConfigError(f"dim {config.dim} is not divisible by num_heads {heads}")


@dataclass(frozen=True)
class SSTConfig(OfficialKeywords):
    """The official ``SST(...)`` constructor keywords; defaults are the paper's SST at x4."""

    title: ClassVar[str] = "SST"

    dim: int = 180
    window_sizes: tuple[int, ...] = (16, 32, 64, 16, 32, 64)
    num_heads: tuple[int, ...] = (6, 6, 6, 6, 6, 6)
    n_blocks: int = 6
    exp_ratio: float = 1.25
    attn_type: str = "RIB"
    rib_hidden_dim: int = 32
    rib_n_freqs: int = 10
    upscaling_factor: int = 4
    upsampler_type: str = "pixelshuffle"
    ranks: tuple[int, ...] = (18, 18, 18, 34, 34, 34)
    gate_type: str = "DWC"
    intermediate_dim: int = 64

    def __post_init__(self) -> None:
        check_rib_layers(self)
        if self.upsampler_type not in UPSAMPLERS:
            raise ConfigError(f"upsampler_type must be one of {', '.join(UPSAMPLERS)}, got {self.upsampler_type!r}")
        if self.upscaling_factor < 1:
            raise ConfigError(f"upscaling_factor must be >= 1, got {self.upscaling_factor}")
        for name in ("n_blocks", "intermediate_dim"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")

    @property
    def scale(self) -> int:
        return self.upscaling_factor

    @property
    def ffn_hidden(self) -> int:
        return int(self.dim * self.exp_ratio)

    @property
    def shifted(self) -> tuple[bool, ...]:
        """Upstream shifts odd layers only when all window sizes of a block are equal."""
        same = len(set(self.window_sizes)) == 1
        return tuple(same and i % 2 == 1 for i in range(len(self.window_sizes)))


class SST(SRNetwork):
    """Maps NCHW RGB (nominally in [0, 1]) to NCHW RGB ``scale`` times larger, any input size."""

    repeated_block = TransformerLayer

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        cfg = SSTConfig.from_kwargs(kwargs)
        self.config = cfg
        # Activations in channels-last layout (None or True; False = NCHW): the layer norms need no copies,
        # window partitions move contiguous runs and the residual adds fuse into the closing 1x1 products
        # (fused.py). Measured faster on the CPU and on an H100 (SST x2: fp32 548 -> 522 ms, bf16 316 -> 290).
        self.channels_last: bool | None = None
        dim = cfg.dim
        self.proj = nn.Conv2d(3, dim, 3, padding=1)
        groups: list[nn.Module] = []
        for _ in range(cfg.n_blocks):
            layers: list[nn.Module] = [
                TransformerLayer(
                    dim,
                    cfg.ffn_hidden,
                    WindowAttention(dim, heads, ws, rank, cfg.rib_hidden_dim, cfg.rib_n_freqs, shift),
                )
                for ws, heads, rank, shift in zip(cfg.window_sizes, cfg.num_heads, cfg.ranks, cfg.shifted, strict=True)
            ]
            groups.append(ResidualGroup(*layers, nn.Conv2d(dim, dim, 3, padding=1)))
        self.body = nn.Sequential(*groups, LayerNorm2d(dim), nn.Conv2d(dim, dim, 3, padding=1))
        if cfg.upsampler_type == "pixelshuffle_direct":
            self.upsampler: nn.Module = DirectUpsampler(dim, cfg.scale)
        else:
            self.upsampler = ShuffleUpsampler(dim, cfg.intermediate_dim, cfg.scale)

    def describe(self) -> ModelDescriptor:
        """What the tiler, the Upscaler, eval and bench need to know; see ModelDescriptor."""
        return ModelDescriptor(
            architecture="SST",
            scale=self.config.scale,
            size_multiple=self.tile_align,
            exact_context=self.exact_context,
            default_context=self.tile_align,
            attention_head_sizes=self.attention_head_sizes,
            parameters=sum(p.numel() for p in self.parameters()),
        )

    @property
    def scale(self) -> int:
        return self.config.scale

    def reference_path(self) -> AbstractContextManager[nn.Module]:
        return reference_path(self)

    @property
    def tile_align(self) -> int:
        """Tiles whose origins are multiples of this see the same window grid as the whole image."""
        return math.lcm(*self.config.window_sizes)

    @property
    def min_side(self) -> int:
        """Smallest side every layer's reflect padding accepts; smaller inputs are padded at entry."""
        return max(self.config.window_sizes) // 2 + 1

    @property
    def exact_context(self) -> int | None:
        """LR pixels of context beyond a window-aligned tile edge that make tiling exact.

        Damage from a cut travels inward: each 3x3 conv adds one pixel and each attention layer
        spreads it to every window it touches, so the distance rounds up to that layer's window size.
        None where windows shift (configs whose window sizes are all equal): the shift rolls the image around
        unmasked, so each edge attends to the opposite one and no context makes a tile equal the whole.
        """
        if any(self.config.shifted):
            return None
        depth = 1  # proj
        for _ in range(self.config.n_blocks):
            for ws in self.config.window_sizes:
                depth = max(-(-depth // ws) * ws, depth + 1)  # windows touched; the gate's 3x3 reach
                depth += 1  # depth-wise conv of the FFN
            depth += 1  # the group's tail conv
        depth += 1  # body tail conv
        return depth + (1 if self.config.upsampler_type == "pixelshuffle_direct" else 3)

    def activation_bytes(self, height: int, width: int, dtype: torch.dtype = torch.float32) -> int:
        """Rough peak activation memory of one forward pass (no grad), used to size tiles."""
        cfg, elem = self.config, torch.finfo(dtype).bits // 8
        align = max(cfg.window_sizes)
        padded = -(-height // align) * align * (-(-width // align) * align)  # each layer pads to the window grid
        body = 14 * cfg.dim + 3 * cfg.ffn_hidden
        inner = 3 if cfg.upsampler_type == "pixelshuffle_direct" else cfg.intermediate_dim
        head = 2 * inner * cfg.scale**2 + 6 * cfg.scale**2
        return elem * max(body * padded, head * height * width)

    @property
    def attention_head_sizes(self) -> tuple[tuple[int, ...], ...]:
        """Distinct (q/k, v, rank) head sizes of the attention layers, for planning and describing kernels."""
        return tuple(sorted({m.attention_sizes for m in self.modules() if isinstance(m, WindowAttention)}))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        small = self.min_side
        pad_h, pad_w = max(0, small - h), max(0, small - w)
        if pad_h or pad_w:
            # Upstream raises here; padding only these inputs keeps every other size identical to it.
            mode = "reflect" if pad_h < h and pad_w < w else "replicate"
            x = F.pad(x, (0, pad_w, 0, pad_h), mode=mode)
        if self.channels_last is not False:
            x = x.contiguous(memory_format=torch.channels_last)  # every later op keeps the layout
        feat = self.proj(x)
        feat = feat + self.body(feat)
        out = self.upsampler(feat, x)
        if pad_h or pad_w:
            out = out[..., : h * self.scale, : w * self.scale]
        return out
