"""``sst compare``: your own pictures through bicubic and several models, as an HTML report and/or one PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..choices import DEFAULT_MODEL
from ._options import (
    AttentionOption,
    BatchOption,
    ConfigOption,
    CropOption,
    DeviceOption,
    ExactOption,
    HubRepoOption,
    MaxMemoryOption,
    OverwriteOption,
    PrecisionOption,
    TileOverlapOption,
    model_specs,
    parse_crop,
    path_text,
    refuse_stdio,
    upscale_options,
)
from .output import as_markup, console, count_progress, handle_errors, note

DEFAULT_REPORT = Path("sst-compare")


@handle_errors
def compare(
    images: Annotated[
        list[Path], typer.Argument(help="Pictures (or folders of pictures) to compare on.", parser=path_text)
    ],
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            "-m",
            metavar="NAME",
            help=f"Zoo model name; repeat to put several side by side (default {DEFAULT_MODEL}). Bicubic is always "
            "shown. With --weights: the architecture to load them into (once).",
        ),
    ] = None,
    weights: Annotated[
        list[str] | None,
        typer.Option(
            "--weights", metavar="FILE", help="Weights file or hf://OWNER/REPO/PATH[@REV]; repeat to compare several."
        ),
    ] = None,
    config: ConfigOption = None,
    hub_repo: HubRepoOption = None,
    scale: Annotated[
        int | None, typer.Option("--scale", "-s", metavar="N", help="Scale (default: the weights' own, else 4).")
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            "-o",
            metavar="DIR",
            help=f"Report folder (index.html and images); default {DEFAULT_REPORT}/ unless only --png is given. "
            "An earlier report there is replaced.",
            parser=path_text,
        ),
    ] = None,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            metavar="FILE",
            help="Also (or only) write the crops side by side as one labelled PNG.",
            parser=path_text,
        ),
    ] = None,
    crop: CropOption = None,
    title: Annotated[str | None, typer.Option("--title", metavar="TEXT", help="The report's title.")] = None,
    overwrite: OverwriteOption = False,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    attention: AttentionOption = "auto",
    tile: Annotated[
        str, typer.Option("--tile", metavar="auto|0|PX", help="auto, 0 (whole image) or tile side in input pixels.")
    ] = "auto",
    tile_overlap: TileOverlapOption = None,
    exact: ExactOption = False,
    batch: BatchOption = 1,
    max_memory: MaxMemoryOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Compare bicubic and models on your own pictures: zoomed crops side by side and a before/after slider.

    Examples:

      sst compare photo.png --model sst-light-291 --model sst-l+        (report in sst-compare/index.html)

      sst compare photo.png --weights mine.safetensors --crop 120,80,64,64 --png side-by-side.png
    """
    refuse_stdio({"IMAGES": images, "--report": report, "--png": png, "--weights": weights, "--config": config})
    crop_box = parse_crop(crop)
    options = upscale_options(
        device=device, precision=precision, attention=attention, tile=tile, tile_overlap=tile_overlap,
        exact=exact, batch=batch, max_memory=max_memory,
    )  # fmt: skip
    from ..compare import CompareSettings, run_compare

    settings = CompareSettings(
        images=tuple(images),
        models=model_specs(model or [], weights or [], config, hub_repo),
        scale=scale,
        options=options,
        report=report if report is not None or png is not None else DEFAULT_REPORT,
        png=png,
        crop=crop_box,
        title=title,
        overwrite=overwrite,
    )
    with count_progress(disable=quiet) as progress:
        task = progress.add_task("comparing", total=None)
        result = run_compare(
            settings,
            on_start=lambda total: progress.update(task, total=total),
            on_image=lambda label, name: progress.update(task, advance=1, description=as_markup(f"{label}: {name}")),
            on_message=note,
        )
    shown = ", ".join(("bicubic", *result.models))
    console.print(f"compared {shown} on {result.images} image(s) at x{result.scale}", soft_wrap=True, markup=False)
    if result.page is not None:
        console.print(f"report: {result.page}", soft_wrap=True, markup=False)
    if result.png is not None:
        console.print(f"side by side: {result.png}", soft_wrap=True, markup=False)
