"""File systems a batch found full: once writing an output fails for want of space (or quota), the files still
bound for that file system fail at once instead of being computed first, which on a GPU batch of large photos
would spend hours on results that cannot be kept. Files written elsewhere go on.

The up-front write test (``files.unwritable``) catches a disk that is full when the batch starts; this catches
one that fills while it runs. Only a failure of the write itself counts: a cache elsewhere (kernels, seams)
running out of room says nothing about the output's file system.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .errors import DiskFull, causes
from .naming import resume_hint

# errno -> how the folder is described; EDQUOT is missing on Windows
_FULL = {errno.ENOSPC: "is full (no space left on device)"}
if hasattr(errno, "EDQUOT"):
    _FULL[errno.EDQUOT] = "is over its disk quota (disk quota exceeded)"


def lack_of_space(exc: BaseException) -> int | None:
    """ENOSPC or EDQUOT where ``exc`` or an error it was raised from or during says so (the atomic writer turns
    the system's OSError into an ImageError raised from it), else None."""
    return next((e.errno for e in causes(exc) if isinstance(e, OSError) and e.errno in _FULL), None)


def file_system(target: Path) -> int | str:
    """What tells the file system ``target`` is written to: the device of its folder (or of the nearest existing
    folder above it), or the folder itself where it cannot be looked at."""
    folder = Path(os.path.abspath(target)).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return os.stat(folder).st_dev
    except OSError:
        return str(folder)


@dataclass
class FullFileSystems:
    """The file systems one batch (or one worker of it) found full, each with the sentence its later files get.

    ``overwrite``: the batch replaces existing outputs, so a rerun that keeps existing outputs would keep the old
    ones of the files not done (``naming.resume_hint``)."""

    overwrite: bool = False
    _full: dict[int | str, str] = field(default_factory=dict)

    def check(self, target: Path) -> None:
        """Raise DiskFull when writing ``target`` already failed for want of space in this batch."""
        reason = self._full.get(file_system(target))
        if reason is not None:
            raise DiskFull(reason)

    @contextmanager
    def watching(self, target: Path) -> Iterator[None]:
        """Around the write of ``target``: a failure for want of space marks its file system full, and passes on."""
        try:
            yield
        except Exception as exc:
            code = lack_of_space(exc)
            if code is not None:
                folder = target.parent if str(target.parent) else Path(".")
                self._full.setdefault(
                    file_system(target),
                    f"not computed: '{folder}' {_FULL[code]}; free some space, then {resume_hint(self.overwrite)}",
                )
            raise
