"""Tests for sst_cli.image_io: round-trips, metadata, odd modes, hostile files and atomic writes."""

from __future__ import annotations

import errno
import io
import itertools
import os
import struct
import time
import warnings
import zlib
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest
from PIL import Image, ImageCms, ImageFile, ImageOps

from sst_cli import encoders, image_io
from sst_cli.errors import ConfigError, ImageError, OutputExists
from sst_cli.image_io import (
    EXTENSIONS,
    Picture,
    is_image_file,
    output_format,
    probe_image,
    read_image,
    write_image,
)

RNG = np.random.default_rng(1234)


def _u8(*shape: int) -> np.ndarray:
    return RNG.integers(0, 256, shape, dtype=np.uint8)


def _u16(*shape: int) -> np.ndarray:
    return RNG.integers(0, 65536, shape, dtype=np.uint16)


def _as_int(values: np.ndarray, full: int) -> np.ndarray:
    return np.rint(values * full).astype(np.int64)


def _srgb_icc() -> bytes:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def _picture(**changes: object) -> Picture:
    base: dict[str, object] = dict(
        color=np.zeros((4, 5, 3), np.float32),
        alpha=None,
        grayscale=False,
        bit_depth=8,
        icc_profile=None,
        exif=None,
        format="png",
    )
    base.update(changes)
    return Picture(**base)  # type: ignore[arg-type]


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _reference_png16(values: np.ndarray, color_type: int) -> bytes:
    """Independent slow encoder that cycles through all five PNG filters, to test the reader."""
    height, width, channels = values.shape
    step = 2 * channels
    raw = values.astype(">u2").reshape(height, -1).view(np.uint8).astype(int)
    out = bytearray()
    previous = np.zeros(raw.shape[1], int)
    for y, row in enumerate(raw):
        kind = y % 5
        out.append(kind)
        for x, value in enumerate(row):
            a = row[x - step] if x >= step else 0
            b, c = previous[x], (previous[x - step] if x >= step else 0)
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            paeth = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            out.append((value - [0, a, b, (a + b) // 2, paeth][kind]) % 256)
        previous = row
    header = struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0)
    idat = _png_chunk(b"IDAT", zlib.compress(bytes(out)))
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + idat + _png_chunk(b"IEND", b"")


# ------------------------------------------------------------------------------------------- round-trips


def test_rgb8_png_round_trip_is_exact(tmp_path: Path) -> None:
    pixels = _u8(7, 9, 3)
    Image.fromarray(pixels).save(tmp_path / "in.png")
    picture = read_image(tmp_path / "in.png")
    assert picture.color.dtype == np.float32 and picture.color.shape == (7, 9, 3)
    assert (picture.alpha, picture.grayscale, picture.bit_depth, picture.format) == (None, False, 8, "png")
    np.testing.assert_array_equal(_as_int(picture.color, 255), pixels)
    write_image(tmp_path / "out.png", picture)
    with Image.open(tmp_path / "out.png") as im:
        assert im.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(im), pixels)


@pytest.mark.parametrize("fmt", ["png", "webp", "tiff"])
def test_rgba_round_trip(tmp_path: Path, fmt: str) -> None:
    pixels = _u8(6, 8, 4)
    Image.fromarray(pixels).save(tmp_path / "in.png")
    picture = read_image(tmp_path / "in.png")
    assert picture.alpha is not None and picture.alpha.shape == (6, 8)
    np.testing.assert_array_equal(_as_int(picture.alpha, 255), pixels[..., 3])
    write_image(tmp_path / f"out.{fmt}", picture, quality=100)
    again = read_image(tmp_path / f"out.{fmt}")
    assert again.alpha is not None and again.format == fmt
    if fmt != "webp":  # lossy colour, but the alpha channel must survive
        np.testing.assert_array_equal(again.color, picture.color)
    np.testing.assert_allclose(again.alpha, picture.alpha, atol=2 / 255)


@pytest.mark.parametrize(("mode", "channels"), [("L", 1), ("LA", 2)])
def test_gray_round_trip_stays_gray(tmp_path: Path, mode: str, channels: int) -> None:
    pixels = _u8(5, 6, channels)
    Image.fromarray(pixels[..., 0] if channels == 1 else pixels).save(tmp_path / "in.png")
    picture = read_image(tmp_path / "in.png")
    assert picture.grayscale and picture.bit_depth == 8
    assert picture.color.shape == (5, 6, 3)
    np.testing.assert_array_equal(picture.color[..., 0], picture.color[..., 2])
    np.testing.assert_array_equal(_as_int(picture.color[..., 1], 255), pixels[..., 0])
    assert (picture.alpha is not None) == (mode == "LA")
    write_image(tmp_path / "out.png", picture)
    with Image.open(tmp_path / "out.png") as im:
        assert im.mode == mode
        np.testing.assert_array_equal(np.asarray(im).reshape(pixels.shape), pixels)


def test_gray_picture_is_written_as_channel_mean(tmp_path: Path) -> None:
    color = np.zeros((2, 2, 3), np.float32)
    color[..., 0], color[..., 1] = 0.3, 0.6
    write_image(tmp_path / "out.png", _picture(color=color, grayscale=True))
    with Image.open(tmp_path / "out.png") as im:
        assert im.mode == "L"
        assert np.asarray(im)[0, 0] == round(0.3 * 255)


def test_writing_quantises_with_rounding_and_clipping(tmp_path: Path) -> None:
    color = np.array([[[-0.5, 1.7, 0.5 / 255 + 1e-4]]], np.float32)
    write_image(tmp_path / "out.png", _picture(color=color))
    with Image.open(tmp_path / "out.png") as im:
        assert np.asarray(im)[0, 0].tolist() == [0, 255, 1]


@pytest.mark.parametrize(("color_type", "channels"), [(2, 3), (6, 4), (4, 2)])
def test_third_party_16bit_png_is_read_exactly(tmp_path: Path, color_type: int, channels: int) -> None:
    values = _u16(9, 11, channels)
    (tmp_path / "in.png").write_bytes(_reference_png16(values, color_type))
    picture = read_image(tmp_path / "in.png")
    assert picture.bit_depth == 16 and picture.grayscale == (channels == 2)
    np.testing.assert_array_equal(
        _as_int(picture.color[..., : 1 if channels == 2 else 3], 65535), values[..., : 1 if channels == 2 else 3]
    )
    if channels in (2, 4):
        assert picture.alpha is not None
        np.testing.assert_array_equal(_as_int(picture.alpha, 65535), values[..., -1])


@pytest.mark.parametrize(("fmt", "channels"), [("png", 3), ("png", 4), ("png", 2), ("tiff", 3), ("tiff", 4)])
def test_16bit_colour_round_trip_is_exact(tmp_path: Path, fmt: str, channels: int) -> None:
    values = _u16(10, 12, channels)
    gray = channels == 2
    color = np.repeat(values[..., :1], 3, axis=2) if gray else values[..., :3]
    picture = _picture(
        color=color.astype(np.float32) / 65535,
        grayscale=gray,
        bit_depth=16,
        format=fmt,
        alpha=values[..., -1].astype(np.float32) / 65535 if channels != 3 else None,
    )
    write_image(tmp_path / f"out.{fmt}", picture)
    with Image.open(tmp_path / f"out.{fmt}") as im:  # Pillow's own 8-bit view checks the file independently
        view = np.asarray(im)
        np.testing.assert_array_equal(view[..., 0], values[..., 0] >> 8)
        np.testing.assert_array_equal(view[..., -1], values[..., -1] >> 8)
    again = read_image(tmp_path / f"out.{fmt}")
    assert again.bit_depth == 16 and again.format == fmt
    np.testing.assert_array_equal(again.color, picture.color)
    if picture.alpha is None:
        assert again.alpha is None
    else:
        np.testing.assert_array_equal(again.alpha, picture.alpha)


@pytest.mark.parametrize("fmt", ["png", "tiff"])
def test_16bit_gray_round_trip_is_exact(tmp_path: Path, fmt: str) -> None:
    values = _u16(8, 5)
    Image.fromarray(values).save(tmp_path / f"in.{fmt}")
    picture = read_image(tmp_path / f"in.{fmt}")
    assert picture.grayscale and picture.bit_depth == 16
    np.testing.assert_array_equal(_as_int(picture.color[..., 2], 65535), values)
    write_image(tmp_path / f"out.{fmt}", picture)
    if fmt == "png":  # the stored depth: Pillow 10.0 opens 16-bit gray PNGs in its 32-bit mode "I"
        assert (tmp_path / "out.png").read_bytes()[24:26] == bytes([16, 0])  # IHDR: 16 bits, colour type gray
    with Image.open(tmp_path / f"out.{fmt}") as im:
        assert fmt == "png" or im.mode.startswith("I;16")
        np.testing.assert_array_equal(np.asarray(im).astype(np.uint16), values)


def test_bit_depth_follows_dtype_not_values(tmp_path: Path) -> None:
    Image.fromarray(np.full((3, 3), 7, np.uint16)).save(tmp_path / "dark16.png")
    assert read_image(tmp_path / "dark16.png").bit_depth == 16


def test_palette_with_transparency_becomes_rgba(tmp_path: Path) -> None:
    image = Image.new("P", (4, 3))
    image.putpalette([255, 0, 0, 0, 255, 0] + [0] * 762)
    image.putpixel((1, 1), 1)
    image.info["transparency"] = 0
    image.save(tmp_path / "in.png", transparency=0)
    picture = read_image(tmp_path / "in.png")
    assert picture.alpha is not None and not picture.grayscale
    assert picture.alpha[1, 1] == 1 and picture.alpha[0, 0] == 0
    np.testing.assert_array_equal(picture.color[1, 1], [0, 1, 0])


def test_rgb_colour_key_transparency_becomes_alpha(tmp_path: Path) -> None:
    pixels = np.zeros((2, 2, 3), np.uint8)
    pixels[0, 0] = [10, 20, 30]
    Image.fromarray(pixels).save(tmp_path / "in.png", transparency=(0, 0, 0))
    picture = read_image(tmp_path / "in.png")
    assert picture.alpha is not None
    assert picture.alpha.tolist() == [[1, 0], [0, 0]]


def test_one_bit_image_becomes_gray(tmp_path: Path) -> None:
    Image.fromarray(np.eye(4, dtype=bool)).save(tmp_path / "in.png")
    picture = read_image(tmp_path / "in.png")
    assert picture.grayscale and picture.bit_depth == 8
    np.testing.assert_array_equal(picture.color[..., 0], np.eye(4))


def test_float_tiff_is_clipped_and_16bit_and_says_how_much(tmp_path: Path) -> None:
    Image.fromarray(np.array([[-1.0, 0.25], [0.5, 3.0]], np.float32)).save(tmp_path / "in.tif")
    picture = read_image(tmp_path / "in.tif")
    assert picture.grayscale and picture.bit_depth == 16 and picture.clipped == 0.5
    np.testing.assert_array_equal(picture.color[..., 0], [[0, 0.25], [0.5, 1]])
    assert probe_image(tmp_path / "in.tif").clipped == 0.5  # the batch says it before computing
    Image.fromarray(np.array([[0.5, np.nan]], np.float32)).save(tmp_path / "nan.tif")
    with pytest.raises(ImageError, match=r"cannot read '.*nan\.tif': it holds NaN or infinite samples"):
        read_image(tmp_path / "nan.tif")


@pytest.mark.parametrize("compression", [None, "zlib"])
def test_planar_deep_and_signed_tiffs_read_exactly_through_tifffile(tmp_path: Path, compression: str | None) -> None:
    """Pillow decoded 16-bit planar TIFFs with wrong colours, their alpha as 0, and int32 clipped to 16 bits."""
    tifffile = pytest.importorskip("tifffile")
    y, x = np.mgrid[0:6, 0:8]
    rgba = np.stack([x * 8000, y * 9000, (x + y) * 4000 + 7, np.full_like(x, 65535)]).astype(np.uint16)
    tifffile.imwrite(tmp_path / "planar.tif", rgba, planarconfig="separate", photometric="rgb",
                     extrasamples=["unassalpha"], compression=compression)  # fmt: skip
    picture = read_image(tmp_path / "planar.tif")
    assert picture.bit_depth == 16 and picture.alpha is not None and np.all(picture.alpha == 1)
    np.testing.assert_array_equal(np.round(picture.color * 65535), np.moveaxis(rgba[:3], 0, -1))
    info = probe_image(tmp_path / "planar.tif")
    assert (info.bit_depth, info.alpha, info.width, info.height) == (16, True, 8, 6)
    tifffile.imwrite(tmp_path / "planar8.tif", (rgba[:3] >> 8).astype(np.uint8), planarconfig="separate",
                     photometric="rgb", compression=compression)  # fmt: skip
    assert read_image(tmp_path / "planar8.tif").bit_depth == 8
    tifffile.imwrite(tmp_path / "int32.tif", (x * 100_000_000).astype(np.int32), compression=compression)
    wide = read_image(tmp_path / "int32.tif")
    np.testing.assert_allclose(wide.color[0, :, 0], x[0] * 100_000_000 / (2**31 - 1), rtol=1e-6)
    tifffile.imwrite(tmp_path / "signed.tif", (x - 4).astype(np.int16) * 1000, compression=compression)
    signed = read_image(tmp_path / "signed.tif")
    assert signed.clipped == 0.5 and probe_image(tmp_path / "signed.tif").clipped == 0.5  # said before work
    assert signed.color.min() == 0


def test_16_bit_values_in_32_bit_integers_are_flagged_and_scaled_as_before(tmp_path: Path) -> None:
    """A 16-bit scan saved as PIL mode I (int32) reads nearly black, integers being scaled by their type's range:
    kept (the depth is never guessed from the values), but flagged for a notice, before any work (the probe)."""
    tifffile = pytest.importorskip("tifffile")
    values = np.array([[0, 1000], [20000, 40000]], np.int32)
    Image.fromarray(values, "I").save(tmp_path / "mode_i.tif")  # Pillow writes mode I as 32-bit signed
    tifffile.imwrite(tmp_path / "u32.tif", values.astype(np.uint32))
    for name, bits in (("mode_i.tif", 2**31 - 1), ("u32.tif", 2**32 - 1)):
        picture = read_image(tmp_path / name)
        assert picture.sixteen_bits_in == 32 and probe_image(tmp_path / name).sixteen_bits_in == 32, name
        np.testing.assert_allclose(picture.color[..., 0], values / bits, rtol=1e-6)  # nearly black, as before
    Image.fromarray(values * 50_000, "I").save(tmp_path / "full.tif")  # 32-bit values: nothing to say
    Image.fromarray(values * 0, "I").save(tmp_path / "black.tif")  # black in any depth
    Image.fromarray(values.astype(np.uint16)).save(tmp_path / "u16.tif")  # 16-bit as it should be
    for name in ("full.tif", "black.tif", "u16.tif"):
        assert read_image(tmp_path / name).sixteen_bits_in == 0 == probe_image(tmp_path / name).sixteen_bits_in
    assert image_io.sixteen_bits_note("mode_i.tif", 32) == (
        "mode_i.tif: every sample lies in 0..65535, 16-bit values stored in 32-bit integers, it looks like; samples "
        "are scaled by the 32-bit range, so the result will be nearly black (save it as 16-bit)"
    )


def test_a_signed_8_bit_tiff_is_read_as_signed_with_its_negatives_clipped_and_counted(tmp_path: Path) -> None:
    """Pillow opened int8 TIFFs as unsigned gray: -100 came out as 156 / 255, with no notice."""
    tifffile = pytest.importorskip("tifffile")
    row = np.array([-100, -50, -10, 0, 10, 50, 100, 127], np.int8)
    tifffile.imwrite(tmp_path / "i8.tif", np.stack([row] * 4))
    picture = read_image(tmp_path / "i8.tif")
    assert picture.grayscale and picture.bit_depth == 8 and picture.clipped == 3 / 8
    np.testing.assert_allclose(picture.color[0, :, 0], np.clip(row / 127, 0, 1), rtol=1e-6)  # as int16: by its max
    info = probe_image(tmp_path / "i8.tif")  # the batch says how much is clipped before computing
    assert (info.clipped, info.bit_depth, info.width, info.height) == (3 / 8, 8, 8, 4)
    rgb = np.stack([np.stack([row, -row, row // 2], axis=-1)] * 2)  # signed RGB: also through tifffile
    tifffile.imwrite(tmp_path / "rgb8.tif", rgb, photometric="rgb")
    colour = read_image(tmp_path / "rgb8.tif")
    assert not colour.grayscale and colour.clipped == float(np.count_nonzero(rgb < 0)) / rgb.size
    np.testing.assert_allclose(colour.color, np.clip(rgb / 127, 0, 1), rtol=1e-6)


def test_a_deep_tiff_is_turned_upright(tmp_path: Path) -> None:
    tifffile = pytest.importorskip("tifffile")
    gray = np.arange(12, dtype=np.uint16).reshape(3, 4) * 5000
    tifffile.imwrite(tmp_path / "turned.tif", gray, extratags=[(274, "H", 1, 6, False)])  # rotated 90° clockwise
    picture = read_image(tmp_path / "turned.tif")
    np.testing.assert_array_equal(np.round(picture.color[..., 0] * 65535), np.rot90(gray, -1))
    info = probe_image(tmp_path / "turned.tif")  # the sides upright, as read (as for every format)
    assert (info.width, info.height, info.bit_depth) == (3, 4, 16)


@pytest.mark.parametrize("orientation", [3, 6, 8])
@pytest.mark.parametrize("where", ["png", "png text", "png xmp", "jpg", "webp", "tif"])
def test_the_probe_gives_the_sides_of_the_picture_as_read(tmp_path: Path, where: str, orientation: int) -> None:
    """Planning (and ``sst eval``'s check of its pairs) works from the probe: with the stored sides, an HR photo
    turned by its EXIF failed midway, its upright pixels not the size the check had passed."""
    from PIL import PngImagePlugin

    exif = Image.Exif()
    exif[0x0112] = orientation
    stored, path = Image.fromarray(_u8(4, 6, 3)), tmp_path / f"in.{where.split()[0]}"
    if where == "png text":
        raw = exif.tobytes().hex()
        text = PngImagePlugin.PngInfo()
        text.add_text("Raw profile type exif", f"\nexif\n{len(raw) // 2:8d}\n{raw}\n", zip=True)
        stored.save(path, pnginfo=text)
    elif where == "png xmp":
        xmp = PngImagePlugin.PngInfo()
        turned = f'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="{orientation}"/>'
        xmp.add_itxt(
            "XML:com.adobe.xmp", f'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF>{turned}</rdf:RDF></x:xmpmeta>'
        )
        stored.save(path, pnginfo=xmp)
    else:
        stored.save(path, exif=exif)
    height, width = read_image(path).color.shape[:2]
    assert (height, width) == ((6, 4) if orientation > 4 else (4, 6))
    info = probe_image(path)
    assert (info.width, info.height) == (width, height)


def _deep_tiff_cases() -> dict[str, tuple[dict[str, object], np.ndarray, np.ndarray, np.ndarray | None]]:
    """name -> (tifffile.imwrite keywords, stored samples, expected colour, expected alpha), colours in [0, 1]."""
    rgb = _u8(6, 8, 3)
    alpha = np.maximum(_u8(6, 8), 64)  # premultiplied 16-bit samples keep colour within 0.5 / (64 * 257)
    alpha[:, 0] = 0
    cmyk = np.asarray(Image.fromarray(rgb).convert("CMYK"))
    gray = rgb[..., 0]
    wide = (rgb.astype(np.uint16) * 257, alpha.astype(np.uint16) * 257, gray.astype(np.uint16) * 257)
    rgb16, a16, g16 = wide
    kept = alpha[..., None] > 0
    premultiplied = np.rint(rgb16 * (a16[..., None] / 65535)).astype(np.uint16)
    floats = (rgb / 255 * alpha[..., None] / 255).astype(np.float32)
    naive = np.asarray(Image.fromarray(cmyk, "CMYK").convert("RGB")) / 255  # Pillow's formula, as for 8-bit files
    return {
        "cmyk": ({"photometric": "separated"}, cmyk.astype(np.uint16) * 257, naive, None),
        "min-is-white": ({"photometric": "miniswhite"}, 65535 - g16, np.repeat(gray[..., None] / 255, 3, 2), None),
        "premultiplied": ({"photometric": "rgb", "extrasamples": [1]}, np.dstack([premultiplied, a16]),
                          np.where(kept, rgb / 255, 0), alpha / 255),
        "premultiplied float": ({"photometric": "rgb", "extrasamples": [1]}, np.dstack([floats, alpha / 255]).astype(
            np.float32), np.where(kept, rgb / 255, 0), alpha / 255),
        "alpha and a spot channel": ({"photometric": "rgb", "extrasamples": [2, 0]}, np.dstack([rgb16, a16, g16]),
                                     rgb / 255, alpha / 255),
        "a channel that is not alpha": ({"photometric": "rgb", "extrasamples": [0]}, np.dstack([rgb16, a16]),
                                        rgb / 255, None),
    }  # fmt: skip


@pytest.mark.parametrize("case", list(_deep_tiff_cases()))
def test_deep_tiffs_are_read_in_their_colour_space(tmp_path: Path, case: str) -> None:
    """16-bit and float TIFFs go through tifffile, which hands samples as stored: CMYK came out as RGB with K as
    alpha, min-is-white as a negative, premultiplied colour darkened, and an extra channel was 'not an image'."""
    tifffile = pytest.importorskip("tifffile")
    options, stored, colour, alpha = _deep_tiff_cases()[case]
    tifffile.imwrite(tmp_path / "in.tif", stored, **options)
    picture = read_image(tmp_path / "in.tif")
    np.testing.assert_allclose(picture.color, colour, atol=4e-5 if case == "premultiplied" else 1e-6)
    assert (picture.alpha is None) == (alpha is None) == (not probe_image(tmp_path / "in.tif").alpha)
    if alpha is not None:
        np.testing.assert_allclose(picture.alpha, alpha, atol=1e-6)


def test_a_deep_tiff_in_a_colour_space_tifffile_does_not_convert_is_refused(tmp_path: Path) -> None:
    tifffile = pytest.importorskip("tifffile")
    tifffile.imwrite(tmp_path / "lab.tif", _u16(4, 5, 3), photometric="cielab")
    for read in (read_image, probe_image):  # the probe too: found before any work is done
        with pytest.raises(ImageError, match=r"lab\.tif.*colour space \(CIELAB\) is read only from 8-bit TIFFs"):
            read(tmp_path / "lab.tif")


def test_cmyk_jpeg_becomes_rgb(tmp_path: Path) -> None:
    Image.new("CMYK", (8, 8), (0, 255, 255, 0)).save(tmp_path / "in.jpg")
    picture = read_image(tmp_path / "in.jpg")
    assert picture.format == "jpeg" and not picture.grayscale
    np.testing.assert_allclose(picture.color[4, 4], [1, 0, 0], atol=0.05)


@pytest.mark.parametrize("fmt", ["jpeg", "webp", "bmp"])
def test_lossy_and_bmp_formats_read(tmp_path: Path, fmt: str) -> None:
    pixels = np.full((8, 8, 3), 128, np.uint8)
    Image.fromarray(pixels).save(tmp_path / f"in.{EXTENSIONS[fmt]}")
    picture = read_image(tmp_path / f"in.{EXTENSIONS[fmt]}")
    assert picture.format == fmt and picture.bit_depth == 8
    np.testing.assert_allclose(picture.color, 128 / 255, atol=3 / 255)


# ------------------------------------------------------------------------------------------------ metadata


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_matches_pillow(tmp_path: Path, orientation: int) -> None:
    pixels = _u8(3, 5, 3)
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(pixels).save(tmp_path / "in.png", exif=exif)
    with Image.open(tmp_path / "in.png") as im:
        expected = np.asarray(ImageOps.exif_transpose(im))
    picture = read_image(tmp_path / "in.png")
    np.testing.assert_array_equal(_as_int(picture.color, 255), expected)
    assert picture.exif is not None
    parsed = Image.Exif()
    parsed.load(picture.exif)
    assert parsed[0x0112] == 1


def test_exif_rotated_jpeg_is_upright_and_orientation_reset(tmp_path: Path) -> None:
    pixels = np.zeros((16, 32, 3), np.uint8)
    pixels[:, :16] = 255  # left half white, right half black
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: viewers turn it 90 degrees clockwise
    exif[0x010F] = "SST camera"
    Image.fromarray(pixels).save(tmp_path / "in.jpg", exif=exif, quality=95)
    picture = read_image(tmp_path / "in.jpg")
    assert picture.color.shape == (32, 16, 3)  # rotated
    assert picture.color[4, 8].mean() > 0.9 and picture.color[28, 8].mean() < 0.1  # white now on top
    write_image(tmp_path / "out.jpg", picture)
    with Image.open(tmp_path / "out.jpg") as im:
        assert im.size == (16, 32)
        assert im.getexif()[0x0112] == 1
        assert im.getexif()[0x010F] == "SST camera"


@pytest.mark.parametrize(("fmt", "depth"), [("png", 8), ("jpeg", 8), ("webp", 8), ("tiff", 8), ("tiff", 16)])
def test_icc_profile_and_exif_are_kept(tmp_path: Path, fmt: str, depth: int) -> None:
    icc = _srgb_icc()
    exif = Image.Exif()
    exif[0x010F], exif[0x0132], exif[0x4746] = "SST camera", "2021:02:03 04:05:06", 4  # 0x4746: a rating
    exif[0x013E] = (0.3125, 0.328125)  # the white point: two rationals
    # a sub-directory, as every camera writes, with the input's size as the camera said it
    exif[0x8769] = {0x9003: "2020:01:01 10:00:00", 0xA002: 3, 0xA003: 2}
    Image.fromarray(_u8(6, 6, 3)).save(tmp_path / "in.png", icc_profile=icc, exif=exif)
    picture = replace(read_image(tmp_path / "in.png"), bit_depth=depth)
    assert picture.icc_profile == icc
    write_image(tmp_path / f"out.{EXTENSIONS[fmt]}", picture)  # a TIFF failed: libtiff cannot write sub-IFDs
    again = read_image(tmp_path / f"out.{EXTENSIONS[fmt]}")
    assert again.icc_profile == icc and again.bit_depth == depth
    with Image.open(tmp_path / f"out.{EXTENSIONS[fmt]}") as im:  # a 16-bit TIFF had no EXIF at all
        main = im.getexif()
        assert (main[0x010F], main[0x0132], main[0x4746]) == ("SST camera", "2021:02:03 04:05:06", 4)
        assert tuple(map(float, main[0x013E])) == (0.3125, 0.328125)
        # a compressed TIFF keeps the main tags; the others say the picture's own size, not the input's
        kept = {} if fmt == "tiff" else {0x9003: "2020:01:01 10:00:00", 0xA002: 6, 0xA003: 6}
        assert dict(im.getexif().get_ifd(0x8769)) == kept


def test_a_maker_note_too_large_for_jpeg_is_left_out_not_the_whole_exif(tmp_path: Path) -> None:
    """A JPEG's EXIF segment holds 64 KiB: EXIF with a 70 KB maker note was dropped whole, camera, date and place
    with it, without a word."""
    exif = Image.Exif()
    exif[0x010F] = "SST camera"
    exif[0x8769] = {0x9003: "2020:01:01 10:00:00", 0x927C: b"\x07" * 70_000, 0xA002: 3, 0xA003: 2}
    exif[0x8825] = {1: "N", 5: 0}  # GPS: latitude ref, altitude ref
    Image.fromarray(_u8(6, 6, 3)).save(tmp_path / "in.png", exif=exif)
    assert len(read_image(tmp_path / "in.png").exif or b"") > 70_000
    write_image(tmp_path / "out.jpg", read_image(tmp_path / "in.png"))
    with Image.open(tmp_path / "in.png") as im:
        place = dict(im.getexif().get_ifd(0x8825))
    with Image.open(tmp_path / "out.jpg") as im:
        kept = im.getexif()
        assert kept[0x010F] == "SST camera" and dict(kept.get_ifd(0x8825)) == place and place
        assert dict(kept.get_ifd(0x8769)) == {0x9003: "2020:01:01 10:00:00", 0xA002: 6, 0xA003: 6}
    write_image(tmp_path / "out.png", read_image(tmp_path / "in.png"))  # where it fits, it is kept whole
    with Image.open(tmp_path / "out.png") as im:
        assert len(im.getexif().get_ifd(0x8769)[0x927C]) == 70_000


@pytest.mark.parametrize("note", ['{"shape": [5, 7, 3]}', "ImageJ=1.54f\nimages=1\n"])
def test_a_writers_note_of_the_stored_layout_is_not_carried(tmp_path: Path, note: str) -> None:
    """tifffile's shape note (and ImageJ's header) went to the output, which then read back with a warning that
    its shape did not match; a description of the picture itself is kept."""
    tifffile = pytest.importorskip("tifffile")
    for description, kept in ((note, None), ("a cat", "a cat")):
        tifffile.imwrite(tmp_path / "in.tif", _u16(5, 7, 3), photometric="rgb", description=description,
                         metadata=None)  # fmt: skip
        exif = Image.Exif()
        exif.load(read_image(tmp_path / "in.tif").exif or b"")
        assert exif.get(0x010E) == kept and exif[0x0131] == "tifffile.py"  # the software that wrote it stays


def test_exif_pillow_cannot_parse_does_not_fail_a_tiff_write(tmp_path: Path) -> None:
    broken = b"Exif\x00\x00" + b"not a TIFF structure at all"
    for depth in (8, 16):
        write_image(tmp_path / f"out{depth}.tif", _picture(exif=broken, bit_depth=depth))
        assert read_image(tmp_path / f"out{depth}.tif").bit_depth == depth


def test_an_app1_text_profile_that_is_not_exif_is_kept_as_it_is(tmp_path: Path) -> None:
    """ImageMagick's APP1 profile may hold XMP: it became a broken eXIf chunk, and a TIFF output failed on it."""
    from PIL import PngImagePlugin

    raw = b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta/>".hex()
    info = PngImagePlugin.PngInfo()
    info.add_text("Raw profile type APP1", f"\nAPP1\n{len(raw) // 2:8d}\n{raw}\n", zip=True)
    Image.fromarray(_u8(4, 6, 3)).save(tmp_path / "in.png", pnginfo=info)
    picture = read_image(tmp_path / "in.png")
    assert picture.exif is None and [kind for kind, _ in picture.png_chunks] == [b"zTXt"]
    write_image(tmp_path / "out.tif", picture)


def test_a_tiff_inputs_exif_is_carried_to_the_output(tmp_path: Path) -> None:
    """A TIFF keeps EXIF among its own tags, which Pillow's ``info`` does not hold: it was dropped silently."""
    exif = Image.Exif()
    exif[0x010F], exif[0x0110], exif[0x0112] = "SST camera", "Model 9", 6
    exif[0x8769] = {0x9003: "2020:01:01 10:00:00"}
    Image.fromarray(_u8(4, 6, 3)).save(tmp_path / "in.tif", exif=exif.tobytes())  # bytes: sub-IFD written
    picture = read_image(tmp_path / "in.tif")
    assert picture.color.shape[:2] == (6, 4)  # stored 6 wide, 4 high, turned 90 degrees (ImageOps.exif_transpose
    # of Pillow 10 turns such a TIFF twice: Pillow turns it as it decodes it, and keeps the tag)
    write_image(tmp_path / "out.png", picture)
    with Image.open(tmp_path / "out.png") as im:
        out = im.getexif()
        assert (out[0x010F], out[0x0110], out.get(0x0112)) == ("SST camera", "Model 9", None)
        assert dict(out.get_ifd(0x8769)) == {0x9003: "2020:01:01 10:00:00"}
        assert 0x0111 not in out and 0x0100 not in out  # the input's strips and sizes stay behind


@pytest.mark.parametrize("fmt", ["png", "tiff"])
def test_icc_profile_kept_in_16bit_output(tmp_path: Path, fmt: str) -> None:
    icc = _srgb_icc()
    exif = b"Exif\x00\x00" + Image.Exif().tobytes()[6:]
    write_image(tmp_path / f"out.{fmt}", _picture(bit_depth=16, icc_profile=icc, exif=exif))
    assert read_image(tmp_path / f"out.{fmt}").icc_profile == icc


def test_gray_profile_is_dropped_for_colour_output(tmp_path: Path) -> None:
    gray_icc = _srgb_icc()[:16] + b"GRAY" + _srgb_icc()[20:]
    write_image(tmp_path / "out.png", _picture(icc_profile=gray_icc))
    assert read_image(tmp_path / "out.png").icc_profile is None


def _gray_icc(gamma: float) -> bytes:
    """A minimal ICC v2 gray display profile (white point D50, one gamma curve), built by hand: Pillow makes none."""

    def xyz(x: float, y: float, z: float) -> bytes:
        return struct.pack(">iii", *(round(v * 65536) for v in (x, y, z)))

    name = b"gray test"
    tags = [
        (b"desc", b"desc\0\0\0\0" + struct.pack(">I", len(name) + 1) + name + b"\0" * 80),
        (b"wtpt", b"XYZ \0\0\0\0" + xyz(0.9642, 1.0, 0.8249)),
        (b"kTRC", b"curv\0\0\0\0" + struct.pack(">IH", 1, round(gamma * 256)) + b"\0\0"),
    ]
    start = 128 + 4 + 12 * len(tags)
    table, data = struct.pack(">I", len(tags)), b""
    for sig, body in tags:
        body += b"\0" * (-len(body) % 4)
        table, data = table + sig + struct.pack(">II", start + len(data), len(body)), data + body
    header = b"\0" * 4 + bytes([2, 0x10, 0, 0]) + b"mntrGRAYXYZ " + b"\0" * 12 + b"acsp"  # after the size
    header = (header + b"\0" * 28 + xyz(0.9642, 1.0, 0.8249)).ljust(124, b"\0")  # the D50 illuminant at byte 68
    return struct.pack(">I", start + len(data)) + header + table + data


@pytest.mark.parametrize(("fmt", "depth", "alpha"), [("webp", 8, False), ("webp", 8, True), ("tiff", 16, True)])
def test_gray_picture_written_as_rgb_goes_through_its_gray_profile(
    tmp_path: Path, fmt: str, depth: int, alpha: bool
) -> None:
    level = np.linspace(0, 1, 20, dtype=np.float32).reshape(4, 5)
    picture = _picture(
        color=np.repeat(level[..., None], 3, axis=2), grayscale=True, bit_depth=depth, icc_profile=_gray_icc(1.0),
        alpha=np.ones((4, 5), np.float32) if alpha else None, lossless=True,
    )  # fmt: skip
    write_image(tmp_path / f"out.{fmt}", picture)
    with Image.open(tmp_path / f"out.{fmt}") as im:
        assert "icc_profile" not in im.info  # a gray profile cannot tag RGB: the samples carry it instead
    out = read_image(tmp_path / f"out.{fmt}")
    top = 2**depth - 1
    stored = np.round(level * top) / top  # the gray levels the file can hold, in linear light
    srgb = np.where(stored <= 0.0031308, 12.92 * stored, 1.055 * stored ** (1 / 2.4) - 0.055)  # -> sRGB
    assert out.color.shape == (4, 5, 3) and np.array_equal(out.color[..., 0], out.color[..., 2])
    assert np.abs(out.color[..., 1] - srgb).max() <= 1.5 / 255  # not the gray levels written as sRGB (0.2 darker)
    assert np.abs(level - srgb).max() > 0.2


def test_unicode_path(tmp_path: Path) -> None:
    folder = tmp_path / "фото 写真"
    folder.mkdir()
    Image.fromarray(_u8(4, 4, 3)).save(folder / "ünïcødé ✓.png")
    picture = read_image(folder / "ünïcødé ✓.png")
    write_image(folder / "résultat ✓.png", picture)
    assert read_image(str(folder / "résultat ✓.png")).color.shape == (4, 4, 3)


# ---------------------------------------------------------------------------------------- hostile inputs


def test_bomb_refused_before_decoding(tmp_path: Path) -> None:
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    (tmp_path / "bomb.png").write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(b""))
        + _png_chunk(b"IEND", b"")
    )
    with pytest.raises(ImageError, match=r"bomb\.png.*100000x100000"):
        read_image(tmp_path / "bomb.png")
    Image.new("RGB", (20, 10)).save(tmp_path / "small.png")
    with pytest.raises(ImageError, match=r"small\.png.*20x10.*limit of 199"):
        read_image(tmp_path / "small.png", max_pixels=199)
    assert read_image(tmp_path / "small.png", max_pixels=200).color.shape == (10, 20, 3)


def test_pillow_own_limit_does_not_interfere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Image.new("RGB", (30, 30)).save(tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_image(tmp_path / "big.png", max_pixels=None).color.shape == (30, 30, 3)
    assert Image.MAX_IMAGE_PIXELS == 100  # restored


@pytest.mark.parametrize("fmt", ["png", "jpeg", "tiff", "webp"])
def test_truncated_file_raises_image_error(tmp_path: Path, fmt: str) -> None:
    Image.fromarray(_u8(64, 64, 3)).save(tmp_path / "full", format=fmt)
    data = (tmp_path / "full").read_bytes()
    (tmp_path / "cut.img").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError, match=r"cut\.img"):
        read_image(tmp_path / "cut.img")


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"", "empty"), (b"hello, I am not a picture\n" * 10, "not a PNG"), (None, "no such file")],
)
def test_unreadable_files_raise_image_error(tmp_path: Path, content: bytes | None, reason: str) -> None:
    path = tmp_path / "thing.png"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ImageError, match=rf"thing\.png.*{reason}"):
        read_image(path)


def _damaged(fmt: str, path: Path) -> Path:
    """A small file of ``fmt`` whose header Pillow refuses, its magic bytes intact."""
    Image.fromarray(_u8(8, 8, 3)).save(path, format=fmt)
    data = bytearray(path.read_bytes())
    if fmt == "PNG":
        data[29] ^= 0xFF  # the IHDR chunk's CRC
    elif fmt == "GIF":
        data[10:] = b"\x00" * (len(data) - 10)  # no image descriptor after the header
    else:  # a header cut off soon after its magic bytes
        del data[{"JPEG": 20, "WEBP": 12, "BMP": 16}[fmt] :]
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "BMP", "GIF"])
def test_a_damaged_file_of_a_known_format_is_said_to_be_damaged_not_foreign(tmp_path: Path, fmt: str) -> None:
    """A PNG with a bad IHDR checksum was refused as 'not a PNG, JPEG, WebP, TIFF, BMP or GIF image'."""
    path = _damaged(fmt, tmp_path / "bad.img")
    kind = {"WEBP": "WebP"}.get(fmt, fmt)
    for read in (read_image, probe_image):
        with pytest.raises(ImageError, match=rf"^cannot read '.*bad\.img': it is a damaged {kind} image") as caught:
            read(path)
        assert "not a PNG" not in str(caught.value) and "\n" not in str(caught.value)


def test_text_starting_like_a_bmp_is_still_not_an_image(tmp_path: Path) -> None:
    path = tmp_path / "notes.bmp"
    path.write_bytes(b"BMX to buy\n")  # two magic bytes alone do not make a BMP
    with pytest.raises(ImageError, match="not a PNG, JPEG, WebP, TIFF, BMP or GIF image"):
        read_image(path)


def test_folder_is_not_an_image(tmp_path: Path) -> None:
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(ImageError, match="folder"):
        read_image(tmp_path / "dir.png")


# ------------------------------------------------------------------------------------------------ writing


def test_overwrite_refused_unless_asked(tmp_path: Path) -> None:
    target = tmp_path / "out.png"
    target.write_bytes(b"precious")
    with pytest.raises(OutputExists, match=r"out\.png"):
        write_image(target, _picture())
    assert target.read_bytes() == b"precious"
    write_image(target, _picture(), overwrite=True)
    assert read_image(target).color.shape == (4, 5, 3)


@pytest.mark.parametrize("error", [OSError("disk on fire"), KeyboardInterrupt()])
def test_failed_write_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    def explode(im: Image.Image, fp: io.BufferedIOBase, *args: object, **kwargs: object) -> None:
        fp.write(b"partial data")
        raise error

    def explode_png(*args: object) -> None:  # sst-cli's own PNG encoder, after the header went out
        raise error

    monkeypatch.setattr(ImageFile, "_save", explode)  # Pillow's encoders (JPEG here)
    monkeypatch.setattr(encoders, "_paeth_rows", explode_png)
    (tmp_path / "old.png").write_bytes(b"old")
    for name in ("new.png", "new.jpg"):
        with pytest.raises(type(error)):
            write_image(tmp_path / name, _picture())
    with pytest.raises(type(error)):
        write_image(tmp_path / "old.png", _picture(), overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["old.png"]
    assert (tmp_path / "old.png").read_bytes() == b"old"
    if isinstance(error, OSError):
        for name in ("new.png", "new.jpg"):
            with pytest.raises(ImageError, match="disk on fire"):
                write_image(tmp_path / name, _picture())


def test_failed_16bit_write_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []

    def chunk(kind: bytes, data: bytes) -> bytes:
        calls.append(kind)
        if kind == b"IDAT":
            raise KeyboardInterrupt
        return b"x" * 10

    monkeypatch.setattr(encoders, "_png_chunk", chunk)
    with pytest.raises(KeyboardInterrupt):
        write_image(tmp_path / "out.png", _picture(bit_depth=16))
    assert calls[0] == b"IHDR" and os.listdir(tmp_path) == []


@pytest.mark.parametrize("links", [True, False])
def test_a_file_written_meanwhile_is_not_replaced_without_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool
) -> None:
    """The name was checked before encoding and the rename replaced whatever was there by then: another run
    writing the same output meanwhile lost its file without --overwrite."""
    real_png = encoders.write_png

    def slow_encode(fh: IO[bytes], *args: Any, **kwargs: Any) -> None:
        (tmp_path / "out.png").write_bytes(b"another run's result")
        real_png(fh, *args, **kwargs)

    monkeypatch.setattr(image_io, "write_png", slow_encode)
    if not links:  # a file system without hard links: the name is checked again just before the rename
        monkeypatch.setattr(os, "link", lambda *args: (_ for _ in ()).throw(OSError(errno.EPERM, "no links")))
    with pytest.raises(OutputExists, match=r"out\.png': it already exists \(written while this run worked\)"):
        write_image(tmp_path / "out.png", _picture())
    assert os.listdir(tmp_path) == ["out.png"] and (tmp_path / "out.png").read_bytes() == b"another run's result"
    write_image(tmp_path / "out.png", _picture(), overwrite=True)
    assert read_image(tmp_path / "out.png").color.shape == (4, 5, 3)


def test_temporary_file_is_hidden_beside_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []
    real_link = os.link

    def spy(src: str, dst: str) -> None:  # a new name: linked (replacing only with overwrite)
        seen.append((src, dst))
        real_link(src, dst)

    monkeypatch.setattr(os, "link", spy)
    write_image(tmp_path / "out.png", _picture())
    ((src, dst),) = seen
    assert os.listdir(tmp_path) == ["out.png"]
    assert os.path.dirname(src) == str(tmp_path) and os.path.basename(src).startswith(".")
    assert os.path.basename(src).endswith(".sst-tmp") and os.fspath(dst) == str(tmp_path / "out.png")


def test_missing_folder_is_an_image_error(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="does not exist"):
        write_image(tmp_path / "nope" / "out.png", _picture())


def test_format_from_argument_or_extension(tmp_path: Path) -> None:
    write_image(tmp_path / "out.data", _picture(), format="JPG")
    with Image.open(tmp_path / "out.data") as im:
        assert im.format == "JPEG"
    with pytest.raises(ImageError, match=r"out\.gif"):
        write_image(tmp_path / "out.gif", _picture())
    with pytest.raises(ConfigError):
        write_image(tmp_path / "out.png", _picture(), format="gif")


def test_jpeg_with_transparency_is_refused_and_an_opaque_alpha_channel_dropped(tmp_path: Path) -> None:
    """An RGBA screenshot, opaque everywhere, was refused as JPEG: its alpha channel holds nothing to lose."""
    alpha = np.ones((4, 5), np.float32)
    alpha[2, 3] = 254 / 255
    picture = _picture(alpha=alpha)
    with pytest.raises(ImageError, match="JPEG cannot store transparency, which this image has"):
        write_image(tmp_path / "out.jpg", picture)
    assert os.listdir(tmp_path) == []
    assert output_format(picture, "jpg") == "jpeg"  # the header is not enough to tell: the pixels decide
    opaque = _picture(alpha=np.ones((4, 5), np.float32))
    write_image(tmp_path / "out.jpg", opaque)
    assert read_image(tmp_path / "out.jpg").alpha is None


def test_16bit_picture_written_as_8bit_jpeg(tmp_path: Path) -> None:
    write_image(tmp_path / "out.jpg", _picture(bit_depth=16, color=np.full((4, 5, 3), 0.5, np.float32)))
    assert read_image(tmp_path / "out.jpg").bit_depth == 8


# ---------------------------------------------------------------------------------------- format choices


def test_output_format_rules() -> None:
    alpha = np.ones((4, 5), np.float32)
    assert output_format(_picture(format="jpeg"), None) == "jpeg"
    assert output_format(_picture(format="webp", alpha=alpha), None) == "webp"
    assert output_format(_picture(format="tiff", bit_depth=16), None) == "tiff"
    assert output_format(_picture(format="png", bit_depth=16), None) == "png"
    assert output_format(_picture(format="jpeg", bit_depth=16), None) == "png"
    assert output_format(_picture(format="webp", bit_depth=16), None) == "png"
    assert output_format(_picture(format="bmp"), None) == "png"
    assert output_format(_picture(format="jpeg"), ".WEBP") == "webp"
    assert output_format(_picture(format="png"), "tif") == "tiff"
    with pytest.raises(ConfigError):
        output_format(_picture(), "gif")


def test_extensions_and_is_image_file() -> None:
    assert EXTENSIONS["jpeg"] == "jpg" and EXTENSIONS["png"] == "png"
    assert all(is_image_file(f"a.{ext}") for ext in EXTENSIONS.values())
    assert is_image_file("PHOTO.JPEG") and is_image_file(Path("x/scan.TIFF"))
    assert not is_image_file("notes.txt") and not is_image_file(".out.png.1234abcd.sst-tmp")


def test_a_lossless_webp_is_written_back_lossless(tmp_path: Path) -> None:
    pixels = np.random.default_rng(3).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "ll.webp", lossless=True)
    Image.fromarray(pixels).save(tmp_path / "lossy.webp", quality=80)
    lossless, lossy = read_image(tmp_path / "ll.webp"), read_image(tmp_path / "lossy.webp")
    assert lossless.lossless and not lossy.lossless
    write_image(tmp_path / "out.webp", lossless)
    assert (tmp_path / "out.webp").read_bytes()[12:16] == b"VP8L"
    assert np.array_equal(np.asarray(Image.open(tmp_path / "out.webp")), pixels)  # bit for bit
    write_image(tmp_path / "lossy_out.webp", lossy)
    assert (tmp_path / "lossy_out.webp").read_bytes()[12:16] != b"VP8L"
    write_image(tmp_path / "asked.webp", lossless, quality=50)  # --quality asks for a lossy file: it was ignored
    assert (tmp_path / "asked.webp").read_bytes()[12:16] == b"VP8 "


@pytest.mark.parametrize("depth", [8, 16])
def test_resolution_gamma_and_text_are_kept(tmp_path: Path, depth: int) -> None:
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Title", "cat")
    info.add_itxt("Comment", "ünïcode", lang="en")
    info.add(b"gAMA", (45455).to_bytes(4, "big"))
    pixels = np.full((6, 5), 40000, np.uint16) if depth == 16 else np.full((6, 5, 3), 90, np.uint8)
    Image.fromarray(pixels).save(tmp_path / "in.png", pnginfo=info, dpi=(300, 150))
    picture = read_image(tmp_path / "in.png")
    assert picture.dpi is not None and picture.dpi == pytest.approx((300, 150), abs=0.02)  # PNG: pixels per metre
    write_image(tmp_path / "out.png", picture)
    with Image.open(tmp_path / "out.png") as out:
        out.load()
        assert (out.info["Title"], out.info["Comment"], out.info["gamma"]) == ("cat", "ünïcode", 0.45455)
        assert out.info["dpi"] == pytest.approx((300, 150), abs=0.02)
    write_image(tmp_path / "out.jpg", replace(picture, bit_depth=8))  # another format: the resolution only
    with Image.open(tmp_path / "out.jpg") as out:
        assert out.info["dpi"] == pytest.approx((300, 150), abs=0.5) and "Title" not in out.info


@pytest.mark.parametrize("suffix", ["png", "jpg", "tif", "webp"])
def test_the_resolution_is_kept_in_the_outputs_the_readme_names(tmp_path: Path, suffix: str) -> None:
    """README: the resolution goes to PNG, JPEG and TIFF outputs. WebP has no field for it (Pillow neither writes
    nor reads one), which the README left unsaid: WebP outputs go without it, as it now says."""
    Image.new("RGB", (6, 4), "teal").save(tmp_path / "in.bmp", dpi=(300, 150))  # a BMP input's resolution too
    picture = read_image(tmp_path / "in.bmp")
    assert picture.dpi == pytest.approx((300, 150), abs=0.02)
    write_image(tmp_path / f"out.{suffix}", picture)
    with Image.open(tmp_path / f"out.{suffix}") as out:
        written = out.info.get("dpi")
    kept = suffix != "webp"
    assert (written is not None, read_image(tmp_path / f"out.{suffix}").dpi is not None) == (kept, kept)
    if kept:
        assert written == pytest.approx((300, 150), abs=0.02)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_a_16_bit_tiff_keeps_its_resolution(tmp_path: Path, channels: int) -> None:
    """16-bit TIFFs lost it both ways: written without one, and read without one where tifffile decodes them."""
    values = _u16(5, 7, channels)
    tifffile = pytest.importorskip("tifffile")  # planar colour: one of the layouts read through tifffile
    layout = {"photometric": "rgb", "planarconfig": "separate"} if channels > 1 else {}
    tifffile.imwrite(tmp_path / "in.tif", np.moveaxis(values, -1, 0) if layout else values[..., 0], **layout,
                     resolution=(300, 150), resolutionunit="INCH",
                     extrasamples=["unassalpha"] if channels == 4 else None)  # fmt: skip
    picture = read_image(tmp_path / "in.tif")
    assert picture.bit_depth == 16 and picture.dpi == pytest.approx((300, 150))
    write_image(tmp_path / "out.tif", picture)
    with Image.open(tmp_path / "out.tif") as out:
        assert out.info["dpi"] == pytest.approx((300, 150))
    again = read_image(tmp_path / "out.tif")
    assert again.bit_depth == 16 and again.dpi == pytest.approx((300, 150))
    np.testing.assert_array_equal(again.color, picture.color)


@pytest.mark.parametrize("where", ["text", "xmp", "zipped xmp"])
def test_an_orientation_a_png_keeps_outside_exif_is_reset_too(tmp_path: Path, where: str) -> None:
    """Pillow turns a PNG by the orientation in ImageMagick's EXIF text chunk or in XMP; both were copied to the
    output as they were, still saying 6, so viewers turned the upright result a second time."""
    from PIL import PngImagePlugin

    stored = Image.fromarray(_u8(4, 6, 3))  # shown turned 90° clockwise: 6 wide, 4 high
    info = PngImagePlugin.PngInfo()
    if where == "text":
        exif = Image.Exif()
        exif[0x0112], exif[0x010F] = 6, "SST camera"
        raw = exif.tobytes().hex()  # "Exif\0\0" and the TIFF structure
        info.add_text("Raw profile type exif", f"\nexif\n{len(raw) // 2:8d}\n{raw}\n", zip=True)
    else:
        xmp = ('<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
               '<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="6" tiff:Make="SST"/>'
               "</rdf:RDF></x:xmpmeta>")  # fmt: skip
        info.add_itxt("XML:com.adobe.xmp", xmp, zip=where == "zipped xmp")
    stored.save(tmp_path / "in.png", pnginfo=info)
    picture = read_image(tmp_path / "in.png")
    assert picture.color.shape[:2] == (6, 4)
    write_image(tmp_path / "out.png", picture)
    with Image.open(tmp_path / "out.png") as out:
        out.load()
        assert ImageOps.exif_transpose(out).size == (4, 6)  # as stored: upright already
        if where == "text":
            assert out.getexif()[0x010F] == "SST camera" and "Raw profile type exif" not in out.info
        else:
            xmp = out.info["XML:com.adobe.xmp"]
            assert 'tiff:Orientation="1"' in xmp and 'tiff:Make="SST"' in xmp


def test_a_turned_photo_turns_its_resolution_and_an_icc_profile_replaces_srgb(tmp_path: Path) -> None:
    from PIL import PngImagePlugin

    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90°: the upright picture's x is the stored y
    Image.new("RGB", (6, 4), "red").save(tmp_path / "turned.jpg", exif=exif.tobytes(), dpi=(300, 100))
    assert read_image(tmp_path / "turned.jpg").dpi == (100, 300)
    info = PngImagePlugin.PngInfo()
    info.add(b"sRGB", b"\x00")
    Image.new("RGB", (4, 4)).save(tmp_path / "srgb.png", pnginfo=info)
    picture = read_image(tmp_path / "srgb.png")
    assert picture.png_chunks == ((b"sRGB", b"\x00"),)
    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    write_image(tmp_path / "both.png", replace(picture, icc_profile=profile))  # PNG allows one of the two
    with Image.open(tmp_path / "both.png") as out:
        assert "icc_profile" in out.info and "srgb" not in out.info


def test_a_16_bit_lzw_tiff_stays_with_pillow_which_reads_it(tmp_path: Path) -> None:
    """tifffile decodes LZW only with imagecodecs: the 16-bit layouts Pillow reads right are left to it."""
    gray = (np.arange(48 * 64).reshape(48, 64) * 20).astype(np.uint16)
    Image.fromarray(gray).save(tmp_path / "lzw.tif", compression="tiff_lzw")
    picture = read_image(tmp_path / "lzw.tif")
    assert picture.bit_depth == 16 and np.array_equal(np.round(picture.color[..., 0] * 65535), gray)


def _idat_stream(data: bytes) -> bytes:
    """The zlib stream of a PNG file: its IDAT chunks' data, joined."""
    stream, at = b"", 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"IDAT":
            stream += data[at + 8 : at + 8 + length]
        at += 12 + length
    return stream


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("bit_depth", [8, 16])
def test_png_slices_from_several_threads_make_one_exact_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, channels: int, bit_depth: int
) -> None:
    """Slices of a few rows each, filtered and deflated by 4 threads, read back exactly, and zlib (which checks
    the Adler-32 the writer joined from the slices') decodes the whole stream."""
    monkeypatch.setattr(encoders, "_PNG_SLICE_BYTES", 200)
    monkeypatch.setattr(encoders, "usable_cores", lambda: 4)
    full = 65535 if bit_depth == 16 else 255
    rng = np.random.default_rng(channels)
    values = rng.integers(0, full + 1, (37, 29, channels)).astype(np.float32)
    values[:, :10] = values[:1, :1]  # flat runs too, where Paeth predicts exactly
    gray = channels in (1, 2)
    color = np.repeat(values[..., :1], 3, axis=2) if gray else values[..., :3]
    alpha = values[..., -1] if channels in (2, 4) else None
    picture = _picture(
        color=color / full, alpha=None if alpha is None else alpha / full, grayscale=gray, bit_depth=bit_depth
    )
    write_image(tmp_path / "out.png", picture)
    data = (tmp_path / "out.png").read_bytes()
    row_bytes = 29 * channels * bit_depth // 8
    assert len(zlib.decompress(_idat_stream(data))) == 37 * (1 + row_bytes)
    back = read_image(tmp_path / "out.png")
    assert back.bit_depth == bit_depth and back.grayscale == gray
    assert np.array_equal(np.rint(back.color * full), color)
    assert (back.alpha is None) == (alpha is None)
    if alpha is not None and back.alpha is not None:
        assert np.array_equal(np.rint(back.alpha * full), alpha)


def test_adler32_of_joined_slices() -> None:
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    for cuts in ([0, 100_000], [0, 0, 5, 70_000, 100_000], [0, 1, 99_999, 100_000]):
        checksum = 1
        for start, end in itertools.pairwise(cuts):
            checksum = encoders._adler32_joined(checksum, zlib.adler32(data[start:end]), end - start)
        assert checksum == zlib.adler32(data)


def test_png_files_are_about_as_small_as_pillows(tmp_path: Path) -> None:
    """One filter for every row (Paeth) against Pillow's pick per row, on a photo enlarged as an upscale is."""
    with Image.open(Path(__file__).parent.parent / "examples" / "chelsea.png") as im:
        photo = im.convert("RGB").resize((im.width * 4, im.height * 4), Image.BICUBIC)
    write_image(tmp_path / "ours.png", _picture(color=np.asarray(photo, np.float32) / 255))
    photo.save(tmp_path / "pillow.png")
    ours, pillows = (tmp_path / "ours.png").stat().st_size, (tmp_path / "pillow.png").stat().st_size
    assert ours <= 1.08 * pillows, (ours, pillows)


def test_an_interrupted_png_encode_stops_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the slices are encoded: the slices not yet started are dropped (``Executor.map`` cancels
    them when its results stop being read), and no file is left."""
    monkeypatch.setattr(encoders, "_PNG_SLICE_BYTES", 64)
    monkeypatch.setattr(encoders, "usable_cores", lambda: 2)
    real = encoders._paeth_rows
    calls: list[int] = []

    def paeth(*args: np.ndarray | int) -> np.ndarray:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        time.sleep(0.05)  # a slice's real work, so that the interrupt is seen while most slices wait
        return real(*args)

    monkeypatch.setattr(encoders, "_paeth_rows", paeth)
    with pytest.raises(KeyboardInterrupt):
        write_image(tmp_path / "out.png", _picture(color=np.zeros((200, 20, 3), np.float32)))
    assert len(calls) < 20  # of 200 one-row slices (all 200: 5 s)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("orientation", [3, 6])
def test_a_turned_8_bit_tiff_is_turned_once_and_its_resolution_with_it(tmp_path: Path, orientation: int) -> None:
    """Pillow turns a TIFF's pixels as it decodes them; Pillow 10 keeps the orientation tag, and the reader turned
    the pixels a second time (found by CI's lowest-versions run); with 13 the resolution was not turned."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    pixels = _u8(4, 6, 3)
    Image.fromarray(pixels).save(tmp_path / "in.tif", exif=exif, dpi=(300, 100))
    Image.fromarray(pixels).save(tmp_path / "in.png", exif=exif)
    with Image.open(tmp_path / "in.png") as png:
        expected = np.asarray(ImageOps.exif_transpose(png))
    picture = read_image(tmp_path / "in.tif")
    np.testing.assert_array_equal(_as_int(picture.color, 255), expected)
    assert picture.dpi == pytest.approx((100, 300) if orientation == 6 else (300, 100))
