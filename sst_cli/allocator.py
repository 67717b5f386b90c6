"""Memory the C heap keeps after tensors are freed on the CPU (torch-free).

glibc serves big blocks with mmap, which returns them when freed, but raises that threshold each time such a
block is freed, after which the tensors of later tiles come from its heap, which keeps what they free: with
``--max-memory 512M`` a 900x600 picture peaked at 1.0 GiB, 0.7 GiB above the loaded model. Trimming the heap
after each batch of tiles gives that back (measured: 1.0 -> 0.80-0.88 GiB, no slower).

Within one forward pass the heap still grows with the holes its tensors leave, and by chance: the same ``sst
upscale --max-memory 200M`` (300x200, 128x192 px tiles) peaked 133 to 490 MB above a tiny run's in 24 runs.
``sst`` itself therefore fixes the threshold (``keep_large_blocks_off_the_heap``): every block of 2 MiB or more
is mapped for itself and returned when freed, and torch backs those with transparent huge pages so that fresh
pages cost fewer faults. Measured: 126-127 MB in every run, for 1.1-1.17x the time (benchmarks/RESULTS.md).
Only the ``sst`` program does it (and its workers): a library must not reset its host process's allocator.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
OWN_MAPPING_FROM = 2 << 20  # torch asks huge pages from 2 MiB (THP_MEM_ALLOC_ENABLE): none then pads the heap
# The environment variables glibc and torch read at start: a user's own choice stands.
_USER_CHOICES = ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):  # musl has neither malloc_trim nor mallopt's parameters
        return None
    return libc


def _malloc_trim() -> Callable[[int], int] | None:
    libc = _glibc()
    return None if libc is None else libc.malloc_trim


def keep_large_blocks_off_the_heap() -> bool:
    """Serve every block of ``OWN_MAPPING_FROM`` bytes or more with its own mapping, returned when freed, so that
    a forward pass peaks at what its tensors hold, not at that plus the heap's holes; ask torch for huge pages
    there (it reads ``THP_MEM_ALLOC_ENABLE`` once: call this before torch allocates). False where glibc is not
    the allocator or the user set glibc's thresholds."""
    libc = _glibc()
    if libc is None or any(name in os.environ for name in _USER_CHOICES):
        return False
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    global _kept_off
    _kept_off = bool(libc.mallopt(M_MMAP_THRESHOLD, OWN_MAPPING_FROM))
    return _kept_off


def large_blocks_kept_off() -> bool:
    """Whether this process did ``keep_large_blocks_off_the_heap``: its worker processes then do it too."""
    return _kept_off


_kept_off = False  # set once, by keep_large_blocks_off_the_heap


def give_back_freed() -> bool:
    """Return the heap's free pages to the system (glibc's ``malloc_trim``); False where there is none."""
    trim = _malloc_trim()
    return trim is not None and bool(trim(0))
