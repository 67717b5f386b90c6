"""Preflight of a batch: every output planned from the image headers alone, before any computation.

Unreadable headers, existing targets, targets no file can take (a folder, too long a name), two inputs with one
output name, folders that cannot be written and formats too small for the result are known here, so no result is
computed in vain. Nothing here prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ImageError, OutputExists, OutputIsInput, SstError, WriteError
from .files import InputFiles, check_file_target, clean_stale_temporaries, folds_case, unwritable
from .image_io import choose_format, clipping_note, frames_note, named_format, probe_image, sixteen_bits_note
from .inputs import Job
from .naming import Naming, WriteOptions

if TYPE_CHECKING:
    from .upscaler import ScaleOnly, Upscaler


@dataclass
class _Plan:
    """One job's output, decided before any computation; ``failure`` or ``skip`` end it without computing."""

    job: Job
    target: Path | None = None
    format: str | None = None
    megapixels: float = 0.0
    failure: SstError | None = None
    skip: str | None = None


class _Skip(Exception):
    """Internal: the output exists and skip_existing is set."""


@dataclass
class Preflight:
    """Settings of one batch plus the outputs claimed so far (so two inputs never share an output)."""

    sizes: Upscaler | ScaleOnly  # the result's size for an input's (``output_size``)
    naming: Naming
    writing: WriteOptions
    note: Callable[[str], None]
    inputs: InputFiles = field(default_factory=lambda: InputFiles(()))
    claimed: dict[str, Path] = field(default_factory=dict)
    folders: dict[Path, str | None] = field(default_factory=dict)  # checked output folder -> why unusable
    kept_in: set[Path] = field(default_factory=set)  # folders of outputs kept by skip_existing (cleaned too)
    tidy: bool = True  # remove the temporaries a killed run left in the output folders

    def preflight(self, jobs: Sequence[Job]) -> list[_Plan]:
        """Plan every output from the image headers alone and say up front what will not work."""
        # What is read must not be written over; a file skipped as an earlier output is not read (a rerun over
        # a folder holding its own results lists them: they are the targets, kept or replaced as asked).
        self._note_inputs(jobs)
        plans = [self._plan(job) for job in jobs]
        clashes = [p.failure for p in plans if isinstance(p.failure, OutputNameClash)]
        if clashes:
            default = self.naming.default_template
            self.note(clash_note(clashes, self.naming.template or default, default))
        lossless = {p.format for p in plans if p.format is not None} - {"jpeg", "webp"}
        if self.writing.quality is not None and lossless and not {p.format for p in plans} & {"jpeg", "webp"}:
            self.note(f"--quality applies to JPEG and WebP; the outputs here are {'/'.join(sorted(lossless)).upper()}, "
                      "which are lossless, so it changes nothing (--format jpg or webp uses it)")  # fmt: skip
        for folder in (self.folders.keys() | self.kept_in) if self.tidy else ():
            clean_stale_temporaries(folder, self.note)
        return plans

    def has_work(self, jobs: Sequence[Job]) -> bool:
        """Whether any job is left to compute; headers are read only up to the first one that is."""
        self._note_inputs(jobs)
        return any(plan.skip is None and plan.failure is None for plan in map(self._plan, jobs))

    def _note_inputs(self, jobs: Sequence[Job]) -> None:
        self.inputs = InputFiles(j.source for j in jobs if j.error is None and j.skip is None)

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
            out_size = self.sizes.output_size(info.width, info.height, job.source)
            fmt, why = choose_format(info, self.writing.format, out_size)
            if why and self.naming.file is not None and fmt != self.writing.format:
                raise ImageError(f"cannot write '{self.naming.file}': {why}; name the output .png")
            if why and fmt != info.format:
                self.note(f"{job.source}: writing PNG because {why}")
            if info.bit_depth == 16 and fmt in ("jpeg", "webp"):  # asked for with --format or -o
                self.note(f"{job.source}: 16 bits per channel become 8 in {fmt.upper()} (PNG and TIFF keep 16)")
            if self.writing.format is None and named_format(job.source) not in (None, info.format):
                self.note(f"{job.source}: the file is a {info.format.upper()} image, whatever its name says; the "
                          f"result is {fmt.upper()} (--format chooses another)")  # fmt: skip
            if (several := frames_note(job.source, info.frames)) is not None:
                self.note(several)
            if info.clipped:
                self.note(clipping_note(job.source, info.clipped))
            if info.sixteen_bits_in:
                self.note(sixteen_bits_note(job.source, info.sixteen_bits_in))
            plan.format, plan.target = fmt, self.naming.target(job, fmt)
            self.claim(plan.target, job)
            self._check_folder(plan.target.parent)
        except _Skip:
            assert plan.target is not None  # claimed, then found to exist
            plan.skip = f"'{plan.target}' already exists"
            self.kept_in.add(plan.target.parent)
        except SstError as exc:
            plan.failure = exc
        return plan

    def claim(self, target: Path, job: Job) -> None:
        """Refuse outputs that are an input or another job's output; then apply the existing-file policy."""
        if claim_output(target, job.source, self.claimed, self.inputs, self.writing):
            raise _Skip

    def _check_folder(self, folder: Path) -> None:
        """Create the output folder now and prove it writable, so that no result is computed in vain."""
        if folder not in self.folders:
            self.folders[folder] = unwritable(folder)
        why = self.folders[folder]
        if why is not None:
            raise WriteError(f"cannot write into '{folder}': {why}")


class OutputNameClash(OutputExists):
    """Two inputs map to one output name (``a.png`` and ``a.bmp``): ``owner``'s output, wanted by ``source``."""

    def __init__(self, message: str, owner: Path | None = None, source: Path | None = None) -> None:
        super().__init__(message)
        self.owner, self.source = owner, source


def clash_note(clashes: Sequence[OutputNameClash], template: str, default: str) -> str:
    """The note on inputs that share an output name, with a pair from this run and what keeps them apart: a
    template naming what differs between them, else separate output folders (inputs of one name in two folders).
    ``template`` is the run's; ``default`` the one without --name (``{outscale}`` with an outscale), whose
    scale the suggested templates keep."""
    first = clashes[0]
    owner, source = first.owner or Path("a.png"), first.source or Path("a.bmp")
    if owner.stem.casefold() != source.stem.casefold() and "{stem}" not in template:
        cure = f'keep them apart with --name "{default}"'
    elif owner.suffix.casefold() != source.suffix.casefold() and "{suffix}" not in template:
        cure = f'keep them apart with --name "{default.replace("{stem}", "{stem}.{suffix}", 1)}"'
    else:
        cure = "upscale them into separate -o folders, or in separate runs"
    return (
        f"{len(clashes)} input(s) would share an output name with another input (e.g. {owner} and {source}): "
        f"the first of each keeps it, the others fail before any computation; {cure}"
    )


def claim_output(
    target: Path, source: Path, claimed: dict[str, Path], inputs: InputFiles, writing: WriteOptions
) -> bool:
    """Refuse an output that is an input, that no file can take (a folder, too long a
    name) or another source's output (``claimed``: real path, case-folded where names ignore case -> source,
    updated here); then apply the existing-file policy. True: it exists and is kept (a skip).

    Another input of this run that is the output is an existing file like any: kept with ``skip_existing``, refused
    as existing without ``overwrite`` (a rerun with --include-outputs), refused as an input with it; the source's
    own file is always refused as an input."""
    key = os.path.realpath(target)
    key = key.casefold() if folds_case(os.fspath(target.parent)) else key  # 'A.png' is 'a.png' there
    if target in inputs and (writing.overwrite or target in InputFiles([source]) or not os.path.lexists(target)):
        raise OutputIsInput(f"'{target}' is an input file; refusing to write over it (change -o or --name)")
    check_file_target(target, f"'{target}'")
    owner = claimed.get(key)
    if owner is not None and owner != source:
        same_name = owner.name.casefold() == source.name.casefold()  # no --name template tells them apart
        cure = "upscale them into separate -o folders" if same_name else "change --name or -o"
        raise OutputNameClash(f"'{target}' is already the output of '{owner}' ({cure})", owner, source)
    claimed[key] = source
    if os.path.lexists(target):
        if writing.skip_existing:
            return True
        if not writing.overwrite:
            raise OutputExists(f"'{target}' already exists")
    return False
