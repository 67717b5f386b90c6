"""Moving tokens into their attention windows and back, each written once.

Into the windows: the plain way pads the layer's input (reflect, a copy), rolls it for shifted windows (a
copy), then moves q, k, v into windows. Here q, k, v are computed on the unpadded image and written straight
from it into the window buffers; only the thin reflected strips (less than a window wide) are copied first.
Back out: the plain way writes the padded image, rolls it back, crops it and multiplies by the gate (three
tensors); here each output pixel is written once, gated and cropped, by ``torch.mul(windows, gate, out=image)``.

Both cut the image into pieces that are regular strided views on both sides: runs of whole windows, and the
partial windows at the padded bottom/right edge or at the shift's wrap-around.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import torch


class AxisPiece(NamedTuple):
    """Image positions ``start + k * length + i`` (``k < repeat``, ``i < length``) read from window grid cells
    ``window + k`` at offsets ``offset + i``. ``repeat`` > 1 only with ``length`` == the window size."""

    start: int
    window: int
    repeat: int
    offset: int
    length: int
    kind: int = 0  # where ``start`` counts: 0 the image, 1 its reflected strip (grid_pieces)


def _split(start: int, cell: int, length: int, window: int, kind: int, pieces: list[AxisPiece]) -> None:
    """A run of ``length`` consecutive positions from ``start`` <-> grid cells from ``cell``, cut at windows."""
    end = cell + length
    while cell < end:
        win, off = divmod(cell, window)
        if off == 0 and end - cell >= window:  # a run of whole windows
            repeat = (end - cell) // window
            pieces.append(AxisPiece(start, win, repeat, 0, window, kind))
            step = repeat * window
        else:  # part of one window
            step = min(window - off, end - cell)
            pieces.append(AxisPiece(start, win, 1, off, step, kind))
        start += step
        cell += step


def axis_pieces(size: int, padded: int, window: int, shift: int) -> list[AxisPiece]:
    """How positions ``0 <= y < size`` of one axis map into a padded grid of ``padded`` (a multiple of
    ``window``) that was rolled by ``-shift``: position ``y`` comes from grid cell ``(y - shift) mod padded``."""
    pieces: list[AxisPiece] = []
    # Two runs of consecutive grid cells: the wrapped head [padded - shift, padded), then [0, size - shift).
    runs = [(0, padded - shift, min(shift, size))] if shift else []
    runs.append((min(shift, size), 0, size - min(shift, size)))
    for start, cell, length in runs:
        _split(start, cell, length, window, 0, pieces)
    return pieces


def grid_pieces(size: int, padded: int, window: int, shift: int) -> list[AxisPiece]:
    """Where each grid cell of one axis reads when the image is reflect-padded to ``padded`` and rolled by
    ``-shift``: cell ``g`` shows padded position ``p = (g + shift) mod padded``, which is image position ``p``
    (kind 0) or, for ``p >= size``, position ``p - size`` of the reflected strip (kind 1)."""
    pieces: list[AxisPiece] = []
    cell = 0
    while cell < padded:
        p = (cell + shift) % padded
        kind, source, limit = (0, p, size) if p < size else (1, p - size, padded)
        length = min(limit - p, padded - cell)
        _split(source, cell, length, window, kind, pieces)
        cell += length
    return pieces


def partition_into(
    parts: list[torch.Tensor], qkv: torch.Tensor, window: int, grid: tuple[int, int], shift: int, scale: float
) -> None:
    """``parts[i][..., :d]`` = the windows of ``roll(reflect_pad(qkv_i, grid), -shift)``, q times ``scale``.

    ``qkv``: (B, 3 * C, H, W), any strides, unpadded; ``parts``: three (windows, heads, window**2, >= d) buffers
    (their other channels untouched); ``grid``: the padded (H, W), multiples of ``window``.
    """
    b, _, h, w = qkv.shape
    heads = parts[0].shape[1]
    d = qkv.shape[1] // (3 * heads)
    hp, wp = grid
    ph, pw = hp - h, wp - w
    sources = {(0, 0): qkv}  # keyed by (row kind, column kind); reflect: padded row h + j is row h - 2 - j
    if ph:
        sources[1, 0] = qkv[:, :, h - 1 - ph : h - 1].flip(2)
    if pw:
        sources[0, 1] = qkv[..., w - 1 - pw : w - 1].flip(3)
    if ph and pw:
        sources[1, 1] = sources[1, 0][..., w - 1 - pw : w - 1].flip(3)
    views = {key: t.permute(0, 2, 3, 1).unflatten(3, (3, heads, d)) for key, t in sources.items()}
    dst = [
        p[..., :d].view(b, hp // window, wp // window, heads, window, window, d).permute(0, 1, 4, 2, 5, 3, 6)
        for p in parts
    ]
    for py in grid_pieces(h, hp, window, shift):
        for px in grid_pieces(w, wp, window, shift):
            src = (
                views[py.kind, px.kind][
                    :, py.start : py.start + py.repeat * py.length, px.start : px.start + px.repeat * px.length
                ]
                .unflatten(1, (py.repeat, py.length))
                .unflatten(3, (px.repeat, px.length))
            )
            for i, part in enumerate(dst):
                target = part[
                    :, py.window : py.window + py.repeat, py.offset : py.offset + py.length,
                    px.window : px.window + px.repeat, px.offset : px.offset + px.length,
                ]  # fmt: skip
                if i == 0:
                    torch.mul(src[..., 0, :, :], scale, out=target)  # q scaled on its way in
                else:
                    target.copy_(src[..., i, :, :])


def merge_gated(
    out: torch.Tensor, gate: torch.Tensor, image: torch.Tensor, window: int, grid: tuple[int, int], shift: int
) -> None:
    """``image = crop(roll(windows_to_image(out), shift)) * gate``, each pixel written once.

    ``out``: (windows, heads, window**2, >= d) attention output over a ``grid`` = (padded H, padded W) image
    (extra channels ignored); ``gate`` and ``image``: (B, C, H, W), any strides (``image`` is written).
    """
    b, c, h, w = image.shape
    heads = out.shape[1]
    d = c // heads
    hp, wp = grid
    # (B, grid rows, in-window row, grid cols, in-window col, heads, d), matching the image's NHWC view below.
    windows = out[..., :d].view(b, hp // window, wp // window, heads, window, window, d).permute(0, 1, 4, 2, 5, 3, 6)
    img = image.permute(0, 2, 3, 1).unflatten(3, (heads, d))
    gt = gate.permute(0, 2, 3, 1).unflatten(3, (heads, d))
    for py in axis_pieces(h, hp, window, shift):
        for px in axis_pieces(w, wp, window, shift):
            src = windows[
                :, py.window : py.window + py.repeat, py.offset : py.offset + py.length,
                px.window : px.window + px.repeat, px.offset : px.offset + px.length,
            ]  # fmt: skip
            rows = slice(py.start, py.start + py.repeat * py.length)
            cols = slice(px.start, px.start + px.repeat * px.length)
            shape = (b, py.repeat, py.length, px.repeat, px.length, heads, d)
            dst = img[:, rows, cols].unflatten(1, (py.repeat, py.length)).unflatten(3, (px.repeat, px.length))
            torch.mul(src, gt[:, rows, cols].unflatten(1, shape[1:3]).unflatten(3, shape[3:5]), out=dst)


def _kept_offsets(size: int, padded: int, window: int, shift: int) -> dict[tuple[int, ...], list[int]]:
    """Windows of one axis grouped by the in-window offsets whose output ``merge_gated`` reads."""
    offsets: dict[int, list[int]] = {}
    for piece in axis_pieces(size, padded, window, shift):
        for k in range(piece.repeat):
            offsets.setdefault(piece.window + k, []).extend(range(piece.offset, piece.offset + piece.length))
    classes: dict[tuple[int, ...], list[int]] = {}
    for win in range(padded // window):
        classes.setdefault(tuple(sorted(offsets.get(win, ()))), []).append(win)
    return classes


@lru_cache(maxsize=64)
def kept_queries(
    size: tuple[int, int], grid: tuple[int, int], window: int, shift: int, batch: int, device: torch.device
) -> tuple[tuple[torch.Tensor, torch.Tensor], ...] | None:
    """Groups of (window indices, in-window token indices) of the queries whose output is kept.

    A padded layer computes attention for every token of the grid, then crops: queries on the reflected
    strips (moved inside by the shift's roll) are discarded, though they stay keys. Leaving them out saves
    their share of the attention. None when nothing is cropped. Windows count batch-major, row-major.
    """
    if tuple(size) == tuple(grid):
        return None
    rows, cols = (_kept_offsets(size[i], grid[i], window, shift) for i in (0, 1))
    per_row, per_image = grid[1] // window, (grid[0] // window) * (grid[1] // window)
    groups = []
    for ys, row_windows in rows.items():
        for xs, col_windows in cols.items():
            if not ys or not xs:
                continue
            windows = [b * per_image + r * per_row + c for b in range(batch) for r in row_windows for c in col_windows]
            tokens = [y * window + x for y in ys for x in xs]
            groups.append((torch.tensor(windows, device=device), torch.tensor(tokens, device=device)))
    return tuple(groups)
