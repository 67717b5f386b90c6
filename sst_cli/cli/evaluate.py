"""``sst eval``: PSNR/SSIM of a model (or bicubic) on benchmark sets, next to the published figures."""

from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ..choices import DEFAULT_MODEL
from ._options import (
    SCALE_HELP,
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
from .output import as_markup, console, count_progress, handle_errors

if TYPE_CHECKING:
    from ..evaluate import DatasetResult


def _fmt(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _table(results: list[DatasetResult], rgb: bool, labels: list[str]) -> Table:
    from ..published import published

    several = len(labels) > 1
    title = "PSNR (dB) / SSIM on the Y channel"
    table = Table(title=title if several else f"{labels[0]}: {title}")
    for name in ("dataset", "scale", *(("model",) if several else ()), "images", "PSNR-Y", "SSIM-Y"):
        table.add_column(name, justify="left" if name in ("dataset", "model") else "right")
    if rgb:
        table.add_column("PSNR-RGB", justify="right")
        table.add_column("SSIM-RGB", justify="right")
    table.add_column("published", justify="right")
    table.add_column("Δ PSNR", justify="right")
    for r in results:
        row = [r.dataset, f"x{r.scale}", *((r.model,) if several else ()), str(r.n_images)]
        row += [f"{r.psnr_y:.2f}", f"{r.ssim_y:.4f}"]
        if rgb:
            row += [_fmt(r.mean("psnr_rgb"), 2), _fmt(r.mean("ssim_rgb"), 4)]
        paper = published(r.model, r.dataset, r.scale, r.n_images)
        if paper is None:
            row += ["—", "—"]
        else:
            row += [f"{paper.psnr:.2f}/{_fmt(paper.ssim, 4)}", f"{r.psnr_y - paper.psnr:+.2f}"]
        table.add_row(*row)
    return table


def _report(results: list[DatasetResult], options: dict, protocol: dict[str, str]) -> dict:
    from ..published import published

    entries = []
    for r in results:
        entry = r.to_dict()
        paper = published(r.model, r.dataset, r.scale, r.n_images)
        if paper is not None:
            entry["published"] = {"psnr_y": paper.psnr, "ssim_y": paper.ssim, "source": paper.source}
        entries.append(entry)
    return {"results": entries, "protocol": {**protocol, **options}}


def _provenance(models: tuple, labels: list[str], device: str, precision: str) -> dict:
    """What a JSON report needs to be rerun: each model's weights (a zoo name, or the file and its sha256), the
    device and precision asked for (each result's ``ran_on`` says what ran), and the versions that computed it."""
    import torch

    from .. import __version__
    from ..evaluate import BICUBIC
    from ..hub import sha256_of

    sources: dict[str, dict[str, str]] = {}
    for label, spec in zip(labels, models, strict=True):
        if spec == BICUBIC:
            continue
        if spec.weights is None:
            sources[label] = {"model": spec.model or DEFAULT_MODEL}
            continue
        sources[label] = {"weights": str(spec.weights)}
        if Path(spec.weights).is_file():  # an hf:// reference names itself
            sources[label]["sha256"] = sha256_of(Path(spec.weights))
    return {
        "models": sources,
        "device": device,
        "precision": precision,
        "sst_cli": __version__,
        "torch": torch.__version__,
    }


def _csv_text(results: list[DatasetResult], rgb: bool) -> str:
    """One row per image; the last two columns, ``device`` and ``precision``, say what computed it (``cuda:0``,
    ``bf16``; bicubic ``cpu``, ``fp64``), as each result's ``ran_on`` in ``--json``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = ["dataset", "scale", "model", "image", "psnr_y", "ssim_y"]
    writer.writerow([*header, *(["psnr_rgb", "ssim_rgb"] if rgb else []), "device", "precision"])
    for r in results:
        ran_on = [r.ran_on.device, r.ran_on.precision] if r.ran_on is not None else ["", ""]
        for s in r.images:
            row = [r.dataset, r.scale, r.model, s.name, f"{s.psnr_y:.6f}", f"{s.ssim_y:.6f}"]
            if rgb:
                row += [f"{s.psnr_rgb:.6f}", f"{s.ssim_rgb:.6f}"]
            writer.writerow([*row, *ran_on])
    return buffer.getvalue()


@handle_errors
def eval_command(
    dataset: Annotated[
        list[str],
        typer.Option(
            "--dataset",
            "-d",
            metavar="NAME",
            help="Set5, Set14, B100, Urban100, Manga109, DIV2K-val (under --data-root), or a folder with HR/ "
            "and optionally LR_bicubic/X{s}/. Repeatable.",
        ),
    ],
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            "-m",
            metavar="NAME",
            help=f"Zoo model name or 'bicubic'; default {DEFAULT_MODEL}. Repeat to compare models side by side. "
            "With --weights: the architecture to load them into (once), or bicubic.",
        ),
    ] = None,
    scale: Annotated[
        list[int] | None,
        typer.Option("--scale", "-s", metavar="N", help=f"Scale, repeatable. {SCALE_HELP}"),
    ] = None,
    weights: Annotated[
        list[str] | None,
        typer.Option(
            "--weights", metavar="FILE", help="Weights file or hf://OWNER/REPO/PATH[@REV]; repeat to compare several."
        ),
    ] = None,
    config: ConfigOption = None,
    hub_repo: HubRepoOption = None,
    data_root: Annotated[
        Path | None,
        typer.Option(
            "--data-root",
            metavar="DIR",
            help="Folder holding the named datasets (or set SST_DATA_ROOT).",
            parser=path_text,
        ),
    ] = None,
    rgb: Annotated[bool, typer.Option("--rgb", help="Also report PSNR/SSIM on RGB.")] = False,
    self_ensemble: Annotated[
        bool, typer.Option("--self-ensemble", help="Average the 8 flips/rotations (x8 time).")
    ] = False,
    json_path: Annotated[
        Path | None, typer.Option("--json", metavar="FILE", help="Write all results as JSON.", parser=path_text)
    ] = None,
    csv_path: Annotated[
        Path | None, typer.Option("--csv", metavar="FILE", help="Write per-image scores as CSV.", parser=path_text)
    ] = None,
    overwrite: OverwriteOption = False,
    save_images: Annotated[
        Path | None,
        typer.Option(
            "--save-images",
            metavar="DIR",
            help="Save SR outputs as DIR/[<model>/]<dataset>/x<scale>/<name>.png (the <model>/ level only when "
            "several models are compared).",
            parser=path_text,
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            metavar="DIR",
            help="Write a visual report to DIR/index.html: the tables, zoomed crops LR | bicubic | models | HR "
            "and a before/after slider per image, sortable by PSNR gain. An earlier report in DIR is replaced.",
            parser=path_text,
        ),
    ] = None,
    crop: CropOption = None,
    crop_by: Annotated[
        str,
        typer.Option(
            "--crop-by",
            metavar="WHAT",
            help="Place the report's crops where the models differ most from bicubic (difference) or where they "
            "err most against the HR (error).",
        ),
    ] = "difference",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    attention: AttentionOption = "auto",
    tile: Annotated[
        str, typer.Option("--tile", metavar="auto|0|PX", help="0 (whole image, default), auto or a tile side.")
    ] = "0",
    tile_overlap: TileOverlapOption = None,
    exact: ExactOption = False,
    batch: BatchOption = 1,
    max_memory: MaxMemoryOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Measure PSNR/SSIM on benchmark sets with the standard SR protocol (Y channel, border = scale).

    Example: sst eval --model bicubic --dataset Set5 --dataset Set14 --scale 2 --scale 4 --data-root datasets/

    Visual report: sst eval -d Set5 --model sst-light-291 --model bicubic --data-root datasets/ --report set5-report/
    """
    from ..errors import ConfigError, WriteError

    refuse_stdio(
        {
            "--dataset": dataset,
            "--data-root": data_root,
            "--weights": weights,
            "--config": config,
            "--json": json_path,
            "--csv": csv_path,
            "--save-images": save_images,
            "--report": report,
        }
    )
    crop_box = parse_crop(crop)
    if crop_by not in ("difference", "error"):
        raise ConfigError(f"--crop-by must be difference or error, got {crop_by!r}")
    if report is None and (crop is not None or crop_by != "difference"):
        raise ConfigError("--crop and --crop-by place the crops of a --report: give --report DIR too")
    options = upscale_options(
        device=device, precision=precision, attention=attention, tile=tile, tile_overlap=tile_overlap,
        exact=exact, batch=batch, max_memory=max_memory,
    )  # fmt: skip
    from .. import hub
    from ..evaluate import BICUBIC, PROTOCOL, EvalSettings, find_dataset, model_labels, run_evaluation
    from ..files import atomic_write_text, check_output_file, check_spared, json_text
    from .downloads import download_display

    models = model_specs(model or [], weights or [], config, hub_repo)
    settings = EvalSettings(
        datasets=tuple(dataset),
        models=models,
        scales=tuple(scale or ()),
        options=options,
        data_root=data_root,
        rgb=rgb,
        self_ensemble=self_ensemble,
        save_images=save_images,
        overwrite=overwrite,
    )
    # Before any work: the datasets' own files are never replaced, and nothing the run keeps lies in the report
    # folder, which is swapped in whole at the end.
    roots = [find_dataset(spec, data_root).root for spec in dataset]
    if json_path is not None and csv_path is not None and json_path.resolve() == csv_path.resolve():
        raise ConfigError(f"--json and --csv name the same file, {json_path}: give each its own")
    if json_path is not None or csv_path is not None:
        inputs = [f for root in roots for f in root.rglob("*") if f.is_file()]
        for path, option in ((json_path, "--json"), (csv_path, "--csv")):
            if path is not None:
                check_output_file(path, overwrite=overwrite, inputs=inputs, option=option)
    if save_images is not None and save_images.exists() and not save_images.is_dir():
        raise WriteError(f"cannot save images into --save-images '{save_images}': it is a file, not a folder")
    if report is not None:
        kept = [p for p in (json_path, csv_path, save_images) if p is not None]
        check_spared(report, [*roots, *kept], "the --report folder")
    labels = model_labels(models)
    with contextlib.ExitStack() as stack:
        recorder = None
        if report is not None:
            from ..report import eval_recorder, open_report

            names = (Path(d).name or d for d in dataset)  # a folder's name: a shared report shows no one's folders
            title = f"{', '.join(labels)} on {', '.join(names)}"
            if scale:
                title += f" at {', '.join(f'x{s}' for s in dict.fromkeys(scale))}"
            builder = stack.enter_context(
                open_report(
                    report, title=title, models=[label for label in labels if label != BICUBIC],
                    ground_truth=True, crop=crop_box, crop_by=crop_by,
                )
            )  # fmt: skip
            recorder = eval_recorder(builder)
        stack.enter_context(hub.show_downloads(download_display(quiet=quiet, bar=False)))  # the eval bar is live
        with count_progress(disable=quiet) as progress:
            task = progress.add_task("evaluating", total=None)
            results = run_evaluation(
                settings,
                on_start=lambda total: progress.update(task, total=total),
                on_image=lambda name, s, _score: progress.update(
                    task, advance=1, description=as_markup(f"{name} x{s}")
                ),
                on_output=recorder,
            )
    console.print(_table(results, rgb, labels))
    ensemble = ", self-ensemble x8" if self_ensemble else ""
    console.print(
        f"[dim]Protocol: HR modcropped; SR clamped, x255, rounded to uint8; scale px shaved; Y = BT.601 studio "
        f"range (MATLAB rgb2ycbcr), gray images as Y; SSIM 11x11 Gaussian σ=1.5, valid; mean over images{ensemble}. "
        "LR from LR_bicubic/ when present, else MATLAB bicubic.[/]",
        soft_wrap=True,
    )
    every_bicubic = all(m == BICUBIC for m in models)
    report_options = {"self_ensemble": self_ensemble, "tile": tile if not every_bicubic else None}
    if json_path is not None:  # provenance hashes the weights files: only for the file that records it
        report_options |= _provenance(models, labels, device, options.precision)
        atomic_write_text(
            json_path, json_text(_report(results, report_options, PROTOCOL), indent=2) + "\n", overwrite=overwrite
        )
    if csv_path is not None:
        atomic_write_text(csv_path, _csv_text(results, rgb), overwrite=overwrite)
    if report is not None:
        console.print(f"report: {report / 'index.html'}", soft_wrap=True, markup=False)
