"""Naming a batch's outputs: the name template, ``-o OUT`` as a file or a folder, and how files are written.

Everything here is checked on construction, before any model is loaded.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .checks import check_quality, option_name, option_value
from .choices import DEFAULT_MODEL
from .errors import ConfigError
from .files import not_a_file
from .image_io import DEFAULT_MAX_PIXELS, EXTENSIONS, is_image_file, normalise_format
from .inputs import UNSUPPORTED_SUFFIXES, Job, distinct_files
from .video_io import is_video_file

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
    quality: int | None = None  # JPEG/WebP; None: DEFAULT_QUALITY, a lossless WebP kept lossless (``write_image``)
    overwrite: bool = False
    skip_existing: bool = False
    name: str | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS

    def __post_init__(self) -> None:
        check_existing_policy(self.overwrite, self.skip_existing)
        if self.quality is not None:
            check_quality(self.quality)
        if self.format is not None:
            normalise_format(self.format)
        if self.name is not None:
            check_template(self.name)
        if self.max_pixels < 0:
            raise ConfigError(f"max pixels must be 0 (no limit) or a pixel count, got {self.max_pixels}")


def check_existing_policy(overwrite: bool, skip_existing: bool, *, cli: bool = False) -> None:
    """Refuse both policies for existing outputs at once, naming them as the caller did (``--overwrite`` on the
    command line, which asks this before ``WriteOptions``; ``overwrite`` as a keyword)."""
    if overwrite and skip_existing:
        first, second = option_name("overwrite", cli), option_name("skip_existing", cli)
        raise ConfigError(f"{first} and {second} exclude each other: replace existing outputs, or keep them")


def check_format_fits(format: str | None, target: str | os.PathLike[str], *, cli: bool = False) -> None:
    """Refuse a ``format`` the target's extension contradicts (``--format jpeg`` / ``format='jpeg'`` with
    ``up.png``): the file would hold one format under another's name. An extension sst-cli does not write says
    nothing, and an unknown format is refused as such."""
    if format is None:
        return
    wanted = normalise_format(format)
    try:
        named = normalise_format(os.path.splitext(os.fspath(target))[1] or "?")
    except ConfigError:
        return
    if wanted != named:
        raise ConfigError(
            f"{option_value('format', format, cli)} does not match the extension of '{os.fspath(target)}'"
        )


def resume_hint(overwrite: bool) -> str:
    """How to finish a batch that stopped part way (interrupted, or its disk found full). --skip-existing keeps
    what was written and computes the rest; after --overwrite it would also keep the earlier outputs of the files
    not done, which this run was to replace, so that run is rerun as it was."""
    if overwrite:
        return "rerun with --overwrite (not --skip-existing: it would keep the earlier outputs of the files not done)"
    return "rerun with --skip-existing to resume"


def model_label(spec: ModelSpec) -> str:
    """Name used for ``{model}`` in output names: the weights file's stem when weights are given."""
    if spec.weights is None:
        return (spec.model or DEFAULT_MODEL).strip().lower()
    return Path(str(spec.weights).split("@", 1)[0]).stem or spec.model or DEFAULT_MODEL


def _fill(template: str, stem: str, suffix: str, model: str, scale: int, outscale: float, ext: str) -> str:
    """The template's fields filled in (``check_template`` has vetted it: plain fields, no look-ups)."""
    values = dict(stem=stem, suffix=suffix, model=model, scale=scale, outscale=f"{outscale:g}", ext=ext)
    return template.format(**values)


def check_template(template: str) -> None:
    """Refuse, before any model is loaded, a template that reaches beyond its fields (``{stem.upper}``,
    ``{stem[0]}``), names folders, or does not end in ``.{ext}``: the format decides the bytes written, so the
    name must carry its extension (the format is chosen with ``--format``, a video's container by its codec)."""
    known = ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
    if not template:
        raise ConfigError(f"the name template is empty; e.g. {DEFAULT_TEMPLATE!r}")
    try:
        parsed = string.Formatter().parse(template)
        parts = [(field, spec, conv) for _, field, spec, conv in parsed if field is not None]
    except ValueError as exc:
        raise ConfigError(f"the name template {template!r} is not valid: {exc}") from None
    for field, spec, conversion in parts:
        if field not in TEMPLATE_FIELDS:
            raise ConfigError(f"unknown field {{{field}}} in the name template {template!r}; use {known}")
        if spec or conversion:  # {stem:>8} pads with spaces, {scale!r} quotes: plain fields only
            raise ConfigError(f"the name template {template!r} formats {{{field}}}: use the plain field {{{field}}}")
    try:
        name = _fill(template, "x", "png", "model", 4, 4.0, "png")
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"the name template {template!r} is not valid: {exc}") from None
    if "/" in name or "\\" in name or name in (".", ".."):  # before the dot: '../x.{ext}' names folders
        raise ConfigError(f"the name template {template!r} must give a plain file name (no folders)")
    if template.startswith("."):
        raise ConfigError(f"the name template {template!r} gives hidden files (a leading dot), which folders skip")
    if not template.endswith(".{ext}"):
        raise ConfigError(
            f"the name template {template!r} must end with .{{ext}}, the extension of the format written "
            "(the format's: --format for images, the container for videos)"
        )


_OWN_FIELDS = {
    "scale": r"\d+",
    "outscale": r"\d+(?:\.\d+)?",
    "suffix": r"(?P<suffix>[^./\\]+)",
    "ext": r"[^./\\]+",
    "stem": r"(?P<stem>.+)",
}


def own_name_pattern(
    template: str, labels: Iterable[str], *, scale: int | None = None, outscale: float | None = None
) -> re.Pattern[str] | None:
    """A pattern for the names ``template`` gives (``{stem}`` any text, ``{model}`` one of ``labels``, ``{scale}``
    and ``{outscale}`` this run's where known, else any number as the default template's rule), so that a folder
    walk can leave a rerun's earlier outputs out; None where such names cannot be told from inputs: a template
    without ``{stem}``, or one that gives the input's own name (``{stem}.{ext}``, for another folder)."""
    parsed = list(string.Formatter().parse(template))
    fields = [f for _, f, _, _ in parsed if f is not None]
    if "stem" not in fields or template.removesuffix(".{ext}") == "{stem}":
        return None
    models = "|".join(re.escape(label) for label in sorted(set(labels), key=len, reverse=True)) or r"[^/\\]+"
    known = dict(_OWN_FIELDS, model=f"(?:{models})")
    if scale is not None:  # '{stem}{scale}.{ext}' at x3: IMG3.png, not IMG1.png beside IMG.png
        known["scale"] = known["outscale"] = re.escape(str(scale))
    if outscale is not None:
        known["outscale"] = re.escape(f"{outscale:g}")
    parts: list[str] = []
    seen: set[str] = set()
    for literal, name, _, _ in parsed:
        parts.append(re.escape(literal))
        if name is None:
            continue
        parts.append(f"(?P={name})" if name in ("stem", "suffix") and name in seen else known[name])  # '{stem}_{stem}'
        seen.add(name)
    return re.compile("".join(parts), re.IGNORECASE)


def names_a_folder(output: str | os.PathLike[str]) -> bool:
    """Whether ``-o OUT`` is taken as a folder (``plan_output`` and the folder walks ask it): an existing folder, a
    name ending in /, or one without an image or video extension; else it names the one output file."""
    out = Path(output)
    if os.path.isdir(out) or os.fspath(output).endswith(("/", os.sep)):
        return True
    return not (is_image_file(out) or is_video_file(out) or out.suffix.lower() in UNSUPPORTED_SUFFIXES)


@dataclass(frozen=True)
class Naming:
    """Where each job's output goes: one exact file, or a folder (or the default folders) plus a template."""

    model: str
    scale: int
    outscale: float | None = None
    template: str | None = None  # None: DEFAULT_TEMPLATE, or DEFAULT_OUTSCALE_TEMPLATE with an outscale
    folder: Path | None = None  # -o OUT as a folder; None: default folders
    file: Path | None = None  # -o OUT as the one output file of a single input

    @property
    def default_template(self) -> str:
        """The template used without --name: ``{outscale}`` in place of ``{scale}`` when an outscale is set."""
        return DEFAULT_OUTSCALE_TEMPLATE if self.outscale is not None else DEFAULT_TEMPLATE

    def name(self, job: Job, ext: str) -> str:
        """The output's file name for ``job``, with the extension ``ext`` (an image format's or a container's)."""
        template = self.template or self.default_template
        outscale = self.outscale if self.outscale is not None else self.scale
        return _fill(template, job.source.stem, job.source.suffix.lstrip("."), self.model, self.scale, outscale, ext)

    def folder_for(self, job: Job) -> Path:
        """``-o`` folder + sub-path; else ``<base>_sst/`` + sub-path for folder inputs, else beside the file."""
        if self.folder is not None:
            return self.folder / job.relative.parent
        if job.from_folder:  # the folder named in full ("." has no name), then spelt as the input was
            base = Path(os.path.abspath(job.base))
            sibling = base.parent / f"{base.name or 'root'}{FOLDER_SUFFIX}"
            sibling = sibling if job.base.is_absolute() else Path(os.path.relpath(sibling))
            return sibling / job.relative.parent
        return job.source.parent

    def target(self, job: Job, fmt: str) -> Path:
        return self.file if self.file is not None else self.folder_for(job) / self.name(job, EXTENSIONS[fmt])

    def folders(self, jobs: Iterable[Job]) -> set[Path]:
        """The folders the outputs of ``jobs`` go into: what planning them makes, if missing."""
        if self.file is not None:
            return {self.file.parent}
        return {self.folder_for(job) for job in jobs}


def check_output_folder(out: Path, kind: str) -> None:
    """``-o`` taken for a folder (no extension) must not be an existing file, device or stream: each input failed
    on its own, "cannot write into '/dev/null'", for a mistake in one option. ``kind``: what else -o may name."""
    if os.path.exists(out) and not os.path.isdir(out):
        what = not_a_file(out)  # a device or a stream (/dev/null, /dev/stdout) is said as such
        if what is not None:
            raise ConfigError(f"-o '{out}': {what}")
        raise ConfigError(f"-o '{out}' is an existing file, not a folder or {kind} name")


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
    if not os.fspath(output).strip():
        raise ConfigError("-o is empty: give an output file or folder")
    out = Path(output)
    folder = names_a_folder(output)  # the text: "-o up.png/" means a folder, and Path drops the /
    if not folder and out.suffix.lower() in UNSUPPORTED_SUFFIXES:
        raise ConfigError(f"cannot write '{out}': name it .png, .jpg, .webp or .tif, or end -o with / for a folder")
    if not folder and is_video_file(out):
        raise ConfigError(
            f"'{out}' names a video file, but the input is not a video (.mp4, .mkv, .mov, .webm, .avi ...): "
            "name it .png, .jpg ... or a folder"
        )
    if folder:
        check_output_folder(out, "an image")
        return Naming(model, scale, outscale, template, folder=out)
    files = distinct_files(jobs)
    if len(files) != 1 or files[0].from_folder:
        inputs = "the input is a folder" if len(files) == 1 else f"there are {len(files)} inputs"
        raise ConfigError(f"'{out}' names one image file, but {inputs}; give a folder with -o")
    if template is not None:
        raise ConfigError("--name does not apply when -o names the output file itself")
    try:
        normalise_format(out.suffix)  # an extension sst-cli writes; whether --format agrees is said below
    except ConfigError:
        raise ConfigError(f"cannot write '{out}': name it .png, .jpg, .webp or .tif") from None
    check_format_fits(format, out, cli=True)
    return Naming(model, scale, outscale, folder=None, file=out)
