"""Running one planned file, and the records a batch keeps: shared by ``run_batch``, the worker processes of
``parallel`` and the Ray actors of ``cluster``.

Each file ends as a ``FileResult`` (done / skipped / failed with a reason) so that one bad file never stops
the batch. Nothing here prints.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .diskfull import FullFileSystems
from .errors import ImageError, OutputExists, OutputIsInput, SstError
from .image_io import for_format, output_format, read_image, write_image
from .inputs import Job
from .naming import Naming, WriteOptions
from .preflight import Preflight, _Plan
from .upscaler import ScaleOnly, Upscaler

if TYPE_CHECKING:
    from .tiling import TileSize
    from .upscaler import TileCallback

Status = Literal["done", "skipped", "failed"]


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

    def failed_with(self, exc: BaseException) -> None:
        """Record why this file failed: our own errors as they read, others with their class name."""
        self.reason = str(exc) if isinstance(exc, SstError) else f"{type(exc).__name__}: {exc}"
        self.error_type = type(exc).__name__
        self.traceback = "".join(traceback.format_exception(exc))


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


class OutputWatch:
    """Notices when a file is renamed over one file's target: the moment its output became whole on disk.

    An interrupt can land in the few bytecodes between that rename and the file's record. The batch then
    asks ``finished()`` and counts the file as done instead of calling it the file that was interrupted.
    """

    def __init__(self, job: Job, target: Path | None, megapixels: float) -> None:
        self.job, self.target, self.megapixels = job, target, megapixels
        self.started = time.perf_counter()
        self.before = self._identity()

    def _identity(self) -> tuple[int, ...] | None:
        """Device, inode, time and size: a rename over the target changes them; None when it is absent."""
        try:
            info = os.stat(self.target) if self.target is not None else None
        except OSError:
            return None
        return None if info is None else (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)

    def replaced(self) -> bool:
        return self.target is not None and self._identity() not in (None, self.before)

    def finished(self) -> FileResult | None:
        """The file's record as done if its output was renamed into place since the watch began."""
        if not self.replaced():
            return None
        seconds = time.perf_counter() - self.started
        return FileResult(self.job.source, self.target, "done", megapixels=self.megapixels, seconds=seconds)


FileStart = Callable[[Job, int, int], None]
FileDone = Callable[[FileResult, int, int], None]


@dataclass(frozen=True)
class FileStep:
    """One file of a batch run in turn: ``run`` computes and records it; ``target`` is None when it is skipped."""

    job: Job
    target: Path | None
    megapixels: float
    run: Callable[[], FileResult]


def run_in_turn(
    steps: Sequence[FileStep], file_start: FileStart | None = None, file_done: FileDone | None = None
) -> BatchResult:
    """Run the files one after another; Ctrl-C (or a signal turned into one) raises BatchInterrupted.

    The whole step is covered, reporting included, so a signal between two files still gets the summary. A
    file whose output was renamed into place just before the signal counts as done (``OutputWatch``).
    """
    started = time.perf_counter()
    result = BatchResult()
    total = len(steps)
    for index, step in enumerate(steps):
        current: Job | None = step.job
        watch = OutputWatch(step.job, step.target, step.megapixels)
        try:
            if file_start:
                file_start(step.job, index, total)
            result.files.append(step.run())
            current = None
            if file_done:
                file_done(result.files[-1], index, total)
        except KeyboardInterrupt as stop:
            written = watch.finished() if current is not None else None
            if written is not None:  # the signal landed just after the rename: the file is whole
                result.files.append(written)
                current = None
                if file_done:
                    file_done(written, index, total)
            result.seconds = time.perf_counter() - started
            raise BatchInterrupted(result, current, total, getattr(stop, "exit_code", 130)) from None
    result.seconds = time.perf_counter() - started
    return result


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


@dataclass
class _BatchRun:
    """Settings of one batch: its outputs are planned by a ``Preflight``, then each file runs with ``one``."""

    upscaler: Upscaler | ScaleOnly  # ScaleOnly: no model is loaded, for a batch that computes nothing
    naming: Naming
    writing: WriteOptions
    on_tile: TileCallback | None
    note: Callable[[str], None]
    full: FullFileSystems = field(init=False)  # file systems this run found full: their later files are not computed

    def __post_init__(self) -> None:
        self.full = FullFileSystems(self.writing.overwrite)

    def preflight(self, jobs: Sequence[Job]) -> list[_Plan]:
        """Plan every output from the image headers alone and say up front what will not work."""
        return Preflight(self.upscaler, self.naming, self.writing, self.note).preflight(jobs)

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
            assert plan.target is not None and plan.format is not None and isinstance(self.upscaler, Upscaler)
            self.full.check(plan.target)
            with self.upscaler.phases.timed("read"):
                picture = read_image(job.source, max_pixels=self.writing.max_pixels or None)
            picture = for_format(picture, plan.format)  # the failure names the file; opaque alpha goes to JPEG
            if output_format(picture, self.writing.format) != plan.format and plan.format != "png":
                raise ImageError(f"cannot read '{job.source}': its pixels do not match its header")
            upscaled, record.tile = self.upscaler.upscale_picture(picture, self.on_tile)
            with self.upscaler.phases.timed("write"), self.full.watching(plan.target):
                # Planning proved this folder writable (made it, if missing); another run's clean-up of its own
                # unused folders may have removed it since, while empty: this run's result still goes there.
                plan.target.parent.mkdir(parents=True, exist_ok=True)
                write_image(
                    plan.target,
                    upscaled,
                    format=plan.format,
                    quality=self.writing.quality,
                    overwrite=self.writing.overwrite,
                )
            record.status = "done"
        except OutputExists as exc:
            if self.writing.skip_existing and plan.failure is None and not isinstance(exc, OutputIsInput):
                # another run wrote it meanwhile: what --skip-existing keeps
                record.status, record.reason = "skipped", f"'{plan.target}' appeared while this run computed it"
            else:
                record.failed_with(exc)
        except (SstError, OSError, RuntimeError, MemoryError) as exc:  # torch kernel failures are RuntimeErrors
            record.failed_with(exc)
        record.seconds = time.perf_counter() - started
        return record
