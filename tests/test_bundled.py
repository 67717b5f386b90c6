"""The bundled default weights: present, loadable offline, and an actual improvement on the input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from conftest import DATASETS, needs_datasets
from PIL import Image

from sst_cli import Upscaler, load_model
from sst_cli.checkpoint import read_weights
from sst_cli.hub import manifest_entry
from sst_cli.zoo import get_variant


def test_default_model_is_bundled_and_carries_its_config() -> None:
    entry = manifest_entry("sst-light", 4)
    assert isinstance(entry, Path) and entry.is_file()
    _, config = read_weights(entry)
    assert config == get_variant("sst-light").config(4)
    model = load_model("sst-light", 4)
    assert model.scale == 4 and not model.training


def _psnr_y(a: np.ndarray, b: np.ndarray, border: int) -> float:
    """PSNR on BT.601 luma of uint8 RGB images, ``border`` pixels shaved (the usual SR protocol)."""

    def luma(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64) / 255.0
        return 16.0 + 65.481 * x[..., 0] + 128.553 * x[..., 1] + 24.966 * x[..., 2]

    diff = (luma(a) - luma(b))[border:-border, border:-border]
    return 10 * math.log10(255.0**2 / np.mean(diff**2))


@needs_datasets
def test_bundled_weights_beat_nearest_neighbour_on_set5() -> None:
    """The demo weights are no official ones, but they must do better than repeating pixels."""
    torch.set_num_threads(2)
    up = Upscaler(tile=0)
    lr = np.asarray(Image.open(DATASETS / "Set5" / "LR_bicubic" / "X4" / "birdx4.png").convert("RGB"))
    hr = np.asarray(Image.open(DATASETS / "Set5" / "HR" / "bird.png").convert("RGB"))
    hr = hr[: lr.shape[0] * 4, : lr.shape[1] * 4]
    nearest = lr.repeat(4, axis=0).repeat(4, axis=1)
    ours = up.upscale(lr)
    assert ours.shape == hr.shape
    assert _psnr_y(ours, hr, 4) > _psnr_y(nearest, hr, 4) + 1.0
