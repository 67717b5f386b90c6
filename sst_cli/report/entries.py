"""What a report holds about its columns and images, and the view of a report that the page is drawn from.

Apart from ``builder`` (which fills them) and ``page`` (which draws them), so that neither imports the other's
module for its types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .crops import CropBox

CROP_DISPLAY = 240  # px, about how wide a crop is shown (an integer zoom of its pixels)

LR, BICUBIC, HR = "lr", "bicubic", "hr"


@dataclass(frozen=True)
class Score:
    """PSNR-Y / SSIM-Y of one method on one image (SSIM may be unknown)."""

    psnr: float
    ssim: float | None = None


@dataclass
class Method:
    """A column of the report: ``id`` names its files, ``label`` is shown."""

    id: str
    label: str
    kind: str  # "lr", "bicubic", "model" or "hr"


@dataclass
class ImageEntry:
    """What a report keeps in memory about one image (its pixels live in the staging folder)."""

    order: int
    key: str
    slug: str
    name: str
    scale: int
    lr_size: tuple[int, int]  # (width, height)
    out_size: tuple[int, int]
    dataset: str | None = None
    bit_depth: int = 8
    alpha: bool = False
    has_hr: bool = False
    scores: dict[str, Score] = field(default_factory=dict)  # method id -> whole-image score
    crop_psnr: dict[str, float] = field(default_factory=dict)  # method id -> PSNR-Y of the crop
    change: dict[str, float] = field(default_factory=dict)  # model id -> mean |ΔY| from bicubic (8-bit levels)
    ran_on: dict[str, dict[str, str]] = field(default_factory=dict)  # method id -> {"device": .., "precision": ..}
    outputs: set[str] = field(default_factory=set)
    crop: CropBox | None = None  # in input pixels
    thumb: str = ""

    def crop_option(self, ground_truth: bool) -> str:
        """The ``--crop`` that shows this crop again: HR (output) pixels for eval, input pixels for compare."""
        assert self.crop is not None
        box = self.crop.scaled(self.scale) if ground_truth else self.crop
        return f"--crop {box.x},{box.y},{box.width},{box.height}"


class ReportView(Protocol):
    """What ``page.render_page`` reads from a report (``builder.ReportBuilder`` is one)."""

    title: str
    ground_truth: bool
    notes: list[str]
    methods: list[Method]
    entries: dict[str, ImageEntry]

    @property
    def models(self) -> list[Method]: ...

    def summary(self) -> list[dict]: ...

    def gain(self, entry: ImageEntry, method_id: str) -> float | None: ...
