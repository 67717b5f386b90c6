"""The one atomic writer: a file is either its old self or the complete new one, never half-written.

Every output sst-cli writes (images, weights, training states, reports, JSON) goes through here: the bytes
go to a hidden temporary file beside the target (same folder, so the final rename is atomic), are flushed
to disk, and the temporary file is renamed over the target. Any failure, Ctrl-C included, removes it.
Temporary names end in ``TEMP_SUFFIX`` so that batch runs skip them and can clean up after a killed run; a
writer holds a lock on its temporary (``inuse``), so that the clean-up never takes a live one however old.
A whole folder (an HTML report with its images) is built in a temporary sibling folder and swapped in the
same way (``atomic_folder``), so a half-written report never replaces a good one.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from .errors import OutputExists, OutputIsInput, SstError, WriteError
from .inuse import holding, in_use

TEMP_SUFFIX = ".sst-tmp"
_REPLACE_RETRIES = 10  # Windows: a reader (antivirus, indexer, viewer) may hold the target open briefly
_UMASK_LOCK = threading.Lock()


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/sst-cli`` (``~/.cache/sst-cli``): where the kernels, compiled graphs and seams figures go."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sst-cli"


def temp_name(path: Path, tag: str = "") -> Path:
    """A fresh hidden temporary name beside ``path``, recognisably sst-cli's (``tag`` before the suffix). It fits
    the folder's name limit in bytes: a name ``check_file_target`` passed must not fail only after the work."""
    ending = f".{secrets.token_hex(4)}{tag}{TEMP_SUFFIX}"
    room = name_max(path.parent) - len(os.fsencode(f".{ending}"))
    return path.with_name(f".{_shortened(path.name, room)}{ending}")


def _shortened(name: str, size: int) -> str:
    """``name`` cut to at most ``size`` bytes as the file system stores it (UTF-8 takes up to 4 per character),
    whole characters only, and one at least."""
    cut = name[: max(size, 1)]
    while len(cut) > 1 and len(os.fsencode(cut)) > size:
        cut = cut[:-1]
    return cut


def _replace(source: Path, target: Path) -> None:
    """``os.replace``, retried briefly on Windows, where it fails while another process has the target open."""
    for attempt in range(_REPLACE_RETRIES):
        try:
            os.replace(source, target)
            return
        except PermissionError:
            if sys.platform != "win32" or attempt == _REPLACE_RETRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def _place_new(temp: Path, target: Path) -> None:
    """Give ``temp`` the name ``target`` unless that name was taken meanwhile: a hard link fails on a taken name,
    which a rename would replace. Where the file system has no hard links (FAT, some network shares), the name
    is checked just before the rename."""
    taken = OutputExists(f"refusing to overwrite '{target}': it already exists (written while this run worked)")
    try:
        os.link(temp, target)
    except FileExistsError:
        raise taken from None
    except OSError:
        if os.path.lexists(target):
            raise taken from None
        _replace(temp, target)
    else:
        with suppress(OSError):
            temp.unlink()


def _default_mode() -> int:
    """The permissions a plain new file gets here (0666 less the umask), for writers that make it private."""
    umask = _proc_umask()
    return 0o666 & ~(umask if umask is not None else _umask_by_setting())


def _proc_umask() -> int | None:
    """The umask as Linux (4.7 on) shows it, read without changing it: setting it, even for a moment, applies
    to the files every other thread (a host application's, training's writers) creates meanwhile."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


@functools.cache
def _umask_by_setting() -> int:
    """The umask where only setting it tells (macOS, Windows): read once, as a private 077 for that moment, so
    another thread's new file is at worst too private, never world-writable; locked, or two readers could leave
    one's stand-in set."""
    with _UMASK_LOCK:
        umask = os.umask(0o077)
        os.umask(umask)
    return umask


def _fail(error: type[SstError], target: Path, exc: BaseException) -> SstError:
    return error(f"cannot write '{target}': {_write_reason(target, exc)}")


def _write_reason(target: Path, exc: BaseException) -> str:
    if isinstance(exc, OSError):  # the errno, whatever the library's own wording
        return _os_reason(exc, target.parent)
    # torch.save's C++ writer: "[enforce fail at ...] ... strerror: <the C library's text>"
    said = re.search(r"strerror: (.+)", str(exc))
    if said:
        text = said[1].strip()
        code = next((code for code in errno.errorcode if os.strerror(code) == text), None)
        return text if code is None else _os_reason(OSError(code, text), target.parent)
    if "unexpected pos" in str(exc) and _nearly_full(target.parent):
        return "no space left on device"
    return str(exc)


def _nearly_full(folder: Path) -> bool:
    """Whether the file system of ``folder`` has (almost) no room left: what a short write means there."""
    try:
        return shutil.disk_usage(folder if str(folder) else ".").free < 1 << 20
    except OSError:
        return False


def atomic_save(
    path: str | os.PathLike[str],
    save: Callable[[Path], None],
    *,
    error: type[SstError] = WriteError,
    overwrite: bool = True,
    parents: bool = False,
) -> None:
    """Run ``save(temporary_path)`` and rename the result over ``path`` (for libraries that take a file name).

    Failures become ``error`` ("cannot write 'path': reason"); library errors (SstError) and interrupts pass
    through unchanged. The temporary file is removed in every case. Without ``overwrite``, a file another
    process put at ``path`` while this one worked is kept (``OutputExists``), not replaced. ``save`` writes over
    an empty file that exists already, locked until it is renamed (``inuse``). A ``path`` that is a link to a
    file writes that file (``written_path``); one that is no file (a device, a pipe) is refused. ``parents``:
    make the missing folders above ``path`` (removed again if the write fails), else they are refused.
    """
    target = written_path(Path(path), error=error)
    if not parents:
        _save_in_folder(target, save, error, overwrite)
        return
    with removing_unused_folders([target.parent]):  # a write that fails leaves no empty folder it made
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _fail(error, target, exc) from exc
        _save_in_folder(target, save, error, overwrite)


def _save_in_folder(target: Path, save: Callable[[Path], None], error: type[SstError], overwrite: bool) -> None:
    """``atomic_save`` in the existing folder of ``target``."""
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise error(f"cannot write '{target}': {_no_folder_reason(folder)}")
    temp = temp_name(target)
    try:  # made here, so that it is locked while ``save`` writes it (for hours, for a video)
        os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666))
    except OSError as exc:
        raise _fail(error, target, exc) from exc
    try:
        with holding(temp):  # another run's clean-up leaves it alone, however long it goes untouched
            _save_held(temp, target, save, overwrite)
    except BaseException as exc:
        with suppress(OSError):  # gone already, unless Ctrl-C came before it was held
            temp.unlink()
        if isinstance(exc, SstError) or not isinstance(exc, Exception):
            raise
        raise _fail(error, target, exc) from exc


def _save_held(temp: Path, target: Path, save: Callable[[Path], None], overwrite: bool) -> None:
    """``save(temp)`` and give it ``target``'s name; on failure ``temp`` is removed while still held, since a
    clean-up that found it free would take it for a killed run's and say so."""
    try:
        save(temp)
        with suppress(OSError):  # some writers (safetensors) create private files: give the usual permissions
            if stat.S_IMODE(temp.stat().st_mode) != _default_mode():
                os.chmod(temp, _default_mode())
        if overwrite:
            _replace(temp, target)
        else:
            _place_new(temp, target)
    except BaseException:
        with suppress(OSError):
            temp.unlink()
        raise


def atomic_write(
    path: str | os.PathLike[str],
    encode: Callable[[IO[bytes]], object],
    *,
    error: type[SstError] = WriteError,
    overwrite: bool = True,
    parents: bool = False,
) -> None:
    """Write the bytes ``encode(fh)`` produces to ``path`` atomically, flushed to disk before the rename
    (``overwrite``, ``parents``: as for ``atomic_save``)."""

    def save(temp: Path) -> None:  # atomic_save made it
        fd = os.open(temp, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_BINARY", 0))
        with os.fdopen(fd, "wb") as fh:
            encode(fh)
            fh.flush()
            os.fsync(fh.fileno())

    atomic_save(path, save, error=error, overwrite=overwrite, parents=parents)


def json_text(data: Any, indent: int | None = None) -> str:
    """``data`` as standard JSON: an infinite or NaN number (the PSNR of identical images) becomes null, since
    Python's ``Infinity`` is not JSON and stops other languages' readers."""

    def finite(value: Any) -> Any:
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, dict):
            return {key: finite(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [finite(item) for item in value]
        return value

    return json.dumps(finite(data), indent=indent, allow_nan=False)


def atomic_write_text(
    path: str | os.PathLike[str], text: str, *, error: type[SstError] = WriteError, overwrite: bool = True
) -> None:
    """A UTF-8 text file (reports, JSON), atomically; missing parent folders are made first (``overwrite``: as
    for ``atomic_save``, so that a file another run wrote meanwhile is not replaced unasked)."""
    encode = lambda fh: fh.write(text.encode("utf-8"))  # noqa: E731
    atomic_write(path, encode, error=error, overwrite=overwrite, parents=True)


@contextmanager
def atomic_folder(
    path: str | os.PathLike[str],
    *,
    may_replace: Callable[[Path], bool] | None = None,
    error: type[SstError] = WriteError,
) -> Iterator[Path]:
    """Build a whole folder (a report) in a hidden temporary sibling, then swap it in for ``path``.

    The body writes into the yielded folder. Only when it finishes is an existing ``path`` moved aside, the new
    folder renamed to ``path`` and the old one deleted; a failure (or Ctrl-C) at any point before deletes the
    temporary folder and leaves the old ``path`` exactly as it was (system errors become ``error``, others pass
    through). An existing non-empty ``path`` is replaced
    only when ``may_replace(path)`` says it is one of ours (default: never), so a mistyped folder is never lost.
    Anything that appeared in ``path`` while the body worked (another run's output) is not ours either: then
    ``path`` is kept as it is, the new folder is placed beside it as ``NAME.new`` (``.new-2`` ...) and ``error``
    says so, since deleting either would lose someone's work.
    """
    target = Path(os.path.abspath(path))
    check_folder_replaceable(target, may_replace, error=error)
    before = _entries(target)
    parent = target.parent if str(target.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        clean_stale_temporaries(parent)  # a staging folder a killed run left there
        temp = temp_name(target)
        temp.mkdir()
    except OSError as exc:
        raise _fail(error, target, exc) from exc
    with holding(temp):  # another run's clean-up leaves it alone while the body works
        try:
            yield temp
            _swap_in(temp, target, lambda: _check_unchanged(target, before, temp, may_replace, error))
        except BaseException as exc:
            shutil.rmtree(temp, ignore_errors=True)
            if isinstance(exc, OSError) and not isinstance(exc, SstError):  # disk full, permissions ...
                raise _fail(error, target, exc) from exc
            raise  # the body's own errors (a model failing, Ctrl-C) pass through unchanged


def check_folder_replaceable(
    target: Path, may_replace: Callable[[Path], bool] | None = None, *, error: type[SstError] = WriteError
) -> None:
    """Refuse (before any work) a ``target`` that is a file, or a non-empty folder ``may_replace`` does not own."""
    if target.is_symlink():  # replacing the folder would replace the link, not what it points to
        raise error(
            f"cannot write '{target}': it is a symbolic link; name the folder it points to ('{target.resolve()}')"
        )
    if target.exists() and not target.is_dir():
        raise error(f"cannot write '{target}': it exists and is not a folder")
    if target.is_dir() and any(target.iterdir()) and not (may_replace is not None and may_replace(target)):
        raise error(f"refusing to replace '{target}': the folder is not empty and was not written by sst-cli")


def _entries(folder: Path) -> set[str]:
    """The paths below ``folder`` (relative; none when it is missing), to tell later what appeared there."""
    found: set[str] = set()
    for root, dirs, names in os.walk(folder):
        found.update(os.path.relpath(os.path.join(root, name), folder) for name in (*dirs, *names))
    return found


def _check_unchanged(
    target: Path, before: set[str], temp: Path, may_replace: Callable[[Path], bool] | None, error: type[SstError]
) -> None:
    """Refuse to swap ``temp`` in for ``target`` when files appeared there meanwhile (or it stopped being ours):
    ``temp`` is kept beside it under a visible name, so that neither the newcomers nor the new folder is lost."""
    foreign = sorted(_entries(target) - before)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        reason = f"refusing to replace '{target}': {shown} appeared there while this run worked"
    else:
        try:
            check_folder_replaceable(target, may_replace, error=error)
            return
        except SstError as exc:
            reason = str(exc)
    raise error(f"{reason}; it is left as it was, and the new one was written to '{_set_aside(temp, target)}'")


def _set_aside(temp: Path, target: Path) -> Path:
    """Rename ``temp`` to the first free ``TARGET.new``, ``TARGET.new-2`` ...; a rename replaces only an empty
    folder, so whatever took a name meanwhile is kept."""
    for number in range(1, 1000):
        beside = target.with_name(target.name + (".new" if number == 1 else f".new-{number}"))
        if os.path.lexists(beside):
            continue
        try:
            os.rename(temp, beside)
        except OSError:
            continue
        return beside
    raise OSError(errno.EEXIST, f"no free name beside '{target}'")


def is_within(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (links resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_spared(target: Path, keep: Iterable[Path], what: str) -> None:
    """Refuse (before any work) a folder that will be replaced whole (``atomic_folder``) while ``keep`` (the run's
    inputs, its other outputs) lies inside it: the swap would delete them. ``what`` names the folder's option."""
    for path in keep:
        if os.path.realpath(path) == os.path.realpath(target):
            raise WriteError(
                f"{what} '{target}' is what this run reads (or another of its outputs): replacing it whole when the "
                "run ends would delete it; choose another folder"
            )
        if is_within(path, target):
            raise WriteError(
                f"'{path}' is inside {what} '{target}', which is replaced whole when the run ends: "
                "keep it elsewhere, or choose another folder"
            )


def check_output_file(target: Path, *, overwrite: bool, inputs: Iterable[Path] = (), option: str = "") -> None:
    """Refuse (before any work) an output file that is one of ``inputs``, no file (``check_file_target``), too
    long a name, below a file, or an existing file ``overwrite`` does not allow replacing. ``option`` names the
    flag that named it, for the message. Missing folders above it are not made here but when it is written
    (``parents``), so that a run refused or failed later leaves none behind."""
    named = f"{option} '{target}'" if option else f"'{target}'"
    if target in InputFiles(inputs):
        raise OutputIsInput(f"{named} is one of the inputs; refusing to write over it")
    check_file_target(target, named)
    in_way = _in_the_way(target.parent)
    if in_way is not None:
        raise WriteError(f"cannot write {named}: {in_way}")
    if os.path.lexists(target) and not overwrite:
        raise OutputExists(f"{named} already exists; add --overwrite to replace it")
    # read-only, full or not ours: said now, not after the work (in the nearest folder there is, for one to make)
    why = unwritable(_nearest_existing(written_path(target).parent))
    if why is not None:
        raise WriteError(f"cannot write {named}: {why}")


def check_file_target(target: Path, named: str) -> None:
    """Refuse (before any work) an output path no file can take, which writing it would only say after the work:
    a folder (``--overwrite`` does not replace one), a device, pipe or socket, or a link to none (``not_a_file``),
    or a name longer than its file system allows. ``named``: the path as the message shows it."""
    size, limit = len(os.fsencode(target.name)), name_max(target.parent)
    if size > limit:
        raise WriteError(
            f"cannot write {named}: its file name is {size} bytes long, more than the {limit} its file system allows"
        )
    if os.path.isdir(target):  # not Path.is_dir: it raises where a folder of the path has too long a name
        raise WriteError(f"cannot write {named}: it is a folder")
    why = not_a_file(target)
    if why is not None:
        raise WriteError(f"cannot write {named}: {why}")


# Names of the process's standard streams and open files, not of files: through them a rename replaced /dev/stdout
_STREAM = re.compile(r"/(dev/(stdin|stdout|stderr|fd/\d+)|proc/(self|thread-self|\d+)/fd/\d+)")
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_file(target: Path) -> str | None:
    """Why ``target``, where it exists, cannot be written as a file, or None. A write renames a new file over the
    name, which would turn a device or pipe (``/dev/null``, a FIFO) into a plain file; a link to a file is
    written through (``written_path``), so it must lead to one. A standard stream (``/dev/stdout``) is refused
    as ``-`` is: sst-cli writes files only."""
    links = _link_chain(target)
    if sys.platform != "win32" and any(_STREAM.fullmatch(path) for path in links):
        return (
            "it names a standard stream or an open file descriptor, not a file: writing to standard output is not "
            "supported (nor with -); give a file name"
        )
    if not os.path.lexists(target):
        return None
    try:
        mode = os.stat(target).st_mode
    except OSError:  # a dangling link, a loop of links
        return f"it is a symbolic link to '{links[-1]}', which does not exist"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    if len(links) > 1:
        return f"it is a symbolic link to {kind} ('{links[-1]}'), not to a file"
    return f"it is {kind}, not a file"


def _link_chain(target: Path) -> list[str]:
    """``target`` as an absolute path, then each path its links lead to in turn (the last is no link)."""
    chain = [os.path.abspath(target)]
    while len(chain) <= 40 and os.path.islink(chain[-1]):  # 40: the system's own limit on links in a row
        try:
            chain.append(os.path.normpath(os.path.join(os.path.dirname(chain[-1]), os.readlink(chain[-1]))))
        except OSError:
            break
    return chain


def written_path(target: Path, *, error: type[SstError] = WriteError) -> Path:
    """The path a write of ``target`` renames its new file to: ``target`` itself, or for a link, the file it
    leads to, so that ``--overwrite`` replaces the file and keeps the link (the rename replaced the link with a
    plain file and left the linked file as it was). Refused (``error``) where it is no file (``not_a_file``)."""
    why = not_a_file(target)
    if why is not None:
        raise error(f"cannot write '{target}': {why}")
    return Path(os.path.realpath(target)) if os.path.islink(target) else target


def name_max(folder: Path) -> int:
    """The longest file name, in bytes, that the file system of ``folder`` (or of its nearest existing parent,
    for a folder not made yet) takes: 255, the common limit, where the system cannot say."""
    try:
        limit = os.pathconf(_nearest_existing(folder), "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):  # no pathconf (Windows), or no answer for this file system
        return 255
    return limit if limit > 0 else 255


def _nearest_existing(folder: Path) -> Path:
    """``folder`` as an absolute path, or its nearest parent that exists: what stands for a folder not made yet."""
    probe = Path(os.path.abspath(folder))
    while not os.path.exists(probe) and probe != probe.parent:
        probe = probe.parent
    return probe


def missing_folders(folders: Iterable[Path]) -> list[Path]:
    """Those of ``folders`` and their parents that do not exist yet, deepest first: what a run that writes into
    ``folders`` makes, and so what it may remove again (``removing_unused_folders``)."""
    missing: set[Path] = set()
    for folder in folders:
        path = Path(os.path.abspath(folder))
        while path not in missing and not os.path.lexists(path):
            missing.add(path)
            path = path.parent
    return sorted(missing, key=lambda path: len(path.parts), reverse=True)


@contextmanager
def removing_unused_folders(folders: Iterable[Path]) -> Iterator[None]:
    """Remove, when the block ends (failed or interrupted too), those of ``folders`` and their parents that did
    not exist when it began and are still empty: a run that wrote nothing leaves no empty output folder behind.
    A folder that existed before, or that holds anything, is never removed (``rmdir`` takes empty ones only)."""
    made = missing_folders(folders)
    try:
        yield
    finally:
        for folder in made:  # deepest first: a parent left empty by its sub-folder's removal goes too
            with suppress(OSError):
                folder.rmdir()


def _swap_in(temp: Path, target: Path, check: Callable[[], None] = lambda: None) -> None:
    """Rename ``temp`` to ``target``; an existing ``target`` is moved aside first and deleted last, locked while
    aside, so that another run's clean-up does not take it for a leftover (a killed run's is one). ``check``
    runs under that lock just before, and may refuse."""
    if not target.exists():
        _replace(temp, target)
        return
    with holding(target):
        check()
        old = temp_name(target, ".old")
        _replace(target, old)
        try:
            _replace(temp, target)
        except BaseException:
            with suppress(OSError):
                _replace(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)


_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{8}(\.old)?" + re.escape(TEMP_SUFFIX))  # .old: a replaced folder, aside


def clean_stale_temporaries(
    folder: Path, note: Callable[[str], None] = lambda text: None, held: Collection[Path] = ()
) -> None:
    """Remove temporaries that an earlier, killed run left in ``folder`` (ours by name). Those a running writer
    holds locked (``inuse``), and those touched in the last minute (just made, not yet locked; or where there are
    no locks), may belong to another sst-cli process still writing there, so they are only reported; except the
    temporaries of ``held``, files this process holds locked (``sst train``'s --out and --state), which no other
    process may be writing: a training resumed within a minute of being killed left its half-written state behind."""
    now = time.time()
    removed = recent = 0
    ours = tuple(f".{path.name}." for path in held if path.parent == folder)
    with suppress(OSError):
        for entry in os.scandir(folder):
            if not _TEMP_NAME.fullmatch(entry.name):
                continue
            fresh = entry.stat(follow_symlinks=False).st_mtime > now - 60 and not entry.name.startswith(ours)
            if fresh or in_use(Path(entry.path)):
                recent += 1
                continue
            with suppress(OSError):
                if entry.is_dir(follow_symlinks=False):  # a report's staging folder
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed += 1
    if removed:
        note(f"removed {removed} unfinished file(s) that an interrupted run left in '{folder}'")
    if recent:
        note(f"'{folder}' holds {recent} unfinished file(s) of another run that may still be writing; left alone")


def unwritable(folder: Path) -> str | None:
    """Why files cannot be written in ``folder`` (made if missing), or None; tried with a real file holding a
    byte (an empty file is made even on a full disk)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", suffix=TEMP_SUFFIX, dir=folder)
        try:
            os.write(fd, b"\0")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        return _os_reason(exc, folder)
    return None


def _in_the_way(folder: Path) -> str | None:
    """The file that stops ``folder`` being made (the nearest existing one of it and its parents, if not a
    folder), in words: the system's error (File exists or Not a directory, by depth) does not name it."""
    for path in (folder, *folder.parents):
        if os.path.exists(path):  # False below a file (ENOTDIR): go on up to it
            return None if os.path.isdir(path) else f"'{path}' is a file, not a folder"
    return None


def _no_folder_reason(folder: Path) -> str:
    """Why the existing-folder check failed: a file where a folder is named is not a missing folder."""
    return _in_the_way(folder) or f"the folder '{folder}' does not exist"


def _os_reason(exc: OSError, folder: Path | None = None) -> str:
    """The system error in words; a file in the way of ``folder`` (the one written in) is named whatever the
    errno, since it is the cause."""
    in_way = _in_the_way(folder) if folder is not None else None
    if in_way is not None:
        return in_way
    reasons = {
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOSPC: "no space left on device",
        errno.ENOTDIR: "a file is in the way of that folder",  # where the folder is not known
    }
    return reasons.get(exc.errno or 0, exc.strerror or str(exc))


class InputFiles:
    """A run's input files, so that no output replaces one: known by real path and, for a name that exists, by
    file identity and case-folded path, since on a case-insensitive file system (macOS's, Windows') 'photo.PNG'
    and 'photo.png' are one file with two real paths. (A hard link elsewhere is another name, which an atomic
    write replaces without touching the input: not refused.)"""

    def __init__(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        self.paths = {os.path.realpath(p) for p in paths}
        self._folded: dict[tuple[int, int], set[str]] | None = None

    def __contains__(self, target: object) -> bool:
        if not isinstance(target, str | os.PathLike):
            return False
        real = os.path.realpath(target)
        if real in self.paths:
            return True
        identity = _identity(real)
        if identity is None:
            return False
        if self._folded is None:  # made once, on the first existing target
            self._folded = {}
            for path in self.paths:
                found = _identity(path)
                if found is not None:
                    self._folded.setdefault(found, set()).add(path.casefold())
        return real.casefold() in self._folded.get(identity, set())


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


@functools.lru_cache(maxsize=256)
def folds_case(folder: str) -> bool:
    """Whether names in ``folder`` ignore case (macOS, Windows, a FAT stick, a casefolded ext4 folder): an entry
    of the folder itself is found again under its name with the case swapped; in an empty or missing folder, the
    nearest existing folder up from it whose name has letters is, in its parent. Nothing is written; a folder
    that cannot tell (no letters up to the root) counts as case-sensitive."""
    path = os.path.realpath(folder)
    if os.path.isdir(path):  # its own entries: a mount point's parent lives on another file system
        with suppress(OSError), os.scandir(path) as entries:
            name = next((e.name for e in entries if e.name.swapcase() != e.name), None)
            if name is not None:
                return _same_entry(os.path.join(path, name), os.path.join(path, name.swapcase()))
    while True:
        parent, name = os.path.split(path)
        if name and name.swapcase() != name and os.path.isdir(path):
            return _same_entry(path, os.path.join(parent, name.swapcase()))
        if parent == path:
            return False
        path = parent


def _same_entry(path: str, other: str) -> bool:
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


@contextmanager
def locked_if_possible(path: Path, timeout: float = 10.0) -> Iterator[None]:
    """Hold ``PATH.lock`` (``filelock``) around a read-modify-write shared by processes (pins, hashes, a kernel
    build). Where it cannot be had within ``timeout`` (a read-only folder, a stuck holder), go on without it: these
    files are only caches, and a run must never hang on one."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path) + ".lock", timeout=timeout)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except (Timeout, OSError):
        yield
        return
    try:
        yield
    finally:
        lock.release()
