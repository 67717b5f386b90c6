"""Benchmark evaluation: find HR/LR pairs, super-resolve them, score them with the standard protocol.

Nothing here prints. ``find_dataset`` resolves names and folders, ``check_pairs`` validates a whole
dataset before any network runs (so a bad file fails in seconds, not after an hour), and
``evaluate_dataset`` returns per-image and mean scores. The protocol itself lives in ``metrics``.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .choices import DEFAULT_MODEL, DEFAULT_SCALE
from .errors import ConfigError, ImageError, OutputExists, WriteError
from .files import unwritable
from .image_io import READABLE_FORMATS, Picture, is_image_file, probe_image, read_image, write_image
from .inputs import is_hidden
from .loader import ModelSpec
from .metrics import SSIM_WINDOW, psnr, psnr_ssim_y, ssim
from .naming import model_label as spec_label
from .resize import imresize
from .runtime import device_label, precision_label
from .upscaler import UpscaleOptions, Upscaler
from .zoo import get_variant

DATA_ROOT_ENV = "SST_DATA_ROOT"

# Canonical name -> folder names tried under the data root (the usual spellings in SR repositories).
KNOWN_DATASETS: dict[str, tuple[str, ...]] = {
    "Set5": ("Set5",),
    "Set14": ("Set14",),
    "B100": ("B100", "BSD100", "BSDS100"),
    "Urban100": ("Urban100",),
    "Manga109": ("Manga109",),
    "DIV2K-val": ("DIV2K-val", "DIV2K_valid", "DIV2K_val", "DIV2K"),
}
_ALIASES = {folder.lower(): name for name, folders in KNOWN_DATASETS.items() for folder in (name, *folders)}

# Y-channel weights of BT.601 without the studio-range offset: they sum to 1, so a network's output
# for a gray input (three nearly equal channels) maps back onto the gray scale of the HR image.
_GRAY_WEIGHTS = np.array([65.481, 128.553, 24.966]) / 219.0

SrFunction = Callable[[np.ndarray, int], np.ndarray]
"""(LR uint8 (H, W) or (H, W, 3), scale) -> SR uint8 of the same layout, ``scale`` times larger."""

PROTOCOL: dict[str, str] = {
    "hr": "modcropped to a multiple of the scale",
    "lr": "LR_bicubic/X{s} files when present, else MATLAB bicubic imresize of the HR (uint8 per pass)",
    "sr": "clamped to [0, 1], x255, rounded to uint8",
    "crop_border": "scale pixels shaved from every border",
    "y": "BT.601 studio range Y = 16 + 65.481 R + 128.553 G + 24.966 B (RGB in [0, 1]), not rounded; "
    "gray images use their gray values as Y",
    "psnr": "10 log10(255^2 / MSE), float64",
    "ssim": "11x11 Gaussian window, sigma 1.5, C1 = (0.01*255)^2, C2 = (0.03*255)^2, valid region, mean",
    "dataset": "mean of per-image scores",
}


@dataclass(frozen=True)
class Dataset:
    """A benchmark folder: ``HR/`` plus optional ``LR_bicubic/X{s}/`` (EDSR layout)."""

    name: str
    root: Path
    hr_files: tuple[Path, ...]

    def lr_file(self, hr: Path, scale: int) -> Path | None:
        """The LR file of ``hr`` if the dataset has one: ``babyx4.png``, ``baby_x4.png`` or ``baby.png``."""
        folder = self.root / "LR_bicubic" / f"X{scale}"
        stems = (f"{hr.stem}x{scale}", f"{hr.stem}_x{scale}", hr.stem)
        suffixes = dict.fromkeys((hr.suffix, ".png", ".bmp", ".jpg", ".tif"))
        for stem in stems:
            for suffix in suffixes:
                candidate = folder / f"{stem}{suffix}"
                if candidate.is_file():
                    return candidate
        return None


@dataclass(frozen=True)
class ImageScore:
    name: str
    psnr_y: float
    ssim_y: float
    psnr_rgb: float | None = None
    ssim_rgb: float | None = None


@dataclass(frozen=True)
class EvalOutput:
    """One model's result on one image, pixels included: uint8 (H, W) for gray images, else (H, W, 3).

    ``hr`` is modcropped; ``lr`` is what the model was given; ``sr`` is its output, the size of ``hr``;
    ``ran_on``: the device and precision that computed it, as ``DatasetResult`` records them.
    """

    model: str
    dataset: str
    scale: int
    score: ImageScore
    hr: np.ndarray
    lr: np.ndarray
    sr: np.ndarray
    ran_on: RanOn | None = None


@dataclass(frozen=True)
class RanOn:
    """Where and at which precision a model's outputs were computed: what ran, where ``auto`` was asked."""

    device: str
    precision: str

    @classmethod
    def of(cls, upscaler: Upscaler) -> RanOn:
        return cls(device_label(upscaler.device), precision_label(upscaler.dtype))


BICUBIC_RAN_ON = RanOn("cpu", "fp64")  # MATLAB bicubic in numpy, whatever --device and --precision say


@dataclass
class DatasetResult:
    dataset: str
    scale: int
    model: str
    images: list[ImageScore] = field(default_factory=list)
    ran_on: RanOn | None = None

    @property
    def n_images(self) -> int:
        return len(self.images)

    def mean(self, metric: str) -> float | None:
        values = [getattr(score, metric) for score in self.images]
        if not values or any(v is None for v in values):
            return None
        return float(np.mean(values))

    @property
    def psnr_y(self) -> float:
        value = self.mean("psnr_y")
        return float("nan") if value is None else value

    @property
    def ssim_y(self) -> float:
        value = self.mean("ssim_y")
        return float("nan") if value is None else value

    def to_dict(self) -> dict:
        out: dict = {"dataset": self.dataset, "scale": self.scale, "model": self.model}
        if self.ran_on is not None:
            out["ran_on"] = asdict(self.ran_on)
        out.update(psnr_y=self.psnr_y, ssim_y=self.ssim_y)
        if self.mean("psnr_rgb") is not None:
            out.update(psnr_rgb=self.mean("psnr_rgb"), ssim_rgb=self.mean("ssim_rgb"))
        out["n_images"] = self.n_images
        out["images"] = [{k: v for k, v in vars(score).items() if v is not None} for score in self.images]
        return out


# ----------------------------------------------------------------------------------------- datasets
def canonical_name(name: str) -> str | None:
    """The known dataset a name means (``set5``, ``BSD100`` ...), or None."""
    return _ALIASES.get(name.strip().lower())


def find_dataset(spec: str, data_root: str | os.PathLike[str] | None = None) -> Dataset:
    """A dataset from a folder path, or from a known name under ``data_root`` / ``$SST_DATA_ROOT``."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return _open_dataset(canonical_name(path.name) or path.name, path)
    known = canonical_name(spec)
    if known is None:
        names = ", ".join(KNOWN_DATASETS)
        raise ConfigError(f"dataset {spec!r} is neither a folder nor a known name ({names})")
    root = data_root if data_root is not None else os.environ.get(DATA_ROOT_ENV)
    if not root:
        raise ConfigError(f"where is {known}? pass --data-root DIR (holding {known}/) or set {DATA_ROOT_ENV}")
    given = "--data-root" if data_root is not None else DATA_ROOT_ENV
    if not Path(root).expanduser().is_dir():
        why = "is not a folder" if Path(root).expanduser().exists() else "does not exist"
        raise ConfigError(f"{given} '{root}' {why}: it should be the folder holding {known}/")
    tried = [Path(root).expanduser() / folder for folder in KNOWN_DATASETS[known]]
    for folder in tried:
        if folder.is_dir():
            return _open_dataset(known, folder)
    where = f"no folder {tried[0]}" if len(tried) == 1 else f"none of {', '.join(map(str, tried))} is a folder"
    raise ConfigError(f"dataset {known} not found in {given} '{root}': {where}")


def _open_dataset(name: str, root: Path) -> Dataset:
    hr = root / "HR"
    if not hr.is_dir():
        raise ConfigError(f"dataset folder '{root}' has no HR/ folder (expected HR/ and optionally LR_bicubic/X2 ...)")
    found = (p for p in hr.iterdir() if p.is_file() and is_image_file(p) and not is_hidden(p.name))  # ._x.png
    files = tuple(sorted(found, key=lambda p: p.name))
    if not files:
        raise ConfigError(f"'{hr}' holds no images ({', '.join(READABLE_FORMATS)})")
    return Dataset(name, root, files)


def _size(path: Path) -> tuple[int, int]:
    """(width, height) from the header, with the reader sst upscale uses (float TIFFs included)."""
    info = probe_image(path)
    return info.width, info.height


def check_pairs(dataset: Dataset, scale: int) -> None:
    """Fail before any work if an HR file is unreadable or too small, or an LR file has the wrong size."""
    for hr in dataset.hr_files:
        width, height = _size(hr)
        smallest = 2 * scale + SSIM_WINDOW  # the SSIM window must fit once the borders are shaved
        cropped = width - width % scale, height - height % scale  # the protocol's crop to a multiple of the scale
        if min(cropped) < smallest:
            crop = (
                ""
                if cropped == (width, height)
                else f", {cropped[0]}x{cropped[1]} once cropped to a multiple of {scale}"
            )
            raise ImageError(
                f"'{hr}' is {width}x{height}{crop}: too small to score at x{scale} (needs {smallest} px on each side)"
            )
        lr = dataset.lr_file(hr, scale)
        if lr is None:
            folder = dataset.root / "LR_bicubic" / f"X{scale}"
            if folder.is_dir():  # LR files given for this scale, but not this one: never mix in our own bicubic
                names = f"{hr.stem}x{scale}, {hr.stem}_x{scale} or {hr.stem}, .png/.bmp/.jpg/.tif"
                raise ImageError(
                    f"'{folder}' has no LR file for '{hr.name}' (looked for {names}); add it, or remove the folder "
                    "to make every LR with MATLAB bicubic"
                )
            continue
        expected = (width // scale, height // scale)
        found = _size(lr)
        if found != expected:
            raise ImageError(
                f"'{lr}' is {found[0]}x{found[1]}, but its HR '{hr.name}' ({width}x{height}) at x{scale} "
                f"needs {expected[0]}x{expected[1]}"
            )


def read_uint8(path: Path) -> np.ndarray:
    """8-bit pixels exactly as stored: (H, W) for gray files, (H, W, 3) for colour (alpha dropped)."""
    picture = read_image(path)
    values = np.round(picture.color * 255.0).astype(np.uint8)
    return values[..., 0] if picture.grayscale else values


def load_pair(dataset: Dataset, hr_path: Path, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(HR modcropped, LR) as uint8; the LR is made with MATLAB bicubic when the dataset has none."""
    hr = read_uint8(hr_path)
    hr = hr[: hr.shape[0] - hr.shape[0] % scale, : hr.shape[1] - hr.shape[1] % scale]
    lr_path = dataset.lr_file(hr_path, scale)
    if lr_path is None:
        return hr, imresize(hr, 1.0 / scale)
    lr = read_uint8(lr_path)
    if lr.ndim != hr.ndim:  # a gray HR with an RGB LR file (its luma, not its red), or the reverse: follow the HR
        lr = _luma(lr) if hr.ndim == 2 else np.repeat(lr[..., None], 3, axis=2)
    if lr.shape[:2] != (hr.shape[0] // scale, hr.shape[1] // scale):
        raise ImageError(f"'{lr_path}' has size {lr.shape[1]}x{lr.shape[0]}, which does not match its HR at x{scale}")
    return hr, lr


def _luma(rgb: np.ndarray) -> np.ndarray:
    """8-bit gray of RGB in 0..255 with the BT.601 weights: a colour LR of a gray HR, a network's gray output."""
    return np.round(rgb.astype(np.float64) @ _GRAY_WEIGHTS).clip(0, 255).astype(np.uint8)


# -------------------------------------------------------------------------------- super-resolution
def bicubic(lr: np.ndarray, scale: int) -> np.ndarray:
    """The classical baseline: MATLAB-compatible bicubic upscaling of the uint8 LR."""
    return imresize(lr, float(scale))


def dihedral(image: torch.Tensor, index: int, *, inverse: bool = False) -> torch.Tensor:
    """One of the 8 flips/rotations of a (C, H, W) tensor, or its inverse."""
    flip, turns = index >= 4, index % 4
    if not inverse:
        image = image.flip(-1) if flip else image
        return torch.rot90(image, turns, dims=(-2, -1))
    image = torch.rot90(image, -turns, dims=(-2, -1))
    return image.flip(-1) if flip else image


def network_sr(run: Callable[[torch.Tensor], torch.Tensor], *, self_ensemble: bool = False) -> SrFunction:
    """Wrap a (C, H, W) float network runner into an SR function on uint8 arrays.

    Gray images go through the network as three equal channels; the output is mapped back to gray
    with the BT.601 luma weights, so it can be compared with the gray HR as MATLAB scripts do.
    """

    def sr(lr: np.ndarray, scale: int) -> np.ndarray:
        rgb = np.repeat(lr[..., None], 3, axis=2) if lr.ndim == 2 else lr
        x = torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1).float().div_(255.0)
        views = range(8) if self_ensemble else range(1)
        out = dihedral(run(dihedral(x, 0)), 0, inverse=True)
        for i in views[1:]:  # accumulate: one output in memory at a time
            out += dihedral(run(dihedral(x, i)), i, inverse=True)
        out /= len(views)
        values = out.clamp_(0.0, 1.0).permute(1, 2, 0).double().numpy() * 255.0
        return _luma(values) if lr.ndim == 2 else np.round(values).clip(0, 255).astype(np.uint8)

    return sr


# ---------------------------------------------------------------------------------------- scoring
def score(sr: np.ndarray, hr: np.ndarray, scale: int, *, rgb: bool = False) -> tuple[float, ...]:
    """(PSNR-Y, SSIM-Y[, PSNR-RGB, SSIM-RGB]) of one uint8 image pair, ``scale`` pixels shaved."""
    if sr.shape != hr.shape:
        raise ImageError(f"the SR output is {sr.shape[1]}x{sr.shape[0]}, the HR {hr.shape[1]}x{hr.shape[0]}")
    y = psnr_ssim_y(sr, hr, scale)
    if not rgb:
        return y
    a = sr[scale:-scale, scale:-scale].astype(np.float64)
    b = hr[scale:-scale, scale:-scale].astype(np.float64)
    if a.ndim == 2:
        return (*y, psnr(a, b), ssim(a, b))
    return (*y, psnr(a, b), float(np.mean([ssim(a[..., c], b[..., c]) for c in range(3)])))


def evaluate_dataset(
    sr: SrFunction,
    dataset: Dataset,
    scale: int,
    model: str,
    *,
    rgb: bool = False,
    save_dir: Path | None = None,
    overwrite: bool = True,
    on_image: Callable[[ImageScore], None] | None = None,
    on_output: Callable[[EvalOutput], None] | None = None,
    ran_on: RanOn | None = None,
) -> DatasetResult:
    """Score every image of ``dataset`` at ``scale``; optionally save each SR output as PNG (replacing a file
    there only with ``overwrite``). ``ran_on``: where ``sr`` computes, recorded in the result.

    ``on_output`` receives each image's pixels (HR, LR and SR) with its score, for reports that show them.
    """
    check_pairs(dataset, scale)
    result = DatasetResult(dataset.name, scale, model, ran_on=ran_on)
    for hr_path in dataset.hr_files:
        hr, lr = load_pair(dataset, hr_path, scale)
        out = sr(lr, scale)
        entry = ImageScore(hr_path.stem, *score(out, hr, scale, rgb=rgb))
        result.images.append(entry)
        if save_dir is not None:
            save_sr(out, save_dir / dataset.name / f"x{scale}" / f"{hr_path.stem}.png", overwrite=overwrite)
        if on_output is not None:
            on_output(EvalOutput(model, dataset.name, scale, entry, hr, lr, out, ran_on))
        if on_image is not None:
            on_image(entry)
    return result


def save_sr(values: np.ndarray, path: Path, *, overwrite: bool = True) -> None:
    """Write an SR result as 8-bit PNG (gray stays gray); an earlier run's file is replaced only with ``overwrite``
    (``_check_saved`` asked at the start; a file another run wrote meanwhile is refused too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    gray = values.ndim == 2
    rgb = np.repeat(values[..., None], 3, axis=2) if gray else values
    picture = Picture(rgb.astype(np.float32) / 255.0, None, gray, 8, None, None, "png")
    write_image(path, picture, format="png", overwrite=overwrite)


# ------------------------------------------------------------------------------------------ the run
BICUBIC = "bicubic"


@dataclass(frozen=True)
class EvalSettings:
    """One ``sst eval`` run, checked on construction (before any file is read or model loaded).

    ``models``: ``ModelSpec``s and/or ``"bicubic"``, each measured on every dataset and scale; ``scales``
    empty means the default scale, or the scale of the first model's weights when ``weights`` are given.
    ``options``: how the networks run (tiling defaults to the whole image, as the literature does).
    """

    datasets: tuple[str, ...]
    models: tuple[ModelSpec | str, ...] = (BICUBIC,)
    scales: tuple[int, ...] = ()
    options: UpscaleOptions = field(default_factory=lambda: UpscaleOptions(tile=0))
    data_root: Path | None = None
    rgb: bool = False
    self_ensemble: bool = False
    save_images: Path | None = None
    overwrite: bool = False  # replace images an earlier run saved in ``save_images``

    def __post_init__(self) -> None:
        if not self.datasets:
            raise ConfigError("give at least one dataset")
        if not self.models:
            raise ConfigError("give at least one model (or bicubic)")
        for model in self.models:
            if isinstance(model, str) and model != BICUBIC:
                raise ConfigError(f"a model is a ModelSpec or {BICUBIC!r}, not {model!r}")
        model_labels(self.models)  # two models that cannot be told apart are refused here
        networks = [m for m in self.models if isinstance(m, ModelSpec)]
        if self.self_ensemble and not networks:
            raise ConfigError("self-ensemble needs a network, not bicubic alone")
        for s in self.scales:
            if s < 2:
                raise ConfigError(f"scale must be 2 or more, got {s}")
            for spec in networks:
                if spec.model is not None and spec.config is None:
                    get_variant(spec.model).config(s)


class _Saved(NamedTuple):
    """One folder ``save_images`` fills: a model's images of one dataset at one scale."""

    folder: Path
    dataset: Dataset
    scale: int


def model_label(model: ModelSpec | str) -> str:
    """How a model is named in tables and reports: the zoo name, the weights file's stem, or bicubic."""
    return model if isinstance(model, str) else spec_label(model)


def model_labels(models: Sequence[ModelSpec | str]) -> list[str]:
    """Each model's ``model_label``; weights files that share a stem (``run1/net_g.pth``, ``run2/net_g.pth``,
    as training runs name them) are told apart by their folders (``run1/net_g``, ``run2/net_g``)."""
    labels = [model_label(m) for m in models]
    for label in set(labels):
        group = [i for i, other in enumerate(labels) if other == label]
        paths = [_weights_path(models[i]) for i in group]
        if len(group) == 1 or None in paths:
            continue
        for depth in range(2, max(len(path.parts) for path in paths if path is not None) + 1):
            longer = [_tail(path, depth) for path in paths if path is not None]
            if len(set(longer)) == len(longer):
                for i, name in zip(group, longer, strict=True):
                    labels[i] = name
                break
    if len(set(labels)) != len(labels):
        raise ConfigError(
            f"two models share a name ({', '.join(labels)}): one file given twice, or files whose names differ only "
            "in their extension; give each once, or rename one"
        )
    return labels


def _weights_path(model: ModelSpec | str) -> Path | None:
    return None if isinstance(model, str) or model.weights is None else Path(str(model.weights).split("@", 1)[0])


def _tail(path: Path, depth: int) -> str:
    """The last ``depth`` parts of a weights path, the file's stem last: ``run1/net_g``."""
    return "/".join([*path.parts[-depth:-1], path.stem])


def run_evaluation(
    settings: EvalSettings,
    *,
    on_start: Callable[[int], None] | None = None,
    on_image: Callable[[str, int, ImageScore], None] | None = None,
    on_output: Callable[[EvalOutput], None] | None = None,
) -> list[DatasetResult]:
    """Score every (model, scale, dataset); every file is checked, and every model's weights found, before the
    first forward pass.

    ``on_start(total_images)`` once the inputs are known; ``on_image(dataset, scale, score)`` per image;
    ``on_output(output)`` per image with its pixels (for ``report``), before ``on_image``.
    Results come one dataset's scales together, in the order of ``settings.datasets``, per model.
    """
    unique: dict[Path, Dataset] = {}  # a set named twice (ev, ev/) runs once
    for spec in settings.datasets:
        dataset = find_dataset(spec, settings.data_root)
        unique.setdefault(dataset.root.resolve(), dataset)
    datasets = list(unique.values())
    scales = list(dict.fromkeys(settings.scales))
    loaded: dict[tuple[int, int], Upscaler] = {}
    inferred = not scales
    if not scales:
        first = next((m for m in settings.models if isinstance(m, ModelSpec)), None)
        if first is not None and first.weights is not None and first.scale is None:
            upscaler = Upscaler(first, options=settings.options)  # the weights say which scale they are
            loaded[(settings.models.index(first), upscaler.scale)] = upscaler
            scales = [upscaler.scale]
        else:
            scales = [DEFAULT_SCALE]
    _check_names(datasets)
    saved = _save_folders(settings, datasets, scales)
    if not settings.overwrite:
        _check_saved(saved)
    for s in scales:
        for ds in datasets:
            check_pairs(ds, s)
    # Every file decoded once before the first forward pass: one cut short after a sound header fails now.
    for ds in datasets:
        for hr in ds.hr_files:
            for path in dict.fromkeys([hr, *(lr for s in scales if (lr := ds.lr_file(hr, s)) is not None)]):
                read_image(path)
    for folder, _, _ in saved:  # made only now that the inputs are known good
        why = unwritable(folder)
        if why is not None:
            raise WriteError(f"--save-images: cannot write into '{folder}': {why}")
    wanted = _fetched(settings.models, scales, loaded, inferred)  # every model's weights are here before any runs
    if on_start is not None:
        on_start(sum(len(ds.hr_files) for ds in datasets) * len(scales) * len(settings.models))
    order = {ds.name: i for i, ds in enumerate(datasets)}
    results: list[DatasetResult] = []
    for index, (model, label) in enumerate(zip(settings.models, model_labels(settings.models), strict=True)):
        found: list[DatasetResult] = []
        for s in scales:
            sr: SrFunction = bicubic
            ran_on = BICUBIC_RAN_ON
            if not isinstance(model, str):
                with _said_at_inferred_scale(inferred, s):
                    sr, ran_on = _network(wanted.get((index, s), model), s, settings, loaded.pop((index, s), None))
            for ds in datasets:
                found.append(
                    evaluate_dataset(
                        sr,
                        ds,
                        s,
                        label,
                        rgb=settings.rgb,
                        save_dir=_save_dir(settings, label),
                        overwrite=settings.overwrite,
                        on_image=None if on_image is None else functools.partial(on_image, ds.name, s),
                        on_output=on_output,
                        ran_on=ran_on,
                    )
                )
        found.sort(key=lambda r: (order[r.dataset], r.scale))  # one dataset's scales together
        results += found
    return results


def _fetched(
    models: Sequence[ModelSpec | str], scales: list[int], loaded: dict[tuple[int, int], Upscaler], inferred: bool
) -> dict[tuple[int, int], ModelSpec]:
    """Each network at each scale, keyed (model index, scale), its weights file found now (``ModelSpec.fetched``):
    a second zoo model missing offline was found only after the first had been scored on every dataset. A zoo
    model has a file per scale; a weights file (``hf://``) is one at every scale, fetched once."""
    wanted: dict[tuple[int, int], ModelSpec] = {}
    for index, model in enumerate(models):
        if isinstance(model, str):
            continue
        for s in scales:
            if (index, s) in loaded:  # loaded already, to read the scale its weights declare
                continue
            with _said_at_inferred_scale(inferred, s):
                wanted[(index, s)] = replace(model, scale=s).fetched(DEFAULT_MODEL, s)
            if model.weights is not None:
                model = wanted[(index, s)]  # one file at every scale: found once
    return wanted


@contextlib.contextmanager
def _said_at_inferred_scale(inferred: bool, scale: int) -> Iterator[None]:
    """A model refused at the scale the first weights declared says where that scale came from."""
    try:
        yield
    except ConfigError as exc:
        if not inferred:
            raise
        raise ConfigError(f"{exc} (without --scale every model runs at the first weights' x{scale})") from None


def _check_names(datasets: list[Dataset]) -> None:
    """Results, saved images and reports are keyed by dataset name and image stem: refuse what would collide."""
    by_name: dict[str, Path] = {}
    for ds in datasets:
        if by_name.setdefault(ds.name, ds.root) != ds.root:
            raise ConfigError(f"two datasets are both called {ds.name!r} ({by_name[ds.name]}, {ds.root}): rename one")
        stems: dict[str, Path] = {}
        for hr in ds.hr_files:
            if stems.setdefault(hr.stem, hr) != hr:
                raise ConfigError(f"{ds.name}: {stems[hr.stem].name} and {hr.name} share the name {hr.stem!r}")


def _save_folders(settings: EvalSettings, datasets: list[Dataset], scales: list[int]) -> list[_Saved]:
    """Where ``save_images`` puts each model's images of each dataset and scale."""
    if settings.save_images is None:
        return []
    roots = [root for label in model_labels(settings.models) if (root := _save_dir(settings, label)) is not None]
    return [_Saved(root / ds.name / f"x{s}", ds, s) for root in roots for ds in datasets for s in scales]


def _check_saved(saved: list[_Saved]) -> None:
    """Images an earlier run saved are replaced only with ``overwrite``: said before any forward pass."""
    for folder, ds, s in saved:
        found = [p for hr in ds.hr_files if (p := folder / f"{hr.stem}.png").exists()]
        if found:
            raise OutputExists(
                f"--save-images: '{found[0]}' already exists ({len(found)} of {ds.name} x{s}); "
                "add --overwrite to replace them"
            )


def _save_dir(settings: EvalSettings, label: str) -> Path | None:
    """DIR/<dataset>/x<scale>/ for one model; DIR/<model>/<dataset>/x<scale>/ when several are compared."""
    if settings.save_images is None:
        return None
    return settings.save_images / label if len(settings.models) > 1 else settings.save_images


def _network(
    spec: ModelSpec, scale: int, settings: EvalSettings, upscaler: Upscaler | None
) -> tuple[SrFunction, RanOn]:
    """The model's SR function at ``scale``, and the device and precision its Upscaler settled on."""
    if upscaler is None:
        upscaler = Upscaler(replace(spec, scale=scale), options=settings.options)
    return network_sr(lambda x: upscaler.run(x).image, self_ensemble=settings.self_ensemble), RanOn.of(upscaler)
