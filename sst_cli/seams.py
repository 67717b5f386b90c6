"""How far tiled output strays from the whole image, measured, for networks whose tiles cannot be exact.

Global pooling, channel attention over all pixels or attention over a grid spanning the image (HAT, DAT,
OmniSR, ...) make every output pixel depend a little on the whole input, so no context makes a tile equal
the whole image; how much it strays depends on the weights, so we measure it instead of guessing from the
module's class names. A probe picture (shapes and texture at every scale, fixed seed) runs once whole,
then tiled exactly as the engine tiles such networks (aligned, feathered) with a given tile and context; the
PSNR between the two is the figure. The engine takes the smallest context that reaches the target with a
margin for tiles of the size it will run (a chosen ``--tile``, or those ``auto`` fits in memory; else the
worst case, ``MIN_TILE``), and states the measured figure whenever it tiles below it.

A tile strays by how far the statistics of its context box differ from the whole picture's, so a larger
picture strays more: the probe is as large as the user's picture (rounded up to ``PROBE_STEP``), from
``MIN_PROBE`` to ``MAX_PROBE`` px and no larger than runs whole in memory; pictures beyond it may stray more
(``benchmarks/RESULTS.md``). The probe's content strays more than the photos measured there. Figures are
kept on disk per network (``seamcache.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .seamcache import SeamCache
from .tiling import plan_tiles, run_tiles

Forward = Callable[[torch.Tensor], torch.Tensor]  # NCHW in [0, 1] -> NCHW scale times larger, on the CPU

TARGET_DB = 60.0  # what tiled output should keep from the whole image's
MARGIN_DB = 3.0  # kept above the target on the probe: real pictures vary more than it does
MIN_PROBE = 192  # LR pixels: the smallest probe, for pictures up to that size
MAX_PROBE = 512  # the largest (several times a 32 px tile with 64 px of context); larger pictures may stray more
PROBE_STEP = 128  # probe sides between are the picture's larger side rounded up to this (cached per side)
MIN_TILE = 32  # the smallest tile contexts are learned for (LR pixels, rounded up to the alignment)
CONTEXTS = (16, 32, 48, 64)  # contexts tried, smallest first (rounded up to the alignment)


@dataclass(frozen=True)
class SeamBound:
    """PSNR (dB) of a ``tile``-pixel core with ``context`` pixels around it against the whole probe; ``measured``
    False (psnr NaN) where the probe ran out of memory."""

    tile: int
    context: int
    psnr: float
    probe: int
    measured: bool = True

    def text(self) -> str:
        if not self.measured:
            return (
                f"{self.tile} px tiles with {self.context} px of context are not measured (the {self.probe} px seams "
                "probe ran out of memory): how far they stray from the whole image is unknown"
            )
        return (
            f"{self.tile} px tiles with {self.context} px of context measured {_db(self.psnr)} from the whole image "
            f"on a {self.probe} px probe"
        )


def probe_side(height: int, width: int, align: int = 1, largest: int = MAX_PROBE) -> int:
    """The probe side that judges tiles of a ``height`` x ``width`` picture: its larger side rounded up to
    ``PROBE_STEP``, within ``MIN_PROBE`` .. ``largest`` (what runs whole in memory), a multiple of ``align``."""
    side = -(-max(height, width) // PROBE_STEP) * PROBE_STEP
    side = max(min(side, largest, MAX_PROBE), min(MIN_PROBE, largest))
    return max(align, side // align * align)


def probe_picture(side: int, channels: int = 3, seed: int = 0) -> torch.Tensor:
    """(channels, side, side) in [0, 1]: noise at octaves from the whole side down to one pixel, so the
    probe has large shapes (which global statistics see) as well as texture (which windows see)."""
    generator = torch.Generator().manual_seed(seed)
    picture = torch.zeros(1, channels, side, side)
    cells, weight = 2, 1.0
    while cells <= side:
        grid = torch.rand(1, channels, cells, cells, generator=generator) - 0.5
        picture += weight * F.interpolate(grid, size=(side, side), mode="bicubic", align_corners=False)
        cells, weight = cells * 2, weight * 0.7
    picture = picture - picture.amin()
    return (picture / picture.amax().clamp_min(1e-6))[0]


class SeamProbe:
    """Measures one network's seams on a probe: the whole probe once, then one tiled run per question."""

    def __init__(
        self,
        forward: Forward,
        scale: int,
        align: int = 1,
        side: int = MIN_PROBE,
        batch: int = 1,
        cache: SeamCache | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        """``say``: told once, before the first figure this probe measures (not one kept on disk), that it runs."""
        self.forward, self.scale, self.align, self.batch, self.cache = forward, scale, align, batch, cache
        self.say = say
        self.side = -(-side // align) * align
        self.picture = probe_picture(self.side)
        self._whole: torch.Tensor | None = None
        self._measured: dict[tuple[int, int], SeamBound] = {}

    @property
    def ran_whole(self) -> bool:
        """Whether the whole probe has run (what runs out of memory after it is a tiled run)."""
        return self._whole is not None

    def measure(self, tile: int, context: int) -> SeamBound:
        """The bound of ``tile``-pixel cores with ``context`` pixels of context (cached in memory and on disk)."""
        key = (tile, context)
        if key not in self._measured:
            if self.cache is None:
                psnr = self._psnr(tile, context)
            else:
                psnr = self.cache.get_or_measure(self.side, tile, context, lambda: self._psnr(tile, context))
            self._measured[key] = SeamBound(tile, context, psnr, self.side)
        return self._measured[key]

    def smallest_context(self, tile: int, contexts: Sequence[int], target: float) -> SeamBound:
        """The smallest of the ascending ``contexts`` whose bound reaches ``target`` dB, else the best one tried;
        by bisection, since more context strays less (so in every figure of ``benchmarks/bench_seams.py``)."""
        lo, hi = 0, len(contexts) - 1
        found: SeamBound | None = None
        tried: list[SeamBound] = []
        while lo <= hi:
            mid = (lo + hi) // 2
            bound = self.measure(tile, contexts[mid])
            tried.append(bound)
            if bound.psnr >= target:
                found, hi = bound, mid - 1
            else:
                lo = mid + 1
        assert tried, "no context to try"
        return found if found is not None else max(tried, key=lambda b: b.psnr)

    def _psnr(self, tile: int, context: int) -> float:
        if self._whole is None:
            if self.say is not None:  # a real network takes minutes on a CPU here: without a word it looked hung
                self.say(
                    f"measuring how far tiles of this network stray from the whole image, on a {self.side} px probe "
                    "(once: the figures are kept for later runs)"
                )
            self._whole = self.forward(self.picture[None])[0].clamp(0, 1)
        tiles = plan_tiles(self.side, self.side, tile, context, self.align)
        out = run_tiles(self.forward, self.picture, self.scale, tiles, batch=self.batch, blend=True).clamp(0, 1)
        mse = float(((out.double() - self._whole.double()) ** 2).mean())
        return math.inf if mse == 0 else 10 * math.log10(1 / mse)


class SeamGuide:
    """What one network needs for tiles within ``TARGET_DB`` of the whole image, learned on a probe the first
    time it is asked (tiling only): the context the smallest tiles it is asked about need (``needed``; by
    default ``MIN_TILE`` pixels, the worst case), and the measured figure of any plan below that (``advice``)."""

    def __init__(
        self,
        forward: Forward,
        scale: int,
        align: int,
        default_context: int,
        batch: int = 1,
        side: int = MIN_PROBE,
        cache: SeamCache | None = None,
        tile: int = MIN_TILE,
        probe: SeamProbe | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        """``batch``: probe tiles per forward pass; ``side``: the probe's (``probe_side``); ``cache``: figures on
        disk; ``tile``: the smallest tile side to learn the context for (the tiles the plan will run: larger
        tiles cost the probe less and stray less, so they may need less context; at most half the probe, at
        least ``MIN_TILE``); ``probe``: one already made for this side, shared (its whole run is computed once);
        ``say``: the probe's (``SeamProbe``)."""
        self.align = align
        wanted = {-(-c // align) * align for c in (default_context, *CONTEXTS) if c >= default_context}
        self.contexts = sorted(wanted)
        self.probe = probe or SeamProbe(forward, scale, align, side=side, batch=batch, cache=cache, say=say)
        self.tile = max(align, -(-MIN_TILE // align) * align, min(tile, self.probe.side // 2) // align * align)
        self._needed: SeamBound | None = None

    @property
    def learned(self) -> bool:
        """Whether ``needed`` is known (measured, or given up on): asking for it then runs nothing."""
        return self._needed is not None

    def unmeasured(self) -> None:
        """The probe does not fit in memory: tiles take the largest context tried, and advice says it is unmeasured
        (no probe runs again)."""
        self._needed = SeamBound(self.tile, self.contexts[-1], math.nan, self.probe.side, measured=False)

    @property
    def needed(self) -> SeamBound:
        """The smallest context reaching the target (with its margin) at ``tile``, else the best one tried."""
        if self._needed is None:
            self._needed = self.probe.smallest_context(self.tile, self.contexts, TARGET_DB + MARGIN_DB)
        return self._needed

    def _probe_tile(self, tile: int) -> int:
        """``tile`` as measured on the probe: at most half its side (at least 2x2 tiles), aligned."""
        return max(self.align, min(tile, self.probe.side // 2 // self.align * self.align))

    @property
    def reachable(self) -> bool:
        return self.needed.psnr >= TARGET_DB + MARGIN_DB

    def advice(self, tile: int, context: int, measure: bool = True) -> str:
        """One sentence on the seams of ``tile``-pixel tiles (the shorter side) with ``context`` pixels; with
        ``measure`` False, a bound not yet known is said to be unmeasured instead of measured."""
        needed = self.needed
        if self.reachable and tile >= needed.tile and context >= needed.context:
            bound = needed  # larger tiles stray less: the bound learned for the smallest holds
        elif needed.measured and measure:
            bound = self.probe.measure(self._probe_tile(tile), context)
        else:
            bound = SeamBound(tile, context, math.nan, self.probe.side, measured=False)
        if not bound.measured:
            return bound.text()
        if bound.psnr >= TARGET_DB:
            larger = " (larger tiles and more context stray less" + (
                ", larger pictures more)" if self.probe.side >= MAX_PROBE else ")"
            )
            return bound.text() + larger
        if self.reachable:
            return (
                f"{bound.text()}, below {TARGET_DB:.0f} dB, which needs tiles of at least {needed.tile} px with "
                f"{needed.context} px of context ({_db(needed.psnr)} there)"
            )
        return (
            f"{bound.text()}, below {TARGET_DB:.0f} dB, and no context up to {self.contexts[-1]} px reaches it "
            f"with {needed.tile} px tiles (best {_db(needed.psnr)}): run whole images where memory allows (--tile auto)"
        )


def _db(psnr: float) -> str:
    return "identical" if math.isinf(psnr) else f"{psnr:.1f} dB"
