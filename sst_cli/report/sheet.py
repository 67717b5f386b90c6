"""One side-by-side PNG of a report's crops, labels drawn with Pillow: for a README, an issue or a chat.

One row per image: LR (nearest-neighbour enlarged) | bicubic | each model | HR, every crop enlarged by the
same whole factor, its label (and PSNR where there is ground truth) underneath; transparent pixels on a
checkerboard.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image, ImageDraw, ImageFont

from ..files import atomic_save

if TYPE_CHECKING:
    from .builder import ReportBuilder

TILE = 256  # px, about how wide each crop is drawn
GAP = 8
MARGIN = 12
FONT_SIZE = 16
TITLE_SIZE = 17
BACKGROUND = (255, 255, 255)
INK = (29, 29, 31)
MUTED = (95, 99, 104)


#: TrueType fonts with accented and non-Latin letters, looked for in the system's font folders (Linux, macOS,
#: Windows); Pillow's own font has ASCII only, and drew "café" as "caf□".
UNICODE_FONTS = ("DejaVuSans.ttf", "NotoSans-Regular.ttf", "LiberationSans-Regular.ttf", "Arial.ttf", "arial.ttf")


@functools.cache
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    for name in UNICODE_FONTS:
        try:
            return ImageFont.truetype(name, size)
        except (OSError, ImportError):  # not installed, or Pillow without FreeType
            continue
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def fitted(text: str, font: ImageFont.ImageFont | ImageFont.FreeTypeFont, width: float) -> str:
    """``text`` cut to ``width`` px with an ellipsis, so that a long label never runs over its neighbour's."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "…") > width:
        text = text[:-1]
    return text + "…"


def checkerboard(width: int, height: int, square: int = 8) -> Image.Image:
    """Light gray and white squares, the usual backdrop for transparent pixels."""
    board = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(board)
    for top in range(0, height, square):
        for left in range((top // square) % 2 * square, width, 2 * square):
            draw.rectangle((left, top, left + square - 1, top + square - 1), fill=(207, 210, 214))
    return board


def flatten(tile: Image.Image) -> Image.Image:
    """RGB for drawing: transparent tiles over a checkerboard, gray as RGB."""
    if tile.mode in ("RGBA", "LA"):
        rgba = tile.convert("RGBA")
        board = checkerboard(*rgba.size).convert("RGBA")
        return Image.alpha_composite(board, rgba).convert("RGB")
    return tile.convert("RGB")


def render_sheet(report: ReportBuilder) -> Image.Image:
    """The sheet of a finished report (its crops are read from the report's folder)."""
    from .entries import HR, LR

    font, title_font = _font(FONT_SIZE), _font(TITLE_SIZE)
    line = FONT_SIZE + 6
    rows: list[tuple[str, list[tuple[Image.Image, str, str]]]] = []
    for entry in report.entries.values():
        assert entry.crop is not None
        box = entry.crop.scaled(entry.scale)
        zoom = max(1, round(TILE / max(box.width, box.height)))
        tiles = []
        for method in report.methods:
            path = report.folder / "images" / entry.slug / f"crop-{method.id}.png"
            if not path.is_file():
                continue
            with Image.open(path) as im:
                tile = flatten(im).resize((box.width * zoom, box.height * zoom), Image.Resampling.NEAREST)
            if method.id == LR:
                label, detail = "LR", f"nearest x{entry.scale}"
            else:
                label = method.label
                value = entry.crop_psnr.get(method.id)
                detail = "ground truth" if method.id == HR else ("" if value is None else f"{value:.2f} dB")
            tiles.append((tile, label, detail))
        where = f"x{entry.scale}, {entry.crop_option(report.ground_truth)}"
        title = f"{entry.dataset} / {entry.name}" if entry.dataset else entry.name
        rows.append((f"{title}   {where}", tiles))
    widest = max(max(sum(t.width for t, _, _ in tiles) + GAP * (len(tiles) - 1), math.ceil(title_font.getlength(title)))
                 for title, tiles in rows)  # fmt: skip
    width = widest + 2 * MARGIN  # a long file name widens the sheet rather than being cut
    heights = [TITLE_SIZE + 8 + max(t.height for t, _, _ in tiles) + 2 * line + GAP for _, tiles in rows]
    sheet = Image.new("RGB", (width, sum(heights) + 2 * MARGIN - GAP), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    top = MARGIN
    for (title, tiles), height in zip(rows, heights, strict=True):
        draw.text((MARGIN, top), title, font=title_font, fill=INK)
        y = top + TITLE_SIZE + 8
        x = MARGIN
        for tile, label, detail in tiles:
            sheet.paste(tile, (x, y))
            draw.rectangle((x - 1, y - 1, x + tile.width, y + tile.height), outline=(218, 220, 224))
            draw.text((x, y + tile.height + 4), fitted(label, font, tile.width), font=font, fill=INK)
            if detail:
                draw.text((x, y + tile.height + 4 + line), fitted(detail, font, tile.width), font=font, fill=MUTED)
            x += tile.width + GAP
        top += height
    return sheet


def write_sheet(report: ReportBuilder, path: str | Path, *, overwrite: bool = True) -> Path:
    """Render the sheet and write it as PNG, atomically (``overwrite``: as for ``files.atomic_save``, so that a
    file another run wrote meanwhile is not replaced unasked); missing folders above it are made, as for every
    single-file output."""
    target = Path(path)
    image = render_sheet(report)
    atomic_save(target, lambda temp: image.save(temp, format="PNG", optimize=True), overwrite=overwrite, parents=True)
    return target
