"""Batches: ``sst upscale`` as a library call. Inputs are found (``inputs``), their outputs named (``naming``)
and planned from the headers (``preflight``), the model loaded once, then every file runs (``filerun``), here
or over worker processes (``parallel``).

Nothing here prints; callbacks let a front end show progress as it happens. The names a caller needs are
re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from .choices import DEFAULT_SCALE
from .filerun import (
    BatchEvents,
    BatchInterrupted,
    BatchResult,
    FileDone,
    FileResult,
    FileStart,
    FileStep,
    Status,
    _BatchRun,
    run_in_turn,
)
from .files import removing_unused_folders
from .image_io import is_image_file
from .inputs import UNSUPPORTED_SUFFIXES, Job, Skips, discover_inputs, is_own_output, own_output_labels
from .naming import (
    DEFAULT_OUTSCALE_TEMPLATE,
    DEFAULT_TEMPLATE,
    FOLDER_SUFFIX,
    TEMPLATE_FIELDS,
    Naming,
    WriteOptions,
    check_template,
    model_label,
    names_a_folder,
    own_name_pattern,
    plan_output,
)
from .parallel import WorkerPlan, run_batch_parallel
from .preflight import OutputNameClash, Preflight
from .upscaler import ScaleOnly, UpscaleOptions, Upscaler, refuse_foreign_settings

if TYPE_CHECKING:
    from .loader import ModelSpec
    from .upscaler import TileCallback

__all__ = [
    "DEFAULT_OUTSCALE_TEMPLATE",
    "DEFAULT_TEMPLATE",
    "FOLDER_SUFFIX",
    "TEMPLATE_FIELDS",
    "UNSUPPORTED_SUFFIXES",
    "BatchEvents",
    "BatchInterrupted",
    "BatchResult",
    "FileDone",
    "FileResult",
    "FileStart",
    "Job",
    "Naming",
    "OutputNameClash",
    "Skips",
    "Status",
    "WorkerPlan",
    "WriteOptions",
    "check_template",
    "discover_inputs",
    "is_own_output",
    "model_label",
    "own_output_labels",
    "plan_batch",
    "plan_output",
    "run_batch",
    "upscale_files",
]


def upscale_files(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str] | None,
    *,
    model: ModelSpec,
    options: UpscaleOptions,
    writing: WriteOptions,
    recursive: bool = False,
    include_outputs: bool = False,
    events: BatchEvents | None = None,
    workers: WorkerPlan | None = None,
    inputs_checked: bool = False,
) -> BatchResult:
    """``sst upscale`` as a library call: find the inputs, plan their outputs, load the model once, run.

    Everything that can be refused (no inputs, an output that cannot be named) is refused before the model
    is loaded; files found in folders that sst-cli wrote itself are skipped unless ``include_outputs``.
    ``workers`` (``parallel.plan_workers``) with several devices runs one worker process per entry, each
    loading the model once; the model is then loaded here on the CPU only to plan the outputs.
    Raises BatchInterrupted on Ctrl-C with what was finished. ``inputs_checked``: as ``discover_inputs`` takes it
    (``sst upscale`` checked all its inputs, of which these images are part).
    """
    events = events or BatchEvents()
    refuse_foreign_settings(model, options)
    paths = [os.fspath(i) for i in ([inputs] if isinstance(inputs, str | os.PathLike) else inputs)]  # one is one
    parallel = workers is not None and workers.parallel
    jobs, naming = name_batch(
        paths, output, model, options, writing, recursive, include_outputs, events.note, inputs_checked
    )
    with removing_unused_folders(naming.folders(jobs)):  # made when planned: kept only if written into
        scale_unknown = model.weights is not None and model.scale is None  # only the loaded weights say it
        known = None if scale_unknown else ScaleOnly(naming.scale, options.outscale, options.cli)
        if known is not None and _computes_nothing(jobs, naming, writing, known):
            # Every output is kept or refused from the headers alone (it exists, is a folder, ...): answer without
            # loading the model, which may need the network.
            return run_batch(jobs, known, naming=naming, writing=writing, on_file_start=events.file_start,
                             on_file_done=events.file_done, on_note=events.note)  # fmt: skip
        jobs, naming, upscaler = plan_batch(
            paths, output, model=model, options=options, writing=writing, recursive=recursive,
            include_outputs=include_outputs, events=events, on_cpu=parallel, named=(jobs, naming),
        )  # fmt: skip
        if workers is not None and parallel:
            return run_batch_parallel(
                jobs, upscaler, spec=model, workers=workers, naming=naming, writing=writing, events=events
            )
        return run_batch(
            jobs,
            upscaler,
            naming=naming,
            writing=writing,
            on_file_start=events.file_start,
            on_tile=events.tile,
            on_file_done=events.file_done,
            on_note=events.note,
        )


def plan_batch(
    inputs: Sequence[str],
    output: str | os.PathLike[str] | None,
    *,
    model: ModelSpec,
    options: UpscaleOptions,
    writing: WriteOptions,
    recursive: bool,
    include_outputs: bool,
    events: BatchEvents,
    on_cpu: bool,
    named: tuple[list[Job], Naming] | None = None,
    inputs_checked: bool = False,
) -> tuple[list[Job], Naming, Upscaler]:
    """Find the inputs and name their outputs (refusals come before the model loads; ``named``: already done by
    ``name_batch``), then load the model that plans the batch (on the CPU with ``on_cpu``: workers or actors do
    the computing) and say it is ready; shared by ``upscale_files`` and the Ray path."""
    jobs, naming = named or name_batch(
        inputs, output, model, options, writing, recursive, include_outputs, events.note, inputs_checked
    )
    planning = replace(options, device="cpu") if on_cpu else options
    upscaler = Upscaler(model, options=planning, on_message=events.warning)
    naming = replace(naming, scale=upscaler.scale)
    if options.outscale is not None and options.outscale != upscaler.scale and events.note is not None:
        events.note(
            f"the model runs at its native x{upscaler.scale}; the result is then resized to x{options.outscale:g} "
            "with an antialiasing (bicubic) filter"
        )
    if events.ready is not None:
        events.ready(upscaler, len(jobs))
    return jobs, naming, upscaler


def name_batch(
    inputs: Sequence[str],
    output: str | os.PathLike[str] | None,
    model: ModelSpec,
    options: UpscaleOptions,
    writing: WriteOptions,
    recursive: bool,
    include_outputs: bool,
    on_note: Callable[[str], None] | None = None,
    inputs_checked: bool = False,
) -> tuple[list[Job], Naming]:
    """The inputs, and how their outputs are named (the scale asked for, or the default until the model says)."""
    exclude = [Path(output)] if output is not None and not is_image_file(output) else []
    skips = Skips() if include_outputs else own_skips(model, writing.name, output=output, outscale=options.outscale)
    jobs = discover_inputs(
        inputs, recursive, exclude=exclude, skips=skips, on_note=on_note, inputs_checked=inputs_checked
    )
    naming = plan_output(
        jobs,
        output,
        model=model_label(model),
        scale=model.scale or DEFAULT_SCALE,
        outscale=options.outscale,
        template=writing.name,
        format=writing.format,
    )
    return jobs, naming


def own_skips(
    model: ModelSpec,
    template: str | None,
    *,
    output: str | os.PathLike[str] | None = None,
    outscale: float | None = None,
) -> Skips:
    """What folder walks leave out as sst-cli's outputs: names the default template gives with a zoo model or
    this run's, and names this run's ``--name`` gives to an input beside them, at this run's scale (any, where
    only the loaded weights say it) and in the folders it writes into (``output``: -o, None: the default places).
    A run into another folder takes such files as inputs: they are not this run's outputs."""
    labels = own_output_labels() | {model_label(model).lower()}
    if template is None or (output is not None and not names_a_folder(output)):
        return Skips(labels)  # -o names the one output file: no other file is this run's
    scale = None if model.weights is not None and model.scale is None else model.scale or DEFAULT_SCALE
    pattern = own_name_pattern(template, labels, scale=scale, outscale=outscale)
    placement = Naming(model_label(model), DEFAULT_SCALE, folder=None if output is None else Path(output))
    return Skips(labels, pattern, placement.folder_for)


def _computes_nothing(jobs: Sequence[Job], naming: Naming, writing: WriteOptions, known: ScaleOnly) -> bool:
    """Whether planning, from the headers alone, leaves no file to compute (a resumed batch that is done)."""
    if naming.file is not None and writing.format is None:
        writing = replace(writing, format=naming.file.suffix.lstrip("."))
    return not Preflight(known, naming, writing, lambda text: None, tidy=False).has_work(jobs)  # said by the real one


def run_batch(
    jobs: Sequence[Job],
    upscaler: Upscaler | ScaleOnly,
    *,
    naming: Naming,
    writing: WriteOptions | None = None,
    on_file_start: FileStart | None = None,
    on_tile: TileCallback | None = None,
    on_file_done: FileDone | None = None,
    on_note: Callable[[str], None] | None = None,
) -> BatchResult:
    """Upscale every job, writing each output atomically; a failing file is recorded and the batch goes on.

    Every output is planned before the first forward pass (``preflight``): unreadable headers, existing
    targets, two inputs with one output name, folders that cannot be written and formats too small for the
    result are known before any computation. Outputs never replace an input file or another job's output.
    Ctrl-C (and SIGTERM/SIGHUP inside ``stop_on_signals``) raises BatchInterrupted with the partial result;
    the file being written is never left half-written.
    """
    writing = writing or WriteOptions()
    if naming.file is not None and writing.format is None:
        writing = replace(writing, format=naming.file.suffix.lstrip("."))
    run = _BatchRun(upscaler, naming, writing, on_tile, on_note or (lambda text: None))
    plans = run.preflight(jobs)
    if isinstance(upscaler, Upscaler):
        upscaler.expect(sum(p.megapixels for p in plans if p.skip is None and p.failure is None))
    steps = [FileStep(p.job, p.target if p.skip is None else None, p.megapixels, partial(run.one, p)) for p in plans]
    return run_in_turn(steps, on_file_start, on_file_done)
