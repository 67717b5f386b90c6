"""How an upscaler cuts images for its network: whole, or tiles with context, and how many per forward pass.

The plan follows the network's own description (window alignment, the context that makes tiles exact, or
its default), the options, and what the device allows: the memory budget, CUDA's 2**31-element index limit
(``widest.py``), and what this planner learned while running: the size of a pass that ran out of memory (a
ceiling for later images) and, for networks whose tiles cannot be exact, the context a probe measured
(``seams.py``, a probe sized to the picture and kept on disk). The only forward passes here are those two
probes' (small inputs, once per network and probe size); the ``Upscaler`` runs the images. A seams probe that
runs out of memory is retried with one tile per pass, then on smaller probes, and at last given up (the largest
context, unmeasured); what ran out is remembered, so later pictures do not try it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .archs import ModelDescriptor, SRNetwork, network_of
from .options import UpscaleOptions
from .runtime import fp32_mode, is_out_of_memory, memory_budget, release_memory
from .seamcache import SeamCache, cache_key, weights_digest
from .seams import CONTEXTS, MAX_PROBE, MIN_PROBE, MIN_TILE, PROBE_STEP, SeamGuide, probe_side
from .tiling import (
    TileSize,
    align_overlap,
    align_tile_size,
    cheapest_tile,
    covers_whole,
    halve_tile,
    tile_sides,
    tiling_cost,
)
from .widest import INDEX_LIMIT, widest_per_pixel

_LEARNING_ROUNDS = 3  # auto's tiles measured at their own size at most this often, then at MIN_TILE's


@dataclass(frozen=True)
class TilePlan:
    """How an image is cut: tile (a side or rows x cols, 0 = whole image), context overlap, alignment,
    blending, and tiles per forward pass."""

    tile: TileSize
    overlap: int
    align: int
    blend: bool
    batch: int = 1
    needs: int = 0  # when even the smallest tile is over the memory budget: the bytes its pass needs, else 0
    whole_only: bool = False  # --exact on a network no context makes exact: tiles would break the promise

    def cost(self, height: int, width: int) -> float:
        """Pixels computed per image pixel: tiles compute their context too, so small tiles cost a lot."""
        return tiling_cost(height, width, self.tile, self.overlap)


class Planner:
    """Tile plans for one loaded network on one device; see the module docstring."""

    def __init__(
        self,
        model: nn.Module,
        descriptor: ModelDescriptor,
        options: UpscaleOptions,
        device: torch.device,
        dtype: torch.dtype,
        forward: Callable[[torch.Tensor], torch.Tensor],
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.model, self.descriptor, self.options = model, descriptor, options
        self._say = say or (lambda _: None)  # notices, such as a seams probe that ran out of memory
        self.device, self.dtype = device, dtype
        self.scale = descriptor.scale
        self._forward = forward  # one batch of tiles through the network: the seams probe runs it
        # Learned on a probe (one per probe side, shared by the tile sizes learned on it) when a network whose
        # tiles cannot be exact tiles; the last one asked for is what messages about seams quote.
        self._guides: dict[tuple[int, int], SeamGuide] = {}
        self._seam_key = (MIN_PROBE, MIN_TILE)  # (probe side, smallest tile) of the last picture planned
        self._seam_cache: SeamCache | None = None
        self._probe_batch = options.batch  # the probe's tiles per pass: the user's, or 1 after running out of memory
        self._probe_ran_out: int | None = None  # the smallest probe side that ran out of memory: none that large again
        self._said_unmeasured = False  # that no probe fits in memory: said once
        # After an out-of-memory retry: the bytes of the largest pass that then ran, so the next images start
        # there instead of failing at the same size again.
        self.memory_ceiling: int | None = None
        self._widest: float | None = None  # see widest_per_pixel

    def lower_ceiling(self, pass_bytes: int) -> None:
        """A pass of ``pass_bytes`` is the most that ran after running out of memory: plan within it from now."""
        self.memory_ceiling = pass_bytes if self.memory_ceiling is None else min(pass_bytes, self.memory_ceiling)

    def plan(self, height: int, width: int) -> TilePlan:
        """Tile, overlap and batch for an image, from the model's own description and the options.

        ``tile="auto"`` runs the whole image when it fits the memory budget; otherwise it takes the tile shape
        (squares or strips) that computes the fewest pixels while its context fits, then as many tiles per
        pass as still fit, up to ``batch``: a smaller batch costs little, a smaller tile costs overlap.
        The overlap itself stays the model's default: a smaller one is faster but shows seams, so it is
        only ever the user's choice (``tile_overlap``). A network whose tiles cannot be exact (global pooling,
        channel attention) gets, when it is tiled, at least the context a probe measured to keep its tiles
        within 60 dB of the whole image (``seams.py``)."""
        d, o = self.descriptor, self.options
        align = d.size_multiple
        # Cores are cropped only where tiling can be exact; a network that sees the whole image (or says
        # nothing about its reach) gets feathered overlaps, which hide what tiling cannot avoid.
        blend = d.exact_context is None
        if o.exact:
            if d.exact_context is None:
                return TilePlan(0, 0, align, blend, whole_only=True)  # no finite context is exact: never tiled
            overlap = align_overlap(d.exact_context, align)
        elif o.tile_overlap is not None:
            overlap = align_overlap(o.tile_overlap, align)
        else:
            overlap = align_overlap(d.default_context, align)
        if o.tile != "auto":
            tile: TileSize = align_tile_size(o.tile, align) if o.tile else 0
            tile = 0 if covers_whole(height, width, tile, overlap) else tile  # tiles as large as the image with context
            if blend and o.tile_overlap is None and self._sees_whole_with_any_context(height, width, tile):
                tile = 0  # whatever context the probe found, each tile would see the whole picture: it is not run
            if blend and o.tile_overlap is None and tile:
                # The context the chosen tiles need, learned at their size (cheaper, and often less context).
                overlap = max(overlap, self.seams_for(height, width, min(tile_sides(tile))).needed.context)
            batch = o.batch
            while self.memory_ceiling is not None and self.pass_bytes(tile, overlap, batch, height, width) > (
                self.memory_ceiling
            ):
                if batch > 1:
                    batch //= 2
                    continue
                smaller = halve_tile(tile, height, width, align)
                if smaller is None:
                    break
                tile = smaller
            return TilePlan(tile, overlap, align, blend, batch)
        budget = self.budget()
        widest = self.widest_per_pixel()

        def fits(h: int, w: int) -> bool:
            return self.activation_bytes(h, w) <= budget and h * w * widest <= INDEX_LIMIT

        if fits(height, width):
            return TilePlan(0, overlap, align, blend)
        if blend and o.tile_overlap is None and self._sees_whole_with_any_context(height, width, align):
            return TilePlan(0, overlap, align, blend)  # even the smallest tile would see the whole picture: no probe
        if blend and o.tile_overlap is None:
            overlap = self._learned_overlap(height, width, overlap, fits)

        # When nothing fits, the smallest aligned tile runs and out-of-memory halving has the last word.
        found = cheapest_tile(height, width, overlap, align, fits)
        rows, cols = found or (align, align)
        largest = self.pass_bytes((rows, cols), overlap, 1, height, width)
        if covers_whole(height, width, (rows, cols), overlap):  # one tile with its context is the whole picture
            return TilePlan(0, overlap, align, blend, needs=largest * (not found))  # over budget: said, as tiles are
        batch = max(1, min(o.batch, budget // max(1, largest)))
        return TilePlan(rows if rows == cols else (rows, cols), overlap, align, blend, batch, largest * (not found))

    def _sees_whole_with_any_context(self, height: int, width: int, tile: TileSize) -> bool:
        """Whether each ``tile`` would see the whole picture with the widest context a seams probe could ask for (and
        the probe would run a picture this size whole): then no probe need run."""
        return covers_whole(height, width, tile, self._widest_context()) and max(height, width) <= self._largest_probe()

    @property
    def seams(self) -> SeamGuide:
        """The seams guide of the last picture planned (``seams_for``); asked only of networks whose tiles cannot
        be exact."""
        side, tile = self._seam_key
        guide = self._guide(side, tile)
        return guide if guide.learned else self._learned(side, tile)

    def seams_for(self, height: int, width: int, tile: int = MIN_TILE) -> SeamGuide:
        """The context this network's tiles of at least ``tile`` px need within 60 dB of the whole image, measured
        on first use on a probe as large as the picture (``seams.probe_side``: up to 512 px and what runs whole
        in memory, and smaller than any that ran out of memory)."""
        side = probe_side(height, width, self.descriptor.size_multiple, self._largest_probe())
        return self._learned(side, tile)

    def seams_advice(self, tile: int, context: int) -> str:
        """``SeamGuide.advice`` for the last picture planned; a figure that runs out of memory to measure is said to
        be unmeasured."""
        guide = self.seams
        try:
            return guide.advice(tile, context)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
        release_memory(self.device)  # outside the except block: the failed pass's tensors went with it
        return guide.advice(tile, context, measure=False)

    def _learned(self, side: int, tile: int) -> SeamGuide:
        """The guide for ``tile`` px tiles, learned on a probe of ``side`` px, or on the largest smaller one that
        fits in memory, or given up on (``SeamGuide.unmeasured``) when even the smallest does not."""
        while True:
            self._seam_key = (side, tile)
            guide = self._guide(side, tile)
            if self._learn(guide):
                return guide
            side = min(side, probe_side(side, side, self.descriptor.size_multiple, self._largest_probe()))

    def _learn(self, guide: SeamGuide) -> bool:
        """Measure what ``guide`` needs now; False when the probe ran out of memory and a smaller pass or probe is
        next (remembered for later pictures)."""
        if guide.learned:
            return True
        if self._probe_ran_out is not None and guide.probe.side >= self._probe_ran_out:
            guide.unmeasured()
            if not self._said_unmeasured:
                self._said_unmeasured = True
                self._say(
                    f"the seams probe ran out of memory even at {guide.probe.side} px: tiles get the largest context "
                    f"tried ({guide.needed.context} px) unless --tile-overlap is given, unmeasured"
                )
            return True
        try:
            guide.needed  # noqa: B018 (measured on first use)
            return True
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
        release_memory(self.device)  # outside the except block: the failed pass's tensors went with it
        if guide.probe.batch > 1 and guide.probe.ran_whole:  # its tiles ran out, several per pass
            self._probe_batch = guide.probe.batch = 1
            self._say("the seams probe ran out of memory: its tiles run one per pass")
            return False
        self._probe_ran_out = guide.probe.side
        self._say(
            f"the {guide.probe.side} px seams probe ran out of memory: measuring on a smaller one, so tiles of "
            "pictures that large may stray more than measured"
        )
        return False

    def _learned_overlap(self, height: int, width: int, overlap: int, fits: Callable[[int, int], bool]) -> int:
        """The context ``tile="auto"``'s tiles need, learned at their own size: the tiles that fit with ``overlap``
        are measured, and measured again while the context they need makes the tiles smaller than those measured
        (a few rounds; then the context of ``MIN_TILE`` tiles, which holds for every tile)."""
        align = self.descriptor.size_multiple
        tile = cheapest_tile(height, width, overlap, align, fits)
        for _ in range(_LEARNING_ROUNDS):
            needed = self.seams_for(height, width, min(tile) if tile else align).needed
            overlap = max(overlap, needed.context)
            tile = cheapest_tile(height, width, overlap, align, fits)
            if tile is None or min(tile) >= needed.tile:
                return overlap
        return max(overlap, self.seams_for(height, width).needed.context)

    def _guide(self, side: int, tile: int) -> SeamGuide:
        if (side, tile) not in self._guides:
            d = self.descriptor
            batch = self._probe_batch  # as many tiles per pass as the user's tiles, until that ran out of memory
            shared = next((g.probe for (s, _), g in self._guides.items() if s == side), None)
            self._guides[side, tile] = SeamGuide(
                self._forward, self.scale, d.size_multiple, d.default_context, batch, side, self._cache(), tile, shared,
                self._say,
            )  # fmt: skip
        return self._guides[side, tile]

    def _cache(self) -> SeamCache:
        """Figures on disk, keyed by the weights and everything else they depend on (``seamcache.py``)."""
        if self._seam_cache is None:
            d = self.descriptor
            key = cache_key(weights_digest(self.model), d.scale, d.size_multiple, self.dtype, self.device.type)
            self._seam_cache = SeamCache(key)
        return self._seam_cache

    def _widest_context(self) -> int:
        """The most context a seams probe can ask for (``SeamGuide.contexts``), aligned."""
        return align_overlap(max(self.descriptor.default_context, *CONTEXTS), self.descriptor.size_multiple)

    def _largest_probe(self) -> int:
        """The largest probe side (a multiple of ``PROBE_STEP`` up to ``MAX_PROBE``) whose whole run fits memory,
        and smaller than one that ran out of it."""
        side = MAX_PROBE
        budget = self.budget()
        ran_out = MAX_PROBE + 1 if self._probe_ran_out is None else self._probe_ran_out
        while side > MIN_PROBE and (self.activation_bytes(side, side) > budget or side >= ran_out):
            side -= PROBE_STEP
        return side

    def budget(self) -> int:
        """Bytes one forward pass may use: ``max_memory`` or a share of free memory, and never more than a pass
        that ran out of memory."""
        o = self.options
        budget = o.max_memory if isinstance(o.max_memory, int) else memory_budget(self.device)  # bytes once made
        return budget if self.memory_ceiling is None else min(budget, self.memory_ceiling)

    def images_per_pass(self, height: int, width: int, limit: int = 8) -> int:
        """How many whole images of this size one forward pass takes within the memory budget, at most ``limit``:
        1 when an image is tiled (its tiles are batched instead) or when the output depends on position."""
        if self.plan(height, width).tile or self.descriptor.position_dependent:
            return 1
        fits = self.budget() // max(1, self.activation_bytes(height, width))
        widest = height * width * self.widest_per_pixel()  # CUDA: n images' widest tensor under 2**31 elements
        if widest:
            fits = min(fits, int(INDEX_LIMIT // widest))
        return int(max(1, min(limit, fits)))

    def activation_bytes(self, height: int, width: int) -> int:
        """Estimated peak activation memory of one tile of this size in one forward pass."""
        network = network_of(self.model)
        if isinstance(network, SRNetwork):
            return int(network.activation_bytes(height, width, self.dtype))
        return 1024 * height * width * torch.finfo(self.dtype).bits // 8  # a foreign module: ~1k channels

    def widest_per_pixel(self) -> float:
        """On CUDA, the largest tensor per input pixel (``widest.py``: tiles stay under 2**31 elements), measured
        once on a small input, on the meta device where the network runs there (no first CUDA forward at a size
        no image uses), else on the device; 0 elsewhere (CPU kernels index in 64 bits)."""
        if self.device.type != "cuda":
            return 0.0
        if self._widest is None:
            side = max(64, 2 * self.descriptor.size_multiple)
            side += -side % self.descriptor.size_multiple
            self._widest = 0.0  # a network that refuses the probe's size: memory alone decides
            for device in (torch.device("meta"), self.device):  # shapes alone, or the device (no meta kernel)
                try:
                    with fp32_mode(self.device, self.dtype):
                        self._widest = widest_per_pixel(self.model, side, device, self.dtype)
                    break
                except (RuntimeError, ValueError, NotImplementedError):
                    continue
        return self._widest

    def pass_bytes(self, tile: TileSize, overlap: int, batch: int, height: int, width: int) -> int:
        """Activation bytes of one forward pass of ``batch`` tiles with their context (the whole image: one)."""
        rows, cols = tile_sides(tile)
        if rows == 0:
            return self.activation_bytes(height, width)
        return batch * self.activation_bytes(min(height, rows + 2 * overlap), min(width, cols + 2 * overlap))
