"""``DATConfig``: the official ``DAT(...)`` constructor keywords, validated once.

Names and defaults follow the authors' class (``basicsr/archs/dat_arch.py``), except that unknown keys
are refused by name instead of being swallowed. Keywords that only matter for training (dropout rates,
stochastic depth, gradient checkpointing) are accepted and kept, so that an option file's ``network_g``
can be pasted as it is; they change nothing at inference. ``act_layer`` / ``norm_layer`` are Python
classes, not JSON values: the network always uses the official GELU and LayerNorm.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ...errors import ConfigError
from ..base import OfficialKeywords

UPSAMPLERS = ("pixelshuffle", "pixelshuffledirect")
RESI_CONNECTIONS = ("1conv", "3conv")
NUM_FEAT = 64  # hard-coded in the official class: channels of the 'pixelshuffle' reconstruction


def _ints(value: int | Sequence[int], name: str) -> tuple[int, ...]:
    values = (value,) if isinstance(value, int) else tuple(value)
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise ConfigError(f"{name} must be positive integers, got {value!r}")
    return values


@dataclass(frozen=True)
class DATConfig(OfficialKeywords):
    """The official keywords; defaults are the authors' DAT at x4 (their ``test_DAT_x4.yml``)."""

    title: ClassVar[str] = "DAT"

    img_size: int = 64
    in_chans: int = 3
    embed_dim: int = 180
    split_size: tuple[int, int] = (8, 32)
    depth: tuple[int, ...] = (6, 6, 6, 6, 6, 6)
    num_heads: tuple[int, ...] = (6, 6, 6, 6, 6, 6)
    expansion_factor: float = 4.0
    qkv_bias: bool = True
    qk_scale: float | None = None
    drop_rate: float = 0.0
    attn_drop_rate: float = 0.0
    drop_path_rate: float = 0.1
    use_chk: bool = False
    upscale: int = 4
    img_range: float = 1.0
    resi_connection: str = "1conv"
    upsampler: str = "pixelshuffle"

    def __post_init__(self) -> None:
        split = _ints(self.split_size, "split_size")
        if len(split) != 2:
            raise ConfigError(f"split_size must be [height, width] of the spatial window, got {list(split)}")
        depth = _ints(self.depth, "depth")
        heads = self.num_heads
        heads = (heads,) * len(depth) if isinstance(heads, int) else _ints(heads, "num_heads")
        if len(heads) != len(depth):
            raise ConfigError(f"num_heads has {len(heads)} entries but depth has {len(depth)} residual groups")
        object.__setattr__(self, "split_size", split)
        object.__setattr__(self, "depth", depth)
        object.__setattr__(self, "num_heads", heads)
        object.__setattr__(self, "expansion_factor", float(self.expansion_factor))
        object.__setattr__(self, "img_range", float(self.img_range))
        for name in ("img_size", "in_chans", "embed_dim", "upscale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.upsampler not in UPSAMPLERS:
            raise ConfigError(f"upsampler must be one of {', '.join(UPSAMPLERS)}, got {self.upsampler!r}")
        if self.resi_connection not in RESI_CONNECTIONS:
            raise ConfigError(
                f"resi_connection must be one of {', '.join(RESI_CONNECTIONS)}, got {self.resi_connection!r}"
            )
        if self.upsampler == "pixelshuffle" and self.upscale != 3 and self.upscale & (self.upscale - 1):
            raise ConfigError(f"upsampler 'pixelshuffle' supports scales 2^n and 3, not {self.upscale}")
        if self.embed_dim % 2 or self.embed_dim < 32:
            # the position-bias MLP is ((embed_dim / 2) // 4) // 4 wide: zero below 32
            raise ConfigError(f"embed_dim must be even and at least 32, got {self.embed_dim}")
        half = self.embed_dim // 2
        for h in heads:
            if h < 2 or half % (h // 2) or self.embed_dim % h:
                raise ConfigError(
                    f"num_heads {h} does not fit embed_dim {self.embed_dim}: it must be at least 2, divide "
                    "embed_dim, and half of it must divide embed_dim / 2"
                )
        hidden = int(self.embed_dim * self.expansion_factor)
        if self.expansion_factor <= 0 or hidden < 2 or hidden % 2:
            raise ConfigError(
                f"expansion_factor {self.expansion_factor} gives an FFN width of {hidden} for embed_dim "
                f"{self.embed_dim}; the spatial gate splits it in two halves, so it must be even and positive"
            )
        if self.img_range <= 0 or not math.isfinite(self.img_range):
            raise ConfigError(f"img_range must be a positive number, got {self.img_range}")
        s0, s1 = split
        if self.has_shifted_blocks and (self.img_size % s0 or self.img_size % s1):
            raise ConfigError(
                f"img_size {self.img_size} must be a multiple of both split sizes {list(split)}: the shifted "
                "blocks store their masks at img_size x img_size"
            )
        if self.qk_scale is not None and not (isinstance(self.qk_scale, (int, float)) and self.qk_scale > 0):
            raise ConfigError(f"qk_scale must be null or a positive number, got {self.qk_scale!r}")

    @classmethod
    def unknown_hint(cls, unknown: Sequence[str]) -> str:
        if {"act_layer", "norm_layer"} & set(unknown):
            return " (act_layer / norm_layer are Python classes: the network always uses GELU and LayerNorm)"
        return ""

    @property
    def scale(self) -> int:
        return self.upscale

    @property
    def ffn_hidden(self) -> int:
        """Hidden width of the SGFN, as the official class computes it: ``int(dim * expansion_factor)``."""
        return int(self.embed_dim * self.expansion_factor)

    @property
    def has_shifted_blocks(self) -> bool:
        return any(shifted(g, i) for g, n in enumerate(self.depth) for i in range(0, n, 2))

    @property
    def window_multiple(self) -> int:
        """Origins that are multiples of this see the same spatial windows (both orientations)."""
        return math.lcm(*self.split_size)


def shifted(group: int, block: int) -> bool:
    """Whether block ``block`` of residual group ``group`` shifts its windows (the official rule).

    Only spatial blocks (even ``block``) are ever shifted: blocks 2, 6, 10, ... of even groups and
    blocks 0, 4, 8, ... of odd groups.
    """
    if group % 2 == 0:
        return block > 0 and (block - 2) % 4 == 0
    return block % 4 == 0
