"""SST, the Scalable SR Transformer: the network only (no files, no hub, no CLI)."""

from .sst import SST, SSTConfig

__all__ = ["SST", "SSTConfig"]
