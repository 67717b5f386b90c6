"""``sst bench``: the paper's speed/memory protocol (Table S4), a reference path side by side, tiled throughput."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from ..checks import check_bench_runs, check_choice, check_device_name
from ..checks import compile_mode as check_compile_mode
from ..choices import BACKENDS, PRECISIONS
from ..errors import ConfigError
from ..zoo import VARIANTS, check_scale, get_variant
from ._options import (
    AttentionOption,
    ConfigOption,
    DeviceOption,
    OverwriteOption,
    WeightsOption,
    parse_tile,
    parse_wxh,
    path_text,
    refuse_stdio,
)
from .output import console, err_console, handle_errors

if TYPE_CHECKING:
    from ..bench import BenchReport, BenchSettings


def _settings(
    *,
    device: str,
    models: list[str] | None,
    scales: list[int] | None,
    precisions: list[str] | None,
    size: str | None,
    tiled: str | None,
    runs: int | None,
    warmup: int | None,
    attention: str,
    reference: bool,
    tile: str,
    compile_mode: str,
    tf32: bool,
    input_image: Path | None,
    channels_last: str = "auto",
    weights: str | None = None,
    config: str | None = None,
) -> tuple[BenchSettings, bool]:
    """The paper's protocol on a GPU; quick defaults on the CPU. Returns the settings and whether CPU defaults apply."""
    # Refusals that need no torch come before it is imported (by bench and runtime): they answer at once.
    check_device_name(device, cli=True)
    check_choice(attention, BACKENDS, "attention backend")
    check_compile_mode(compile_mode)
    precisions = [check_choice(precision, PRECISIONS, "precision") for precision in precisions or ()]
    layouts = {"auto": None, "on": True, "off": False}
    if channels_last not in layouts:
        raise ConfigError(f"unknown --channels-last {channels_last!r}; choose auto, on or off")
    check_bench_runs(runs, warmup)
    parse_tile(tile)
    if tile != "auto" and tiled is None:
        raise ConfigError("--tile sets the tiles of a --tiled run: give --tiled WxH too")
    if weights is not None and scales and len(set(scales)) > 1:
        raise ConfigError("--weights holds one scale: give at most one --scale (it is checked against the file)")
    models = [get_variant(name).name for name in models or ()]  # unknown names fail here; "SST" is sst
    for scale in scales or ():
        check_scale(scale)
    given_sizes = (("--size", size), ("--tiled", tiled))
    sizes = {option: parse_wxh(text, option) for option, text in given_sizes if text is not None}
    from ..bench import BenchSettings, check_weights_file, quick_cpu_settings

    check_weights_file(weights, cli=True)  # BenchSettings would name it as the keyword, weights
    from ..runtime import resolve_device

    cpu = resolve_device(device, cli=True).type != "cuda"
    given: dict[str, Any] = {"device": device, "attention": attention, "reference": reference, "tf32": tf32}
    given |= {"tile": parse_tile(tile), "compile": compile_mode, "channels_last": layouts[channels_last]}
    given["input"] = None if input_image is None else str(input_image)
    if weights is not None:
        if len(set(models)) > 1:
            raise ConfigError("--weights times the network in that file: give at most one --model, its architecture")
        given |= {"weights": weights, "config": config, "variant": models[0] if models else None}
        models = None
    elif config is not None:
        raise ConfigError("--config describes the architecture of --weights; give the weights too")
    if models:
        given["models"] = tuple(models)  # BenchSettings keeps each once
    if scales:
        given["scales"] = tuple(scales)
    elif models:  # the default scales that every model named has (sst-real exists at x4 only)
        from ..bench import PAPER_SCALES

        have = [set(get_variant(m).scales) for m in given["models"]]
        given["scales"] = tuple(s for s in PAPER_SCALES if all(s in h for h in have)) or PAPER_SCALES
    if precisions:
        given["precisions"] = tuple(precisions)
    if runs is not None:
        given["runs"] = runs
    if warmup is not None:
        given["warmup"] = warmup
    if tiled is not None:
        given["tiled"] = sizes["--tiled"]
        given["size"] = None  # --tiled alone measures only the tiled path
    if size is not None:
        given["size"] = sizes["--size"]
    quick = cpu and not models and size is None and runs is None
    if quick and tiled is not None:
        given["size"] = None
    settings = quick_cpu_settings(**given) if quick else BenchSettings(**given)
    return settings, quick


def _listed(words: list[str]) -> str:
    """'x2', 'x2 and x4', 'x2, x3 and x4'."""
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def _quick_notice(settings: BenchSettings) -> str:
    """What the CPU's quick defaults time, worded from ``settings`` (--scale and --tiled change what runs)."""
    if settings.weights is not None:
        what = ["the weights' own network and scale"]
    else:
        what = [", ".join(settings.models), _listed([f"x{scale}" for scale in settings.scales])]
    if settings.size is not None:
        what.append(f"{settings.size[0]}x{settings.size[1]} output")
    if settings.tiled is not None:
        what.append(f"tiled {settings.tiled[0]}x{settings.tiled[1]} output")
    what.append(f"{settings.runs} runs")
    return (
        f"CPU: quick defaults ({', '.join(what)}); the paper's protocol needs a GPU or explicit --model/--size/--runs"
    )


def _ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _opt(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _results_table(report: BenchReport) -> Table:
    table = Table(title="sst bench: one forward pass, median")
    for name in ("model", "scale", "precision", "path", "LR", "ms", "MiB", "compared"):
        table.add_column(name, justify="left" if name in ("model", "precision", "path", "compared") else "right")
    fp32 = {(r.model, r.scale): r.median_ms for r in report.results if r.precision == "fp32" and r.path == "ours"}
    for r in report.results:
        notes = []
        if r.precision == "bf16" and r.path == "ours" and (r.model, r.scale) in fp32:
            notes.append(f"{fp32[(r.model, r.scale)] / r.median_ms:.2f}x fp32 speed")
            if r.psnr_vs_fp32 is not None:
                notes.append(f"{r.psnr_vs_fp32:.1f} dB vs fp32")
        if r.speedup is not None:
            notes.append(f"{r.speedup:.2f}x reference speed")
        if r.max_abs_diff is not None:
            notes.append(f"max diff {r.max_abs_diff:.1e}")
        row = (r.model, f"x{r.scale}", r.precision, r.path, f"{r.lr[0]}x{r.lr[1]}", _ms(r.median_ms))
        table.add_row(*row, _opt(r.memory_mib, ",.0f"), ", ".join(notes))
    return table


def _tiled_table(report: BenchReport) -> Table:
    from ..tiling import tile_label

    table = Table(title="sst bench: tiled upscaling throughput (median)")
    for name in ("model", "scale", "precision", "output", "tile", "tiles", "s", "MP/s", "MiB"):
        table.add_column(name, justify="left" if name in ("model", "precision") else "right")
    for t in report.tiled:
        table.add_row(
            t.model,
            f"x{t.scale}",
            t.precision,
            f"{t.output[0]}x{t.output[1]}",
            tile_label(t.tile) + (f" +{t.overlap}" if t.tiles > 1 else ""),
            str(t.tiles),
            f"{t.median_s:.2f}",
            f"{t.megapixels_per_s:.3f}",
            _opt(t.memory_mib, ",.0f"),
        )
    return table


def print_report(report: BenchReport) -> None:
    """Header facts, the kernel lines, notices, then the tables (stdout)."""
    for key, value in (
        ("device", report.device),
        ("torch", f"{report.torch}, {report.threads} CPU threads"),
        ("date", report.date),
        ("protocol", report.protocol),
        ("memory", report.memory_kind),
    ):
        console.print(f"{key}: {value}", markup=False, soft_wrap=True)
    for line in dict.fromkeys(f"{k}: {v}" for k, v in report.kernels.items()):
        console.print(line, markup=False, soft_wrap=True)
    for notice in report.notices:
        err_console.print(notice, markup=False, soft_wrap=True)
    if report.results:
        console.print(_results_table(report))
        console.print("ms: median of the timed runs; MiB: see 'memory' above; LR x scale = output size.")
        if any(r.speedup is not None for r in report.results):
            console.print(
                "reference: the same weights run the way the authors' code runs them (SST: RIB MLP every "
                "forward, concatenation and padding by separate copies; DAT: matmul-softmax window attention); "
                "'Nx reference speed' = reference median / ours."
            )
    if report.tiled:
        console.print(_tiled_table(report))
        console.print("tile: LR tile side + context overlap; s: median seconds per image; MP/s: output megapixels/s.")


@handle_errors
def bench(
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            "-m",
            metavar="NAME",
            help=f"Zoo model, repeatable ({', '.join(VARIANTS)}). Default sst-light, sst, sst-l.",
        ),
    ] = None,
    scale: Annotated[
        list[int] | None, typer.Option("--scale", "-s", metavar="N", help="Scale, repeatable. Default 2, 3, 4.")
    ] = None,
    precision: Annotated[
        list[str] | None,
        typer.Option(
            "--precision",
            metavar="auto|fp32|bf16",
            help="auto (bf16 on a GPU that has it, else fp32), fp32 or bf16, repeatable. Default fp32 and bf16.",
        ),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option("--size", metavar="WxH", help="Output size WxH of the forward-pass test (default 1280x720)."),
    ] = None,
    runs: Annotated[
        int | None, typer.Option("--runs", metavar="N", help="Timed runs; the median is reported (default 10).")
    ] = None,
    warmup: Annotated[
        int | None, typer.Option("--warmup", metavar="N", help="Untimed warm-up runs (default 3).")
    ] = None,
    device: DeviceOption = "auto",
    attention: AttentionOption = "auto",
    reference: Annotated[
        bool,
        typer.Option("--reference", help="Also time the authors' way of running the same network; print the ratio."),
    ] = False,
    tiled: Annotated[
        str | None,
        typer.Option(
            "--tiled",
            metavar="WxH",
            help="Measure tiled upscaling to this output size WxH, e.g. 3840x2160 (MP/s); alone unless --size.",
        ),
    ] = None,
    tile: Annotated[
        str, typer.Option("--tile", metavar="auto|0|PX", help="Tile side for --tiled: auto, 0 (whole) or LR pixels.")
    ] = "auto",
    compile_mode: Annotated[
        str,
        typer.Option(
            "--compile",
            metavar="MODE",
            help="torch.compile our path: none (or off), default (or on), reduce-overhead (CUDA graphs), max-autotune.",
        ),
    ] = "none",
    channels_last: Annotated[
        str,
        typer.Option(
            "--channels-last", metavar="auto|on|off", help="Activation layout: auto (the network's default), on, off."
        ),
    ] = "auto",
    tf32: Annotated[
        bool, typer.Option("--tf32", help="Allow TF32 in fp32 runs (off by default, as in upscale).")
    ] = False,
    input_image: Annotated[
        Path | None,
        typer.Option(
            "--input",
            metavar="FILE",
            help="A photo to use as the LR input (resized) instead of noise.",
            parser=path_text,
        ),
    ] = None,
    json_path: Annotated[
        Path | None,
        typer.Option(
            "--json",
            metavar="FILE",
            help="Also write all figures to this JSON file (with the settings and the sst-cli version).",
            parser=path_text,
        ),
    ] = None,
    overwrite: OverwriteOption = False,
    weights: WeightsOption = None,
    config: ConfigOption = None,
) -> None:
    """Time inference with random weights (or a checkpoint's, with --weights): the paper's protocol (Table S4)
    and tiled throughput.

    On a GPU the defaults are the paper's: sst-light, sst and sst-l at x2/x3/x4, fp32 and bf16, a
    1280x720 output, 3 warm-up and 10 timed runs. On the CPU, without --model/--size/--runs, a quick
    check runs instead (sst-light, 320x180, x2 and x4, 3 runs); pass a small --size for CPU runs.
    """
    refuse_stdio({"--input": input_image, "--json": json_path, "--weights": weights, "--config": config})
    settings, quick = _settings(
        device=device,
        models=model,
        scales=scale,
        precisions=precision,
        size=size,
        tiled=tiled,
        runs=runs,
        warmup=warmup,
        attention=attention,
        reference=reference,
        tile=tile,
        compile_mode=compile_mode,
        tf32=tf32,
        input_image=input_image,
        channels_last=channels_last,
        weights=weights,
        config=config,
    )
    if json_path is not None:
        from ..files import check_output_file

        check_output_file(json_path, overwrite=overwrite, inputs=[input_image] if input_image else [], option="--json")
    if quick:
        err_console.print(_quick_notice(settings), markup=False, soft_wrap=True)
    from ..bench import run_bench
    from ..files import atomic_write_text, json_text

    report = run_bench(settings, on_progress=lambda text: err_console.print(f"running {text}", style="dim"), cli=True)
    print_report(report)
    if json_path is not None:
        atomic_write_text(json_path, json_text(report.to_dict(), indent=2) + "\n", overwrite=overwrite)
        err_console.print(f"wrote {json_path}", markup=False)
