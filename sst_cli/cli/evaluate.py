"""``sst eval``: PSNR/SSIM of a model (or bicubic) on benchmark sets, next to the published figures."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..archs.attention import BACKENDS
from ..evaluate import PROTOCOL, DatasetResult, SrFunction, bicubic, check_pairs, evaluate_dataset, find_dataset
from ..evaluate import network_sr as make_network_sr
from ..published import published
from ..upscaler import DEFAULT_MODEL, DEFAULT_SCALE, PRECISIONS, Upscaler
from ..zoo import check_scale, get_variant
from .output import (
    AttentionOption,
    ConfigOption,
    DeviceOption,
    HubRepoOption,
    PrecisionOption,
    WeightsOption,
    console,
    err_console,
    fail,
    handle_errors,
)
from .upscale import parse_size, parse_tile

BICUBIC = "bicubic"


def _check_options(
    model: str | None, weights: str | None, config: str | None, scales: list[int], self_ensemble: bool,
    precision: str, attention: str, tile: str, batch: int, tile_overlap: int | None,
) -> None:  # fmt: skip
    if _is_bicubic(model):
        if weights or config:
            raise fail("--model bicubic takes no --weights or --config", 2)
        if self_ensemble:
            raise fail("--self-ensemble needs a network, not --model bicubic", 2)
        for s in scales:
            if s < 2:
                raise fail(f"--scale must be 2 or more, got {s}", 2)
        return
    if config is not None and weights is None:
        raise fail("--config describes an architecture; give the weights to load into it with --weights", 2)
    if config is None and model is not None:
        get_variant(model)
    for s in scales:
        check_scale(s)
    if precision not in PRECISIONS:
        raise fail(f"unknown --precision {precision!r}; choose one of {', '.join(PRECISIONS)}", 2)
    if attention not in BACKENDS:
        raise fail(f"unknown --attention {attention!r}; choose one of {', '.join(BACKENDS)}", 2)
    try:
        parse_tile(tile)
    except ValueError:
        raise fail(f"--tile must be auto, 0 (whole image) or a tile size in pixels, got {tile!r}", 2) from None
    if tile_overlap is not None and tile_overlap < 0:
        raise fail(f"--tile-overlap must be 0 or more, got {tile_overlap}", 2)
    if batch < 1:
        raise fail(f"--batch must be at least 1, got {batch}", 2)


def _is_bicubic(model: str | None) -> bool:
    return model is not None and model.strip().lower() == BICUBIC


def _fmt(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _table(results: list[DatasetResult], rgb: bool, label: str) -> Table:
    table = Table(title=f"{label}: PSNR (dB) / SSIM on the Y channel")
    for name in ("dataset", "scale", "images", "PSNR-Y", "SSIM-Y"):
        table.add_column(name, justify="left" if name == "dataset" else "right")
    if rgb:
        table.add_column("PSNR-RGB", justify="right")
        table.add_column("SSIM-RGB", justify="right")
    table.add_column("published", justify="right")
    table.add_column("Δ PSNR", justify="right")
    for r in results:
        row = [r.dataset, f"x{r.scale}", str(r.n_images), f"{r.psnr_y:.2f}", f"{r.ssim_y:.4f}"]
        if rgb:
            row += [_fmt(r.mean("psnr_rgb"), 2), _fmt(r.mean("ssim_rgb"), 4)]
        paper = published(r.model, r.dataset, r.scale)
        if paper is None:
            row += ["—", "—"]
        else:
            row += [f"{paper.psnr:.2f}/{_fmt(paper.ssim, 4)}", f"{r.psnr_y - paper.psnr:+.2f}"]
        table.add_row(*row)
    return table


def _report(results: list[DatasetResult], options: dict) -> dict:
    entries = []
    for r in results:
        entry = r.to_dict()
        paper = published(r.model, r.dataset, r.scale)
        if paper is not None:
            entry["published"] = {"psnr_y": paper.psnr, "ssim_y": paper.ssim, "source": paper.source}
        entries.append(entry)
    return {"results": entries, "protocol": {**PROTOCOL, **options}}


def _csv_text(results: list[DatasetResult], rgb: bool) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = ["dataset", "scale", "model", "image", "psnr_y", "ssim_y"]
    writer.writerow([*header, "psnr_rgb", "ssim_rgb"] if rgb else header)
    for r in results:
        for s in r.images:
            row = [r.dataset, r.scale, r.model, s.name, f"{s.psnr_y:.6f}", f"{s.ssim_y:.6f}"]
            if rgb:
                row += [f"{s.psnr_rgb:.6f}", f"{s.ssim_rgb:.6f}"]
            writer.writerow(row)
    return buffer.getvalue()


def _write_text(path: Path, text: str) -> None:
    """Write a report atomically: a failed or interrupted run leaves no half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@handle_errors
def eval_command(
    dataset: Annotated[
        list[str],
        typer.Option(
            "--dataset",
            "-d",
            help="Set5, Set14, B100, Urban100, Manga109, DIV2K-val (under --data-root), or a folder with HR/ "
            "and optionally LR_bicubic/X{s}/. Repeatable.",
        ),
    ],
    model: Annotated[
        str | None, typer.Option("--model", "-m", help=f"Zoo model name or 'bicubic'; default {DEFAULT_MODEL}.")
    ] = None,
    scale: Annotated[
        list[int] | None, typer.Option("--scale", "-s", help=f"Scale, repeatable (default {DEFAULT_SCALE}).")
    ] = None,
    weights: WeightsOption = None,
    config: ConfigOption = None,
    hub_repo: HubRepoOption = None,
    data_root: Annotated[
        Path | None, typer.Option("--data-root", help="Folder holding the named datasets (or set SST_DATA_ROOT).")
    ] = None,
    rgb: Annotated[bool, typer.Option("--rgb", help="Also report PSNR/SSIM on RGB.")] = False,
    self_ensemble: Annotated[
        bool, typer.Option("--self-ensemble", help="Average the 8 flips/rotations (x8 time).")
    ] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write all results as JSON.")] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Write per-image scores as CSV.")] = None,
    save_images: Annotated[
        Path | None, typer.Option("--save-images", help="Save SR outputs as DIR/<dataset>/x<scale>/<name>.png.")
    ] = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    attention: AttentionOption = "auto",
    tile: Annotated[str, typer.Option("--tile", help="0 (whole image, default), auto or a tile side.")] = "0",
    tile_overlap: Annotated[int | None, typer.Option("--tile-overlap", help="Context pixels around tiles.")] = None,
    exact: Annotated[bool, typer.Option("--exact", help="Tiles overlap by the full receptive field.")] = False,
    batch: Annotated[int, typer.Option("--batch", help="Tiles per forward pass.")] = 1,
    max_memory: Annotated[
        str | None, typer.Option("--max-memory", help="Memory budget for --tile auto, e.g. 4G.")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Measure PSNR/SSIM on benchmark sets with the standard SR protocol (Y channel, border = scale).

    Example: sst eval --model bicubic --dataset Set5 --dataset Set14 --scale 2 --scale 4 --data-root datasets/
    """
    scales = list(dict.fromkeys(scale or []))
    _check_options(model, weights, config, scales, self_ensemble, precision, attention, tile, batch, tile_overlap)
    memory = None
    if max_memory is not None:
        try:
            memory = parse_size(max_memory)
        except ValueError:
            raise fail(f"--max-memory must be a size such as 4G or 512M, got {max_memory!r}", 2) from None
    is_bicubic = _is_bicubic(model)
    datasets = [find_dataset(spec, data_root) for spec in dict.fromkeys(dataset)]

    def load(s: int | None) -> Upscaler:
        return Upscaler(
            None if config else model, s, weights=weights, config=config, hub_repo=hub_repo, device=device,
            precision=precision, attention=attention, tile=parse_tile(tile), tile_overlap=tile_overlap,
            exact=exact, batch=batch, max_memory=memory,
        )  # fmt: skip

    first: Upscaler | None = None
    if not scales:
        if weights is not None and not is_bicubic:
            first = load(None)  # the weights say which scale they are
            scales = [first.scale]
        else:
            scales = [DEFAULT_SCALE]
    for s in scales:
        for ds in datasets:
            check_pairs(ds, s)  # every file checked before the first forward pass

    if is_bicubic:
        label = BICUBIC
    elif weights:
        label = Path(weights.split("@", 1)[0]).stem
    else:
        label = (model or DEFAULT_MODEL).strip().lower()
    results: list[DatasetResult] = []
    total = sum(len(ds.hr_files) for ds in datasets) * len(scales)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=err_console, disable=quiet, transient=True,
    ) as progress:  # fmt: skip
        task = progress.add_task("evaluating", total=total)
        for s in scales:
            upscaler: Upscaler | None = None
            if not is_bicubic:
                upscaler = first if first is not None and first.scale == s else load(s)
                first = None
            sr: SrFunction = bicubic if upscaler is None else make_network_sr(upscaler.run, self_ensemble=self_ensemble)
            for ds in datasets:
                progress.update(task, description=f"{ds.name} x{s}")
                results.append(
                    evaluate_dataset(
                        sr, ds, s, label, rgb=rgb, save_dir=save_images, on_image=lambda _: progress.advance(task)
                    )
                )

    order = {ds.name: i for i, ds in enumerate(datasets)}
    results.sort(key=lambda r: (order[r.dataset], r.scale))  # one dataset's scales together
    console.print(_table(results, rgb, label))
    ensemble = ", self-ensemble x8" if self_ensemble else ""
    console.print(
        f"[dim]Protocol: HR modcropped; SR clamped, x255, rounded to uint8; scale px shaved; Y = BT.601 studio "
        f"range (MATLAB rgb2ycbcr), gray images as Y; SSIM 11x11 Gaussian σ=1.5, valid; mean over images{ensemble}. "
        "LR from LR_bicubic/ when present, else MATLAB bicubic.[/]",
        soft_wrap=True,
    )
    options = {"self_ensemble": self_ensemble, "tile": tile if not is_bicubic else None}
    if json_path is not None:
        _write_text(json_path, json.dumps(_report(results, options), indent=2) + "\n")
    if csv_path is not None:
        _write_text(csv_path, _csv_text(results, rgb))
