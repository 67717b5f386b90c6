"""EXIF bytes ("Exif\\0\\0" + a TIFF structure): what an output keeps of its input's EXIF, edited in place.

Edits patch numbers where they lie, keeping every other byte (maker notes hold offsets a rewrite would break).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

from PIL import Image, TiffTags

EXIF_HEADER = b"Exif\x00\x00"
ORIENTATION = 0x0112
_EXIF_IFD = 0x8769  # IFD0's pointer to the Exif sub-directory
_SUB_IFDS = (_EXIF_IFD, 0x8825)  # Exif, GPS (0xA005, interoperability, hangs below Exif)
_PIXEL_X, _PIXEL_Y = 0xA002, 0xA003  # the Exif sub-directory's image size
_MAKER_NOTE, _INTEROP = 0x927C, 0xA005  # in the Exif sub-directory: the camera's private data; an offset

# A TIFF's own tags that say what the picture is, not how it is stored: what EXIF carries to the output.
_TIFF_DESCRIPTION = (0x010E, 0x010F, 0x0110, 0x0131, 0x0132, 0x013B, 0x8298)  # description ... copyright
_DESCRIPTION = 0x010E
# Descriptions that are a writer's note of the stored layout (tifffile's shape, ImageJ's header), which would
# contradict the result's size: not carried.
_LAYOUT_NOTE = re.compile(r'\s*(\{"shape":|ImageJ=)')


def exif_of_tiff(im: Image.Image) -> bytes | None:
    """EXIF for a TIFF input, which keeps it among its own tags (Pillow's ``info`` has none): the descriptive
    tags and the Exif / GPS sub-directories, without the storage tags (strips, sizes), which would describe
    the input's layout, and without the orientation, since the pixels are turned upright."""
    tags = im.getexif()
    kept = Image.Exif()
    for tag in _TIFF_DESCRIPTION:
        if tag in tags and not (tag == _DESCRIPTION and _LAYOUT_NOTE.match(str(tags[tag]))):
            kept[tag] = tags[tag]
    for pointer in _SUB_IFDS:
        sub = tags.get_ifd(pointer)
        if sub:
            kept[pointer] = dict(sub)  # a dict value is written as a sub-directory (get_ifd's is not, in Pillow 10.0)
    return kept.tobytes() if len(kept) else None


def reset_orientation(exif: bytes) -> bytes:
    """Set the IFD0 orientation to 1 in place (the pixels are upright), keeping every other byte."""
    return _patch(exif, {ORIENTATION: 1}, {})


def with_image_size(exif: bytes, width: int, height: int) -> bytes:
    """The Exif sub-directory's image size set to the output's: EXIF that still says the input's size confuses
    the tools that read it."""
    return _patch(exif, {}, {_PIXEL_X: width, _PIXEL_Y: height})


def _patch(exif: bytes, main: dict[int, int], sub: dict[int, int]) -> bytes:
    """Set numbers of IFD0 (``main``) and of the Exif sub-directory (``sub``) in place, keeping every other byte
    (maker notes, whose offsets a rewrite would break, included). Entries must be SHORT, as the standard says,
    or LONG, as sloppy writers make them; a value too large for its SHORT is left as it was."""
    tiff = exif[len(EXIF_HEADER) :]
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return exif
    order = "<" if tiff[:2] == b"II" else ">"
    patched = bytearray(exif)

    def put(kind: int, at: int, value: int) -> None:
        if (kind == 3 and value <= 0xFFFF) or kind == 4:
            struct.pack_into(order + ("H" if kind == 3 else "I"), patched, len(EXIF_HEADER) + at, value)

    for tag, kind, at in _ifd_entries(tiff, order, struct.unpack_from(order + "I", tiff, 4)[0]):
        if tag in main:
            put(kind, at, main[tag])
        elif tag == _EXIF_IFD and kind in (4, 13) and sub:
            for inner, inner_kind, inner_at in _ifd_entries(tiff, order, struct.unpack_from(order + "I", tiff, at)[0]):
                if inner in sub:
                    put(inner_kind, inner_at, sub[inner])
    return bytes(patched)


def _ifd_entries(tiff: bytes, order: str, offset: int) -> Iterator[tuple[int, int, int]]:
    """(tag, type, offset of the value field) of each entry of the IFD at ``offset``, as far as ``tiff`` holds it."""
    if offset + 2 > len(tiff):
        return
    (count,) = struct.unpack_from(order + "H", tiff, offset)
    for entry in range(offset + 2, min(offset + 2 + 12 * count, len(tiff) - 11), 12):
        tag, kind = struct.unpack_from(order + "HH", tiff, entry)
        yield tag, kind, entry + 8


def without_maker_note(exif: bytes) -> bytes | None:
    """EXIF without the camera's maker note and the thumbnail, for a JPEG, whose EXIF segment holds 64 KiB: the
    maker note is what runs over it, and the main tags, the Exif and GPS sub-directories (camera, date, place) are
    kept. None where Pillow cannot parse it."""
    try:
        tags = parsed(exif)
        kept = Image.Exif()
        for tag, value in tags.items():
            if tag not in _SUB_IFDS:
                kept[tag] = value
        for pointer in _SUB_IFDS:
            sub = {tag: value for tag, value in tags.get_ifd(pointer).items() if tag not in (_MAKER_NOTE, _INTEROP)}
            if sub:
                kept[pointer] = sub  # a dict value is written as a sub-directory
        return kept.tobytes()
    except Exception:
        return None


def parsed(exif: bytes) -> Image.Exif:
    """EXIF bytes as Pillow's tag mapping (raises what Pillow raises on EXIF it cannot parse)."""
    tags = Image.Exif()
    tags.load(exif)
    return tags


def _main_tags(exif: bytes) -> Image.Exif:
    """EXIF's main tags (camera, date, software ...) without the pointers to its Exif, GPS and interoperability
    sub-directories, for TIFF outputs: tifffile writes tags, not sub-directories (and Pillow's libtiff writer
    failed on every camera photo with them: "Error setting from dictionary")."""
    try:
        main = parsed(exif)
    except Exception:  # EXIF Pillow cannot parse: the picture is written without it, as it was read despite it
        return Image.Exif()
    for pointer in (*_SUB_IFDS, 0xA005):
        main.pop(pointer, None)
    return main


#: Tags the TIFF writer sets from the pixels themselves (layout, storage, resolution, ICC), or offsets to data not
#: copied (sub-IFDs, a JPEG thumbnail): an input's EXIF may hold some, which must not be written twice or dangle.
_TIFF_LAYOUT_TAGS = frozenset(
    {254, 255, 256, 257, 258, 259, 262, 263, 266, 273, 277, 278, 279, 280, 281, 282, 283, 284, 296, 317, 320}
    | {322, 323, 324, 325, 330, 338, 339, 340, 341, 513, 514, 530, 531, 532, 34675}
)


def exif_as_tiff_tags(exif: bytes) -> list[tuple[int, int, int, object, bool]]:
    """EXIF's main tags as tifffile ``extratags`` (code, type, count, value, once), typed as Pillow's tag table
    declares them, else from the value."""
    tags: list[tuple[int, int, int, object, bool]] = []
    for code, value in _main_tags(exif).items():
        declared = TiffTags.lookup(code).type
        values = value if isinstance(value, tuple) else (value,)
        if code in _TIFF_LAYOUT_TAGS or not values:
            continue
        if isinstance(value, str):
            tags.append((code, 2, 0, value.encode("ascii", "replace"), True))  # tifffile adds the NUL and count
        elif isinstance(value, bytes):
            tags.append((code, 1 if declared == 1 else 7, len(value), value, True))
        elif all(isinstance(v, int) for v in values):
            kind = 3 if declared == 3 and all(0 <= v <= 0xFFFF for v in values) else 4
            if all(v >= 0 for v in values):
                tags.append((code, kind, len(values), values, True))
        elif all(hasattr(v, "numerator") and hasattr(v, "denominator") for v in values):
            pairs = [int(part) for v in values for part in (v.numerator, v.denominator)]
            if all(0 <= v <= 0xFFFFFFFF for v in pairs):
                tags.append((code, 5, len(values), tuple(pairs), True))
    return tags
