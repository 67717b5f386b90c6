"""sst-cli: super-resolution with SST (Scalable SR Transformer with rank-factorized implicit neural bias)."""

from importlib.metadata import PackageNotFoundError, version

from .archs.sst import SST, SSTConfig
from .loader import load_model
from .upscaler import Upscaler
from .zoo import create_model, list_models

try:
    __version__ = version("sst-cli")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["SST", "SSTConfig", "Upscaler", "__version__", "create_model", "list_models", "load_model"]
