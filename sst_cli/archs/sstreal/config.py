"""SSTReal's constructor keywords: those of the authors' ``EDMUNet(...)`` (option file ``SSTReal_X4.yaml``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ...errors import ConfigError
from ..base import OfficialKeywords
from ..sst.sst import check_rib_layers

RELEASED_WINDOWS = (16, 32, 64, 16, 32, 64)
RELEASED_RANKS = (16, 16, 16, 32, 32, 32)


@dataclass(frozen=True)
class SSTRealConfig(OfficialKeywords):
    """``EDMUNet`` keywords; defaults are the released SSTReal-X4 (54,986,502 parameters).

    The EDM wrapper's own keywords (``img_resolution``, ``img_channels``, ``sigma_min``, ``sigma_max``,
    ``up_list``, ``down_list``) do not change inference; they are accepted so that official option files load.
    ``sampling_ig_lambda`` is the default λ of the recombination ``d_i + λ (d_f - d_i)``; the authors test
    with 2.0 (the constructor's own default, 1.0, is the training setting).
    """

    title: ClassVar[str] = "SSTReal"

    img_resolution: int = 192
    img_channels: int = 3
    scale: int = 4
    sigma_min: float = 0.0
    sigma_max: float = math.inf
    sigma_data: float = 0.5
    up_list: Any = None
    down_list: Any = None
    use_skip: bool = True
    sampling_ig_lambda: float = 2.0
    dim: int = 192
    intermediate_dim: int = 96
    emb_channels: int = 768
    noise_channels: int = 192
    num_blocks: int = 14
    fuse_lr_till: int = 6
    ig_idx: int = 6
    attn_type: str = "RIB"
    window_sizes: tuple[int, ...] = RELEASED_WINDOWS
    num_heads: tuple[int, ...] = (6, 6, 6, 6, 6, 6)
    ranks: tuple[int, ...] = RELEASED_RANKS
    rib_hidden_dim: int = 32
    rib_n_freqs: int = 10
    exp_ratio: float = 3
    gate_type: str = "DWC"
    drop_p: float = 0.05

    def __post_init__(self) -> None:
        check_rib_layers(self)
        if self.scale != 4:
            raise ConfigError(f"SSTReal upscales x4 only (its input stem and heads are fixed at x4), not x{self.scale}")
        if self.img_channels != 3:
            raise ConfigError(f"SSTReal works on RGB (img_channels 3), got {self.img_channels}")
        for name in ("num_blocks", "intermediate_dim", "emb_channels", "noise_channels"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not 0 <= self.ig_idx < self.num_blocks:
            raise ConfigError(f"ig_idx must name a block, 0 to {self.num_blocks - 1}, got {self.ig_idx}")
        if not (math.isfinite(self.sigma_data) and self.sigma_data > 0):
            raise ConfigError(f"sigma_data must be a positive number, got {self.sigma_data}")
        if not math.isfinite(self.sampling_ig_lambda):
            raise ConfigError(f"sampling_ig_lambda must be a finite number, got {self.sampling_ig_lambda}")

    @property
    def ffn_hidden(self) -> int:
        """Channels of each SwiGLU half: two thirds of ``int(dim * exp_ratio)``, as upstream rounds them."""
        return int(int(self.dim * self.exp_ratio) * 2 / 3)

    @property
    def shifted(self) -> tuple[bool, ...]:
        """Odd layers shift their windows only when all window sizes of a block are equal (as in SST)."""
        same = len(set(self.window_sizes)) == 1
        return tuple(same and i % 2 == 1 for i in range(len(self.window_sizes)))

    @property
    def fused_blocks(self) -> int:
        """How many leading blocks fuse the LR features (blocks ``0..fuse_lr_till``)."""
        return max(0, min(self.fuse_lr_till + 1, self.num_blocks))
