"""Image files <-> float32 arrays, keeping what users care about (bit depth, alpha, ICC, EXIF, grayscale).

Pillow does the decoding and 8-bit encoding. Pillow cannot hold 16-bit RGB(A) or 16-bit gray+alpha in an
``Image``, so those are decoded by running Pillow's own PNG/TIFF decoder twice with byte-order-swapped raw
modes (one pass yields the high bytes, the other the low bytes), and written by sst-cli's own encoders
(``encoders.py``). Orientation is applied in numpy so every mode and bit depth is treated alike.
"""

from __future__ import annotations

import io
import os
import re
import stat
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import IO, Any

import numpy as np
from PIL import Image, ImageCms, ImageFile, UnidentifiedImageError

from sst_cli.checks import check_quality
from sst_cli.encoders import write_png, write_tiff
from sst_cli.errors import ConfigError, ImageError, OutputExists, SstError
from sst_cli.exif import (
    EXIF_HEADER,
    ORIENTATION,
    exif_of_tiff,
    parsed,
    reset_orientation,
    with_image_size,
    without_maker_note,
)
from sst_cli.files import atomic_write

#: Largest input accepted by default, in pixels: Pillow's own decompression-bomb error threshold
#: (2 * ``PIL.Image.MAX_IMAGE_PIXELS``), about 13400 x 13400. A float32 RGBA copy of it is ~2.9 GB.
DEFAULT_MAX_PIXELS: int = 178_956_970
#: JPEG/WebP quality when none is given (from 90 up, JPEG also keeps colour at full resolution).
DEFAULT_QUALITY = 95

#: Extension used when naming an output file of each format.
EXTENSIONS: dict[str, str] = {"png": "png", "jpeg": "jpg", "webp": "webp", "tiff": "tif", "bmp": "bmp"}

#: File name endings taken as images (case-insensitive); folders are searched for these.
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".jfif", ".jpe", ".webp", ".tif", ".tiff", ".bmp", ".gif"})
_PIL_FORMATS = {"PNG": "png", "JPEG": "jpeg", "MPO": "jpeg", "WEBP": "webp", "TIFF": "tiff", "BMP": "bmp", "GIF": "gif"}
_OPEN_FORMATS = ["PNG", "JPEG", "WEBP", "TIFF", "BMP", "GIF"]  # MPO (multi-picture JPEG) comes via JPEG
#: The formats ``read_image`` takes, as messages name them (png, jpeg, webp, tiff, bmp, gif).
READABLE_FORMATS: tuple[str, ...] = tuple(_PIL_FORMATS[name] for name in _OPEN_FORMATS)
_WRITE_FORMATS = ("png", "jpeg", "webp", "tiff")
_ALIASES = {"jpg": "jpeg", "jfif": "jpeg", "jpe": "jpeg", "tif": "tiff"}
_JPEG_EXIF_BYTES = 65533  # an APP1 segment's 64 KiB, less its length field and Pillow's own header bytes
_CODECS = ("zip", "raw", "libtiff", "packbits", "tiff_lzw")  # PNG/TIFF decoders whose raw mode we swap


@dataclass
class Picture:
    """A decoded image plus the metadata needed to write the result back faithfully."""

    color: np.ndarray  # float32 (H, W, 3), RGB in [0, 1]; gray images are replicated to 3 channels
    alpha: np.ndarray | None  # float32 (H, W) in [0, 1], or None
    grayscale: bool  # source had no colour (L / LA / I;16 ...): write back as gray
    bit_depth: int  # 8 or 16, decided by the source dtype, never by pixel values
    icc_profile: bytes | None
    exif: bytes | None  # EXIF ("Exif\0\0" + TIFF data) with orientation reset to 1 (pixels already upright)
    format: str  # source format, lower-case: "png", "jpeg", "webp", "tiff", "bmp"
    clipped: float = 0.0  # share of float samples outside [0, 1], clipped on reading (float TIFFs)
    lossless: bool = False  # a lossless WebP source, written back lossless (a lossy copy would lose detail)
    dpi: tuple[float, float] | None = None  # resolution, kept as it is (PNG, JPEG and TIFF outputs)
    png_chunks: tuple[tuple[bytes, bytes], ...] = ()  # a PNG's gamma, chromaticities and text, for PNG outputs
    sixteen_bits_in: int = 0  # 32 or 64: an integer TIFF of that many bits whose samples all fit in 16 (said)


def is_image_file(path: str | os.PathLike[str]) -> bool:
    """True when the name has a readable image extension (case-insensitive); the content is not checked."""
    return os.path.splitext(os.fspath(path))[1].lower() in IMAGE_SUFFIXES


def named_format(path: str | os.PathLike[str]) -> str | None:
    """The image format a file's extension names (``.jpg`` -> jpeg, ``.bmp`` -> bmp), or None."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    return _ALIASES.get(suffix[1:], suffix[1:]) if suffix in IMAGE_SUFFIXES else None


@dataclass(frozen=True)
class ImageInfo:
    """What an image file's header says: enough to plan its output before decoding any pixel."""

    width: int  # upright, as ``read_image`` returns the pixels (an EXIF orientation of 5-8 swaps the stored sides)
    height: int
    format: str
    alpha: bool
    bit_depth: int
    frames: int = 1  # animated images: only the first frame is read
    clipped: float = 0.0  # float TIFFs (decoded to probe them): share of samples outside [0, 1]
    sixteen_bits_in: int = 0  # as ``Picture.sixteen_bits_in`` (integer TIFFs of 32 or 64 bits, decoded to probe)

    @classmethod
    def of(cls, picture: Picture) -> ImageInfo:
        height, width = picture.color.shape[:2]
        alpha = picture.alpha is not None
        return cls(width, height, picture.format, alpha, picture.bit_depth, 1, picture.clipped, picture.sixteen_bits_in)


#: Largest side each format can store (WebP: 14-bit sizes; JPEG: 16-bit sizes).
MAX_SIDE = {"webp": 16383, "jpeg": 65535}


def choose_format(info: ImageInfo, requested: str | None, out_size: tuple[int, int] | None = None) -> tuple[str, str]:
    """The output format and, when it differs from what was asked or implied, why (else "").

    ``requested`` if given, else the input's format. PNG replaces BMP (not written), JPEG/WebP for 16-bit
    input, JPEG for alpha, and any format too small for ``out_size`` (width, height), so that nothing the
    source carried is lost and no computation ends in an unwritable result. A requested JPEG for an image with
    an alpha channel is taken here: only its pixels say whether it is transparent (``for_format``).
    """
    fmt = normalise_format(requested) if requested is not None else info.format
    why = ""
    if fmt not in _WRITE_FORMATS:
        fmt = "png"
    elif requested is None and info.alpha and fmt == "jpeg":
        fmt, why = "png", "JPEG cannot store its transparency"
    elif requested is None and info.bit_depth == 16 and fmt in ("jpeg", "webp"):
        fmt, why = "png", f"{fmt.upper()} cannot store 16 bits per channel"
    limit = MAX_SIDE.get(fmt)
    if limit is not None and out_size is not None and max(out_size) > limit:
        size = f"{out_size[0]}x{out_size[1]}"
        fmt, why = (
            "png",
            f"{'JPEG' if fmt == 'jpeg' else 'WebP'} stores at most {limit} px per side, the result is {size}",
        )
    return fmt, why


def output_format(picture: Picture, requested: str | None) -> str:
    """``choose_format`` for a decoded picture (no size limit checked)."""
    return choose_format(ImageInfo.of(picture), requested)[0]


def clipping_note(source: str | os.PathLike[str], share: float) -> str:
    """What ``sst upscale`` and ``Upscaler.upscale_file`` say of a file whose samples the reader clipped (a ``share``
    of them, ``Picture.clipped``): without it, an HDR or 0..255 float TIFF comes back white without a word."""
    return (
        f"{os.fspath(source)}: {100 * share:.3g}% of its samples lie outside the range the network takes "
        "(HDR or unnormalised floats, negative integers): they are clipped to it"
    )


def frames_note(source: str | os.PathLike[str], frames: int) -> str | None:
    """What is said of an animated GIF / WebP or a multi-page TIFF (``ImageInfo.frames``): only its first frame is
    read; None for a single frame."""
    if frames <= 1:
        return None
    return f"{os.fspath(source)}: {frames} frames (an animation, or pages); only the first is upscaled"


def sixteen_bits_note(source: str | os.PathLike[str], bits: int) -> str:
    """What is said of a file whose integers all fit in 16 bits though its type has ``bits`` (``Picture.
    sixteen_bits_in``): samples are scaled by their type's range, so a 16-bit scan saved as 32-bit integers comes
    back nearly black, which is kept (guessing the depth from the values would brighten a dark image)."""
    return (
        f"{os.fspath(source)}: every sample lies in 0..65535, 16-bit values stored in {bits}-bit integers, it looks "
        f"like; samples are scaled by the {bits}-bit range, so the result will be nearly black (save it as 16-bit)"
    )


def probe_image(path: str | os.PathLike[str], *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> ImageInfo:
    """Read only the header: size, format, alpha and bit depth, with the same refusals as ``read_image``."""
    name = os.fspath(path)
    _check_readable(name)
    try:
        with _no_pillow_bomb_limit(), Image.open(name, formats=_OPEN_FORMATS) as im:
            _check_pixels(name, im, max_pixels)
            rawmode = _tile_rawmode(im) or ""
            wide = re.fullmatch(r"(RGBA?|RGBX|LA);16[BLN]?", rawmode)
            mode = im.mode
            if _tifffile_reads(im):
                return _probe_tiff(name, max_pixels)
            alpha = mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in im.info
            alpha = alpha or bool(wide and wide[1] in ("RGBA", "LA"))
            deep = bool(wide) or mode.startswith("I;16") or mode in ("I", "F")
            fmt = _PIL_FORMATS.get(im.format or "", "png")
            tags = getattr(im, "tag_v2", {})  # Pillow gives a TIFF's size turned already: its tags, as stored
            stored = (int(tags[256]), int(tags[257])) if fmt == "tiff" else im.size
            width, height = _upright(stored, _exif_and_orientation(im, fmt, header_only=True)[2])
            frames = int(getattr(im, "n_frames", 1) or 1)  # after the EXIF: counting moves a TIFF to its last page
            return ImageInfo(width, height, fmt, alpha, 16 if deep else 8, frames)
    except SstError:
        raise
    except UnidentifiedImageError:
        if _is_tiff(name):
            return ImageInfo.of(_read_tiff(name, max_pixels))  # rare kinds (float RGB): decoding is the probe
        raise _unidentified(name) from None
    except OSError as exc:
        reason = exc.strerror if exc.errno else f"the file is truncated or damaged ({exc})"
        raise ImageError(f"cannot read '{name}': {reason}") from exc
    except Exception as exc:
        raise ImageError(f"cannot read '{name}': the file is damaged or unsupported ({exc})") from exc


def _check_pixels(name: str, im: Image.Image, max_pixels: int | None) -> None:
    _check_size(name, *im.size, max_pixels)


def _check_size(name: str, width: int, height: int, max_pixels: int | None) -> None:
    if max_pixels is not None and width * height > max_pixels:
        raise ImageError(
            f"cannot read '{name}': {width}x{height} is {width * height:,} pixels, more than the limit of "
            f"{max_pixels:,} (refused as a possible decompression bomb; --max-pixels raises it, 0 lifts it)"
        )


# ----------------------------------------------------------------------------------------------- reading


def read_image(path: str | os.PathLike[str], *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Picture:
    """Decode an image file upright into float32 arrays; every failure is an ImageError naming the file."""
    name = os.fspath(path)
    _check_readable(name)
    try:
        with _no_pillow_bomb_limit(), Image.open(name, formats=_OPEN_FORMATS) as im:
            _check_pixels(name, im, max_pixels)
            if _tifffile_reads(im):
                return _read_tiff(name, max_pixels)
            tiff_turn = int(getattr(im, "tag_v2", {}).get(274, 1) or 1)  # read before decoding (see below)
            values, maxval, gray, icc = _decode(name, im)
            fmt = _PIL_FORMATS.get(im.format or "", "png")
            exif_bytes, text_exif, orientation = _exif_and_orientation(im, fmt)
            if fmt == "tiff":  # Pillow turns a TIFF's pixels upright as it decodes them; 10.x keeps the tag, which
                orientation, pixels_turn = tiff_turn, 1  # turned them a second time here (13 drops it)
            else:
                pixels_turn = orientation
            dpi = upright_dpi(im.info.get("dpi"), turned=orientation in (5, 6, 7, 8))
            chunks = (
                _upright_png_chunks(_kept_png_chunks(name), orientation, text_exif is not None) if fmt == "png" else ()
            )
    except SstError:
        raise
    except UnidentifiedImageError:
        if _is_tiff(name):
            return _read_tiff(name, max_pixels)
        raise _unidentified(name) from None
    except MemoryError:
        raise ImageError(f"cannot read '{name}': not enough memory to decode it") from None
    except OSError as exc:  # errno set: the system refused (permissions ...); unset: Pillow found bad data
        reason = exc.strerror if exc.errno else f"the file is truncated or damaged ({exc})"
        raise ImageError(f"cannot read '{name}': {reason}") from exc
    except Exception as exc:  # Pillow raises SyntaxError, ValueError, EOFError, struct.error ... on bad data
        raise ImageError(f"cannot read '{name}': the file is damaged or unsupported ({exc})") from exc

    values = _orient(values, pixels_turn)
    if exif_bytes:
        exif_bytes = reset_orientation(exif_bytes if exif_bytes.startswith(EXIF_HEADER) else EXIF_HEADER + exif_bytes)
    scaled = values.astype(np.float32)
    if maxval != 1:
        scaled /= np.float32(maxval)
    channels = scaled.shape[2]
    color = np.repeat(scaled[..., :1], 3, axis=2) if gray else np.ascontiguousarray(scaled[..., :3])
    alpha = np.ascontiguousarray(scaled[..., -1]) if channels in (2, 4) else None
    lossless = fmt == "webp" and _lossless_webp(name)
    depth = 8 if maxval == 255 else 16
    return Picture(color, alpha, gray, depth, icc or None, exif_bytes or None, fmt, 0.0, lossless, dpi, chunks)


def upright_dpi(value: object, *, turned: bool) -> tuple[float, float] | None:
    """A resolution Pillow read, as (x, y) of the upright picture; None when absent or meaningless."""
    if not isinstance(value, tuple) or len(value) != 2:
        return None
    try:
        x, y = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        return None
    if not (0 < x < 1e6 and 0 < y < 1e6):
        return None
    return (y, x) if turned else (x, y)


_KEPT_PNG = (b"gAMA", b"cHRM", b"sRGB", b"tEXt", b"zTXt", b"iTXt")  # how to show it, and what it says


def _kept_png_chunks(name: str) -> tuple[tuple[bytes, bytes], ...]:
    """A PNG's ancillary chunks a result keeps, verbatim, in file order (pixel data skipped, not read)."""
    kept = []
    with open(name, "rb") as fh:
        fh.seek(8)
        while len(header := fh.read(8)) == 8:
            size, kind = int.from_bytes(header[:4], "big"), header[4:]
            if kind == b"IEND" or size > 1 << 24:
                break
            if kind in _KEPT_PNG:
                kept.append((kind, fh.read(size)))
                fh.seek(4, os.SEEK_CUR)
            else:
                fh.seek(size + 4, os.SEEK_CUR)
    return tuple(kept)


#: Text chunks that hold EXIF (ImageMagick's, exiftool's): Pillow reads them as the PNG's EXIF, which the result
#: carries as an eXIf chunk, upright and with its own size; the text copies would still say the input's.
_PNG_RAW_EXIF = ("Raw profile type exif", "Raw profile type APP1")
_XMP_KEY = b"XML:com.adobe.xmp"
_XMP_ORIENTATION = re.compile(rb"(tiff:Orientation\s*=\s*[\"']|<tiff:Orientation>\s*)[1-8]")


def _exif_and_orientation(
    im: ImageFile.ImageFile, fmt: str, *, header_only: bool = False
) -> tuple[bytes | None, bytes | None, int]:
    """The EXIF a picture carries (APP1 / eXIf / a TIFF's tags, else a PNG's EXIF text chunk), that text chunk's
    EXIF, and the orientation (1-8; 1 where none is set or the EXIF cannot be read). ``header_only`` never
    decodes pixels, for probing: a PNG whose eXIf chunk follows its pixel data then counts as upright."""
    exif = im.info.get("exif") if isinstance(im.info.get("exif"), bytes) else None
    if exif is None and fmt == "tiff":
        exif = exif_of_tiff(im)
    text_exif = _png_text_exif(im.info) if fmt == "png" else None
    from_text = exif is None and text_exif is not None
    exif = text_exif if from_text else exif
    try:  # broken EXIF must not make an otherwise fine image unreadable
        if from_text:
            shown = parsed(exif) if exif else Image.Exif()
        elif header_only and fmt == "png":  # PNG's own getexif() decodes the pixels to look past them
            shown = Image.Image.getexif(im)
        else:
            shown = im.getexif()
        orientation = int(shown.get(ORIENTATION, 1))
    except Exception:
        orientation = 1
    return exif, text_exif, orientation if orientation in range(1, 9) else 1


def _png_text_exif(info: dict[Any, Any]) -> bytes | None:
    """EXIF a PNG holds in an EXIF text chunk (a line "exif", a line with the length, then hex digits), which
    Pillow reads only in recent versions; None without one or where it cannot be read."""
    for key in _PNG_RAW_EXIF:
        text = info.get(key)
        with suppress(ValueError):
            data = bytes.fromhex("".join(text.split("\n")[3:])) if isinstance(text, str) else b""
            while data.startswith(EXIF_HEADER):  # some writers put the header in twice
                data = data[len(EXIF_HEADER) :]
            if data.startswith((b"II*\0", b"MM\0*")):  # an APP1 profile may hold XMP or other data instead
                return EXIF_HEADER + data
    return None


def _upright_png_chunks(
    chunks: tuple[tuple[bytes, bytes], ...], orientation: int, exif_in_text: bool
) -> tuple[tuple[bytes, bytes], ...]:
    """The kept chunks of a picture the reader turned upright (or not, ``orientation`` 1): without the EXIF text
    chunks when they hold EXIF (``exif_in_text``: the result has it as eXIf), and with the XMP packet's
    orientation set to 1, so that no viewer turns the result a second time."""
    raw_exif = tuple(key.encode() + b"\0" for key in _PNG_RAW_EXIF)
    kept = []
    for kind, data in chunks:
        if exif_in_text and kind in (b"tEXt", b"zTXt", b"iTXt") and data.startswith(raw_exif):
            continue
        if orientation != 1 and kind == b"iTXt" and data.startswith(_XMP_KEY + b"\0"):
            data = _upright_xmp(data)
        kept.append((kind, data))
    return tuple(kept)


def _upright_xmp(itxt: bytes) -> bytes:
    """An XMP iTXt chunk's data (keyword, compression flag and method, language, translated keyword, text) with
    ``tiff:Orientation`` set to 1; left as it is where it cannot be read."""
    head_end = len(_XMP_KEY) + 3  # keyword, its NUL, the compression flag and method
    try:
        compressed = itxt[head_end - 2] == 1
        text_at = itxt.index(b"\0", itxt.index(b"\0", head_end) + 1) + 1
        text = zlib.decompress(itxt[text_at:]) if compressed else itxt[text_at:]
    except (IndexError, ValueError, zlib.error):
        return itxt
    text = _XMP_ORIENTATION.sub(rb"\g<1>1", text)
    return itxt[:text_at] + (zlib.compress(text) if compressed else text)


def _lossless_webp(name: str) -> bool:
    """Whether a WebP file's image is stored lossless (its first image chunk is VP8L, not VP8)."""
    with open(name, "rb") as fh:
        fh.seek(12)  # past "RIFF", the size and "WEBP"
        while len(header := fh.read(8)) == 8:
            kind, size = header[:4], int.from_bytes(header[4:], "little")
            if kind in (b"VP8L", b"VP8 "):
                return kind == b"VP8L"
            if kind == b"ANMF":  # an animation frame: its image chunk follows the 16-byte frame header
                fh.seek(16, os.SEEK_CUR)
                continue
            fh.seek(size + (size & 1), os.SEEK_CUR)
    return False


#: The first bytes of each format read here (TIFF's are ``_is_tiff``'s), and the name said of a damaged one.
_MAGIC: tuple[tuple[str, Callable[[bytes], bool]], ...] = (
    ("PNG", lambda head: head.startswith(b"\x89PNG\r\n\x1a\n")),
    ("JPEG", lambda head: head.startswith(b"\xff\xd8\xff")),
    ("WebP", lambda head: head.startswith(b"RIFF") and head[8:12] == b"WEBP"),
    ("GIF", lambda head: head.startswith((b"GIF87a", b"GIF89a"))),
    ("BMP", lambda head: head.startswith(b"BM") and head[6:10] == b"\x00" * 4),  # "BM" alone starts much text
)


def _magic_format(name: str) -> str | None:
    """The format a file's first bytes say it is (PNG, JPEG, WebP, GIF, BMP), or None: a file that says it is
    one of these but that Pillow cannot open is a damaged one, not a foreign one."""
    try:
        with open(name, "rb") as fh:
            head = fh.read(12)
    except OSError:
        return None
    return next((kind for kind, starts in _MAGIC if starts(head)), None)


def _unidentified(name: str) -> ImageError:
    """The error for a file Pillow could not identify: damaged, when its magic bytes name a format read here."""
    kind = _magic_format(name)
    if kind is not None:
        why = f"it is a damaged {kind} image (it starts as one, but its header cannot be decoded)"
        return ImageError(f"cannot read '{name}': {why}")
    return ImageError(f"cannot read '{name}': not a PNG, JPEG, WebP, TIFF, BMP or GIF image")


def _is_tiff(name: str) -> bool:
    with open(name, "rb") as fh:
        return fh.read(4) in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")


def _tifffile_reads(im: Image.Image) -> bool:
    """TIFFs read through tifffile: Pillow decodes planar layouts of more than 8 bits with wrong colours, 32-bit
    integers clipped to 16 bits, 16-bit colour with associated alpha as 8 bits, 16-bit min-is-white gray as a
    negative, signed 8-bit samples as unsigned, and float colour not at all. The 16-bit layouts Pillow reads
    right stay with it (tifffile needs imagecodecs for LZW, which Pillow has)."""
    if im.format != "TIFF":
        return False
    tags = getattr(im, "tag_v2", {})
    bits = tags.get(258, 8)
    deep = max(bits if isinstance(bits, tuple) else (bits,)) > 8
    rawmode = _tile_rawmode(im) or ""
    pillow_reads = (
        bool(re.fullmatch(r"(RGBA?|RGBX);16[BLN]", rawmode)) or rawmode == "LA;16B" or im.mode.startswith("I;16")
    )
    turned = tags.get(274, 1) != 1  # Pillow's 16-bit gray comes out of its orientation scrambled
    inverted = tags.get(262, 1) == 0  # min-is-white: Pillow's 16-bit gray is not turned positive
    extras = tags.get(338, (2,))
    not_plain_alpha = (extras if isinstance(extras, tuple) else (extras,))[:1] != (2,)  # Pillow 10: all alpha
    deep_wrong = deep and (tags.get(284, 1) == 2 or turned or inverted or not_plain_alpha or not pillow_reads)
    return im.mode in ("F", "I") or deep_wrong or _signed_samples(tags)


def _signed_samples(tags: Any) -> bool:
    """Whether a TIFF's SampleFormat tag says signed integers: Pillow opens 8-bit ones as unsigned gray or RGB,
    so that -100 would read as 156 (tifffile reads them as int8, whose negatives are clipped and counted)."""
    formats = tags.get(339, 1)
    return 2 in (formats if isinstance(formats, tuple) else (formats,))


def _probe_tiff(name: str, max_pixels: int | None) -> ImageInfo:
    """``probe_image`` for the TIFFs tifffile reads: their tags, or the pixels of float and signed ones (decoded
    to count what would be clipped)."""
    import tifffile

    try:
        with tifffile.TiffFile(name) as tif:
            page = tif.pages[0]
            width, height = int(page.imagewidth), int(page.imagelength)
            _check_size(name, width, height, max_pixels)
            turn = page.tags.get("Orientation")
            width, height = _upright((width, height), int(turn.value) if turn is not None else 1)
            dtype, frames = page.dtype, len(tif.pages)
            _, alpha, _ = _tiff_layout(name, page)
    except SstError:
        raise
    except Exception as exc:  # tifffile raises its own TiffFileError, ValueError ... on bad data
        raise ImageError(f"cannot read '{name}': the TIFF is damaged or unsupported ({exc})") from exc
    if dtype is None or dtype.kind in "fi" or dtype.itemsize > 2:  # decoded: clipped, or 16-bit values in 32 bits
        return replace(ImageInfo.of(_read_tiff(name, max_pixels)), frames=frames)
    return ImageInfo(width, height, "tiff", alpha, 8 if dtype == np.uint8 else 16, frames)


#: Colour samples per pixel of the TIFF colour spaces (PhotometricInterpretation) read through tifffile:
#: min-is-white gray, min-is-black gray, RGB, CMYK ("separated"). Pillow reads the others at 8 bits.
_TIFF_COLOUR_SAMPLES = {0: 1, 1: 1, 2: 3, 5: 4}


def _tiff_layout(name: str, page: Any) -> tuple[int, bool, bool]:
    """(colour samples, alpha, alpha premultiplied) of a TIFF page tifffile reads. Alpha is the first extra
    sample when the file says so; other extra samples (spot colours, masks) are left out. tifffile hands the
    samples as stored, so colour spaces it does not convert are refused rather than read as RGB."""
    photometric = int(page.photometric)
    colour = _TIFF_COLOUR_SAMPLES.get(photometric)
    if colour is None:
        space = getattr(page.photometric, "name", str(photometric))
        raise ImageError(
            f"cannot read '{name}': its colour space ({space}) is read only from 8-bit TIFFs; save it as RGB or gray"
        )
    extras = tuple(page.extrasamples or ())
    alpha = int(page.samplesperpixel) > colour and bool(extras) and extras[0] in (1, 2)  # 0: not transparency
    return colour, alpha, alpha and extras[0] == 1


def _read_tiff(name: str, max_pixels: int | None) -> Picture:
    """TIFFs Pillow does not decode well (``_tifffile_reads``), upright, through tifffile.

    Floats are taken as values in [0, 1], as the network takes them: what lies outside is clipped (its share
    is ``Picture.clipped``, which the batch reports), NaN or infinity is refused, and the result is written with
    16 bits; integers are scaled by their type's range (negative samples are clipped, and counted).
    """
    import tifffile

    try:
        with tifffile.TiffFile(name) as tif:
            page = tif.pages[0]
            height, width = int(page.imagelength), int(page.imagewidth)
            _check_size(name, width, height, max_pixels)
            colour, has_alpha, premultiplied = _tiff_layout(name, page)
            photometric = int(page.photometric)
            values = page.asarray()
            axes = page.axes
            icc = page.tags.get("InterColorProfile")
            icc_bytes = bytes(icc.value) if icc is not None else None
            turn = page.tags.get("Orientation")
            orientation = int(turn.value) if turn is not None else 1
    except SstError:
        raise
    except Exception as exc:  # tifffile raises its own TiffFileError, ValueError ... on bad data
        raise _tiff_error(name, exc) from exc
    if axes.startswith("S"):
        values = np.moveaxis(values, 0, -1)  # planar: channels first in the file
    values = values if values.ndim == 3 else values[..., None]
    if values.ndim != 3 or values.shape[2] < colour + has_alpha:
        raise ImageError(f"cannot read '{name}': a TIFF with shape {values.shape} ({axes}) is not an image")
    values = values[..., : colour + has_alpha]
    clipped, sixteen_bits_in = 0.0, 0
    if values.dtype.kind == "f":
        floats = values.astype(np.float32)
        if not np.isfinite(floats).all():
            raise ImageError(f"cannot read '{name}': it holds NaN or infinite samples")
        clipped = float(np.count_nonzero((floats < 0) | (floats > 1))) / floats.size
        scaled = np.clip(floats, 0.0, 1.0)
    elif values.dtype.kind in "ui":
        clipped = float(np.count_nonzero(values < 0)) / values.size if values.dtype.kind == "i" else 0.0
        scaled = np.clip(values.astype(np.float32) / np.float32(np.iinfo(values.dtype).max), 0.0, 1.0)
        if values.dtype.itemsize > 2 and 0 < values.max() <= 65535:  # of 2**31: nearly black, said
            sixteen_bits_in = 8 * values.dtype.itemsize
    else:
        raise ImageError(f"cannot read '{name}': TIFF samples of type {values.dtype} are not supported")
    if premultiplied:  # colour stored multiplied by alpha: divided out, as Pillow does for 8-bit files
        weight = scaled[..., -1:]
        np.divide(scaled[..., :-1], weight, out=scaled[..., :-1], where=weight > 0)
        np.clip(scaled, 0.0, 1.0, out=scaled)
    if photometric == 0:  # min-is-white
        scaled[..., :1] = 1.0 - scaled[..., :1]
    elif photometric == 5:  # CMYK
        scaled, icc_bytes = _cmyk_samples_to_rgb(scaled, icc_bytes), None
    scaled = _orient(scaled, orientation)
    gray = scaled.shape[2] in (1, 2)
    color = np.repeat(scaled[..., :1], 3, axis=2) if gray else np.ascontiguousarray(scaled[..., :3])
    alpha = np.ascontiguousarray(scaled[..., -1]) if scaled.shape[2] in (2, 4) else None
    depth = 8 if values.dtype.itemsize == 1 else 16  # int8's 128 levels fit in 8 bits
    exif, dpi = None, None
    with suppress(Exception), Image.open(name, formats=["TIFF"]) as im:  # Pillow reads the tags of most TIFFs
        exif = exif_of_tiff(im)
        dpi = upright_dpi(im.info.get("dpi"), turned=orientation in (5, 6, 7, 8))
    return Picture(
        color, alpha, gray, depth, icc_bytes, exif, "tiff", clipped, dpi=dpi, sixteen_bits_in=sixteen_bits_in
    )


def _cmyk_samples_to_rgb(cmyk: np.ndarray, icc: bytes | None) -> np.ndarray:
    """CMYK(A) samples in [0, 1] -> RGB(A), as ``cmyk_to_rgb`` for 8-bit images: through the embedded profile
    (at 8 bits, Pillow's colour management has no deeper CMYK mode), else Pillow's formula in full precision."""
    if icc:
        stored = np.rint(cmyk[..., :4] * 255).astype(np.uint8)
        eight = Image.frombytes("CMYK", stored.shape[1::-1], stored.tobytes())
        rgb = np.asarray(cmyk_to_rgb(eight, icc), np.float32) / np.float32(255)
    else:
        rgb = (1.0 - cmyk[..., :3]) * (1.0 - cmyk[..., 3:4])
    return np.concatenate([rgb, cmyk[..., 4:]], axis=2, dtype=np.float32)


def _tiff_error(name: str, exc: Exception) -> ImageError:
    if "imagecodecs" in str(exc):  # a compression (LZW, JPEG, ...) tifffile decodes only with that package
        return ImageError(f"cannot read '{name}': its compression needs the imagecodecs package (pip install "
                          "imagecodecs)")  # fmt: skip
    return ImageError(f"cannot read '{name}': the TIFF is damaged or unsupported ({exc})")


def _check_readable(name: str) -> None:
    """Turn the common 'wrong path' cases into plain-words errors before Pillow gets involved."""
    try:
        info = os.stat(name)
    except FileNotFoundError:
        raise ImageError(f"cannot read '{name}': no such file") from None
    except OSError as exc:
        raise ImageError(f"cannot read '{name}': {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ImageError(f"cannot read '{name}': it is a folder, not an image file")
    if not stat.S_ISREG(info.st_mode):
        raise ImageError(f"cannot read '{name}': not a regular file (a pipe, socket or device)")
    if info.st_size == 0:
        raise ImageError(f"cannot read '{name}': the file is empty")


_bomb_lock = threading.Lock()
_bomb_users = 0
_bomb_saved: int | None = None


@contextmanager
def _no_pillow_bomb_limit() -> Iterator[None]:
    """Switch off Pillow's global pixel limit while we read, since read_image enforces its own limit.

    Reference-counted so that concurrent reads in threads restore the original value only at the end.
    """
    global _bomb_users, _bomb_saved
    with _bomb_lock:
        if _bomb_users == 0:
            _bomb_saved, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        _bomb_users += 1
    try:
        yield
    finally:
        with _bomb_lock:
            _bomb_users -= 1
            if _bomb_users == 0:
                Image.MAX_IMAGE_PIXELS = _bomb_saved


def _tile_rawmode(im: Image.Image) -> str | None:
    """The raw mode Pillow will decode with (only the PNG and TIFF decoders are inspected)."""
    tiles = getattr(im, "tile", None)
    # A tile is (codec name, extents, offset, args): a plain tuple before Pillow 11, a named tuple since.
    if im.format not in ("PNG", "TIFF") or not tiles or tiles[0][0] not in _CODECS:
        return None
    args = tiles[0][3]
    return args if isinstance(args, str) else (args[0] if args and isinstance(args[0], str) else None)


def _with_args(tile: Any, args: object) -> Any:
    """``tile`` with other decoder arguments, in the type this Pillow uses (tuple, or ``ImageFile._Tile``)."""
    return tile._replace(args=args) if hasattr(tile, "_replace") else (*tile[:3], args)


def _decode_raw(im: Image.Image, rawmode: str) -> np.ndarray:
    """Load ``im`` unpacking its pixel bytes with ``rawmode`` instead of the one Pillow picked."""
    tiles = im.tile  # type: ignore[attr-defined]
    im.tile = [_with_args(t, rawmode if isinstance(t[3], str) else (rawmode, *t[3][1:])) for t in tiles]  # type: ignore[attr-defined]
    im.load()
    return np.asarray(im)


def _decode(name: str, im: Image.Image) -> tuple[np.ndarray, int, bool, bytes | None]:
    """Pixels as (H, W, C) integers (or float for mode F), their full-scale value, grayness and ICC."""
    icc = im.info.get("icc_profile")
    rawmode = _tile_rawmode(im)
    wide = re.fullmatch(r"(RGBA?|RGBX);16([BLN])", rawmode or "")
    if wide:  # 16-bit RGB(A): decode twice, once for the high and once for the low bytes
        big = wide[2] == "B" or (wide[2] == "N" and sys.byteorder == "big")
        high = _decode_raw(im, f"{wide[1]};16{'B' if big else 'L'}").astype(np.uint16)
        with Image.open(name, formats=[im.format or "PNG"]) as twin:
            low = _decode_raw(twin, f"{wide[1]};16{'L' if big else 'B'}")
        return with_colour_key(im, (high << 8) | low), 65535, False, icc
    if rawmode == "LA;16B":  # 16-bit gray+alpha PNG: 4 bytes per pixel, copied verbatim into RGBA
        raw = _decode_raw(im, "RGBA").astype(np.uint16)
        return (raw[..., 0::2] << 8) | raw[..., 1::2], 65535, True, icc
    im.load()
    mode = im.mode
    if mode == "CMYK":
        return np.asarray(cmyk_to_rgb(im, icc)), 255, False, None
    if mode.startswith("I;16") or mode == "I":
        words = np.clip(np.asarray(im), 0, 65535).astype(np.uint16)[..., None]
        return with_colour_key(im, words), 65535, True, icc
    if mode == "F":
        return np.clip(np.asarray(im, dtype=np.float32), 0, 1)[..., None], 1, True, icc
    if mode in ("P", "PA"):
        im = im.convert("RGBA" if mode == "PA" or "transparency" in im.info else "RGB")
    elif mode in ("1", "La", "RGBa", "RGBX") or mode not in ("L", "LA", "RGB", "RGBA"):
        im = im.convert({"1": "L", "La": "LA", "RGBa": "RGBA"}.get(mode, "RGB"))
    values = np.asarray(im)
    gray = im.mode in ("L", "LA")
    values = values[..., None] if values.ndim == 2 else values
    return (with_colour_key(im, values) if mode not in ("P", "PA") else values), 255, gray, icc


def with_colour_key(im: Image.Image, values: np.ndarray) -> np.ndarray:
    """Add an alpha channel from a PNG tRNS colour key (one transparent gray value or RGB triple)."""
    key = im.info.get("transparency")
    if values.shape[2] not in (1, 3) or not isinstance(key, int | tuple):
        return values
    key_arr = np.asarray(key if isinstance(key, tuple) else (key,), dtype=values.dtype)
    if key_arr.size != values.shape[2]:
        return values
    full = np.iinfo(values.dtype).max
    alpha = np.where((values != key_arr).any(axis=2), full, 0).astype(values.dtype)
    return np.concatenate([values, alpha[..., None]], axis=2)


def cmyk_to_rgb(im: Image.Image, icc: bytes | None) -> Image.Image:
    """Use the embedded CMYK profile when there is one; Pillow's naive formula otherwise."""
    if icc:
        with suppress(Exception):
            source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            srgb = ImageCms.createProfile("sRGB")
            converted = ImageCms.profileToProfile(im, source, srgb, outputMode="RGB")
            if converted is not None:
                return converted
    return im.convert("RGB")


def _upright(size: tuple[int, int], orientation: int) -> tuple[int, int]:
    """(width, height) once ``_orient`` has turned the pixels: orientations 5-8 swap the sides."""
    return (size[1], size[0]) if orientation in (5, 6, 7, 8) else size


def _orient(values: np.ndarray, orientation: int) -> np.ndarray:
    """Apply an EXIF orientation (1-8) so the pixels are upright, like ``ImageOps.exif_transpose``."""
    transforms: dict[int, Callable[[np.ndarray], np.ndarray]] = {
        2: lambda a: a[:, ::-1],
        3: lambda a: a[::-1, ::-1],
        4: lambda a: a[::-1],
        5: lambda a: a.swapaxes(0, 1),
        6: lambda a: np.rot90(a, -1),
        7: lambda a: a.swapaxes(0, 1)[::-1, ::-1],
        8: lambda a: np.rot90(a, 1),
    }
    return np.ascontiguousarray(transforms[orientation](values)) if orientation in transforms else values


# ----------------------------------------------------------------------------------------------- writing


def write_image(
    path: str | os.PathLike[str],
    picture: Picture,
    *,
    format: str | None = None,
    quality: int | None = None,
    overwrite: bool = False,
) -> None:
    """Encode ``picture`` atomically to ``path`` (format from ``format`` or else the file extension).

    ``quality``: JPEG / WebP quality; None is ``DEFAULT_QUALITY``, and a lossless WebP picture stays lossless
    (a quality given asks for a lossy file: it was spent as compression effort, the file as large as before).

    16-bit pictures stay 16-bit in PNG and TIFF; JPEG and WebP get 8 bits. Grayscale pictures are
    written as gray (mean of the channels). JPEG with alpha is refused rather than flattened onto a
    colour the user did not choose. TIFFs carry EXIF's main tags only (no sub-directories); EXIF too long
    for a JPEG segment (64 KiB) is dropped rather than failing the write.
    """
    name = os.fspath(path)
    if not overwrite and os.path.lexists(name):
        raise OutputExists(f"refusing to overwrite '{name}': it already exists")
    fmt = normalise_format(format) if format else _format_from_name(name)
    picture = for_format(picture, fmt, f"'{name}'")
    lossless = fmt == "webp" and picture.lossless and quality is None
    quality = DEFAULT_QUALITY if quality is None else quality
    check_quality(quality)
    depth = 16 if picture.bit_depth == 16 and fmt in ("png", "tiff") else 8
    samples = _quantise(picture, depth, name)
    if fmt == "webp" or (fmt == "tiff" and depth == 16 and samples.shape[2] == 2):
        samples = _gray_as_rgb(samples, picture.icc_profile)  # WebP has no gray; Pillow cannot read 16-bit LA TIFF
    gray = samples.shape[2] in (1, 2)
    icc = picture.icc_profile
    icc = icc if icc and (icc[16:20] == b"GRAY") == gray else None  # mismatched profiles confuse viewers

    chunks = tuple((kind, data) for kind, data in picture.png_chunks if not (icc and kind == b"sRGB"))  # one or other
    height, width = samples.shape[:2]
    exif = with_image_size(picture.exif, width, height) if picture.exif else None

    def encode(fh: IO[bytes]) -> None:
        if fmt == "png":
            write_png(fh, samples, icc=icc, exif=exif, dpi=picture.dpi, chunks=chunks)
        elif fmt == "tiff":
            write_tiff(fh, samples, icc=icc, exif=exif, dpi=picture.dpi)
        else:
            kept = exif if fmt != "jpeg" or len(exif or b"") <= _JPEG_EXIF_BYTES else without_maker_note(exif or b"")
            fits = len(kept or b"") <= _JPEG_EXIF_BYTES or fmt != "jpeg"
            params: dict[str, object] = {k: v for k, v in (("icc_profile", icc), ("exif", kept if fits else None)) if v}
            if picture.dpi is not None:
                params["dpi"] = picture.dpi
            params["quality"] = quality
            if lossless:
                params["lossless"] = True  # quality is then the effort spent compressing
            if fmt == "jpeg" and quality >= 90:
                params["subsampling"] = 0  # 4:4:4, or high quality settings still blur colour edges
            image = Image.fromarray(samples[..., 0] if samples.shape[2] == 1 else samples)
            image.save(fh, format=fmt.upper(), **params)

    atomic_write(name, encode, error=ImageError, overwrite=overwrite)


def _gray_as_rgb(samples: np.ndarray, icc: bytes | None) -> np.ndarray:
    """Gray samples (and alpha) as RGB(A) for files without gray, taken through the picture's gray ICC profile into
    sRGB, what an untagged RGB file means, so that the result looks as the gray picture did; R = G = B without one
    (or with a profile littleCMS cannot read). Colour samples are returned as they are."""
    if samples.shape[2] not in (1, 2):
        return samples
    curve = _gray_profile_curve(icc, samples.dtype) if icc and icc[16:20] == b"GRAY" else None
    gray = samples[..., 0]
    colour = np.repeat(gray[..., None], 3, axis=2) if curve is None else curve[gray]
    return np.concatenate([colour, samples[..., 1:]], axis=2)


def _gray_profile_curve(icc: bytes, dtype: np.dtype) -> np.ndarray | None:
    """A (levels, 3) table from a gray profile's levels to sRGB. littleCMS in Pillow works in 8 bits: 16-bit levels
    are interpolated between its 256 (within half an 8-bit step of the profile's own curve)."""
    try:
        source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        ramp = Image.fromarray(np.arange(256, dtype=np.uint8)[None])
        unoptimised: Any = 0x0100  # NOOPTIMIZE (Pillow 10.0 has no ImageCms.Flags): optimised, shadows were 10 off
        exact = ImageCms.buildTransform(source, ImageCms.createProfile("sRGB"), "L", "RGB", flags=unoptimised)
        srgb = ImageCms.applyTransform(ramp, exact)
    except (ImageCms.PyCMSError, OSError, ValueError):
        return None
    knots = np.asarray(srgb, dtype=np.float64)[0]
    if dtype == np.uint8:
        return knots.astype(np.uint8)
    levels = np.arange(65536) / 257
    curve = np.stack([np.interp(levels, np.arange(256), knots[:, c] * 257) for c in range(3)], axis=1)
    return np.rint(curve).astype(np.uint16)


def normalise_format(fmt: str) -> str:
    """Accept 'JPG', '.tif' and friends; ConfigError for formats sst-cli does not write."""
    key = fmt.strip().lower().lstrip(".")
    key = _ALIASES.get(key, key)
    if key not in _WRITE_FORMATS:
        raise ConfigError(f"unknown output format '{fmt}' (choose png, jpg, webp or tiff)")
    return key


def _format_from_name(name: str) -> str:
    """Infer the format from the target's extension."""
    try:
        return normalise_format(os.path.splitext(name)[1] or "?")
    except ConfigError:
        raise ImageError(f"cannot write '{name}': name it .png, .jpg, .webp or .tif, or give a format") from None


def for_format(picture: Picture, fmt: str, what: str = "") -> Picture:
    """``picture`` as ``fmt`` can hold it: for JPEG, an alpha channel opaque everywhere (a screenshot's) is
    dropped, nothing being lost; real transparency is refused, since flattening it onto a colour the user did
    not choose would surprise. Called on the decoded picture, before the network runs."""
    if fmt != "jpeg" or picture.alpha is None:
        return picture
    if bool((picture.alpha >= 1.0).all()):
        return replace(picture, alpha=None)
    named = f"{what}: " if what else ""
    raise ImageError(f"{named}JPEG cannot store transparency, which this image has; choose png, webp or tiff")


def _quantise(picture: Picture, depth: int, name: str) -> np.ndarray:
    """Float picture -> (H, W, C) uint8/uint16, C = 1 (gray), 2 (gray+alpha), 3 (RGB) or 4 (RGBA)."""
    color, alpha = picture.color, picture.alpha
    if color.ndim != 3 or color.shape[2] != 3 or (alpha is not None and alpha.shape != color.shape[:2]):
        shapes = f"{color.shape} and {None if alpha is None else alpha.shape}"
        raise ImageError(f"cannot write '{name}': colour/alpha shapes {shapes} are not (H, W, 3) and (H, W)")
    planes = [color.mean(axis=2, keepdims=True) if picture.grayscale else color]
    if alpha is not None:
        planes.append(alpha[..., None])
    values = np.concatenate(planes, axis=2, dtype=np.float32)
    full = 255 if depth == 8 else 65535
    np.clip(values, 0.0, 1.0, out=values)
    values *= full
    np.rint(values, out=values)
    return values.astype(np.uint8 if depth == 8 else np.uint16)
