"""A model loaded by spandrel, as an ``SRNetwork``: the engine asks it the same questions it asks SST.

Everything here comes from spandrel's ``ImageModelDescriptor`` (scale, channels, size requirements, dtype
support, purpose) and from what the module itself holds (window sizes, measured receptive field); nothing
branches on the architecture's name. The forward pass is spandrel's own call (padding to the size
requirements, the architecture's call function, clamping, cropping), so the pixels are spandrel's.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..archs import ModelDescriptor, SRNetwork
from ..errors import one_line
from ..runtime import is_out_of_memory
from .context import Reach, cached_failure

_LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601, the weights grayscale models are trained on
_TRIAL = (37, 45)  # an input size no window, multiple or training patch divides (DRCT's bf16 broke off its img_size)


@dataclass(frozen=True)
class Facts:
    """What ``sst models info FILE`` says about a spandrel model, besides the engine's descriptor."""

    architecture: str
    purpose: str
    tags: tuple[str, ...]
    input_channels: int
    output_channels: int
    supports_fp16: bool
    supports_bf16: bool
    size_requirements: str
    tiling: str
    library: str


def window_sizes(model: nn.Module) -> tuple[int, ...]:
    """Attention window sides the module's layers hold (``window_size`` / ``split_size`` attributes); empty
    for convnets. A fact the module states, read the same way whatever the architecture."""
    sides: set[int] = set()
    for module in model.modules():
        for name in ("window_size", "split_size"):
            value = getattr(module, name, None)
            values = value if isinstance(value, (tuple, list)) else (value,)
            sides.update(v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 1)
    return tuple(sorted(sides))


def repeated_block(model: nn.Module) -> type[nn.Module] | None:
    """The class that the module's ``nn.ModuleList``s hold most often, at least twice (torch's own classes
    aside): a transformer's block, which ``--compile`` then compiles one by one, blocks alike sharing a graph
    (``SRNetwork.compile_regions``). Ties go to the class met first, the outer one. None for most convnets."""
    held = Counter(
        type(child)
        for module in model.modules()
        if isinstance(module, nn.ModuleList)
        for child in module
        if not type(child).__module__.startswith("torch.")
    )
    kind, count = held.most_common(1)[0] if held else (None, 0)
    return kind if count >= 2 else None


def drop_stochastic_depth(model: nn.Module) -> None:
    """Replace stochastic depth (``DropPath`` modules) by ``nn.Identity``, which is what it computes at inference.

    Each block holds its own drop probability and dynamo guards on it, so blocks that are otherwise alike would
    each trace a graph of their own; the first block of a group, an ``Identity`` already, would too.
    """
    for module in model.modules():
        for name, child in module.named_children():
            if type(child).__name__ == "DropPath":
                setattr(module, name, nn.Identity())


def _contiguous_first(_block: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A block's first input in its contiguous layout (a no-op where it is already): the first block of a
    group is often fed a transposed view, which dynamo would trace as a graph of its own."""
    first = args[0] if args else None
    return (first.contiguous(), *args[1:]) if isinstance(first, torch.Tensor) else args


class _TrialOutOfMemory(Exception):
    """The bf16 trial ran out of memory: it says nothing of bf16."""


def requirement_text(minimum: int, multiple_of: int, square: bool) -> str:
    parts = [f"minimum {minimum} px"] if minimum else []
    parts += [f"multiple of {multiple_of} px"] if multiple_of > 1 else []
    parts += ["square"] if square else []
    return ", ".join(parts) or "none"


class SpandrelNetwork(SRNetwork):
    """NCHW RGB in [0, 1] -> NCHW RGB ``scale`` times larger through a spandrel ``ImageModelDescriptor``.

    Grayscale models get the BT.601 luma of the input and their one output channel is repeated to RGB.
    """

    def __init__(self, descriptor: Any, reach: Reach, library: str, key: str = "") -> None:
        super().__init__()
        self._key = key  # the weights' cache key: measured facts are kept under it ("" keeps none)
        self.inner = descriptor.model  # a submodule, so .to() and .eval() reach the weights
        self._call = descriptor  # spandrel's call: pads, runs, clamps and crops as spandrel does
        self.repeated_block = repeated_block(descriptor.model)
        self._made_alike = False  # compile_regions' changes, made once
        req = descriptor.size_requirements
        windows = window_sizes(descriptor.model)
        align = math.lcm(req.multiple_of, *windows) if windows else req.multiple_of
        self._descriptor = ModelDescriptor(
            architecture=descriptor.architecture.name,
            scale=descriptor.scale,
            size_multiple=align,
            exact_context=reach.exact,
            default_context=max(reach.default, max(windows, default=0)),
            bf16_safe=bool(descriptor.supports_bfloat16),
            parameters=sum(p.numel() for p in descriptor.model.parameters()),
            seam_note=reach.note,
        )
        self.facts = Facts(
            architecture=descriptor.architecture.name,
            purpose=str(descriptor.purpose),
            tags=tuple(descriptor.tags),
            input_channels=descriptor.input_channels,
            output_channels=descriptor.output_channels,
            supports_fp16=bool(descriptor.supports_half),
            supports_bf16=bool(descriptor.supports_bfloat16),
            size_requirements=requirement_text(req.minimum, req.multiple_of, req.square),
            tiling=descriptor.tiling.name.lower(),
            library=library,
        )
        self._width = max((p.shape[0] for p in descriptor.model.parameters() if p.ndim >= 2), default=64)

    def describe(self) -> ModelDescriptor:
        return self._descriptor

    def bf16_failure(self, device: torch.device) -> str | None:
        """spandrel's bf16 flag, checked once per weights and device kind by a small bf16 forward: DRCT says it
        supports bf16 but builds its attention mask in fp32 at any size but its training patch's."""
        stated = super().bf16_failure(device)
        if stated is not None:
            return stated
        try:
            if not self._key:
                return self._bf16_trial(device)
            return cached_failure(f"bf16-{self._key}-{device.type}", lambda: self._bf16_trial(device))
        except _TrialOutOfMemory:
            return (
                None  # not an answer to keep (a busy GPU): the flag is trusted, the run's own memory handling follows
            )

    def _bf16_trial(self, device: torch.device) -> str | None:
        """A forward of a bf16 copy (the weights themselves stay fp32) at ``_TRIAL``; what it raised, if anything."""
        try:
            trial = copy.deepcopy(self).to(device=device, dtype=torch.bfloat16)
            with torch.inference_mode():
                trial(torch.rand(1, 3, *_TRIAL, device=device, dtype=torch.bfloat16))
        except Exception as exc:  # third-party code: whatever it raises, bf16 is what failed, but for memory
            if is_out_of_memory(exc):
                raise _TrialOutOfMemory from exc
            return f"fails in bf16 on a {_TRIAL[1]}x{_TRIAL[0]} image ({one_line(exc)})"
        return None

    def compile_regions(self) -> list[nn.Module]:
        """The repeated blocks, first made alike where they differ only in ways that do nothing at inference
        (stochastic depth, the layout of their input), so that they share graphs: a SwinIR or HAT traced 6
        graphs per input size, now 2 (one per kind of window shift); a small HAT compiled in 41 s, not 65 s."""
        blocks = super().compile_regions()
        if blocks and not self._made_alike:
            drop_stochastic_depth(self.inner)
            for block in blocks:
                block.register_forward_pre_hook(_contiguous_first)
            self._made_alike = True
        return blocks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.facts.input_channels == 1:
            weights = torch.tensor(_LUMA, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
            x = (x * weights).sum(1, keepdim=True)
        y = self._call(x)
        return y.expand(-1, 3, -1, -1) if y.shape[1] == 1 else y

    def activation_bytes(self, height: int, width: int, dtype: torch.dtype = torch.float32) -> int:
        """A rough bound: a few feature maps of the widest layer, plus the output; windowed attention adds
        its score matrices (window area per pixel)."""
        item = torch.finfo(dtype).bits // 8
        windows = window_sizes(self.inner)
        per_pixel = 8 * self._width + (max(windows) ** 2 if windows else 0)
        scale = self._descriptor.scale
        return item * height * width * (per_pixel + 6 * scale * scale)
