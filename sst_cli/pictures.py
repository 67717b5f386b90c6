"""Pictures in memory: numpy arrays and PIL images read as their files would be (``image_io.Picture``), and
the results given back in the caller's kind, dtype, byte order and mode; with the notices a caller's input
deserves (samples clipped, an 8-bit image in mode I), which the ``Upscaler`` passes on."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import torch
from PIL import Image, ImageOps

from .errors import ConfigError, ImageError
from .exif import ORIENTATION
from .image_io import Picture, cmyk_to_rgb, upright_dpi, with_colour_key


def loaded(image: Image.Image) -> Image.Image:
    """``image`` with its pixels decoded, else an ImageError: a damaged file, or one closed before its pixels were
    read (``with Image.open(p) as im: pass`` and then ``im``), which met a bare AssertionError from Pillow."""
    try:
        image.load()
    except OSError as exc:
        raise ImageError(f"cannot read the image: {exc}") from exc
    except (AssertionError, ValueError, AttributeError) as exc:  # how Pillow says the file is closed (10.0: no fp)
        raise ImageError(
            f"cannot read the image: it is closed or unreadable ({str(exc) or type(exc).__name__}); an image opened "
            "in a with block is closed at its end unless loaded: upscale it in the block, or call image.load() there"
        ) from exc
    return image


RUN_TAKES = "Upscaler.run takes a (3, H, W) float32 CPU tensor of RGB in 0..1"


def image_array(image: object, method: str) -> np.ndarray:
    """``image`` as the array ``method`` takes, or a ConfigError saying what it takes: bytes, file objects and
    numbers met "expected an (H, W), (H, W, 1-4) image array, got shape ()"."""
    takes = f"{method} takes an image (PIL or numpy array)"
    if image is None:
        raise ConfigError(f"{takes}, not None")
    if isinstance(image, str | os.PathLike):
        raise ConfigError(
            f"{takes}, not the path {os.fspath(image)!r}: use upscale_file(source, target), or Image.open(path)"
        )
    if isinstance(image, bytes | bytearray) or hasattr(image, "read"):
        raise ConfigError(
            f"{takes}, not {type(image).__name__}: open encoded image data with PIL first "
            "(Image.open(io.BytesIO(data)), Image.open(file)), or give upscale_file a path"
        )
    if isinstance(image, torch.Tensor):  # an HWC uint8 one passed, the usual CHW float one met the shape message
        raise ConfigError(
            f"{takes}, not a torch tensor: {RUN_TAKES} and returns "
            "one in .image; or pass tensor.numpy() as an (H, W, C) array"
        )
    array = np.asarray(image)
    if not isinstance(image, np.ndarray) and (array.ndim == 0 or array.dtype == object):
        raise ConfigError(f"{takes}, not {type(image).__name__}")
    return array


def check_run_input(image: object) -> None:
    """Refuse what ``Upscaler.run`` cannot take, saying what it takes: a (C, H, W) tensor of 3 float channels in
    0..1. Others failed deep in torch (a 4-channel or HWC tensor, a numpy array) or, for uint8, returned
    numbers from -40 to 305 without a word."""
    takes = RUN_TAKES
    if not isinstance(image, torch.Tensor):
        also = ", or pass it to upscale()" if isinstance(image, np.ndarray | Image.Image) else ""
        raise ConfigError(f"{takes}, not {type(image).__name__}{also}")
    if image.ndim != 3 or image.shape[0] != 3:
        hint = " (HWC? use image.permute(2, 0, 1))" if image.ndim == 3 and image.shape[-1] == 3 else ""
        raise ConfigError(f"{takes}, not one of shape {tuple(image.shape)}{hint}; upscale() takes gray and RGBA")
    if not image.dtype.is_floating_point:
        raise ConfigError(f"{takes}, not {image.dtype} (8-bit samples: image.float() / 255)")


FLOATS_OUTSIDE = "the float samples lie outside 0..1"
WORDS_OUTSIDE = "the mode I samples lie outside 0..65535 (mode I is read as 16 bits, as image files are)"


def clipped_note(share: float, what: str) -> str | None:
    """The notice for a ``share`` of samples clipped on reading (``what`` says which, and the range), or None."""
    return f"{100 * share:.3g}% of {what}: they are clipped to it" if share else None


def pil_notes(mode: str, picture: Picture) -> tuple[str | None, ...]:
    """What reading a PIL image of this mode clipped (floats of mode F outside 0..1, integers of mode I outside
    16 bits), and a mode I image whose values all lie in 0..255: ``convert("I")`` of an 8-bit image, which
    comes back nearly black (mode I is 16 bits, as in files; guessing the depth from the values would make a
    dark 16-bit image bright)."""
    if mode != "I":
        return (clipped_note(picture.clipped, FLOATS_OUTSIDE),)
    top = float(picture.color.max())
    narrow = None
    if 0 < top <= 255 / 65535:
        narrow = (
            "the mode I image's values all lie in 0..255, but mode I is read as 16 bits (0..65535), as image files "
            "are: it comes back nearly black; if it holds 8-bit values, pass image.convert('L') instead"
        )
    return clipped_note(picture.clipped, WORDS_OUTSIDE), narrow


def picture_from_array(array: np.ndarray, what: str = "the image array") -> Picture:
    """``array`` as a picture; ``what`` names it in refusals as the caller passed it (a PIL image's pixels pass
    through here too, and were called "the image array")."""
    if array.ndim == 2:
        array = array[..., None]
    if array.ndim != 3 or array.shape[2] not in (1, 2, 3, 4):
        raise ConfigError(f"expected an (H, W), (H, W, 1-4) image array, got shape {array.shape}")
    if not array.dtype.isnative:  # big-endian uint16 (a FITS or raw file's) was "unsupported dtype >u2"
        array = array.astype(array.dtype.newbyteorder("="))
    clipped = 0.0
    if array.dtype == np.uint8:
        values, depth = array.astype(np.float32) / 255.0, 8
    elif array.dtype == np.uint16:
        values, depth = array.astype(np.float32) / 65535.0, 16
    elif np.issubdtype(array.dtype, np.floating):
        floats = array.astype(np.float32)
        if not np.isfinite(floats).all():
            raise ConfigError(f"{what} holds NaN or infinite values")
        clipped = float(np.count_nonzero((floats < 0) | (floats > 1))) / max(1, floats.size)
        values, depth = np.clip(floats, 0.0, 1.0), 16
    else:
        raise ConfigError(f"unsupported image array dtype {array.dtype}; use uint8, uint16 or float in [0, 1]")
    channels = values.shape[2]
    gray = channels in (1, 2)
    color = np.repeat(values[..., :1], 3, axis=2) if gray else values[..., :3]
    alpha = values[..., -1] if channels in (2, 4) else None
    return Picture(color, alpha, gray, depth, None, None, "png", clipped)


def to_array(picture: Picture, like: np.ndarray) -> np.ndarray:
    color = picture.color.mean(axis=2, keepdims=True) if picture.grayscale else picture.color
    parts = [color] if picture.alpha is None else [color, picture.alpha[..., None]]
    values = np.concatenate(parts, axis=2)
    if like.ndim == 2:
        values = values[..., 0]
    native = like.dtype.newbyteorder("=")  # the input's byte order is kept, as its dtype is
    if native == np.uint8:
        return np.round(values * 255.0).astype(like.dtype)
    if native == np.uint16:
        return np.round(values * 65535.0).astype(like.dtype)
    return values.astype(like.dtype)


def picture_from_pil(image: Image.Image) -> Picture:
    """The picture a file with this image would give: upright, palette without transparency as RGB, CMYK
    through its profile, ICC and EXIF carried."""
    icc = image.info.get("icc_profile") or None
    dpi = upright_dpi(image.info.get("dpi"), turned=image.getexif().get(ORIENTATION, 1) in (5, 6, 7, 8))
    image = ImageOps.exif_transpose(image)  # also resets the orientation tag in .info["exif"]
    mode = image.mode
    exif = image.info.get("exif")
    if mode == "P" or mode == "PA":
        image = image.convert("RGBA" if mode == "PA" or "transparency" in image.info else "RGB")
    elif mode == "CMYK":
        image, icc = cmyk_to_rgb(image, icc), None
    elif mode in ("1", "RGBa"):
        image = image.convert({"1": "L", "RGBa": "RGBA"}[mode])
    elif mode == "La":  # premultiplied gray + alpha, which Pillow cannot convert: divided out here
        la = np.asarray(image).astype(np.float32)
        gray = np.where(la[..., 1] > 0, la[..., 0] * 255 / np.maximum(la[..., 1], 1), 0)
        image = Image.fromarray(np.dstack([np.clip(np.round(gray), 0, 255), la[..., 1]]).astype(np.uint8), "LA")
    elif mode not in ("L", "LA", "RGB", "RGBA", "F", "I") and not mode.startswith("I;16"):
        image = image.convert("RGB")  # YCbCr, LAB, HSV: colour without alpha
    values = np.asarray(image)
    clipped = 0.0
    if mode == "I" or mode.startswith("I;16"):  # 16-bit gray, as the file reader takes it
        clipped = float(np.count_nonzero((values < 0) | (values > 65535))) / max(1, values.size)
        values = np.clip(values, 0, 65535).astype(np.uint16)
    if mode not in ("P", "PA") and values.dtype.kind == "u":  # a PNG's tRNS colour key: alpha, as files get
        values = with_colour_key(image, values[..., None] if values.ndim == 2 else values)
    picture = picture_from_array(values, f"the PIL image (mode {mode})")
    exif_bytes = exif if isinstance(exif, bytes) and exif else None
    clipped = clipped or picture.clipped  # mode I's integers, or mode F's floats
    icc_bytes = icc if isinstance(icc, bytes) else None
    return replace(picture, icc_profile=icc_bytes, exif=exif_bytes, clipped=clipped, dpi=dpi)


def to_pil(picture: Picture, mode: str) -> Image.Image:
    wide = mode == "I" or mode.startswith("I;16")
    like = np.zeros((1, 1, 1), dtype=np.float32 if mode == "F" else np.uint16 if wide else np.uint8)
    array = to_array(picture, like)
    image = Image.fromarray(array[..., 0] if array.shape[2] == 1 else array)
    for key, value in (("icc_profile", picture.icc_profile), ("exif", picture.exif), ("dpi", picture.dpi)):
        if value:
            image.info[key] = value  # as Image.open gives them: ICC and EXIF are saved with it, dpi when passed
    return image
