"""SSTReal-X4, the authors' real-world model (``EDMUNet``), reusing SST's window attention and RIB."""

from ..base import Architecture
from .config import SSTRealConfig
from .infer import check, detect, infer
from .sstreal import RealOutput, SSTReal

ARCH = Architecture(
    name="sstreal",
    title="SSTReal",
    scale_key="scale",
    detect=detect,
    infer=infer,
    make_config=SSTRealConfig.from_kwargs,
    build=lambda config: SSTReal(**config.to_kwargs()),
    check=check,
    undetermined="window sizes and ig_idx",
    settings=("ig_lambda", "seed"),
)

__all__ = ["ARCH", "RealOutput", "SSTReal", "SSTRealConfig"]
