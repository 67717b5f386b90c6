"""Finding a batch's inputs: INPUT arguments (files, folders, globs) become jobs, in a stable order.

Files sst-cli cannot read, and files named like its own outputs, become skipped jobs rather than being
passed over silently; a named file that does not exist becomes a failed job so the rest still runs.
"""

from __future__ import annotations

import errno
import glob
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import ConfigError, system_reason
from .files import TEMP_SUFFIX
from .image_io import IMAGE_SUFFIXES, is_image_file
from .video_io import is_video_file

_MAGIC = re.compile(r"[*?[]")


def is_glob(item: str) -> bool:
    """Whether an INPUT holds glob magic (``*``, ``?``, ``[``)."""
    return _MAGIC.search(item) is not None


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


def is_hidden(name: str) -> bool:
    """Dot files (macOS ._ forks among them) and sst-cli's own unfinished writes: never inputs."""
    return name.startswith(".") or name.endswith(TEMP_SUFFIX)


#: Image kinds users have that sst-cli does not read: counted as skipped in folders rather than ignored.
UNSUPPORTED_SUFFIXES = frozenset({".heic", ".heif", ".avif", ".jxl", ".exr", ".hdr", ".psd", ".dng", ".cr2", ".nef",
                                  ".ico", ".ppm", ".pgm", ".pbm", ".pnm", ".tga", ".jp2", ".svg"})  # fmt: skip
_SCALE_SUFFIX = re.compile(r"_x\d+(?:\.\d+)?$", re.IGNORECASE)


def own_output_labels() -> frozenset[str]:
    """Model labels sst-cli puts into default output names (zoo names; a weights stem is added per run)."""
    from .zoo import list_models

    return frozenset(list_models())


def is_own_output(path: Path, labels: frozenset[str]) -> bool:
    """True when the name is one sst-cli's default template gives (``photo_sst-light_x4.png``)."""
    stem = path.stem.lower()
    suffix = _SCALE_SUFFIX.search(stem)
    if suffix is None:
        return False
    head = stem[: suffix.start()]  # "photo_mini_x3" for a weights stem that holds "_x3" itself
    return any(head.endswith("_" + label) and len(head) > len(label) + 1 for label in labels)


def unreadable_folder(exc: OSError) -> str:
    """What a folder walk says of a folder it could not enter (``os.walk``'s ``onerror``): never passed over."""
    return f"cannot read the folder '{exc.filename}': {system_reason(exc)}"


def _folder_images(
    folder: Path, recursive: bool, exclude: Sequence[Path], skips: Skips, glob_root: Path | None = None
) -> list[Job]:
    """Jobs for the image files in ``folder`` (the whole tree with ``recursive``), hidden and temp files left out;
    images sst-cli cannot read or wrote itself become skipped jobs, and folders it cannot enter failed ones, so
    that none is passed over silently. ``glob_root``: the folder matched a glob, whose root the jobs keep."""
    excluded = {os.path.realpath(p) for p in exclude}
    found: list[Path] = []
    unreadable: list[OSError] = []
    for root, dirs, files in os.walk(folder, onerror=unreadable.append):
        dirs[:] = (
            []
            if not recursive
            else [d for d in dirs if not is_hidden(d) and os.path.realpath(os.path.join(root, d)) not in excluded]
        )
        found.extend(Path(root, f) for f in files if not is_hidden(f) and is_image_like(f))
    base, from_folder = (folder, True) if glob_root is None else (glob_root, False)
    jobs = [skips.found(p, base, from_folder=from_folder) for p in sorted(found, key=lambda p: p.as_posix())]
    return jobs + [Job(Path(exc.filename), base, from_folder, error=unreadable_folder(exc)) for exc in unreadable]


def is_image_like(name: str) -> bool:
    """Images sst-cli reads, and those it does not (listed as skipped): what a folder scan takes from a folder."""
    return is_image_file(name) or os.path.splitext(name)[1].lower() in UNSUPPORTED_SUFFIXES


OWN_OUTPUT = "named like an sst-cli output (add --include-outputs to upscale it too)"


@dataclass(frozen=True)
class Skips:
    """Which files found in folders are not upscaled: formats sst-cli cannot read, and its own outputs: names the
    default template gives (``own_labels``), and names the run's own ``--name`` gives (``own_pattern``,
    ``naming.own_name_pattern``) to an input beside them, in a folder the run writes into (``output_folder``:
    where a job's output goes, ``Naming.folder_for``), so that a rerun into the input folder does not upscale its
    outputs again (``a-4x.png``, then ``a-4x-4x.png``), while a run into another folder takes them as inputs."""

    own_labels: frozenset[str] = frozenset()  # empty: own outputs are upscaled like any image
    own_pattern: re.Pattern[str] | None = None
    output_folder: Callable[[Job], Path] | None = None  # None: own_pattern counts in every folder
    _listed: dict[str, frozenset[str]] = field(default_factory=dict, compare=False, repr=False)

    def found(self, path: Path, base: Path, *, from_folder: bool = False) -> Job:
        """The job of a file found in a folder or by a glob: skipped, saying why, where it is not upscaled."""
        job = Job(path, base, from_folder)
        return replace(job, skip=self.reason(job))

    def reason(self, job: Job) -> str | None:
        path = job.source
        if not is_image_file(path):
            return f"{path.suffix.lstrip('.').upper()} is not a format sst-cli reads (convert it to PNG first)"
        return OWN_OUTPUT if self.is_own(job) else None

    def is_own(self, job: Job) -> bool:
        """Whether ``job``'s file is named like an output of sst-cli: by the default template, or by this run's
        where the run writes into its folder."""
        path = job.source
        if self.own_labels and is_own_output(path, self.own_labels):
            return True
        found = self.own_pattern.fullmatch(path.name) if self.own_pattern is not None else None
        if found is None or not self._written_beside(job):
            return False
        return self._has_source(path, found.group("stem"), found.groupdict().get("suffix"))

    def _written_beside(self, job: Job) -> bool:
        """Whether the run writes the outputs of ``job``'s folder into that folder (-o the folder walked, or the
        default place beside a file), where an earlier run's outputs lie beside their inputs."""
        if self.output_folder is None:
            return True
        return os.path.realpath(self.output_folder(job)) == os.path.realpath(job.source.parent)

    def _has_source(self, path: Path, stem: str, suffix: str | None) -> bool:
        """Whether another file beside ``path`` is an input that the template names ``path``: stem ``stem`` (and
        extension ``suffix`` where the template says it). Without one, the name is the user's own."""
        folder = os.fspath(path.parent)
        if folder not in self._listed:
            try:
                self._listed[folder] = frozenset(os.listdir(folder))
            except OSError:
                self._listed[folder] = frozenset()
        return any(self._is_source(name, path.name, stem, suffix) for name in self._listed[folder])

    @staticmethod
    def _is_source(name: str, output: str, stem: str, suffix: str | None) -> bool:
        own_stem, dot, ext = name.rpartition(".")
        named = bool(dot) and own_stem == stem and name != output and (suffix is None or ext == suffix)
        return named and not is_hidden(name) and (is_image_like(name) or is_video_file(name))


def _glob_root(pattern: str) -> Path:
    """The literal folder in front of the first wildcard: the tree below it is kept in the output."""
    parts = Path(pattern).parts
    literal: list[str] = []
    for part in parts[:-1]:
        if is_glob(part):
            break
        literal.append(part)
    return Path(*literal) if literal else Path(".")


def _through_linked_folder(found: Path, root: Path) -> bool:
    """Whether a glob match is, or lies below, a linked folder under the pattern's literal root. ``**`` follows
    such links (one to a parent folder looped 40 levels deep and hid the file's real place); the folder walk
    does not, and globs now agree with it."""
    folder = found if found.is_dir() else found.parent
    try:
        inner = folder.relative_to(root).parts
    except ValueError:
        inner = folder.parts
    return any(os.path.islink(root.joinpath(*inner[: i + 1])) for i in range(len(inner)))


def glob_matches(pattern: str) -> tuple[Path, list[Path]]:
    """The literal root of a glob INPUT (outputs keep the tree below it) and its matches, sorted, leaving out
    those reached through a linked folder. Shared by the image and the video batch."""
    root = _glob_root(pattern)
    found = (Path(m) for m in sorted(glob.glob(pattern, recursive=True)))
    return root, [p for p in found if not _through_linked_folder(p, root)]


def _expand(item: str, recursive: bool, exclude: Sequence[Path], skips: Skips) -> list[Job]:
    path = Path(item)
    if os.path.isdir(item):  # False, not an error, where a folder on the way may not be entered
        return _folder_images(path, recursive, exclude, skips)
    missing = _missing(item)
    if missing is None:
        return [Job(path, path.parent)]  # named explicitly: tried whatever its name, so errors are reported
    if not is_glob(item) or missing.errno not in (errno.ENOENT, errno.ENOTDIR):
        return [Job(path, path.parent, error=f"cannot read '{item}': {system_reason(missing)}")]
    root, matches = glob_matches(item)
    jobs: list[Job] = []
    for found in matches:
        if found.is_dir():
            jobs.extend(_folder_images(found, recursive, exclude, skips, glob_root=root))
        elif found.is_file() and is_image_like(found.name) and not is_hidden(found.name):
            jobs.append(skips.found(found, root))
    if not jobs:
        return [Job(path, root, error=f"no image files match '{item}'")]
    return jobs


def _missing(item: str) -> OSError | None:
    """Why ``item`` cannot be looked at (no such path; a folder on the way that may not be entered), or None
    where it exists, itself or as a link."""
    try:
        os.lstat(item)
    except OSError as exc:
        return exc
    return None


class NothingToUpscale(ConfigError):
    """Every input is a folder, and none holds a file to upscale (empty, or only outputs and skipped files), nor
    has sub-folders holding images or videos that --recursive would find: the library refuses it as any input
    without work, ``sst upscale`` says it and exits 0 (a scheduled run over an inbox folder with nothing new did
    nothing wrong).

    ``skipped``: the files found and not upscaled (``Job`` with ``skip`` set), for the summary to list."""

    def __init__(self, message: str, skipped: Sequence[Job] = ()) -> None:
        super().__init__(message)
        self.skipped = tuple(skipped)


def check_inputs_exist(items: Sequence[str]) -> None:
    """Refuse a run in which no INPUT names anything (each one a missing path, or a pattern that matches
    nothing), before anything is loaded. One missing among others is not refused: the batch reports it."""
    if not items:
        return
    for item in items:
        missing = _missing(item)
        if missing is None or missing.errno not in (errno.ENOENT, errno.ENOTDIR):
            return  # there, or there but hidden from this user: its job says why
        if is_glob(item) and glob.glob(item, recursive=True):
            return
    if len(items) == 1:
        raise ConfigError(f"nothing to upscale: '{items[0]}' does not exist (no such file, folder or match)")
    names = ", ".join(f"'{item}'" for item in items)
    raise ConfigError(f"nothing to upscale: none of {names} exists (no such file, folder or match)")


_SAME_FILE = "the same file as"


def one_job_per_file(found: list[Job]) -> list[Job]:
    """``found`` without repeats of a path (however it is spelt), and with one job per real file: where a link
    (to the file, or to a folder above it) reaches a file also found by its own path, that path is upscaled and
    the link is listed as skipped, saying why. A path both found skipped in a folder (named like an output) and
    named by the user is the user's: it is tried, whatever the order of the arguments."""
    tried: dict[str, Job] = {}
    for job in found:
        path = os.path.abspath(job.source)
        if path not in tried or (tried[path].skip is not None and job.skip is None):
            tried[path] = job
    found = [tried[os.path.abspath(job.source)] for job in found]
    real = {id(job): os.path.realpath(job.source) for job in found if job.error is None and job.skip is None}
    upscaled: dict[str, Job] = {}
    for job in found:
        key = real.get(id(job))
        if key is None:
            continue
        if key not in upscaled or (_linked(upscaled[key].source, key) and not _linked(job.source, key)):
            upscaled[key] = job
    jobs: list[Job] = []
    named: set[str] = set()
    for job in found:
        if os.path.abspath(job.source) in named:
            continue  # the same path twice: once is enough
        named.add(os.path.abspath(job.source))
        key = real.get(id(job))
        if key is not None and os.path.abspath(upscaled[key].source) != os.path.abspath(job.source):
            job = replace(job, skip=f"{_SAME_FILE} {upscaled[key].source}, which is upscaled")
        jobs.append(job)
    return jobs


def distinct_files(jobs: Sequence[Job]) -> list[Job]:
    """The jobs that stand for a file of their own: ``one_job_per_file`` skips a link to a file also named by
    its own path, so ``a.png link-to-a.png -o one.png`` names one file, as it means."""
    return [job for job in jobs if job.skip is None or not job.skip.startswith(_SAME_FILE)] or list(jobs)


def _linked(path: Path, real: str) -> bool:
    """Whether ``path`` reaches its file (``real``) through a link, itself or a folder above it."""
    return os.path.abspath(path) != real


def discover_inputs(
    inputs: Iterable[str],
    recursive: bool = False,
    *,
    exclude: Sequence[Path] = (),
    skips: Skips | None = None,
    on_note: Callable[[str], None] | None = None,
    inputs_checked: bool = False,
) -> list[Job]:
    """Jobs for INPUT items (files, folders, globs), in argument order, each expansion sorted, no duplicates.

    A missing file becomes a failed job so the rest of the batch still runs. Folders in ``exclude``
    (the output folder) are not searched, so a rerun does not pick up its own results as inputs.
    Raises ConfigError when nothing at all is found, since there is nothing to report on; a folder among
    other inputs that holds no image is said through ``on_note`` (it was passed over without a word).
    ``inputs_checked``: these items are part of a command whose inputs were checked together
    (``check_inputs_exist``), so that all of these missing is a missing file among others, not a refusal.
    """
    items = list(inputs)
    if not items:
        raise ConfigError("no inputs given: name image files, folders or globs")
    if not inputs_checked:
        check_inputs_exist(items)
    expanded = [(item, _expand(item, recursive, exclude, skips or Skips())) for item in items]
    jobs = one_job_per_file([job for _, found in expanded for job in found])
    for item, found in expanded:
        if not found and jobs and on_note is not None:
            on_note(nothing_from(item, recursive))
    if not any(job.skip is None for job in jobs):
        if jobs:
            reasons = sorted({f"{j.source.name}: {j.skip}" for j in jobs})
            said = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
            message = f"nothing to upscale in {', '.join(repr(i) for i in items)}: {said}"
            message += _recursive_hint(items, recursive)
            if _refusal(items, recursive) is NothingToUpscale:
                raise NothingToUpscale(message, jobs)
            raise ConfigError(message)
        raise nothing_found(items, recursive)
    return jobs


def nothing_found(items: Sequence[str], recursive: bool, *, videos: Iterable[str] = ()) -> ConfigError:
    """The refusal of inputs in which no file was found, with the endings looked for: images, and the ``videos``
    endings where the caller (``sst upscale``) takes video files from folders too. NothingToUpscale where every
    input is a folder (an inbox with nothing new), which ``sst upscale`` answers with exit 0, unless
    --recursive was left out of folders with sub-folders (``_refusal``)."""
    video_kinds = " ".join(sorted(videos))
    what = "image or video files" if video_kinds else "image files"
    kinds = " ".join(sorted(IMAGE_SUFFIXES)) + (f"; videos {video_kinds}" if video_kinds else "")
    names = ", ".join(repr(i) for i in items)
    refusal = _refusal(items, recursive)
    return refusal(f"no {what} found in {names} (looked for {kinds}){_recursive_hint(items, recursive)}")


def _refusal(items: Sequence[str], recursive: bool) -> type[ConfigError]:
    """NothingToUpscale (``sst upscale`` exits 0) where every input is a folder and --recursive would search no
    more of them: an inbox with nothing new. Where it would (sub-folders, no --recursive), a forgotten -r is the
    user's mistake to be told as one (ConfigError, exit 2), not a run that succeeded."""
    folders = bool(items) and all(os.path.isdir(i) for i in items)
    return NothingToUpscale if folders and not _recursive_hint(items, recursive) else ConfigError


def nothing_from(item: str, recursive: bool, *, videos: bool = False) -> str:
    """The note on a folder among other inputs in which nothing was found (it is passed over, not refused)."""
    what = "image or video files" if videos else "image files"
    return f"'{item}' holds no {what}: nothing comes from it{_recursive_hint([item], recursive)}"


def _recursive_hint(items: Sequence[str], recursive: bool) -> str:
    """Where folders found empty have sub-folders holding images or videos that --recursive would find, a hint
    saying so (an empty ``archive/`` beside an inbox's files is no reason to add it)."""
    if recursive:
        return ""
    folders = [i for i in items if os.path.isdir(i)]
    who = "its" if len(folders) == 1 else "their"
    found = any(_files_below(Path(f)) for f in folders)
    return f"; {who} sub-folders hold image or video files: add --recursive to search them" if found else ""


def _files_below(folder: Path) -> bool:
    """Whether a sub-folder (not hidden) of ``folder``, at any depth, holds an image or video file; stops at the
    first found."""
    for root, dirs, files in os.walk(folder, onerror=lambda exc: None):
        dirs[:] = [d for d in dirs if not is_hidden(d)]
        if root != os.fspath(folder) and any(
            not is_hidden(f) and (is_image_like(f) or is_video_file(f)) for f in files
        ):
            return True
    return False
