"""SST, the Scalable SR Transformer: the network only (no files, no hub, no CLI)."""

from ..base import Architecture
from .infer import REQUIRED, check, detect, infer
from .sst import SST, SSTConfig

ARCH = Architecture(
    name="sst",
    title="SST",
    scale_key="upscaling_factor",
    detect=detect,
    infer=infer,
    make_config=SSTConfig.from_kwargs,
    build=lambda config: SST(**config.to_kwargs()),
    check=check,
    undetermined="window sizes",
    markers=REQUIRED,
)

__all__ = ["ARCH", "SST", "SSTConfig"]
