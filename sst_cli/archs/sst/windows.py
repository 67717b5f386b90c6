"""Moving attention output from its windows straight into the image, gated and cropped in the same write.

The plain way writes the padded image (a permute copy), rolls it back (a copy), crops it and multiplies by the
gate (a third tensor). Here every output pixel is written once: the image is cut into pieces that are regular
strided views on both sides (whole windows, and the partial windows at the padded bottom/right edge or at the
shift's wrap-around), and each piece is one ``torch.mul(windows, gate, out=image)``.
"""

from __future__ import annotations

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


def axis_pieces(size: int, padded: int, window: int, shift: int) -> list[AxisPiece]:
    """How positions ``0 <= y < size`` of one axis map into a padded grid of ``padded`` (a multiple of
    ``window``) that was rolled by ``-shift``: position ``y`` comes from grid cell ``(y - shift) mod padded``."""
    pieces: list[AxisPiece] = []
    # Two runs of consecutive grid cells: the wrapped head [padded - shift, padded), then [0, size - shift).
    runs = [(0, padded - shift, min(shift, size))] if shift else []
    runs.append((min(shift, size), 0, size - min(shift, size)))
    for start, cell, length in runs:
        end = cell + length
        while cell < end:
            win, off = divmod(cell, window)
            if off == 0 and end - cell >= window:  # a run of whole windows
                repeat = (end - cell) // window
                pieces.append(AxisPiece(start, win, repeat, 0, window))
                step = repeat * window
            else:  # part of one window
                step = min(window - off, end - cell)
                pieces.append(AxisPiece(start, win, 1, off, step))
            start += step
            cell += step
    return pieces


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
