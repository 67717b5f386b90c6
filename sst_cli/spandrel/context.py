"""How far a model looks: the receptive field, measured, for the context a tile needs.

spandrel says whether tiling is advisable, not how much context a tile needs. We measure it: the gradient
of one output block (at the centre of a noise probe) with respect to the input is non-zero exactly where
the input can change that block, so its extent is the receptive field. A field that reaches the probe's
border (window transformers, deep convnets, global pooling) has no finite bound we can state; the context
then starts at the radius holding all but 1e-6 of the measured sensitivity, and the engine measures what
tiles need on top of that when it tiles (``sst_cli.seams``). A model whose in-place writes autograd cannot undo
(PLKSR) is measured without gradients: the output change one changed input pixel makes, the same field seen from
the input's side; a model that fails that way too fails on the test image. The measurement takes a forward
and a backward pass on the CPU (10 s for HAT_SRx4 on 2 cores), so what it found is kept beside the seams
figures, per weights.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn

from ..errors import WriteError
from ..files import atomic_write_text
from ..seamcache import seams_cache_dir

T = TypeVar("T")

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
    else ``measure()``, stored."""
    return _remembered(f"reach-{key}", _reach_from, measure, dataclasses.asdict)


def cached_failure(name: str, trial: Callable[[], str | None]) -> str | None:
    """The answer stored as ``name`` (a failure, or None for none), else ``trial()``, stored; kept beside the
    reach, as it is a fact measured once per weights."""
    return _remembered(name, _failure_from, trial, lambda failure: {"failure": failure})


def _remembered(name: str, parse: Callable[[Any], T], measure: Callable[[], T], stored: Callable[[T], object]) -> T:
    """``parse`` of the JSON kept as ``name`` in the seams cache, else ``measure()``, kept there. A cache that
    cannot be read or written, or holds what ``parse`` refuses (ValueError), is ignored: ``measure`` then runs."""
    path = seams_cache_dir() / f"{name}.json"
    with suppress(OSError, ValueError, TypeError, KeyError):
        return parse(json.loads(path.read_text()))
    value = measure()
    with suppress(WriteError):
        atomic_write_text(path, json.dumps(stored(value)))
    return value


def _reach_from(data: Any) -> Reach:
    exact, default, note = data["exact"], data["default"], data["note"]
    if (exact is None or type(exact) is int) and type(default) is int and isinstance(note, str):
        return Reach(exact, default, note)
    raise ValueError("not a stored reach")


def _failure_from(data: Any) -> str | None:
    failure = data["failure"]
    if failure is None or isinstance(failure, str):
        return failure
    raise ValueError("not a stored bf16 answer")


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
    x = torch.rand(1, channels, side, side, generator=generator).to(device)
    run = call if call is not None else _plain_call
    try:
        sensitivity = _gradient_sensitivity(model, run, x, scale)
    except RuntimeError:  # in-place writes autograd needs undone (PLKSR): measured without gradients instead
        sensitivity = _perturbation_sensitivity(model, run, x, scale)
    return _reach_of(sensitivity, side // 2)


def _plain_call(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x)


def _gradient_sensitivity(
    model: nn.Module, run: Callable[[nn.Module, torch.Tensor], torch.Tensor], x: torch.Tensor, scale: int
) -> torch.Tensor:
    """|d centre output block / d input|, summed over channels: (side, side). The model gets a copy of the leaf,
    so that one writing into its input (RCAN scales it in place) does not write into a leaf autograd tracks."""
    leaf = x.clone().requires_grad_(True)
    c = x.shape[-1] // 2
    with torch.enable_grad():
        y = run(model, leaf.clone())
        y[..., c * scale : (c + 1) * scale, c * scale : (c + 1) * scale].sum().backward()
    assert leaf.grad is not None
    return leaf.grad.detach().abs().sum((0, 1)).double().cpu()


def _perturbation_sensitivity(
    model: nn.Module, run: Callable[[nn.Module, torch.Tensor], torch.Tensor], x: torch.Tensor, scale: int
) -> torch.Tensor:
    """How much each LR position's output block changes when the centre input pixel changes by 0.5: (side, side).

    The field seen from the other side (what one input reaches, not what one output sees), which is the same
    extent for a model that treats every position alike; two forwards, no gradients. Copies go in: a model may
    write into its input."""
    c = x.shape[-1] // 2
    moved = x.clone()
    centre = moved[..., c, c]
    moved[..., c, c] = torch.where(centre < 0.5, centre + 0.5, centre - 0.5)
    with torch.no_grad():
        change = (run(model, moved) - run(model, x.clone())).abs().sum((0, 1)).double().cpu()
    side = x.shape[-1]
    return change[: side * scale, : side * scale].reshape(side, scale, side, scale).sum((1, 3))


def _reach_of(sensitivity: torch.Tensor, c: int) -> Reach:
    """The reach a (side, side) sensitivity map centred on ``c`` shows."""
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
