"""``UpscaleOptions``: how an ``Upscaler`` runs (device, precision, tiles, batch, alpha, ...), checked when made.

Apart from ``upscaler.py`` so that the tile planner (``planner.py``) can read the options without importing
the Upscaler that owns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch

from .checks import check_running_values, memory_bytes
from .runtime import device_text, resolve_device


@dataclass(frozen=True)
class UpscaleOptions:
    """How to run a network on images, checked on construction, so front ends fail before loading anything.

    ``device``: a name (``"cuda:1"``) or a ``torch.device``. ``tile``: ``"auto"`` (whole image when it fits
    ``max_memory``, default a share of free memory), 0 (whole image) or a tile side in LR pixels; ``max_memory``:
    bytes one forward pass may use, or a size as ``--max-memory`` takes it (``"4G"``, ``"512M"``);
    ``tile_overlap``: context pixels around tiles (default: the model's own, or what ``seams.py`` measured a
    network whose tiles cannot be exact needs); ``exact``: context covering the receptive field, so tiling leaves
    no trace but float rounding (a network whose receptive field is the whole image, such as DAT, then runs on
    the whole image); ``batch``: tiles per forward pass; ``alpha``: transparency through the network (``model``)
    or bicubic (``resize``); ``outscale``: resize the native output to this final scale. ``ig_lambda`` and
    ``seed``: runtime settings of generative models (SSTReal: λ of its recombination, default 2.0, and the seed
    of its noise, default 0); None leaves the model's own, and a model without the setting refuses it.
    ``compile``: ``on`` runs the network through torch.compile (cached on disk, eager if it fails), ``off``
    never, ``auto`` only on CUDA once ``Upscaler.expect`` announces a batch long enough to repay it
    (``compiling.wants_compile``); an SST's layers are compiled in place (``compiling.compile_network``), so the
    model object runs them compiled after. ``cli``: made from the command line's options, so that refusals and
    advice name ``--outscale 2``, not ``outscale=2`` (it travels with the options to what sizes the results).
    """

    device: str | torch.device = "auto"  # a torch.device is kept as its name
    precision: str = "auto"
    attention: str = "auto"
    tile: int | Literal["auto"] = "auto"
    tile_overlap: int | None = None
    exact: bool = False
    batch: int = 1
    max_memory: float | str | None = None  # bytes (a float: whole bytes); a size text such as "4G" becomes bytes
    alpha: str = "model"
    outscale: float | None = None
    ig_lambda: float | None = None
    seed: int | None = None
    compile: str = "auto"
    cli: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The checks that need no torch first (checks.py), then whether PyTorch can use the device here.
        object.__setattr__(self, "device", device_text(self.device))  # frozen: set once, here
        object.__setattr__(self, "max_memory", memory_bytes(self.max_memory))
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "device"}
        for name, value in check_running_values(**values).items():
            object.__setattr__(self, name, value)  # the canonical spelling: "FP32" runs as "fp32"
        if self.tile != "auto":  # np.int64(64) as the int the planner tests for
            object.__setattr__(self, "tile", int(self.tile))
        resolve_device(self.device)  # a device PyTorch cannot use here is an option error, said at once

    @property
    def settings(self) -> dict[str, Any]:
        """The model settings asked for (``SRNetwork.configure`` keywords), without those left at None."""
        values = {"ig_lambda": self.ig_lambda, "seed": self.seed}
        return {name: value for name, value in values.items() if value is not None}
