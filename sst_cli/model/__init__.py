"""The SST network only: no files, no hub, no CLI."""

from .attention import BACKENDS, attend, available_backends
from .sst import SST, SSTConfig

__all__ = ["BACKENDS", "SST", "SSTConfig", "attend", "available_backends"]
