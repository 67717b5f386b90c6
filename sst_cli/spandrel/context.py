"""How far a model looks: the receptive field, measured, for the context a tile needs.

spandrel says whether tiling is advisable, not how much context a tile needs. We measure it: the gradient
of one output block (at the centre of a noise probe) with respect to the input is non-zero exactly where
the input can change that block, so its extent is the receptive field. A field that reaches the probe's
border (window transformers, deep convnets, global pooling) has no finite bound we can state; the context
then starts at the radius holding all but 1e-6 of the measured sensitivity, and the engine measures what
tiles need on top of that when it tiles (``sst_cli.seams``). The measurement takes a forward and a backward
pass on the CPU (10 s for HAT_SRx4 on 2 cores), so what it found is kept beside the seams figures, per weights.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import WriteError
from ..files import atomic_write_text
from ..seamcache import seams_cache_dir

_TAIL = 1e-6  # share of the sensitivity a non-exact context may leave outside
_MARGIN = 2  # pixels added to a measured finite field: a probe's dead ReLU may hide its last ring


@dataclass(frozen=True)
class Reach:
    """``exact``: LR pixels of context that make tiles equal the whole image (None: none found);
    ``default``: the context used otherwise; ``note``: what was measured, said when tiling a model whose
    tiles cannot be exact."""

    exact: int | None
    default: int
    note: str = ""


def cached_reach(key: str, measure: Callable[[], Reach]) -> Reach:
    """The reach stored under ``key`` (``seamcache.cache_key`` of the weights and what the probe depends on),
    else ``measure()``, stored. A cache that cannot be read or written is ignored: the probe then runs."""
    path = seams_cache_dir() / f"reach-{key}.json"
    with suppress(OSError, ValueError, TypeError, KeyError):
        data = json.loads(path.read_text())
        exact, default, note = data["exact"], data["default"], data["note"]
        if (exact is None or type(exact) is int) and type(default) is int and isinstance(note, str):
            return Reach(exact, default, note)
    reach = measure()
    with suppress(WriteError):
        atomic_write_text(path, json.dumps(dataclasses.asdict(reach)))
    return reach


def probe_side(minimum: int, multiple_of: int, wanted: int) -> int:
    side = max(wanted, minimum)
    return -(-side // multiple_of) * multiple_of


def measure_reach(
    model: nn.Module,
    channels: int,
    scale: int,
    *,
    minimum: int = 0,
    multiple_of: int = 1,
    probe: int = 64,
    call: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
) -> Reach:
    """The receptive field of ``model`` (in float32 on the CPU, eval mode) on a ``probe``-pixel noise image.

    ``call(model, x)`` runs it as its library does (FBCNN returns a tuple, FDnCNN appends a noise-level channel);
    the default is ``model(x)``.
    """
    side = probe_side(minimum, multiple_of, probe)
    generator = torch.Generator().manual_seed(0)
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    x = torch.rand(1, channels, side, side, generator=generator).to(device).requires_grad_(True)
    c = side // 2
    with torch.enable_grad():
        y = call(model, x) if call is not None else model(x)
        y[..., c * scale : (c + 1) * scale, c * scale : (c + 1) * scale].sum().backward()
    assert x.grad is not None
    sensitivity = x.grad.detach().abs().sum((0, 1)).double().cpu()
    rows = torch.nonzero(sensitivity.sum(1)).flatten()
    cols = torch.nonzero(sensitivity.sum(0)).flatten()
    if rows.numel() == 0:  # a constant output: any context is exact
        return Reach(0, 0)
    radius = max(c - int(rows[0]), int(rows[-1]) - c, c - int(cols[0]), int(cols[-1]) - c)
    if radius < c - 1:  # the field ends inside the probe
        return Reach(radius + _MARGIN, radius + _MARGIN)
    held = _radius_holding(sensitivity, c, 1 - _TAIL)
    note = f"its receptive field reaches beyond {c} px (measured), so tiles cannot be exact (--exact runs whole images)"
    return Reach(None, held, note)


def _radius_holding(sensitivity: torch.Tensor, centre: int, share: float) -> int:
    """The smallest square radius around ``centre`` holding ``share`` of the total sensitivity."""
    total = float(sensitivity.sum())
    n = sensitivity.shape[0]
    for r in range(n):
        lo, hi = max(0, centre - r), min(n, centre + r + 1)
        if float(sensitivity[lo:hi, lo:hi].sum()) >= share * total:
            return max(1, r)
    return math.ceil(n / 2)
