"""Training data: the image folders, the test-set guard, and random (LR, HR) patch pairs.

Benchmark test sets are never trained on, so any ``--data`` folder that is, or contains, one is
refused. LR patches are made exactly like the benchmark LR images: MATLAB-compatible bicubic of the
uint8 HR crop, rounded after each pass.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from .checks import option_name
from .errors import ConfigError
from .image_io import READABLE_FORMATS, is_image_file, probe_image, read_image
from .inputs import UNSUPPORTED_SUFFIXES, Job, Skips, is_hidden, unreadable_folder
from .resize import imresize

# Compared with each folder name, lower-case, without - _ and spaces.
TEST_SETS = ("set5", "set14", "b100", "bsd100", "bsds100", "urban100", "manga109", "div2kvalid", "div2kval")

Message = Callable[[str], None]


def benchmark_in_path(path: str | os.PathLike[str]) -> str | None:
    """The benchmark test-set folder named in ``path`` (any component), or None."""
    for part in Path(path).parts:
        key = "".join(ch for ch in part.lower() if ch.isalnum())
        if key in TEST_SETS or key.startswith("div2kvalid"):
            return part
    return None


def fingerprint(files: Sequence[Path]) -> str:
    """What a resumed run must find again to go on bit for bit: each image's name and size, in the order they are
    drawn from; not the folders' paths, which may be written another way or moved."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}\0{path.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def find_images(
    folders: Sequence[str | os.PathLike[str]], on_message: Message | None = None, *, cli: bool = False
) -> list[Path]:
    """Every image file under each folder (recursive, sorted); refuses test sets and empty folders. Files that
    look like images but cannot be read (HEIC, links to nothing) are left out and said (``on_message``).
    ``cli``: name the folders as the command line spells it (``--data``), not as the keyword (``data``)."""
    data = option_name("data", cli)
    found: list[Path] = []
    for folder in map(Path, folders):
        named = benchmark_in_path(folder) or benchmark_in_path(folder.resolve())
        if named:
            raise ConfigError(f"{data} {folder}: '{named}' is a benchmark test set, and test sets are never trained on")
        if not folder.is_dir():
            raise ConfigError(f"{data} {folder} is not a folder")
        files, skipped = _walk(folder, data)
        said = f"skipped {_skipped_text(skipped)}" if skipped else ""
        inside = sorted({n for p in files if (n := benchmark_in_path(p.relative_to(folder).parent))})
        if inside:
            raise ConfigError(
                f"{data} {folder} contains the benchmark test set(s) {', '.join(inside)}, which are never trained "
                f"on: point {data} at the training images only"
            )
        linked = next(((p, n) for p in files if (n := benchmark_in_path(p.resolve().parent))), None)
        if linked:
            raise ConfigError(f"{data} {folder}: {linked[0]} is a link into the benchmark test set '{linked[1]}'")
        if not files:
            formats = ", ".join(READABLE_FORMATS)
            raise ConfigError(f"{data} {folder}: no images sst-cli reads ({formats}) in it or below it"
                              + (f"; {said}" if said else ""))  # fmt: skip
        if said and on_message is not None:
            on_message(f"{data} {folder}: {said}")
        found += files
    unique: dict[Path, Path] = {}  # a folder given twice, or linked twice, counts once
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def _walk(folder: Path, data: str) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Image files under ``folder``, sorted, following linked folders (each real folder once: no loops), and the
    image-like files left out with why (formats sst-cli cannot read, links to nothing). Hidden files and folders
    are left out silently, as upscale's folder walks leave them (macOS's ._photo.png, .git/)."""
    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    seen: set[str] = set()
    unreadable: list[OSError] = []
    for root, dirs, names in os.walk(folder, followlinks=True, onerror=unreadable.append):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [d for d in dirs if not is_hidden(d)]
        for path in (Path(root, n) for n in names if not is_hidden(n) and _image_like(n)):
            why = _unreadable(path)
            if why is None:
                files.append(path)
            else:
                skipped.append((path, why))
    if unreadable:  # a training set with a part missing would train another network than the one asked for
        raise ConfigError(f"{data} {folder}: {unreadable_folder(unreadable[0])}; training reads every image below it")
    return sorted(files), sorted(skipped)


def _image_like(name: str) -> bool:
    """An image sst-cli reads, or of a kind it does not (HEIC, ...): those are skipped aloud, as upscale does."""
    return is_image_file(name) or os.path.splitext(name)[1].lower() in UNSUPPORTED_SUFFIXES


def _unreadable(path: Path) -> str | None:
    """Why an image-like file cannot be trained on, or None."""
    if not is_image_file(path):
        return Skips().reason(Job(path, path.parent))
    if not path.is_file():
        return "a link to nothing" if path.is_symlink() else "not a file"
    return None


def _skipped_text(skipped: Sequence[tuple[Path, str]]) -> str:
    """``3 file(s): HEIC is not a format ...: a.heic, b.heic; a link to nothing: c.png``: a few names per reason."""
    reasons: dict[str, list[str]] = {}
    for path, why in skipped:
        reasons.setdefault(why, []).append(path.name)
    parts = []
    for why, names in reasons.items():
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        parts.append(f"{why}: {', '.join(names[:3])}{more}")
    return f"{len(skipped)} file(s): " + "; ".join(parts)


def large_enough(
    files: Sequence[Path], min_side: int, on_message: Message | None = None, *, cli: bool = False
) -> list[Path]:
    """The files whose pictures are at least ``min_side`` on each side, known from their headers alone: smaller
    ones are skipped and said, and a ``--patch`` larger than every picture is refused before any is decoded.
    ``cli``: as in ``find_images``."""
    kept: list[Path] = []
    small: list[str] = []
    for path in files:
        info = probe_image(path)
        if min(info.width, info.height) < min_side:
            small.append(path.name)
        else:
            kept.append(path)
    if small and on_message is not None:
        more = f" and {len(small) - 5} more" if len(small) > 5 else ""
        names = ", ".join(small[:5]) + more
        on_message(f"skipped {len(small)} image(s) smaller than the {min_side}x{min_side} HR patch: {names}")
    if not kept:
        folders = ", ".join(sorted({str(p.parent) for p in files}))
        patch = option_name("patch", cli)
        raise ConfigError(
            f"no training image is at least {min_side}x{min_side} pixels (the HR patch, {patch} x scale) in "
            f"{folders}: give a smaller {patch}"
        )
    return kept


def decode_images(files: Sequence[Path]) -> list[np.ndarray]:
    """Decode each file once to (H, W, 3) uint8."""
    return [np.round(read_image(path).color * 255.0).astype(np.uint8) for path in files]


def load_images(files: Sequence[Path], min_side: int, on_message: Message | None = None) -> list[np.ndarray]:
    """Decode each file at least ``min_side`` on each side (``large_enough``) to (H, W, 3) uint8."""
    return decode_images(large_enough(files, min_side, on_message))


class PatchSampler:
    """Random (LR, HR) training pairs cut on the training device from its resident uint8 copy of the images.

    All images live in one flat uint8 buffer on ``device`` (291 images are about 100 MB), so a step uploads
    only a (batch, 6) table of crop parameters and cuts, flips and downscales there: no per-image copies and
    no host syncs. The parameters come from one seeded CPU generator (``generator``, whose state is what a
    resumed run restores), so the data order is the same on every device.
    """

    def __init__(self, images: Sequence[np.ndarray], patch: int, scale: int, seed: int, device: torch.device) -> None:
        self.patch, self.scale, self.device = patch, scale, torch.device(device)
        self.size = patch * scale
        self.generator = torch.Generator().manual_seed(seed)
        shapes = torch.tensor([image.shape[:2] for image in images], dtype=torch.int64)
        if len(images) == 0 or int(shapes.min()) < self.size:
            raise ConfigError(f"every training image must be at least {self.size}x{self.size} pixels (the HR patch)")
        self.room = shapes - self.size + 1  # (n, 2): the crop corners that fit, per image (CPU, for drawing)
        pixels = shapes.prod(dim=1)
        table = torch.stack([torch.cumsum(pixels, 0) - pixels, shapes[:, 1]], dim=1)  # first pixel, width
        self.table = table.to(self.device)
        flat = np.concatenate([np.ascontiguousarray(image, dtype=np.uint8).reshape(-1, 3) for image in images])
        self.pixels = torch.from_numpy(flat).to(self.device)  # (sum of H*W, 3)
        self.steps = torch.arange(self.size, device=self.device)

    def draw(self, batch: int) -> torch.Tensor:
        """(batch, 6) int64 on the CPU: image, top, left, horizontal flip, vertical flip, transpose."""
        image = torch.randint(len(self.room), (batch,), generator=self.generator)
        corner = torch.rand(batch, 2, generator=self.generator, dtype=torch.float64) * self.room[image]
        flips = torch.randint(2, (batch, 3), generator=self.generator)
        return torch.cat([image[:, None], corner.long(), flips], dim=1)

    def cut(self, params: torch.Tensor) -> torch.Tensor:
        """uint8 (batch, 3, S, S) HR crops for ``draw``'s parameters: flips first, then the transpose."""
        if self.device.type == "cuda":  # a pageable copy would make the host wait for the GPU
            params = params.pin_memory()
        p = params.to(self.device, non_blocking=True)[:, :, None, None]
        image, top, left, hflip, vflip, transpose = p.unbind(dim=1)
        y, x = self.steps[:, None], self.steps[None, :]
        row = torch.where(transpose.bool(), x, y)  # output (y, x) reads the flipped crop at (x, y) when transposed
        col = torch.where(transpose.bool(), y, x)
        row = torch.where(vflip.bool(), self.size - 1 - row, row)
        col = torch.where(hflip.bool(), self.size - 1 - col, col)
        first, width = self.table[image.flatten()].unbind(dim=1)
        index = first[:, None, None] + (top + row) * width[:, None, None] + (left + col)
        return self.pixels[index].permute(0, 3, 1, 2).contiguous()

    def sample(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(LR, HR) float32 NCHW in [0, 1]; LR is MATLAB bicubic of the uint8 HR crop, rounded per pass."""
        hr = self.cut(self.draw(batch))
        lr = imresize(hr, size=(self.patch, self.patch))
        return lr.float().div_(255.0), hr.float().div_(255.0)
