"""``sst compare``: the user's own pictures through bicubic and several models, as a report and/or one PNG.

No ground truth here: each picture is the input (LR); the report shows it nearest-neighbour enlarged, bicubic
and every model side by side on the same crop, placed where the models differ most from bicubic. 16-bit and
transparent pictures go through the models as ``sst upscale`` does and are shown through 8-bit previews.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from .choices import DEFAULT_MODEL, DEFAULT_SCALE
from .errors import ConfigError
from .evaluate import BICUBIC, BICUBIC_RAN_ON, RanOn, model_labels
from .files import check_output_file, check_spared
from .image_io import READABLE_FORMATS, Picture, is_image_file, read_image
from .loader import ModelSpec
from .resize import imresize
from .upscaler import UpscaleOptions, Upscaler


@dataclass(frozen=True)
class CompareSettings:
    """One ``sst compare`` run, checked on construction.

    ``models``: ``ModelSpec``s (and ``"bicubic"``, which is always shown anyway); ``scale``: default the
    first weights file's own scale, else 4; ``crop``: (x, y, width, height) in the pictures' own pixels
    instead of the automatic placement; ``report``: the report folder; ``png``: the side-by-side PNG, which
    replaces an existing file only with ``overwrite`` (and never one of the pictures).
    """

    images: tuple[Path, ...]
    models: tuple[ModelSpec | str, ...] = (ModelSpec(),)
    scale: int | None = None
    options: UpscaleOptions = field(default_factory=UpscaleOptions)
    report: Path | None = None
    png: Path | None = None
    crop: tuple[int, int, int, int] | None = None
    title: str | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not self.images:
            raise ConfigError("give at least one image to compare")
        if self.report is None and self.png is None:
            raise ConfigError("say where the comparison goes: a report folder, a PNG file, or both")
        if self.png is not None and self.png.suffix.lower() != ".png":
            raise ConfigError(f"the side-by-side image is a PNG: name it .png, not '{self.png.name}'")
        for model in self.models:
            if isinstance(model, str) and model != BICUBIC:
                raise ConfigError(f"a model is a ModelSpec or {BICUBIC!r}, not {model!r}")
        model_labels(self.networks)  # two models that cannot be told apart are refused here
        if self.scale is not None and (isinstance(self.scale, bool) or self.scale < 2):
            raise ConfigError(f"scale must be 2 or more, got {self.scale}")
        if self.crop is not None and (len(self.crop) != 4 or min(self.crop[2:]) < 1 or min(self.crop[:2]) < 0):
            raise ConfigError(f"a crop is x,y,width,height with x, y >= 0 and a positive size, got {self.crop}")

    @property
    def networks(self) -> list[ModelSpec]:
        return [m for m in self.models if isinstance(m, ModelSpec)]


@dataclass(frozen=True)
class CompareResult:
    page: Path | None  # the report's index.html
    png: Path | None
    images: int
    scale: int
    models: tuple[str, ...]


def find_inputs(paths: tuple[Path, ...]) -> list[Path]:
    """Image files from files and folders (a folder's images, not its subfolders), in the order given.

    A file named twice (``a.png`` and ``$PWD/a.png``, a link, a folder and a file in it) is one input, kept under
    its first spelling: comparing it twice wasted the run and showed the copy under a misleading folder."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and is_image_file(p))
            if not files:
                raise ConfigError(f"'{path}' holds no images ({', '.join(READABLE_FORMATS)})")
            found += files
        elif path.is_file():
            found.append(path)
        else:
            raise ConfigError(f"cannot read '{path}': no such file or folder")  # a command-line mistake: exit 2
    first_spelling: dict[str, Path] = {}
    for path in found:
        first_spelling.setdefault(os.path.realpath(path), path)
    return list(first_spelling.values())


def check_declared_scales(networks: list[ModelSpec], labels: list[str], asked: int | None) -> None:
    """Weights files whose metadata declare scales that cannot be compared are refused before any model runs:
    the second file's scale was found only after the first model had run on every picture."""
    from .loader import declared_scale

    declared = [
        (label, declared_scale(spec.weights))
        for spec, label in zip(networks, labels, strict=True)
        if spec.weights is not None and spec.scale is None and spec.model is None and spec.config is None
    ]
    known = [(label, scale) for label, scale in declared if scale is not None]
    if not known:
        return
    if asked is not None:
        wrong = next(((label, scale) for label, scale in known if scale != asked), None)
        if wrong is not None:
            raise _not_at(wrong[0], wrong[1], asked)
        return
    (first, first_scale), *others = known
    for label, scale in others:
        if scale != first_scale:
            raise ConfigError(f"{first} upscales x{first_scale} and {label} x{scale}: a comparison is at one scale")


def fetched(spec: ModelSpec, scale: int) -> ModelSpec:
    """``spec`` at the comparison's ``scale`` (weights without one keep their own), its weights file found now
    (``ModelSpec.fetched``): a second zoo model missing offline was found only after the first had run on every
    picture."""
    at_scale = spec if spec.weights is not None and spec.scale is None else replace(spec, scale=scale)
    return at_scale.fetched(DEFAULT_MODEL, scale)


def frame(picture: Picture) -> np.ndarray:
    """The uint8 frame a report shows: (H, W) gray, (H, W, 3) RGB or (H, W, 4) RGBA (gray+alpha as RGBA)."""
    color = picture.color.mean(axis=2) if picture.grayscale else picture.color
    if picture.alpha is not None:
        rgb = np.repeat(color[..., None], 3, axis=2) if color.ndim == 2 else color
        color = np.concatenate([rgb, picture.alpha[..., None]], axis=2)
    shown = np.round(np.clip(color, 0.0, 1.0) * 255.0).astype(np.uint8)
    if picture.icc_profile and not picture.grayscale:  # previews carry no profile: show the colours meant
        shown[..., :3] = _in_srgb(shown[..., :3], picture.icc_profile)
    return shown


def _in_srgb(rgb: np.ndarray, icc: bytes) -> np.ndarray:
    """RGB pixels in a picture's own colour space (its ICC profile), converted to sRGB; unchanged if it fails."""
    import io

    from PIL import Image, ImageCms

    try:
        source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        target = ImageCms.createProfile("sRGB")
        converted = ImageCms.profileToProfile(
            Image.fromarray(np.ascontiguousarray(rgb)), source, target, outputMode="RGB"
        )
    except (ImageCms.PyCMSError, OSError, ValueError):
        return rgb
    return np.asarray(converted) if converted is not None else rgb


def _not_at(label: str, scale: int, asked: int) -> ConfigError:
    """A model of another scale than the comparison's, said with what to do (its file's stated scale, checked
    before anything runs, or the scale its loaded weights turn out to have)."""
    return ConfigError(
        f"{label} upscales x{scale}, the comparison is at x{asked}: compare at x{scale}, or models for x{asked}"
    )


def bicubic_picture(picture: Picture, scale: int) -> Picture:
    """MATLAB-style bicubic enlargement of colour and alpha, in float (16-bit pictures keep their precision)."""
    color = np.clip(imresize(picture.color.astype(np.float64), float(scale)), 0.0, 1.0).astype(np.float32)
    alpha = None
    if picture.alpha is not None:
        alpha = np.clip(imresize(picture.alpha.astype(np.float64), float(scale)), 0.0, 1.0).astype(np.float32)
    return replace(picture, color=color, alpha=alpha)


def _title(settings: CompareSettings, labels: list[str], scale: int) -> str:
    if settings.title:
        return settings.title
    return f"bicubic vs {', '.join(labels)} at x{scale}" if labels else f"bicubic at x{scale}"


def shown_names(paths: list[Path]) -> dict[Path, str]:
    """Each input's file name, with as many of its folders as tell it from another input of that name
    (``a/photo.png``, ``b/photo.png``); one of a kind keeps its bare name, so a shared report shows no folders."""
    depth = dict.fromkeys(paths, 1)
    while True:
        names = {p: "/".join(p.parts[-depth[p] :]) for p in paths}
        counts = Counter(names.values())
        clashing = [p for p in paths if counts[names[p]] > 1 and depth[p] < len(p.parts)]
        if not clashing:
            return names
        for p in clashing:
            depth[p] += 1


def run_compare(
    settings: CompareSettings,
    *,
    on_start: Callable[[int], None] | None = None,
    on_image: Callable[[str, str], None] | None = None,
    on_message: Callable[[str], None] | None = None,
) -> CompareResult:
    """Run every picture through bicubic and each model (one model loaded at a time) and write the outputs.

    ``on_start(total)`` with the number of (model, picture) runs; ``on_image(model, picture name)`` after each;
    ``on_message(text)`` with what the report notes on the way (a ``--crop`` moved to fit a picture).
    A report folder that exists and is not an sst-cli report is refused before any model is loaded.
    """
    from .report import ReportBuilder, check_target, open_report, write_sheet

    inputs = find_inputs(settings.images)
    if settings.report is not None:
        check_target(settings.report)
        check_spared(settings.report, [*inputs, *([settings.png] if settings.png else [])], "the report folder")
    if settings.png is not None:
        check_output_file(settings.png, overwrite=settings.overwrite, inputs=inputs, option="--png")
    networks = settings.networks
    labels = model_labels(networks)
    check_declared_scales(networks, labels, settings.scale)
    upscalers: dict[int, Upscaler] = {}
    scale = settings.scale
    if scale is None:
        first = next((m for m in networks if m.weights is not None and m.scale is None), None)
        if first is not None:  # the weights say which scale they are
            upscalers[networks.index(first)] = Upscaler(first, options=settings.options)
            scale = upscalers[networks.index(first)].scale
        else:
            scale = DEFAULT_SCALE
    wanted = [
        spec if index in upscalers else fetched(spec, scale)  # every model's weights are here before any runs
        for index, spec in enumerate(networks)
    ]
    if on_start is not None:
        on_start(len(inputs) * len(networks))
    shown = shown_names(inputs)
    first_notes = [f"Inputs: {', '.join(shown[p] for p in inputs[:12])}{' …' if len(inputs) > 12 else ''}"]
    report_settings = {
        "title": _title(settings, labels, scale),
        "models": labels,
        "ground_truth": False,
        "crop": settings.crop,
        "notes": first_notes,
    }

    def fill(report: ReportBuilder) -> None:
        keys = {}
        for path in inputs:
            picture = read_image(path)
            keys[path] = key = str(path)
            report.add_image(  # named and filed by the file's name: a shared report shows no one's folders
                key, shown[path], scale=scale, lr=frame(picture), bicubic=frame(bicubic_picture(picture, scale)),
                bit_depth=picture.bit_depth, folder=path.name, bicubic_ran_on=asdict(BICUBIC_RAN_ON),
            )  # fmt: skip
        for index, (spec, label) in enumerate(zip(wanted, labels, strict=True)):
            upscaler = upscalers.pop(index, None)
            if upscaler is None:
                upscaler = Upscaler(spec, options=settings.options)
            if upscaler.scale != scale:
                raise _not_at(label, upscaler.scale, scale)
            for path in inputs:
                out, _ = upscaler.upscale_picture(read_image(path))
                report.add_output(keys[path], label, frame(out), ran_on=asdict(RanOn.of(upscaler)))
                if on_image is not None:
                    on_image(label, shown[path])
            del upscaler
        report.finish()
        if on_message is not None:
            for note in report.notes[len(first_notes) :]:
                on_message(note)
        if settings.png is not None:
            write_sheet(report, settings.png, overwrite=settings.overwrite)

    page = None
    if settings.report is not None:
        with open_report(settings.report, **report_settings) as report:
            fill(report)
        page = Path(settings.report) / "index.html"
    else:
        with tempfile.TemporaryDirectory(prefix="sst-compare-") as staging:
            fill(ReportBuilder(Path(staging), **report_settings))  # type: ignore[arg-type]
    return CompareResult(page, settings.png, len(inputs), scale, tuple(labels))
