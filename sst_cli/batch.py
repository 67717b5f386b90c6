"""Batches: turn INPUT arguments into jobs, name their outputs, and upscale them one by one.

Nothing here prints. Each file ends as a ``FileResult`` (done / skipped / failed with a reason) so
that one bad file never stops the batch; callbacks let a front end show progress as it happens.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .choices import DEFAULT_MODEL, DEFAULT_SCALE
from .errors import ConfigError, ImageError, OutputExists, SstError, WriteError
from .image_io import (
    DEFAULT_MAX_PIXELS,
    EXTENSIONS,
    choose_format,
    is_image_file,
    normalise_format,
    output_format,
    probe_image,
    read_image,
    write_image,
)
from .loader import ModelSpec
from .tiling import TileSize
from .upscaler import TileCallback, UpscaleOptions, Upscaler

if TYPE_CHECKING:
    from .parallel import WorkerPlan

#: Output name used when none is given; ``{outscale}`` replaces ``{scale}`` when an outscale is set.
DEFAULT_TEMPLATE = "{stem}_{model}_x{scale}.{ext}"
DEFAULT_OUTSCALE_TEMPLATE = "{stem}_{model}_x{outscale}.{ext}"
#: Suffix of the default output folder made beside a folder input (``photos/`` -> ``photos_sst/``).
FOLDER_SUFFIX = "_sst"
TEMPLATE_FIELDS = ("stem", "suffix", "model", "scale", "outscale", "ext")  # suffix: the input's extension
TEMP_SUFFIX = ".sst-tmp"

Status = Literal["done", "skipped", "failed"]
_MAGIC = re.compile(r"[*?[]")


@dataclass(frozen=True)
class Job:
    """One input file; ``base`` is the folder its output sub-path is measured from."""

    source: Path
    base: Path
    from_folder: bool = False  # came from a folder INPUT: default output goes to the sibling <name>_sst folder
    error: str | None = None  # known to fail before reading (e.g. the named file does not exist)
    skip: str | None = None  # found in a folder but not upscaled, and why (counted and listed, never silent)

    @property
    def relative(self) -> Path:
        """Path below ``base``: the sub-folder tree that is recreated in the output folder."""
        try:
            return self.source.relative_to(self.base)
        except ValueError:
            return Path(self.source.name)


# ------------------------------------------------------------------------------------------ discovery


def _hidden(name: str) -> bool:
    return name.startswith(".") or name.endswith(TEMP_SUFFIX)


#: Image kinds users have that sst-cli does not read: counted as skipped in folders rather than ignored.
UNSUPPORTED_SUFFIXES = frozenset({".heic", ".heif", ".avif", ".jxl", ".exr", ".hdr", ".psd", ".dng", ".cr2", ".nef"})
_OWN_OUTPUT = re.compile(r".+_(?P<model>[a-z0-9][a-z0-9+._-]*)_x\d+(?:\.\d+)?", re.IGNORECASE)


def own_output_labels() -> frozenset[str]:
    """Model labels sst-cli puts into default output names (zoo names; a weights stem is added per run)."""
    from .zoo import list_models

    return frozenset(list_models())


def is_own_output(path: Path, labels: frozenset[str]) -> bool:
    """True when the name is one sst-cli's default template gives (``photo_sst-light_x4.png``)."""
    match = _OWN_OUTPUT.fullmatch(path.stem)
    return match is not None and match["model"].lower() in labels


def _folder_images(folder: Path, recursive: bool, exclude: Sequence[Path], skips: Skips) -> list[Job]:
    """Jobs for the image files in ``folder`` (the whole tree with ``recursive``), hidden and temp files left out;
    images sst-cli cannot read or wrote itself become skipped jobs, so that none is passed over silently."""
    excluded = {os.path.realpath(p) for p in exclude}
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = (
            []
            if not recursive
            else [d for d in dirs if not _hidden(d) and os.path.realpath(os.path.join(root, d)) not in excluded]
        )
        found.extend(Path(root, f) for f in files if not _hidden(f) and _image_like(f))
    return [Job(p, folder, True, skip=skips.reason(p)) for p in sorted(found, key=lambda p: p.as_posix())]


def _image_like(name: str) -> bool:
    return is_image_file(name) or os.path.splitext(name)[1].lower() in UNSUPPORTED_SUFFIXES


@dataclass(frozen=True)
class Skips:
    """Which files found in folders are not upscaled: formats sst-cli cannot read, and its own outputs."""

    own_labels: frozenset[str] = frozenset()  # empty: own outputs are upscaled like any image

    def reason(self, path: Path) -> str | None:
        if not is_image_file(path):
            return f"{path.suffix.lstrip('.').upper()} is not a format sst-cli reads (convert it to PNG first)"
        if self.own_labels and is_own_output(path, self.own_labels):
            return "named like an sst-cli output (add --include-outputs to upscale it too)"
        return None


def _glob_root(pattern: str) -> Path:
    """The literal folder in front of the first wildcard: the tree below it is kept in the output."""
    parts = Path(pattern).parts
    literal: list[str] = []
    for part in parts[:-1]:
        if _MAGIC.search(part):
            break
        literal.append(part)
    return Path(*literal) if literal else Path(".")


def _expand(item: str, recursive: bool, exclude: Sequence[Path], skips: Skips) -> list[Job]:
    path = Path(item)
    if path.is_dir():
        return _folder_images(path, recursive, exclude, skips)
    if path.exists() or os.path.islink(item):
        return [Job(path, path.parent)]  # named explicitly: tried whatever its name, so errors are reported
    if not _MAGIC.search(item):
        return [Job(path, path.parent, error=f"cannot read '{item}': no such file or folder")]
    root = _glob_root(item)
    jobs: list[Job] = []
    for match in sorted(glob.glob(item, recursive=True)):
        found = Path(match)
        if found.is_dir():
            jobs.extend(
                replace(j, base=root, from_folder=False) for j in _folder_images(found, recursive, exclude, skips)
            )
        elif found.is_file() and _image_like(found.name) and not _hidden(found.name):
            jobs.append(Job(found, root, skip=skips.reason(found)))
    if not jobs:
        return [Job(path, root, error=f"no image files match '{item}'")]
    return jobs


def discover_inputs(
    inputs: Iterable[str], recursive: bool = False, *, exclude: Sequence[Path] = (), skips: Skips | None = None
) -> list[Job]:
    """Jobs for INPUT items (files, folders, globs), in argument order, each expansion sorted, no duplicates.

    A missing file becomes a failed job so the rest of the batch still runs. Folders in ``exclude``
    (the output folder) are not searched, so a rerun does not pick up its own results as inputs.
    Raises ConfigError when nothing at all is found, since there is nothing to report on.
    """
    items = list(inputs)
    jobs: list[Job] = []
    seen: set[str] = set()
    for item in items:
        for job in _expand(item, recursive, exclude, skips or Skips()):
            key = os.path.realpath(job.source) if job.error is None else f"missing:{job.source}"
            if key not in seen:
                seen.add(key)
                jobs.append(job)
    if not any(job.skip is None for job in jobs):
        if jobs:
            reasons = "; ".join(sorted({f"{j.source.name}: {j.skip}" for j in jobs})[:3])
            raise ConfigError(f"nothing to upscale in {', '.join(repr(i) for i in items)}: {reasons}")
        folders = [i for i in items if Path(i).is_dir()]
        nested = any(any(p.is_dir() and not _hidden(p.name) for p in Path(f).iterdir()) for f in folders)
        kinds = ", ".join(sorted(set(EXTENSIONS.values()) | {"jpeg", "tiff", "gif"}))
        hint = "; they have sub-folders: add --recursive to search them" if nested and not recursive else ""
        raise ConfigError(f"no image files found in {', '.join(repr(i) for i in items)} (looked for {kinds}){hint}")
    return jobs


# --------------------------------------------------------------------------------------------- naming


@dataclass(frozen=True)
class WriteOptions:
    """How outputs are named and written, checked on construction (before any model is loaded).

    ``format``: png, jpg, webp or tiff (None: as the input when it fits); ``name``: output name template
    (fields ``TEMPLATE_FIELDS``); ``max_pixels``: larger inputs are refused (decompression bombs; 0 = no
    limit); ``overwrite`` replaces existing outputs, ``skip_existing`` keeps them (a rerun resumes).
    """

    format: str | None = None
    quality: int = 95
    overwrite: bool = False
    skip_existing: bool = False
    name: str | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS

    def __post_init__(self) -> None:
        if self.overwrite and self.skip_existing:
            raise ConfigError("overwrite and skip-existing exclude each other: replace existing outputs, or keep them")
        if not 1 <= self.quality <= 100:
            raise ConfigError(f"quality must be between 1 and 100, got {self.quality}")
        if self.format is not None:
            normalise_format(self.format)
        if self.name is not None:
            check_template(self.name)
        if self.max_pixels < 0:
            raise ConfigError(f"max pixels must be 0 (no limit) or a pixel count, got {self.max_pixels}")


def model_label(spec: ModelSpec) -> str:
    """Name used for ``{model}`` in output names: the weights file's stem when weights are given."""
    if spec.weights is None:
        return (spec.model or DEFAULT_MODEL).strip().lower()
    return Path(str(spec.weights).split("@", 1)[0]).stem or spec.model or DEFAULT_MODEL


def _number(value: float) -> str:
    return f"{value:g}"


def check_template(template: str) -> None:
    """Refuse unknown fields and folder separators up front, before any model is loaded."""
    values = dict.fromkeys(TEMPLATE_FIELDS, "x")
    try:
        name = template.format(**values)
    except KeyError as exc:
        known = ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
        raise ConfigError(f"unknown field {{{exc.args[0]}}} in the name template; use {known}") from None
    except (ValueError, IndexError) as exc:
        raise ConfigError(f"the name template {template!r} is not valid: {exc}") from None
    if "/" in name or "\\" in name or name in ("", ".", ".."):
        raise ConfigError(f"the name template {template!r} must give a plain file name (no folders)")


@dataclass(frozen=True)
class Naming:
    """Where each job's output goes: one exact file, or a folder (or the default folders) plus a template."""

    model: str
    scale: int
    outscale: float | None = None
    template: str | None = None  # None: DEFAULT_TEMPLATE, or DEFAULT_OUTSCALE_TEMPLATE with an outscale
    folder: Path | None = None  # -o OUT as a folder; None: default folders
    file: Path | None = None  # -o OUT as the one output file of a single input

    def name(self, job: Job, fmt: str) -> str:
        template = self.template or (DEFAULT_OUTSCALE_TEMPLATE if self.outscale is not None else DEFAULT_TEMPLATE)
        outscale = self.outscale if self.outscale is not None else self.scale
        return template.format(
            stem=job.source.stem,
            suffix=job.source.suffix.lstrip("."),
            model=self.model,
            scale=self.scale,
            outscale=_number(outscale),
            ext=EXTENSIONS[fmt],
        )

    def folder_for(self, job: Job) -> Path:
        """``-o`` folder + sub-path; else ``<base>_sst/`` + sub-path for folder inputs, else beside the file."""
        if self.folder is not None:
            return self.folder / job.relative.parent
        if job.from_folder:
            base = Path(os.path.abspath(job.base))
            return base.parent / f"{base.name or 'root'}{FOLDER_SUFFIX}" / job.relative.parent
        return job.source.parent

    def target(self, job: Job, fmt: str) -> Path:
        return self.file if self.file is not None else self.folder_for(job) / self.name(job, fmt)


def plan_output(
    jobs: Sequence[Job],
    output: str | os.PathLike[str] | None,
    *,
    model: str,
    scale: int,
    outscale: float | None = None,
    template: str | None = None,
    format: str | None = None,
) -> Naming:
    """Decide what ``-o OUT`` means: a single image file for one named input file, else a folder."""
    if template is not None:
        check_template(template)
    if output is None:
        return Naming(model, scale, outscale, template)
    out = Path(output)
    if out.is_dir() or not is_image_file(out):
        if out.exists() and not out.is_dir():
            raise ConfigError(f"-o '{out}' is an existing file, not a folder or an image name")
        return Naming(model, scale, outscale, template, folder=out)
    if len(jobs) != 1 or jobs[0].from_folder:
        inputs = "the input is a folder" if len(jobs) == 1 else f"there are {len(jobs)} inputs"
        raise ConfigError(f"'{out}' names one image file, but {inputs}; give a folder with -o")
    if template is not None:
        raise ConfigError("--name does not apply when -o names the output file itself")
    try:
        suffix_format = normalise_format(out.suffix)
    except ConfigError:
        raise ConfigError(f"cannot write '{out}': name it .png, .jpg, .webp or .tif") from None
    if format is not None and normalise_format(format) != suffix_format:
        raise ConfigError(f"--format {format} does not match the extension of '{out}'")
    return Naming(model, scale, outscale, folder=None, file=out)


# -------------------------------------------------------------------------------------------- running


@dataclass
class FileResult:
    """What happened to one input."""

    source: Path
    output: Path | None
    status: Status
    reason: str | None = None
    error_type: str | None = None  # class name of the error, e.g. OutputExists, ImageError
    megapixels: float = 0.0  # input size
    seconds: float = 0.0
    tile: TileSize | None = None  # tile used: a side, (rows, cols), or 0 for the whole image
    traceback: str | None = field(default=None, repr=False, compare=False)  # text only: frames would pin images


@dataclass
class BatchResult:
    """Per-file records plus totals; ``seconds`` is the wall time of the whole batch."""

    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: Status) -> int:
        return sum(r.status == status for r in self.files)

    @property
    def done(self) -> int:
        return self.count("done")

    @property
    def skipped(self) -> int:
        return self.count("skipped")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def failures(self) -> list[FileResult]:
        return [r for r in self.files if r.status == "failed"]

    @property
    def megapixels(self) -> float:
        """Input megapixels upscaled (done files only)."""
        return sum(r.megapixels for r in self.files if r.status == "done")

    @property
    def megapixels_per_second(self) -> float:
        """Throughput over the time spent on files that were upscaled (skips and failures excluded)."""
        busy = sum(r.seconds for r in self.files if r.status == "done")
        return self.megapixels / busy if busy > 0 else 0.0


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a batch: still a KeyboardInterrupt, carrying what was finished and what was running."""

    def __init__(self, result: BatchResult, current: Job | None, total: int, exit_code: int = 130) -> None:
        super().__init__("interrupted")
        self.result, self.current, self.total = result, current, total
        self.exit_code = exit_code  # 130 for Ctrl-C, 128 + N for signal N (143 for SIGTERM)


class _Skip(Exception):
    """Internal: the output exists and skip_existing is set."""


FileStart = Callable[[Job, int, int], None]
FileDone = Callable[[FileResult, int, int], None]


@dataclass(frozen=True)
class BatchEvents:
    """What a front end may want to hear about while a batch runs; every callback is optional.

    ``note``: remarks (e.g. the model's native scale differs from ``--outscale``); ``warning``: things that
    went wrong but were handled (out-of-memory retries); ``ready``: the model is loaded and ``total`` files
    are about to run; then ``file_start`` / ``tile`` / ``file_done`` per file.
    """

    note: Callable[[str], None] | None = None
    warning: Callable[[str], None] | None = None
    ready: Callable[[Upscaler, int], None] | None = None
    file_start: FileStart | None = None
    tile: TileCallback | None = None
    file_done: FileDone | None = None


def upscale_files(
    inputs: Sequence[str],
    output: str | os.PathLike[str] | None,
    *,
    model: ModelSpec,
    options: UpscaleOptions,
    writing: WriteOptions,
    recursive: bool = False,
    include_outputs: bool = False,
    events: BatchEvents | None = None,
    workers: WorkerPlan | None = None,
) -> BatchResult:
    """``sst upscale`` as a library call: find the inputs, plan their outputs, load the model once, run.

    Everything that can be refused (no inputs, an output that cannot be named) is refused before the model
    is loaded; files found in folders that sst-cli wrote itself are skipped unless ``include_outputs``.
    ``workers`` (``parallel.plan_workers``) with several devices runs one worker process per entry, each
    loading the model once; the model is then loaded here on the CPU only to plan the outputs.
    Raises BatchInterrupted on Ctrl-C with what was finished.
    """
    events = events or BatchEvents()
    parallel = workers is not None and workers.parallel
    jobs, naming, upscaler = plan_batch(
        inputs, output, model=model, options=options, writing=writing, recursive=recursive,
        include_outputs=include_outputs, events=events, on_cpu=parallel,
    )  # fmt: skip
    if workers is not None and parallel:
        from .parallel import run_batch_parallel

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
) -> tuple[list[Job], Naming, Upscaler]:
    """Find the inputs and name their outputs (refusals come before the model loads), then load the model
    that plans the batch (on the CPU with ``on_cpu``: workers or actors do the computing) and say it is
    ready; shared by ``upscale_files`` and the Ray path."""
    exclude = [Path(output)] if output is not None and not is_image_file(output) else []
    skips = Skips() if include_outputs else Skips(own_output_labels() | {model_label(model).lower()})
    jobs = discover_inputs(inputs, recursive, exclude=exclude, skips=skips)
    naming = plan_output(
        jobs,
        output,
        model=model_label(model),
        scale=model.scale or DEFAULT_SCALE,
        outscale=options.outscale,
        template=writing.name,
        format=writing.format,
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


def run_batch(
    jobs: Sequence[Job],
    upscaler: Upscaler,
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
    started = time.perf_counter()
    run = _BatchRun(upscaler, naming, writing, on_tile, on_note or (lambda text: None))
    plans = run.preflight(jobs)
    upscaler.expect(sum(p.megapixels for p in plans if p.skip is None and p.failure is None))
    result = BatchResult()
    total = len(jobs)
    for index, plan in enumerate(plans):
        current: Job | None = plan.job
        # The whole step, reporting included: a signal between two files still gets the summary and the hint.
        try:
            if on_file_start:
                on_file_start(plan.job, index, total)
            result.files.append(run.one(plan))
            current = None
            if on_file_done:
                on_file_done(result.files[-1], index, total)
        except KeyboardInterrupt as stop:
            result.seconds = time.perf_counter() - started
            raise BatchInterrupted(result, current, total, getattr(stop, "exit_code", 130)) from None
    result.seconds = time.perf_counter() - started
    return result


@dataclass
class _Plan:
    """One job's output, decided before any computation; ``failure`` or ``skip`` end it without computing."""

    job: Job
    target: Path | None = None
    format: str | None = None
    megapixels: float = 0.0
    failure: SstError | None = None
    skip: str | None = None


@dataclass
class _BatchRun:
    """Settings of one batch plus the outputs claimed so far (so two inputs never share an output)."""

    upscaler: Upscaler
    naming: Naming
    writing: WriteOptions
    on_tile: TileCallback | None
    note: Callable[[str], None]
    inputs: dict[str, Path] = field(default_factory=dict)
    claimed: dict[str, Path] = field(default_factory=dict)
    folders: dict[Path, str | None] = field(default_factory=dict)  # checked output folder -> why unusable

    def preflight(self, jobs: Sequence[Job]) -> list[_Plan]:
        """Plan every output from the image headers alone and say up front what will not work."""
        self.inputs = {os.path.realpath(j.source): j.source for j in jobs if j.error is None}
        plans = [self._plan(job) for job in jobs]
        clashes = [p for p in plans if isinstance(p.failure, OutputNameClash)]
        if clashes:
            self.note(
                f"{len(clashes)} input(s) would share an output name with another input (e.g. a.png and a.bmp): "
                'they fail before any computation; keep them apart with --name "{stem}.{suffix}_{model}_x{scale}.{ext}"'
            )
        for folder in self.folders:
            _clean_stale_temporaries(folder, self.note)
        return plans

    def _plan(self, job: Job) -> _Plan:
        plan = _Plan(job)
        if job.skip is not None:
            plan.skip = job.skip
            return plan
        try:
            if job.error is not None:
                raise ImageError(job.error)
            info = probe_image(job.source, max_pixels=self.writing.max_pixels or None)
            plan.megapixels = info.width * info.height / 1e6
            out_size = self.upscaler.output_size(info.width, info.height)
            fmt, why = choose_format(info, self.writing.format, out_size)
            if why and self.naming.file is not None and fmt != self.writing.format:
                raise ImageError(f"cannot write '{self.naming.file}': {why}; name the output .png")
            if why and fmt != info.format:
                self.note(f"{job.source}: writing PNG because {why}")
            if info.frames > 1:
                self.note(f"{job.source}: animated ({info.frames} frames); only the first frame is upscaled")
            plan.format, plan.target = fmt, self.naming.target(job, fmt)
            self.claim(plan.target, job)
            self._check_folder(plan.target.parent)
        except _Skip:
            plan.skip = f"'{plan.target}' already exists"
        except SstError as exc:
            plan.failure = exc
        return plan

    def one(self, plan: _Plan) -> FileResult:
        started = time.perf_counter()
        job = plan.job
        record = FileResult(job.source, plan.target, "failed", megapixels=plan.megapixels)
        if plan.skip is not None:
            record.status, record.reason = "skipped", plan.skip
            return record
        try:
            if plan.failure is not None:
                raise plan.failure
            assert plan.target is not None and plan.format is not None
            picture = read_image(job.source, max_pixels=self.writing.max_pixels or None)
            if output_format(picture, self.writing.format) != plan.format and plan.format != "png":
                raise ImageError(f"cannot read '{job.source}': its pixels do not match its header")
            upscaled, record.tile = self.upscaler.upscale_picture(picture, self.on_tile)
            write_image(
                plan.target,
                upscaled,
                format=plan.format,
                quality=self.writing.quality,
                overwrite=self.writing.overwrite,
            )
            record.status = "done"
        except (SstError, OSError, RuntimeError, MemoryError) as exc:  # torch kernel failures are RuntimeErrors
            record.reason = str(exc) if isinstance(exc, SstError) else f"{type(exc).__name__}: {exc}"
            record.error_type = type(exc).__name__
            record.traceback = "".join(traceback.format_exception(exc))
        record.seconds = time.perf_counter() - started
        return record

    def claim(self, target: Path, job: Job) -> None:
        """Refuse outputs that are an input or another job's output; then apply the existing-file policy."""
        key = os.path.realpath(target)
        if key in self.inputs:
            raise OutputExists(f"'{target}' is an input file; refusing to write over it (change -o or --name)")
        if key in self.claimed:
            raise OutputNameClash(f"'{target}' is already the output of '{self.claimed[key]}' (change --name or -o)")
        self.claimed[key] = job.source
        if os.path.lexists(target):
            if self.writing.skip_existing:
                raise _Skip
            if not self.writing.overwrite:
                raise OutputExists(f"'{target}' already exists")

    def _check_folder(self, folder: Path) -> None:
        """Create the output folder now and prove it writable, so that no result is computed in vain."""
        if folder not in self.folders:
            self.folders[folder] = _unwritable(folder)
        why = self.folders[folder]
        if why is not None:
            raise WriteError(f"cannot write into '{folder}': {why}")


class OutputNameClash(OutputExists):
    """Two inputs map to one output name (``a.png`` and ``a.bmp``)."""


def _unwritable(folder: Path) -> str | None:
    """Why files cannot be written in ``folder`` (made if missing), or None; tried with a real file."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", suffix=TEMP_SUFFIX, dir=folder)
        os.close(fd)
        os.unlink(probe)
    except FileExistsError:
        return "a file of that name is in the way"
    except OSError as exc:
        return _os_reason(exc)
    return None


def _os_reason(exc: OSError) -> str:
    reasons = {
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOSPC: "no space left on device",
        errno.ENOTDIR: "a file is in the way of that folder",
    }
    return reasons.get(exc.errno or 0, exc.strerror or str(exc))


_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{8}" + re.escape(TEMP_SUFFIX))


def _clean_stale_temporaries(folder: Path, note: Callable[[str], None]) -> None:
    """Remove temporaries that an earlier, killed run left in ``folder`` (ours by name); ones touched in the last
    minute may belong to another sst-cli process still writing there, so they are only reported."""
    now = time.time()
    removed = recent = 0
    with suppress(OSError):
        for entry in os.scandir(folder):
            if not (_TEMP_NAME.fullmatch(entry.name) and entry.is_file()):
                continue
            if entry.stat().st_mtime > now - 60:
                recent += 1
                continue
            with suppress(OSError):
                os.unlink(entry.path)
                removed += 1
    if removed:
        note(f"removed {removed} unfinished file(s) that an interrupted run left in '{folder}'")
    if recent:
        note(f"'{folder}' holds {recent} unfinished file(s) of another run that may still be writing; left alone")
