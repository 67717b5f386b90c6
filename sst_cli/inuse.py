"""Whether an unfinished file is still being written: an advisory lock its writer holds (POSIX ``flock``).

A writer can go minutes without touching its temporary file (a video's encoder buffers frames that each take
minutes on a CPU), so its age does not tell a killed run's leftover from a live run's file: the clean-up
(``files.clean_stale_temporaries``) removes a leftover only when it can take this lock. The kernel drops the
lock when the holder's process ends, killed or not. Windows gets no lock (``msvcrt.locking`` locks byte
ranges against every other handle, the writing library's own included); there a file open for writing cannot
be deleted anyway, and the age rule alone decides, as it does on a file system without locks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

_LOCK_TRIES = 100  # 10 ms apart
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


@contextmanager
def holding(path: Path) -> Iterator[None]:
    """Hold the lock of ``path`` (a file or folder this process just made) until the block ends. The lock is on
    the file, not its name: rename or remove ``path`` inside the block, so no clean-up finds it unlocked."""
    fd = _open(path)
    if fd is not None and _lock_soon(fd) is not True:  # no locks on this file system: the age rule protects it
        os.close(fd)
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def in_use(path: Path) -> bool | None:
    """Whether a writer holds the lock of ``path``; None where that cannot be told (Windows, a file system
    without locks, a file this user cannot open)."""
    fd = _open(path)
    if fd is None:
        return None
    try:
        taken = _try_lock(fd)
    finally:
        os.close(fd)  # releases the lock taken here, if any
    return None if taken is None else not taken


def _open(path: Path) -> int | None:
    """A descriptor to lock ``path`` with (links not followed, a FIFO not waited on); None without locks."""
    if fcntl is None:
        return None
    try:
        return os.open(path, _OPEN_FLAGS)
    except OSError:
        return None


def _lock_soon(fd: int) -> bool | None:
    """``_try_lock``, retried for up to a second while another holds it: a clean-up's ``in_use`` holds a lock for
    a moment only, and a writer that gave up then would have written its file unprotected."""
    for _ in range(_LOCK_TRIES):
        taken = _try_lock(fd)
        if taken is not False:
            return taken
        time.sleep(0.01)
    return False


def _try_lock(fd: int) -> bool | None:
    """Take the lock of ``fd`` without waiting: True if taken, False if another holds it, None without locks."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True
