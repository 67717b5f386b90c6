"""Naming a batch's outputs: the name template, ``-o OUT`` as a file or a folder, and how files are written.

Everything here is checked on construction, before any model is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .choices import DEFAULT_MODEL
from .errors import ConfigError
from .image_io import DEFAULT_MAX_PIXELS, EXTENSIONS, is_image_file, normalise_format
from .inputs import Job

if TYPE_CHECKING:
    from .loader import ModelSpec

#: Output name used when none is given; ``{outscale}`` replaces ``{scale}`` when an outscale is set.
DEFAULT_TEMPLATE = "{stem}_{model}_x{scale}.{ext}"
DEFAULT_OUTSCALE_TEMPLATE = "{stem}_{model}_x{outscale}.{ext}"
#: Suffix of the default output folder made beside a folder input (``photos/`` -> ``photos_sst/``).
FOLDER_SUFFIX = "_sst"
TEMPLATE_FIELDS = ("stem", "suffix", "model", "scale", "outscale", "ext")  # suffix: the input's extension


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
