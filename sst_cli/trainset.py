"""Training data: the image folders, the test-set guard, and random (LR, HR) patch pairs.

Benchmark test sets are never trained on, so any ``--data`` folder that is, or contains, one is
refused. LR patches are made exactly like the benchmark LR images: MATLAB-compatible bicubic of the
uint8 HR crop, rounded after each pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from .errors import ConfigError
from .image_io import is_image_file, read_image
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


def find_images(folders: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Every image file under each folder (recursive, sorted); refuses test sets and empty folders."""
    found: list[Path] = []
    for folder in map(Path, folders):
        named = benchmark_in_path(folder) or benchmark_in_path(folder.resolve())
        if named:
            raise ConfigError(f"--data {folder}: '{named}' is a benchmark test set, and test sets are never trained on")
        if not folder.is_dir():
            raise ConfigError(f"--data {folder} is not a folder")
        files = sorted(p for p in folder.rglob("*") if is_image_file(p) and p.is_file())
        inside = sorted({n for p in files if (n := benchmark_in_path(p.relative_to(folder).parent))})
        if inside:
            raise ConfigError(
                f"--data {folder} contains the benchmark test set(s) {', '.join(inside)}, which are never trained "
                "on: point --data at the training images only"
            )
        if not files:
            raise ConfigError(f"--data {folder}: no images (png, jpg, webp, tif, bmp) found in it or below it")
        found += files
    return found


def load_images(files: Sequence[Path], min_side: int, on_message: Message | None = None) -> list[np.ndarray]:
    """Decode each file once to (H, W, 3) uint8; images smaller than ``min_side`` are skipped, and said so."""
    images: list[np.ndarray] = []
    small: list[str] = []
    for path in files:
        picture = read_image(path)
        if min(picture.color.shape[:2]) < min_side:
            small.append(path.name)
            continue
        images.append(np.round(picture.color * 255.0).astype(np.uint8))
    if small and on_message is not None:
        more = f" and {len(small) - 5} more" if len(small) > 5 else ""
        names = ", ".join(small[:5]) + more
        on_message(f"skipped {len(small)} image(s) smaller than the {min_side}x{min_side} HR patch: {names}")
    if not images:
        folders = ", ".join(sorted({str(p.parent) for p in files}))
        raise ConfigError(f"no training image is at least {min_side}x{min_side} pixels (the HR patch) in {folders}")
    return images


class PatchSampler:
    """Random (LR, HR) training pairs from uint8 images; all randomness comes from one seeded generator."""

    def __init__(self, images: Sequence[np.ndarray], patch: int, scale: int, seed: int) -> None:
        self.images, self.patch, self.scale = list(images), patch, scale
        self.generator = torch.Generator().manual_seed(seed)

    def _int(self, high: int) -> int:
        return int(torch.randint(high, (1,), generator=self.generator))

    def sample(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(LR, HR) float32 NCHW in [0, 1]; LR is MATLAB bicubic of the uint8 HR crop, rounded per pass."""
        size = self.patch * self.scale
        crops = []
        for _ in range(batch):
            image = self.images[self._int(len(self.images))]
            top, left = self._int(image.shape[0] - size + 1), self._int(image.shape[1] - size + 1)
            crop = image[top : top + size, left : left + size]
            hflip, vflip, transpose = torch.randint(2, (3,), generator=self.generator).tolist()
            if hflip:
                crop = crop[:, ::-1]
            if vflip:
                crop = crop[::-1]
            if transpose:  # with the flips: all 8 rotations / reflections
                crop = crop.transpose(1, 0, 2)
            crops.append(crop)
        hr = torch.from_numpy(np.ascontiguousarray(np.stack(crops)))
        if device.type == "cuda":  # a pageable copy would wait for the GPU to finish the previous step
            hr = hr.pin_memory()
        hr = hr.to(device, non_blocking=True).permute(0, 3, 1, 2)
        lr = imresize(hr, size=(self.patch, self.patch))
        return lr.float().div_(255.0), hr.float().div_(255.0)
