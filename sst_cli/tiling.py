"""Tile planning and tiled inference, independent of any network class.

Window-attention SR networks without shifted windows (SST) pad each layer bottom/right to a
multiple of the window size and tile windows from the image origin.  A tile whose context box
starts on a multiple of ``align`` (the lcm of the window sizes) therefore sees the same window
grid as the whole image, and a tile that ends at the image edge gets the same padding.  For such
models tiles are aligned, overlaps are whole multiples of ``align``, the last tile runs to the
image edge (never shifted back) and cores are cropped into the output.  Generic models
(``align=1``) use feathered blending over the overlaps instead.

The output canvas lives on the CPU; only tiles go through ``forward``, so device memory grows with
the tile, not with the image.  With ``origins=True`` the tiler also tells ``forward`` where each tile's
context box starts in the whole image (``forward(x, [(y, x), ...])`` in LR pixels), for networks whose
output depends on position (noise keyed by position); it never needs to know which network that is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from sst_cli.allocator import give_back_freed
from sst_cli.errors import ConfigError

Forward = Callable[..., torch.Tensor]  # forward(x), or forward(x, origins) when run with origins=True
TileSize = int | tuple[int, int]  # a square side or (rows, cols) in LR pixels; 0 = the whole image
_WEIGHT_BITS = 16  # feather weights are multiples of 2**-16 so a constant image blends exactly


@dataclass(frozen=True)
class Tile:
    """One tile: the core it owns in the output and the larger context fed to the model (LR pixels)."""

    y0: int
    y1: int
    x0: int
    x1: int
    cy0: int
    cy1: int
    cx0: int
    cx1: int

    @property
    def context_shape(self) -> tuple[int, int]:
        """(height, width) of the context box; tiles with equal shapes can be batched."""
        return self.cy1 - self.cy0, self.cx1 - self.cx0


def align_tile_size(tile: int, align: int) -> int:
    """Round a tile size down to a multiple of ``align`` (at least ``align``); 0 (whole image) stays 0."""
    _check_align(align)
    if tile < 0:
        raise ConfigError(f"tile size must be >= 0 (0 = whole image), got {tile}")
    if tile == 0:
        return 0
    return max(align, tile // align * align)


def align_overlap(overlap: int, align: int) -> int:
    """Round an overlap up to a multiple of ``align`` so context boxes start on the window grid."""
    _check_align(align)
    if overlap < 0:
        raise ConfigError(f"tile overlap must be >= 0, got {overlap}")
    return -(-overlap // align) * align


def tile_sides(tile: TileSize) -> tuple[int, int]:
    """(rows, cols) of a tile size; 0 stays (0, 0), the whole image."""
    if isinstance(tile, tuple):
        rows, cols = tile
        if (rows == 0) != (cols == 0):
            raise ConfigError(f"a tile is the whole image (0) or has two positive sides, got {rows}x{cols}")
        return rows, cols
    return tile, tile


def tile_label(tile: TileSize) -> str:
    """How a tile size reads in messages: ``whole image``, ``256 px`` or ``128x448 px`` (rows x cols)."""
    rows, cols = tile_sides(tile)
    if rows == 0:
        return "whole image"
    return f"{rows} px" if rows == cols else f"{rows}x{cols} px"


def plan_tiles(height: int, width: int, tile: TileSize, overlap: int, align: int = 1) -> list[Tile]:
    """Split an image into row-major tiles whose cores partition it exactly.

    Cores form a grid of ``tile`` (a side, or rows x cols) from the origin; the last row/column runs to the
    image edge and may be smaller.  Contexts are cores grown by ``overlap`` and clipped to the image.
    """
    _check_align(align)
    if height < 1 or width < 1:
        raise ConfigError(f"image size must be positive, got {height}x{width}")
    rows, cols = tile_sides(tile)
    for side in (rows, cols):
        if side < 0:
            raise ConfigError(f"tile size must be >= 0 (0 = whole image), got {side}")
        if side % align:
            raise ConfigError(f"tile size {side} is not a multiple of the model's alignment {align}")
    if overlap < 0:
        raise ConfigError(f"tile overlap must be >= 0, got {overlap}")
    if overlap % align:
        raise ConfigError(f"tile overlap {overlap} is not a multiple of the model's alignment {align}")
    if rows == 0 or covers_whole(height, width, tile, overlap):
        return [Tile(0, height, 0, width, 0, height, 0, width)]
    return [
        Tile(y0, y1, x0, x1, cy0, cy1, cx0, cx1)
        for (y0, y1), (cy0, cy1) in _spans(height, rows, overlap)
        for (x0, x1), (cx0, cx1) in _spans(width, cols, overlap)
    ]


def covers_whole(height: int, width: int, tile: TileSize, overlap: int) -> bool:
    """Whether every tile's context is the whole image: each would compute all of it, so one whole pass gives the
    same pixels (and a network that cannot be tiled exactly then needs no seams probe)."""
    rows, cols = tile_sides(tile)
    return rows == 0 or all(
        context == (0, size)
        for size, side in ((height, rows), (width, cols))
        for _, context in _spans(size, side, overlap)
    )


def _spans(size: int, tile: int, overlap: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Cores and contexts along one axis: cores of ``tile`` from 0 (the last one to the edge), contexts grown
    by ``overlap`` and clipped."""
    spans = []
    for start in range(0, size, tile):
        end = min(start + tile, size)
        spans.append(((start, end), (max(0, start - overlap), min(size, end + overlap))))
    return spans


def tiling_cost(height: int, width: int, tile: TileSize, overlap: int) -> float:
    """Pixels computed per image pixel: every tile computes its whole context, so small tiles cost a lot.

    The sum of context areas factors into a product of per-axis sums, so no tile list is built."""
    rows, cols = tile_sides(tile)
    if covers_whole(height, width, tile, overlap):
        return 1.0
    along_y = sum(c1 - c0 for _, (c0, c1) in _spans(height, rows, overlap))
    along_x = sum(c1 - c0 for _, (c0, c1) in _spans(width, cols, overlap))
    return along_y * along_x / (height * width)


def cheapest_tile(
    height: int, width: int, overlap: int, align: int, fits: Callable[[int, int], bool]
) -> tuple[int, int] | None:
    """The aligned (rows, cols) tile whose largest context box ``fits(h, w)`` and that computes the fewest
    pixels in all, or None when not even an ``align`` tile fits.

    Rectangles are considered too: where the image does not divide evenly into squares, a rectangle often
    wastes less on overlaps for the same memory (a 480x320 image with room for ~300x300 contexts: 192x256 tiles
    compute 17% fewer pixels than the best square).  Cost and the largest context are per-axis quantities, so
    the search is over pairs of sides."""
    _check_align(align)

    def axis(size: int) -> list[tuple[int, int, int]]:  # (side, summed context length, largest context)
        sides = range(align, -(-size // align) * align + 1, align)
        out = []
        for side in sides:
            contexts = [c1 - c0 for _, (c0, c1) in _spans(size, side, overlap)]
            out.append((side, sum(contexts), max(contexts)))
        return out

    best: tuple[int, int, int] | None = None  # (cost in pixels, -area, ...) compared as a key
    choice: tuple[int, int] | None = None
    across = axis(width)
    for rows, total_y, largest_y in axis(height):
        for cols, total_x, largest_x in across:
            if not fits(largest_y, largest_x):
                break  # the largest context only grows with the side
            key = (total_y * total_x, -rows * cols, rows)
            if best is None or key < best:
                best, choice = key, (rows, cols)
    return choice


def run_tiles(
    forward: Forward,
    image: torch.Tensor,
    scale: int,
    tiles: Sequence[Tile],
    *,
    batch: int = 1,
    blend: bool = False,
    on_tile: Callable[[int, int], None] | None = None,
    skip: Callable[[Tile], bool] | None = None,
    canvas: torch.Tensor | None = None,
    origins: bool = False,
) -> torch.Tensor:
    """Run ``forward`` over ``tiles`` of a (C, H, W) image; return the (C_out, H*s, W*s) CPU float32 output.

    Skipped tiles count as done for ``on_tile``.  ``canvas`` (crop mode only) continues an earlier,
    interrupted run.  ``forward`` should already run without autograd.
    """
    acc = _Accumulator(image, scale, blend, canvas)
    _run(forward, image, scale, tiles, acc, batch, on_tile, skip, None, origins)
    return acc.result()


class Adapted(NamedTuple):
    """What ``run_tiles_adaptive`` ran: the output, and the tile and tiles per pass it ended with."""

    image: torch.Tensor
    tile: TileSize
    batch: int


def run_tiles_adaptive(
    forward: Forward,
    image: torch.Tensor,
    scale: int,
    *,
    tile: TileSize,
    overlap: int,
    align: int = 1,
    batch: int = 1,
    blend: bool = False,
    on_tile: Callable[[int, int], None] | None = None,
    is_oom: Callable[[BaseException], bool],
    on_oom: Callable[[TileSize, int, int], None] | None = None,
    origins: bool = False,
) -> Adapted:
    """Run tiled inference, shrinking the pass on out-of-memory errors (``smaller_pass``: first fewer tiles per
    pass, down to one, then half the tile); return the output and the tile and batch that ran.

    In crop mode finished cores are kept and not recomputed: an LR mask records them, and new
    tiles whose core is fully covered are skipped (the same tiles with a smaller batch; halved grids nest
    exactly when tile/align is a power of two; otherwise straddling tiles are recomputed, which overwrites
    identical values).  In blend mode the run simply restarts with the smaller pass, since partial weighted
    sums in another order could round differently.  ``on_oom(tile, batch, tiles)``, with the next tile and batch
    and the number of tiles in the pass that ran out, runs after the exception is released, so the caller can
    free the device cache there.
    """
    _check_image(image)
    _, height, width = image.shape
    finished = torch.zeros(height, width, dtype=torch.bool)
    acc: _Accumulator | None = None
    last_pass = [0]  # tiles in the pass that ran last (the one that failed, after an error)

    def counted(x: torch.Tensor, *rest: object) -> torch.Tensor:
        last_pass[0] = x.shape[0]
        return forward(x, *rest)

    def is_finished(t: Tile) -> bool:
        return bool(finished[t.y0 : t.y1, t.x0 : t.x1].all())

    def mark(t: Tile) -> None:
        finished[t.y0 : t.y1, t.x0 : t.x1] = True

    while True:
        tiles = plan_tiles(height, width, tile, overlap, align)
        if acc is None or blend:
            acc = _Accumulator(image, scale, blend, None)
            finished.zero_()
        last_pass[0] = batch  # should it fail before the network runs (stacking the tiles)
        try:
            _run(counted, image, scale, tiles, acc, batch, on_tile, is_finished, mark, origins)
            return Adapted(acc.result(), tile, batch)
        except Exception as exc:
            if not is_oom(exc):
                raise
            failed = min(batch, last_pass[0])
            smaller = smaller_pass(tile, failed, height, width, align, overlap)
            if smaller is None:
                raise
        # Outside the except block the traceback (and the device tensors its frames hold) is gone.
        tile, batch = smaller
        if on_oom is not None:
            on_oom(tile, batch, failed)


def smaller_pass(
    tile: TileSize, tiles: int, height: int, width: int, align: int, overlap: int = 0
) -> tuple[TileSize, int] | None:
    """After a pass of ``tiles`` tiles ran out of memory: (tile, batch) with half as many tiles per pass, or, from
    a pass of one, half the tile one per pass; None when the tile cannot shrink below ``align``, or when every
    smaller tile's context (``overlap``) would still be the whole image, which is what ran out."""
    if tiles > 1:
        return tile, tiles // 2
    smaller = halve_tile(tile, height, width, align)
    while smaller is not None and covers_whole(height, width, smaller, overlap):
        smaller = halve_tile(smaller, height, width, align)
    return None if smaller is None else (smaller, 1)


def halve_tile(tile: TileSize, height: int, width: int, align: int) -> TileSize | None:
    """Next smaller aligned tile (each side halved), or None when it cannot shrink below ``align``."""
    rows, cols = tile_sides(tile)
    if rows == 0:
        rows = cols = max(height, width)
    elif isinstance(tile, int):
        rows = cols = min(tile, max(height, width))
    else:
        rows, cols = min(rows, height), min(cols, width)
    if rows <= align and cols <= align:
        return None
    smaller = align_tile_size(max(align, rows // 2), align), align_tile_size(max(align, cols // 2), align)
    return smaller[0] if smaller[0] == smaller[1] else smaller


def _run(
    forward: Forward,
    image: torch.Tensor,
    scale: int,
    tiles: Sequence[Tile],
    acc: _Accumulator,
    batch: int,
    on_tile: Callable[[int, int], None] | None,
    skip: Callable[[Tile], bool] | None,
    on_done: Callable[[Tile], None] | None,
    origins: bool = False,
) -> None:
    """Group runnable tiles by context shape, run them in batches and feed the accumulator."""
    if batch < 1:
        raise ConfigError(f"tile batch must be >= 1, got {batch}")
    total = len(tiles)
    todo = [t for t in tiles if skip is None or not skip(t)]
    done = total - len(todo)
    groups: dict[tuple[int, int], list[Tile]] = {}
    for t in todo:
        groups.setdefault(t.context_shape, []).append(t)
    for group in groups.values():
        for start in range(0, len(group), batch):
            chunk = group[start : start + batch]
            x = torch.stack([image[:, t.cy0 : t.cy1, t.cx0 : t.cx1] for t in chunk])
            out = forward(x, [(t.cy0, t.cx0) for t in chunk]) if origins else forward(x)
            h, w = chunk[0].context_shape
            if out.ndim != 4 or out.shape[0] != len(chunk) or tuple(out.shape[2:]) != (h * scale, w * scale):
                raise ValueError(f"model returned shape {tuple(out.shape)} for input {tuple(x.shape)} at scale {scale}")
            on_cpu = out.device.type == "cpu"
            out = out.to("cpu", torch.float32)
            del x
            for i, t in enumerate(chunk):
                acc.add(t, out[i])
                if on_done is not None:
                    on_done(t)
                done += 1
                if on_tile is not None:
                    on_tile(done, total)
            del out
            if on_cpu:  # the next tiles' tensors would come from a heap that kept these (sst_cli.allocator)
                give_back_freed()


class _Accumulator:
    """CPU output canvas, created on the first tile because only then C_out is known.

    Crop mode writes each core once.  Blend mode keeps a float64 weighted sum and weight sum; the
    weights are multiples of 2**-16, so products and sums are exact and a constant image (or a
    pointwise model) reproduces the untiled result bit for bit.
    """

    def __init__(self, image: torch.Tensor, scale: int, blend: bool, canvas: torch.Tensor | None) -> None:
        _check_image(image)
        if scale < 1:
            raise ConfigError(f"scale must be >= 1, got {scale}")
        if blend and canvas is not None:
            raise ValueError("resuming into an existing canvas is not supported with blending")
        _, self.height, self.width = image.shape
        self.scale = scale
        self.blend = blend
        self.out = canvas
        self.weight: torch.Tensor | None = None
        if canvas is not None:
            self._check_canvas(canvas.shape[0])

    def _check_canvas(self, channels: int) -> None:
        assert self.out is not None
        want = (channels, self.height * self.scale, self.width * self.scale)
        if tuple(self.out.shape) != want or self.out.dtype != torch.float32 or self.out.device.type != "cpu":
            raise ValueError(f"canvas must be a CPU float32 tensor of shape {want}, got {tuple(self.out.shape)}")

    def add(self, t: Tile, out: torch.Tensor) -> None:
        """Put one tile's (C_out, h*s, w*s) output into the canvas."""
        s = self.scale
        if self.out is None:
            shape = (out.shape[0], self.height * s, self.width * s)
            self.out = torch.zeros(shape, dtype=torch.float64 if self.blend else torch.float32)
            if self.blend:
                self.weight = torch.zeros(shape[1:], dtype=torch.float64)
        elif self.out.shape[0] != out.shape[0]:
            raise ValueError(f"model returned {out.shape[0]} channels, canvas has {self.out.shape[0]}")
        if not self.blend:
            self.out[:, t.y0 * s : t.y1 * s, t.x0 * s : t.x1 * s] = out[
                :, (t.y0 - t.cy0) * s : (t.y1 - t.cy0) * s, (t.x0 - t.cx0) * s : (t.x1 - t.cx0) * s
            ]
            return
        assert self.weight is not None
        wy = _ramp(t.cy0, t.cy1, t.y0, t.y1, self.height, s)
        wx = _ramp(t.cx0, t.cx1, t.x0, t.x1, self.width, s)
        w = _quantize(wy[:, None] * wx[None, :])
        ys, xs = slice(t.cy0 * s, t.cy1 * s), slice(t.cx0 * s, t.cx1 * s)
        self.out[:, ys, xs] += out.double() * w
        self.weight[ys, xs] += w

    def result(self) -> torch.Tensor:
        """The finished (C_out, H*s, W*s) CPU float32 output."""
        if self.out is None:
            raise ValueError("no tile was run and no canvas was given")
        if not self.blend:
            return self.out
        assert self.weight is not None
        return self.out.div_(self.weight).float()


def _ramp(c0: int, c1: int, k0: int, k1: int, size: int, scale: int) -> torch.Tensor:
    """1-D feather weights over a context [c0, c1) with core [k0, k1), in output pixels.

    An interior context edge ramps linearly from ~0 across the zone shared with the neighbour
    (twice the overlap), so the two ramps of a seam sum to 1; image borders keep weight 1.
    """
    n = (c1 - c0) * scale
    pos = torch.arange(n, dtype=torch.float64) + 0.5
    w = torch.ones(n, dtype=torch.float64)
    if c0 > 0 and k0 > c0:
        w = torch.minimum(w, pos / (2 * (k0 - c0) * scale))
    if c1 < size and c1 > k1:
        w = torch.minimum(w, (n - pos) / (2 * (c1 - k1) * scale))
    return w


def _quantize(w: torch.Tensor) -> torch.Tensor:
    """Round weights to multiples of 2**-16 (never 0) so float64 weighted sums of float32 are exact."""
    q = float(1 << _WEIGHT_BITS)
    return (w * q).round_().clamp_(1.0, q).div_(q)


def _check_align(align: int) -> None:
    if align < 1:
        raise ConfigError(f"alignment must be >= 1, got {align}")


def _check_image(image: torch.Tensor) -> None:
    if image.ndim != 3:
        raise ValueError(f"image must be a (C, H, W) tensor, got shape {tuple(image.shape)}")
