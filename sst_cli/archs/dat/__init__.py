"""DAT, the Dual Aggregation Transformer (Chen et al., ICCV 2023): the network only (no files, no hub, no CLI)."""

from ..base import Architecture
from .config import DATConfig
from .dat import DAT
from .infer import REQUIRED, detect, infer

ARCH = Architecture(
    name="dat",
    title="DAT",
    scale_key="upscale",
    detect=detect,
    infer=infer,
    make_config=DATConfig.from_kwargs,
    build=lambda config: DAT(**config.to_kwargs()),
    markers=REQUIRED,
)

__all__ = ["ARCH", "DAT", "DATConfig"]
