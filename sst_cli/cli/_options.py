"""Options several commands share, declared once, and the parsers that turn their text into values.

Parsers raise ConfigError naming the option (exit status 2). Everything else about an option's value is
checked by the library's own options objects (``UpscaleOptions``, ``WriteOptions``, ``ModelSpec``, ...).
Kept free of heavy imports, so that ``--help`` and option errors answer at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from ..checks import check_device_name, check_running_values, parse_size
from ..choices import BACKENDS, DEFAULT_MODEL, DEFAULT_SCALE, DEVICE_HELP, PRECISIONS
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..upscaler import UpscaleOptions

PathText = str | os.PathLike[str]
SCALE_HELP = f"Upscaling factor (default: what --weights holds, else {DEFAULT_SCALE})."
WeightsOption = Annotated[
    str | None,
    typer.Option("--weights", metavar="FILE", help="Weights file or hf://OWNER/REPO/PATH[@REV] instead of the zoo's."),
]
ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config", metavar="JSON", help="JSON file of the architecture's constructor keywords for --weights."
    ),
]
HubRepoOption = Annotated[
    str | None,
    typer.Option(
        "--hub-repo",
        metavar="OWNER/REPO",
        help="Hugging Face repo OWNER/REPO for zoo weights (overrides the manifest).",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        metavar="NAME",
        help=f"Zoo model name (sst-light, sst, sst-l, ...); default {DEFAULT_MODEL}. With --weights: the "
        "architecture to load them into; without it the file says (SST files cannot: their window sizes are in "
        "no tensor, and the error names the models that fit).",
    ),
]
OverwriteOption = Annotated[bool, typer.Option("--overwrite", help="Replace output files that already exist.")]
DeviceOption = Annotated[str, typer.Option("--device", metavar="DEVICE", help=f"{DEVICE_HELP}.")]
PrecisionOption = Annotated[
    str, typer.Option("--precision", metavar="auto|fp32|bf16", help=f"{', '.join(PRECISIONS)}.")
]
AttentionOption = Annotated[
    str, typer.Option("--attention", metavar="KERNEL", help=f"Attention kernel: {', '.join(BACKENDS)}.")
]
TileOverlapOption = Annotated[
    int | None, typer.Option("--tile-overlap", metavar="PX", help="Context pixels around each tile.")
]
ExactOption = Annotated[
    bool,
    typer.Option(
        "--exact", help="Overlap tiles by the full receptive field: the whole image's result, up to float rounding."
    ),
]
BatchOption = Annotated[int, typer.Option("--batch", metavar="N", help="Tiles per forward pass.")]
MaxMemoryOption = Annotated[
    str | None,
    typer.Option(
        "--max-memory",
        metavar="SIZE",
        help="Memory one forward pass may use, e.g. 4G or 512M (--tile auto: whether the whole image fits, and "
        "else the tile size); default: a share of what is free.",
    ),
]
IgLambdaOption = Annotated[
    float | None,
    typer.Option(
        "--ig-lambda",
        metavar="L",
        help="sst-real only: λ of d_i + λ (d_f - d_i); default 2.0 (1.0: most faithful; higher: sharper, more "
        "invented texture, artefacts from about 3.0).",
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option(
        "--seed", metavar="N", help="sst-real only: seed of the noise it adds (default 0); same seed, same output."
    ),
]

_WXH = re.compile(r"\s*(\d+)\s*[xX]\s*(\d+)\s*")


def refuse_stdio(paths: Mapping[str, PathText | Sequence[PathText] | None]) -> None:
    """Refuse ``-`` where a path is asked for: sst-cli reads and writes files only, and taken as a name it made a
    folder or a file called ``-`` (or said no such file); and an empty name, which became the working folder.
    ``paths``: the option's name -> its value, or values."""
    for option, value in paths.items():
        values = [value] if value is None or isinstance(value, str | os.PathLike) else value
        named = [os.fspath(item).strip() for item in values if item is not None]
        if "-" in named:
            raise ConfigError(f"{option}: - (standard input/output) is not supported: give a file name")
        if "" in named:
            raise ConfigError(f"{option}: an empty name; give a file or folder")


def path_text(text: str) -> Path:
    """A path option's text as a Path, refusing an empty one (``Path('')`` is the working folder: ``--json ''``
    wrote nothing, and ``--weights ''`` was "a folder")."""
    if not text.strip():
        raise typer.BadParameter("an empty name; give a file or folder")
    return Path(text)


def parse_tile(text: str, option: str = "--tile") -> int | Literal["auto"]:
    """'auto', 0 (whole image) or a positive tile side in pixels."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{option} must be auto, 0 (whole image) or a tile size in pixels, got {text!r}")
    return value


def parse_wxh(text: str, option: str) -> tuple[int, int]:
    """'1280x720' -> (1280, 720)."""
    match = _WXH.fullmatch(text)
    if not match or min(int(match[1]), int(match[2])) < 1:
        raise ConfigError(f"{option} must be WIDTHxHEIGHT in pixels, e.g. 1280x720, got {text!r}")
    return int(match[1]), int(match[2])


_CROP = re.compile(r"\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*")


def parse_crop(text: str | None, option: str = "--crop") -> tuple[int, int, int, int] | None:
    """'x,y,w,h' -> (x, y, w, h) in pixels, w and h positive; None stays None."""
    if text is None:
        return None
    match = _CROP.fullmatch(text)
    if not match or min(int(match[3]), int(match[4])) < 1:
        raise ConfigError(f"{option} must be x,y,width,height in pixels, e.g. 120,80,64,64, got {text!r}")
    return int(match[1]), int(match[2]), int(match[3]), int(match[4])


CropOption = Annotated[
    str | None,
    typer.Option(
        "--crop",
        metavar="X,Y,W,H",
        help="The region the report zooms into, x,y,width,height in pixels of the images you name (HR for eval); "
        "default: where the models differ most from bicubic.",
    ),
]


def model_specs(names: list[str], weights: list[str], config: str | None, hub_repo: str | None) -> tuple:
    """The models of --model and --weights: several zoo names (or bicubic) side by side, or several weights files
    loaded into one architecture (given once by --model, or by --config, or found in the files)."""
    from ..errors import ConfigError
    from ..evaluate import BICUBIC
    from ..loader import ModelSpec

    wants_bicubic = any(n.strip().lower() == BICUBIC for n in names)
    networks = [n for n in names if n.strip().lower() != BICUBIC]
    if not weights:
        if config:
            raise ConfigError("--config describes the architecture of --weights; give the weights too")
        if not names:
            return (ModelSpec(None, None, None, None, hub_repo, cli=True),)
        chosen: list = [BICUBIC if n.strip().lower() == BICUBIC else ModelSpec(n, None, None, None, hub_repo, cli=True)
                        for n in names]  # fmt: skip
        return tuple(dict.fromkeys(chosen))
    if len(networks) > 1:
        raise ConfigError("with --weights, --model names the weights' architecture: give it once (or bicubic)")
    arch = networks[0] if networks else None  # with --config too, so that ModelSpec refuses both (upscale does)
    specs = [ModelSpec(arch, None, w, config, hub_repo, cli=True) for w in weights]
    return ((BICUBIC,) if wants_bicubic else ()) + tuple(specs)


def check_upscale_options(*, tile: str, max_memory: str | None, **values: Any) -> None:
    """The checks of ``upscale_options`` that need no torch (all but the device's), from the options' text."""
    check_running_values(tile=parse_tile(tile), max_memory=parse_size(max_memory), cli=True, **values)


def upscale_options(*, tile: str, max_memory: str | None, **values: Any) -> UpscaleOptions:
    """The running options every upscaling command shares, from their text: ``--tile`` and ``--max-memory``
    parsed here, the rest (device, precision, attention, overlap, exact, batch, ...) passed as given."""
    running = {name: value for name, value in values.items() if name != "device"}
    check_upscale_options(tile=tile, max_memory=max_memory, **running)  # before torch: refusals answer at once
    check_device_name(values.get("device", "auto"), cli=True)
    from ..runtime import resolve_device
    from ..upscaler import UpscaleOptions  # torch: only once a command runs

    resolve_device(values.get("device", "auto"), cli=True)  # a device PyTorch cannot use, said as --device
    return UpscaleOptions(tile=parse_tile(tile), max_memory=parse_size(max_memory), cli=True, **values)
