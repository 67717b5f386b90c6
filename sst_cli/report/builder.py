"""``ReportBuilder``: collects each image's input, bicubic, model outputs and ground truth into a report folder.

The builder writes into a staging folder (``open_report`` makes it with ``files.atomic_folder``, so the report
appears whole or not at all): full-size 8-bit PNGs of every method as they arrive, then, in ``finish``, one crop
per method (placed by ``crops.choose_crop`` unless a box is given), a thumbnail per image, ``report.json`` and
``index.html``. Only small per-image facts stay in memory, so a report of a hundred large images is fine.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image

from ..errors import ConfigError
from ..files import atomic_folder, check_folder_replaceable, json_text
from ..metrics import psnr
from . import page as index_page
from .crops import (
    CropBox,
    CropBy,
    alpha_of,
    box_from_output_pixels,
    choose_crop,
    fit_box,
    luma,
    nearest,
    to_pil,
)
from .entries import BICUBIC, HR, LR, ImageEntry, Method, Score

REPORT_JSON = "report.json"
GENERATOR = "sst-cli report"
THUMB_SIDE = 160  # px, longest side of a thumbnail
PNG_LEVEL = 3  # zlib level for full-size PNGs: a third of level 9's time, a few percent larger
SLUG_MAX = 100  # characters of an image's folder name, well under the 255 bytes file systems allow


def is_report(folder: Path) -> bool:
    """True when ``folder`` holds a report sst-cli wrote (its report.json says so), so it may be replaced."""
    try:
        data = json.loads((folder / REPORT_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("generator") == GENERATOR


def check_target(folder: Path) -> None:
    """Fail at once (before models run) when ``folder`` is a file or a non-empty folder that is not a report."""
    check_folder_replaceable(Path(folder), is_report)


def slugify(text: str, limit: int = SLUG_MAX) -> str:
    """A file-name-safe form of ``text`` (letters, digits, ., -, _) of at most ``limit`` characters.

    A longer form is cut and ends in a short hash of the whole ``text``, so two long names that start
    alike still get different folders.
    """
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip(".-") or "image"
    if len(slug) <= limit:
        return slug
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{slug[: limit - len(digest) - 1].rstrip('.-')}-{digest}"


def _save_png(frame: np.ndarray, path: Path) -> None:
    to_pil(frame).save(path, format="PNG", compress_level=PNG_LEVEL)


def _load(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im)


class ReportBuilder:
    """Build one report in ``folder`` (a staging folder; see ``open_report``).

    ``models``: the labels of the networks compared, in column order (bicubic is always a column of its own).
    ``ground_truth``: an HR column with PSNR (``sst eval``) or none (``sst compare``). ``crop``: a fixed box
    (x, y, width, height) in the pixels of the images named by the user (HR for eval, input for compare),
    else the crop is placed ``crop_by`` "difference" (models vs bicubic) or "error" (worst error vs HR).
    """

    def __init__(
        self,
        folder: Path,
        *,
        title: str,
        models: Sequence[str],
        ground_truth: bool,
        crop: tuple[int, int, int, int] | None = None,
        crop_by: CropBy = "difference",
        notes: Sequence[str] = (),
    ) -> None:
        if len(set(models)) != len(models):
            raise ConfigError(f"two models share a name in {', '.join(models)}: give each its own")
        if crop_by == "error" and not ground_truth:
            raise ConfigError("placing the crop at the worst error needs ground truth; sst compare has none")
        self.folder = Path(folder)
        self.title = title
        self.ground_truth = ground_truth
        self.crop = crop
        self.crop_by = crop_by
        self.notes = list(notes)
        self.methods = [Method(LR, "LR", "lr"), Method(BICUBIC, "bicubic", "bicubic")]
        self.methods += [Method(f"m{i}", label, "model") for i, label in enumerate(models)]
        if ground_truth:
            self.methods.append(Method(HR, "HR", "hr"))
        self._by_label = {m.label: m for m in self.methods if m.kind == "model"}
        self.entries: dict[str, ImageEntry] = {}
        self._slugs: set[str] = set()
        (self.folder / "images").mkdir(parents=True, exist_ok=True)
        self.finished = False

    @property
    def models(self) -> list[Method]:
        return [m for m in self.methods if m.kind == "model"]

    # ---------------------------------------------------------------------------------------------- input
    def _dir(self, entry: ImageEntry) -> Path:
        return self.folder / "images" / entry.slug

    def _file(self, entry: ImageEntry, method: str, prefix: str = "") -> Path:
        return self._dir(entry) / f"{prefix}{method}.png"

    def add_image(
        self,
        key: str,
        name: str,
        *,
        scale: int,
        lr: np.ndarray,
        bicubic: np.ndarray,
        hr: np.ndarray | None = None,
        dataset: str | None = None,
        bit_depth: int = 8,
        bicubic_score: Score | None = None,
        folder: str | None = None,
        bicubic_ran_on: Mapping[str, str] | None = None,
    ) -> ImageEntry:
        """Register an image: its input ``lr``, the ``bicubic`` baseline and (for eval) ``hr``, as uint8 frames.

        ``key`` names the image in later calls and never leaves this process; its folder under ``images/`` is
        named from ``folder`` (default ``key``), made safe, short and unique. ``bicubic_ran_on``: the device and
        precision that computed the baseline (``{"device": "cpu", "precision": "fp64"}``), for the summary.
        """
        if key in self.entries:
            raise ConfigError(f"the report already has an image {key!r}")
        if (hr is not None) != self.ground_truth:
            raise ConfigError("give HR for every image of a report with ground truth, and for no other")
        expected = (lr.shape[0] * scale, lr.shape[1] * scale)
        for what, frame in (("bicubic", bicubic), ("HR", hr)):
            if frame is not None and frame.shape[:2] != expected:
                raise ConfigError(f"{key}: the {what} image is {frame.shape[1]}x{frame.shape[0]}, not x{scale}")
        slug = base = slugify(key if folder is None else folder)
        counter = 2
        while slug.lower() in self._slugs:
            slug, counter = f"{base}-{counter}", counter + 1
        self._slugs.add(slug.lower())
        entry = ImageEntry(
            order=len(self.entries),
            key=key,
            slug=slug,
            name=name,
            scale=scale,
            lr_size=(lr.shape[1], lr.shape[0]),
            out_size=(expected[1], expected[0]),
            dataset=dataset,
            bit_depth=bit_depth,
            alpha=lr.ndim == 3 and lr.shape[2] == 4,
            has_hr=hr is not None,
        )
        self.entries[key] = entry
        self._dir(entry).mkdir(parents=True, exist_ok=True)
        _save_png(lr, self._file(entry, LR))
        _save_png(bicubic, self._file(entry, BICUBIC))
        if hr is not None:
            _save_png(hr, self._file(entry, HR))
        if bicubic_score is not None:
            entry.scores[BICUBIC] = bicubic_score
        if bicubic_ran_on is not None:
            entry.ran_on[BICUBIC] = dict(bicubic_ran_on)
        return entry

    def add_output(
        self,
        key: str,
        model: str,
        sr: np.ndarray,
        score: Score | None = None,
        ran_on: Mapping[str, str] | None = None,
    ) -> None:
        """One model's output (uint8 frame, the image's output size) and, with ground truth, its score; ``ran_on``:
        the device and precision that computed it, which the summary names beside the model's means."""
        entry = self.entries.get(key)
        if entry is None:
            raise ConfigError(f"add the image {key!r} before its outputs")
        method = self._by_label.get(model)
        if method is None:
            raise ConfigError(f"{model!r} is not one of the report's models ({', '.join(self._by_label)})")
        if (sr.shape[1], sr.shape[0]) != entry.out_size:
            raise ConfigError(f"{key}: {model} gave {sr.shape[1]}x{sr.shape[0]}, expected {entry.out_size}")
        _save_png(sr, self._file(entry, method.id))
        entry.outputs.add(method.id)
        if score is not None:
            entry.scores[method.id] = score
        if ran_on is not None:
            entry.ran_on[method.id] = dict(ran_on)

    def has_image(self, key: str) -> bool:
        return key in self.entries

    # --------------------------------------------------------------------------------------------- finish
    def _box(self, entry: ImageEntry, frames: dict[str, np.ndarray]) -> CropBox:
        width, height = entry.lr_size
        if self.crop is not None:
            box = box_from_output_pixels(self.crop, entry.scale) if self.ground_truth else self.crop
            fitted = fit_box(box, height, width)
            if fitted != box:  # say so: the crop shown is not the one asked for
                x, y, w, h = fitted.scaled(entry.scale) if self.ground_truth else fitted
                where = f"{x},{y},{w},{h}"
                self.notes.append(f"{entry.name}: the crop asked for does not fit its picture; shown at {where}")
            return fitted
        outputs = [frames[m.id] for m in self.models if m.id in frames]
        by = self.crop_by if outputs else ("error" if self.ground_truth else "difference")
        return choose_crop(outputs, frames[BICUBIC], entry.scale, hr=frames.get(HR), by=by)

    def _finish_entry(self, entry: ImageEntry) -> None:
        frames = {m.id: _load(self._file(entry, m.id)) for m in self.methods if self._file(entry, m.id).is_file()}
        box = entry.crop = self._box(entry, frames)
        out_box = box.scaled(entry.scale)
        for method_id, frame in frames.items():
            tile = nearest(box.cut(frame), entry.scale) if method_id == LR else out_box.cut(frame)
            _save_png(tile, self._file(entry, method_id, "crop-"))
            if HR in frames and method_id not in (LR, HR):
                entry.crop_psnr[method_id] = psnr(luma(tile), luma(out_box.cut(frames[HR])))
        bicubic = luma(frames[BICUBIC])
        visible = alpha_of(frames[BICUBIC])
        for method in self.models:
            if method.id in frames:
                diff = np.abs(luma(frames[method.id]) - bicubic)
                mean = diff.mean() if visible is None else (diff * visible).sum() / max(visible.sum(), 1e-9)
                entry.change[method.id] = float(mean)
        shown = frames[HR] if HR in frames else frames[LR]
        thumb = to_pil(shown)
        thumb.thumbnail((THUMB_SIDE, THUMB_SIDE), Image.Resampling.LANCZOS)
        if thumb.mode in ("RGBA", "LA"):
            entry.thumb = "thumb.png"
            thumb.save(self._dir(entry) / entry.thumb, format="PNG")
        else:
            entry.thumb = "thumb.jpg"
            thumb.save(self._dir(entry) / entry.thumb, format="JPEG", quality=88)

    def summary(self) -> list[dict]:
        """Mean PSNR-Y / SSIM-Y per (dataset, scale, method) over the images that have the method's score."""
        from ..published import published

        groups: dict[tuple[str | None, int], list[ImageEntry]] = {}
        for entry in self.entries.values():
            groups.setdefault((entry.dataset, entry.scale), []).append(entry)
        rows = []
        for (dataset, scale), entries in groups.items():
            for method in self.methods:
                scores = [e.scores[method.id] for e in entries if method.id in e.scores]
                if not scores:
                    continue
                ssims = [s.ssim for s in scores if s.ssim is not None]
                row: dict = {"dataset": dataset, "scale": scale, "method": method.label}
                ran_on = _ran_on(entries, method.id)
                if ran_on is not None:  # where it ran: as each result of ``sst eval --json`` says it
                    row["ran_on"] = ran_on
                row |= {
                    "images": len(scores),
                    "psnr_y": float(np.mean([s.psnr for s in scores])),
                    "ssim_y": float(np.mean(ssims)) if len(ssims) == len(scores) else None,
                }
                paper = published(method.label, dataset, scale, len(scores)) if dataset else None
                if paper is not None:
                    row["published"] = {"psnr_y": paper.psnr, "ssim_y": paper.ssim, "source": paper.source}
                rows.append(row)
        return rows

    def gain(self, entry: ImageEntry, method_id: str) -> float | None:
        """PSNR gain of a method over bicubic on one image, in dB."""
        if method_id in entry.scores and BICUBIC in entry.scores:
            return entry.scores[method_id].psnr - entry.scores[BICUBIC].psnr
        return None

    def to_json(self) -> dict:
        def number(value: float | None) -> float | None:
            return None if value is None or not math.isfinite(value) else round(value, 6)

        images = []
        for e in self.entries.values():
            assert e.crop is not None
            images.append(
                {
                    "name": e.name,
                    "dataset": e.dataset,
                    "scale": e.scale,
                    "folder": f"images/{e.slug}",
                    "input_size": list(e.lr_size),
                    "output_size": list(e.out_size),
                    "bit_depth": e.bit_depth,
                    "alpha": e.alpha,
                    "crop_input_px": list(e.crop),
                    "crop_output_px": list(e.crop.scaled(e.scale)),
                    "psnr_y": {m.label: number(e.scores[m.id].psnr) for m in self.methods if m.id in e.scores},
                    "ssim_y": {m.label: number(e.scores[m.id].ssim) for m in self.methods if m.id in e.scores},
                    "crop_psnr_y": {m.label: number(e.crop_psnr[m.id]) for m in self.methods if m.id in e.crop_psnr},
                    "mean_abs_change_from_bicubic": {
                        m.label: number(e.change[m.id]) for m in self.models if m.id in e.change
                    },
                }
            )
        return {
            "generator": GENERATOR,
            "format": 1,
            "title": self.title,
            "methods": [m.label for m in self.methods],
            "ground_truth": self.ground_truth,
            "ran_on": self._ran_on(),
            "summary": self.summary() if self.ground_truth else [],
            "images": images,
        }

    def _ran_on(self) -> dict[str, dict[str, str]]:
        """Where each method's outputs were computed (device, precision), by label: a comparison has no scored
        summary rows to carry it, and a shared report should say whether a model ran in bf16 on a GPU."""
        found = {}
        for method in self.methods:
            ran_on = _ran_on(self.entries.values(), method.id)
            if ran_on is not None:
                found[method.label] = ran_on
        return found

    def finish(self) -> Path:
        """Crops, thumbnails, report.json and index.html; returns the page's path (inside the staging folder)."""
        if not self.entries:
            raise ConfigError("a report needs at least one image")
        for entry in self.entries.values():
            self._finish_entry(entry)
        (self.folder / REPORT_JSON).write_text(json_text(self.to_json(), indent=1) + "\n", encoding="utf-8")
        page = self.folder / "index.html"
        page.write_text(index_page.render_page(self), encoding="utf-8")
        self.finished = True
        return page


def _ran_on(entries: Iterable[ImageEntry], method_id: str) -> dict[str, str] | None:
    """Where ``method_id``'s outputs among ``entries`` were computed (one model runs one way), if recorded."""
    return next((e.ran_on[method_id] for e in entries if method_id in e.ran_on), None)


@contextmanager
def open_report(folder: str | Path, **settings: object) -> Iterator[ReportBuilder]:
    """A ``ReportBuilder`` staging in a temporary sibling of ``folder``; on leaving the block the report is
    finished and swapped in for ``folder`` (an earlier report there is replaced only now). On an error the
    staging folder is removed and ``folder`` is left as it was. A non-empty ``folder`` that is not an sst-cli
    report is refused before anything runs."""
    with atomic_folder(folder, may_replace=is_report) as staging:
        builder = ReportBuilder(staging, **settings)  # type: ignore[arg-type]
        yield builder
        if not builder.finished:
            builder.finish()
