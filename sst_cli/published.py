"""Published PSNR/SSIM (Y channel) that ``sst eval`` shows next to its own measurements.

Only numbers we hold from a citable source are listed; a missing entry is shown as "—", never
guessed. Keys are (model, dataset, scale) with the canonical dataset names of ``evaluate``.
"""

from __future__ import annotations

from typing import NamedTuple


class Published(NamedTuple):
    psnr: float
    ssim: float | None
    source: str


_BICUBIC = "bicubic baseline as reported across the SR literature (e.g. EDSR, RCAN, SwinIR tables)"
_SST_LIGHT = "Lee et al. 2026, Table S5 (SST-light), as quoted in sst-cli issue #6"

PUBLISHED: dict[tuple[str, str, int], Published] = {
    ("bicubic", "Set5", 2): Published(33.66, 0.9299, _BICUBIC),
    ("bicubic", "Set5", 3): Published(30.39, 0.8682, _BICUBIC),
    ("bicubic", "Set5", 4): Published(28.42, 0.8104, _BICUBIC),
    ("bicubic", "Set14", 2): Published(30.24, 0.8688, _BICUBIC),
    ("bicubic", "Set14", 3): Published(27.55, 0.7742, _BICUBIC),
    ("bicubic", "Set14", 4): Published(26.00, 0.7027, _BICUBIC),
    ("bicubic", "B100", 2): Published(29.56, 0.8431, _BICUBIC),
    ("bicubic", "B100", 3): Published(27.21, 0.7385, _BICUBIC),
    ("bicubic", "B100", 4): Published(25.96, 0.6675, _BICUBIC),
    ("bicubic", "Urban100", 2): Published(26.88, 0.8403, _BICUBIC),
    ("bicubic", "Urban100", 3): Published(24.46, 0.7349, _BICUBIC),
    ("bicubic", "Urban100", 4): Published(23.14, 0.6577, _BICUBIC),
    ("bicubic", "Manga109", 2): Published(30.80, 0.9339, _BICUBIC),
    ("bicubic", "Manga109", 3): Published(26.95, 0.8556, _BICUBIC),
    ("bicubic", "Manga109", 4): Published(24.89, 0.7866, _BICUBIC),
    ("sst-light", "Set5", 4): Published(32.62, None, _SST_LIGHT),
    ("sst-light", "B100", 4): Published(27.79, None, _SST_LIGHT),
    ("sst-light", "Urban100", 4): Published(27.12, None, _SST_LIGHT),
}


#: Images in each benchmark set: a folder named like one but holding other images is not that set.
SET_SIZES = {"Set5": 5, "Set14": 14, "B100": 100, "Urban100": 100, "Manga109": 109}


def published(model: str, dataset: str, scale: int, images: int) -> Published | None:
    """The published figure for a zoo model (or ``bicubic``) on a canonical dataset of ``images`` images, if we
    hold one (a copy of Set5 with two images left was compared with the whole set's figure)."""
    if SET_SIZES.get(dataset) != images:
        return None
    return PUBLISHED.get((model.strip().lower(), dataset, scale))
