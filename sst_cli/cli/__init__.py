"""Command-line interface: the only place that imports typer and rich. It only calls the API.

Command modules import the library inside their commands, so that ``sst --help``, ``--version`` and
option errors answer without importing torch.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from .. import __version__
from ..allocator import keep_large_blocks_off_the_heap
from ..signals import second_interrupt_exits_at_once
from . import bench, compare, evaluate, models, train, upscale
from .output import console, say_refused_command_line, set_debug
from .shutdown import end_process

HELP = """Upscale images with SST, the Scalable SR Transformer.

Examples:

  sst upscale photo.png                      (bundled default model, x4)

  sst upscale photos/ -o out/ --recursive --model sst-l+ --scale 4

  sst models                                  (list models and where their weights are)

  sst models pull sst-l --scale 2             (download for offline use)

  sst train --scale 2 --data train291/ --iters 20000 --out my_x2.safetensors   (train your own weights)

  sst eval --model bicubic --dataset Set5 --scale 4 --data-root datasets/

  sst eval --dataset Set5 --data-root datasets/ --report set5-report/   (HTML: crops, sliders, sortable)

  sst compare photo.png --model sst-light-291 --model sst-l+ --png side-by-side.png

  sst bench --device cuda --reference        (speed and memory, the paper's protocol)

  sst --debug upscale photo.png              (tracebacks instead of one-line errors)
"""

app = typer.Typer(help=HELP, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None)
app.add_typer(models.app, name="models")
app.command("upscale")(upscale.upscale)
app.command("eval")(evaluate.eval_command)
app.command("compare")(compare.compare)
app.command("train")(train.train)
app.command("bench")(bench.bench)


def _version(value: bool) -> None:
    if value:
        console.print(f"sst-cli {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
) -> None:
    """Upscale images with SST."""
    set_debug(debug)
    if not debug:
        quiet_decoders()


def quiet_decoders() -> None:
    """Keep the libraries' own remarks off the terminal (--debug shows them): the image libraries' about metadata
    they skipped (Pillow's "Corrupt EXIF data", tifffile's logged tag errors), which name no file while the image
    is read all the same; huggingface_hub's log of each retry and resumed transfer ("Retrying in 8s [Retry
    4/5]"), since sst-cli says in one sentence what failed in the end; torch's deprecation remark about
    ``meshgrid`` that Swin-style architectures (spandrel's HAT, SwinIR, ...) trigger when they are built, which
    the user cannot act on."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
    warnings.filterwarnings("ignore", message=r"torch\.meshgrid: in an upcoming release", category=UserWarning)
    logging.getLogger("tifffile").setLevel(logging.CRITICAL)
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    # huggingface_hub sets its logger's level when it is imported (from HF_HUB_VERBOSITY, default warning), which
    # is after this in most runs: the level above was reset and --quiet pulls printed 37 lines of retries.
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")


def main() -> None:
    """The command line, callable in a process that goes on afterwards (tests, scripts)."""
    second_interrupt_exits_at_once()
    try:
        app()
    except SystemExit as exc:
        say_refused_command_line(sys.argv[1:], exc.code)
        raise


def entry_point() -> None:
    """The ``sst`` program (and ``python -m sst_cli``): ``main``, then the process ends at once (``shutdown.py``).
    The process is sst's own, so its allocator keeps large tensors off the heap (``allocator``): memory stays
    within what the plan counts."""
    keep_large_blocks_off_the_heap()
    try:
        main()
    except SystemExit as exc:
        end_process(exc.code)
        raise
