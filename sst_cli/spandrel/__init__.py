"""spandrel (optional extra ``sst-cli[spandrel]``): the checkpoints of ~40 other architectures through
sst-cli's engine, and SST / SSTReal registered with spandrel for spandrel-based applications.

``foreign.load_foreign(state, source)`` turns a state dict none of sst-cli's own architectures claims into an
``SRNetwork`` (``network.py``, with the context measured in ``context.py``); ``install()`` (``register.py``)
adds SST and SSTReal to a spandrel registry. Nothing here imports spandrel until it is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .foreign import INSTALL_HINT, available, load_foreign, nearest_miss
from .network import SpandrelNetwork


def install(registry: Any = None, *, configs: Sequence[Any] = ()) -> list[Any]:
    """Register SST and SSTReal with spandrel's ``registry`` (default ``MAIN_REGISTRY``); see ``register``."""
    from .register import install as add

    return add(registry, configs=configs)


__all__ = ["INSTALL_HINT", "SpandrelNetwork", "available", "install", "load_foreign", "nearest_miss"]
