"""sst-cli: super-resolution with SST (Scalable SR Transformer with rank-factorized implicit neural bias).

The public API is imported on first use (PEP 562), so that ``import sst_cli`` and the CLI's ``--help``
do not pay for importing torch. The exceptions (``errors``: ``SstError`` and its kinds) are exported too, so
that a caller can catch them without knowing the module they live in.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

_EXPORTS = {
    "DAT": "sst_cli.archs.dat",
    "DATConfig": "sst_cli.archs.dat",
    "SST": "sst_cli.archs.sst",
    "SSTConfig": "sst_cli.archs.sst",
    "ModelSpec": "sst_cli.loader",
    "load_model": "sst_cli.loader",
    "Upscaler": "sst_cli.upscaler",
    "UpscaleOptions": "sst_cli.upscaler",
    "create_model": "sst_cli.zoo",
    "list_models": "sst_cli.zoo",
    "CheckpointError": "sst_cli.errors",
    "ConfigError": "sst_cli.errors",
    "ImageError": "sst_cli.errors",
    "NonFiniteOutput": "sst_cli.errors",
    "OutOfMemory": "sst_cli.errors",
    "OutputExists": "sst_cli.errors",
    "OutputIsInput": "sst_cli.errors",
    "ScaleMismatch": "sst_cli.errors",
    "SstError": "sst_cli.errors",
    "TrainingDiverged": "sst_cli.errors",
    "VideoError": "sst_cli.errors",
    "WeightsNotFound": "sst_cli.errors",
    "WriteError": "sst_cli.errors",
}

if TYPE_CHECKING:
    from .archs.dat import DAT, DATConfig
    from .archs.sst import SST, SSTConfig
    from .errors import (
        CheckpointError,
        ConfigError,
        ImageError,
        NonFiniteOutput,
        OutOfMemory,
        OutputExists,
        OutputIsInput,
        ScaleMismatch,
        SstError,
        TrainingDiverged,
        VideoError,
        WeightsNotFound,
        WriteError,
    )
    from .loader import ModelSpec, load_model
    from .upscaler import UpscaleOptions, Upscaler
    from .zoo import create_model, list_models


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sst_cli' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The lazy exports too, so that completion in a REPL or an editor offers them."""
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "DAT",
    "SST",
    "CheckpointError",
    "ConfigError",
    "DATConfig",
    "ImageError",
    "ModelSpec",
    "NonFiniteOutput",
    "OutOfMemory",
    "OutputExists",
    "OutputIsInput",
    "SSTConfig",
    "ScaleMismatch",
    "SstError",
    "TrainingDiverged",
    "UpscaleOptions",
    "Upscaler",
    "VideoError",
    "WeightsNotFound",
    "WriteError",
    "__version__",
    "create_model",
    "list_models",
    "load_model",
]
