"""The bundled default (sst-light-291 x4): present, labelled, loadable offline, better than the input."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import DATASETS, needs_datasets
from PIL import Image

from sst_cli import SSTConfig, Upscaler, load_model
from sst_cli.checkpoint import read_weights
from sst_cli.choices import DEFAULT_MODEL, DEFAULT_SCALE
from sst_cli.errors import WeightsNotFound
from sst_cli.hub import manifest_entry, sha256_of
from sst_cli.zoo import get_variant

ROOT = Path(__file__).resolve().parent.parent


def test_default_model_is_bundled_labelled_and_carries_its_config() -> None:
    assert (DEFAULT_MODEL, DEFAULT_SCALE) == ("sst-light-291", 4)
    entry = manifest_entry(DEFAULT_MODEL, DEFAULT_SCALE).bundled_path
    assert entry == ROOT / "weights" / "sst-light-291_x4.safetensors" and entry.is_file()
    _, meta = read_weights(entry)
    config = SSTConfig.from_kwargs(json.loads(meta["sst_config"]))
    assert config == get_variant("sst-light").config(4) == get_variant("sst-light-291").config(4)
    assert meta["trained_by"] == "sst-cli" and meta["variant"] == "sst-light-291"
    assert "not the paper's" in meta["source"] and "train291" in meta["data"]
    model = load_model("sst-light-291", 4)
    assert model.scale == 4 and not model.training


def test_official_name_never_resolves_to_the_bundled_weights(offline_cache: Path) -> None:
    """``sst-light`` means the authors' weights: offline and not cached, it fails and points at the default."""
    assert manifest_entry("sst-light", 4).bundled is None
    with pytest.raises(WeightsNotFound) as info:
        load_model("sst-light", 4)
    assert "HF_HUB_OFFLINE is set" in str(info.value) and "sst-light-291 x4" in str(info.value)


@pytest.mark.parametrize("scale", [3])
def test_untrained_scales_say_how_to_make_them(offline_cache: Path, x3_untrained: Path, scale: int) -> None:
    with pytest.raises(WeightsNotFound, match=f"sst-light-291 x{scale} weights are not trained yet.*sst train"):
        load_model("sst-light-291", scale)


def test_default_upscaler_works_offline_from_a_fresh_install(tmp_path: Path) -> None:
    """Installed layout (weights inside the package), empty HF cache, HF_HUB_OFFLINE=1, no network at all."""
    site = tmp_path / "site"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "sst_cli", site / "sst_cli", ignore=skip)
    shutil.copytree(ROOT / "weights", site / "sst_cli" / "weights", ignore=skip)  # as pyproject installs it
    (site / "weights").mkdir()  # another package's folder in site-packages: it took over the manifest
    (site / "weights" / "manifest.json").write_text('{"format": 1, "models": {}}')
    script = textwrap.dedent(
        """
        import socket
        def no_net(*a, **k):
            raise AssertionError("network used")
        socket.socket.connect = no_net
        socket.getaddrinfo = no_net
        import numpy as np
        from sst_cli import Upscaler, hub
        up = Upscaler(device="cpu", tile=0)
        out = up.upscale(np.full((8, 8, 3), 0.5, dtype=np.float32))
        print(hub.resolve_pretrained("sst-light-291", 4), up.scale, out.shape)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SST_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(tmp_path / "cache"))
    env["PYTHONPATH"] = str(site)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    bundled = site / "sst_cli" / "weights" / "sst-light-291_x4.safetensors"
    assert out.stdout.split() == [str(bundled), "4", "(32,", "32,", "3)"]
    assert sha256_of(bundled) == sha256_of(ROOT / "weights" / "sst-light-291_x4.safetensors")


def _psnr_y(a: np.ndarray, b: np.ndarray, border: int) -> float:
    """PSNR on BT.601 luma of uint8 RGB images, ``border`` pixels shaved (the usual SR protocol)."""

    def luma(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64) / 255.0
        return 16.0 + 65.481 * x[..., 0] + 128.553 * x[..., 1] + 24.966 * x[..., 2]

    diff = (luma(a) - luma(b))[border:-border, border:-border]
    return 10 * math.log10(255.0**2 / np.mean(diff**2))


@needs_datasets
@pytest.mark.parametrize(
    ("scale", "margin"),
    [
        (2, 1.0),  # bird: +2.0 dB (Set5 mean: 35.95 vs 33.67 dB)
        (3, 1.5),  # bird: +2.3 dB (Set5 mean: 32.29 vs 30.40 dB)
        (4, 1.5),  # bird: +2.4 dB (Set5 mean: 30.43 vs 28.43 dB)
    ],
)
def test_bundled_weights_beat_bicubic_on_set5(scale: int, margin: float) -> None:
    """Each shipped scale gains clearly over bicubic on an image it was not trained on (``weights/TRAINING.md``)."""
    torch.set_num_threads(2)
    up = Upscaler(scale=scale, tile=0)
    lr_image = Image.open(DATASETS / "Set5" / "LR_bicubic" / f"X{scale}" / f"birdx{scale}.png").convert("RGB")
    lr = np.asarray(lr_image)
    hr = np.asarray(Image.open(DATASETS / "Set5" / "HR" / "bird.png").convert("RGB"))
    hr = hr[: lr.shape[0] * scale, : lr.shape[1] * scale]
    bicubic = np.asarray(lr_image.resize((lr.shape[1] * scale, lr.shape[0] * scale), Image.BICUBIC))
    ours = up.upscale(lr)
    assert ours.shape == hr.shape
    assert _psnr_y(ours, hr, scale) > _psnr_y(bicubic, hr, scale) + margin
