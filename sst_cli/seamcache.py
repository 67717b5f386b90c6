"""What the seams probe measured, kept on disk per network, so later runs and other worker processes skip it.

The probe (``seams.py``) costs several tiled runs of a picture up to 512 px: seconds on a GPU, minutes for a
large network on a CPU. Its figures depend only on the weights, the scale, the alignment, the precision and
device kind, and the probe itself, so they are kept in ``$XDG_CACHE_HOME/sst-cli/seams/<key>.json`` (the same
root as ``compiling.py``'s cache; ``$SST_SEAMS_CACHE`` names another folder), keyed by a digest of all of
these plus sst-cli's version. A cache that cannot be read or written is ignored: the probe then simply runs.
Writes are atomic (a temporary file, then a rename). Worker processes that start together measure each figure
once: the first holds a lock file beside the figures (``filelock``, released by the OS if it dies) and the
others wait for it (``files.locked_if_possible``), then read what it wrote.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path

import torch
from torch import nn

from ._version import __version__
from .errors import WriteError
from .files import atomic_write_text, cache_root, locked_if_possible

PROBE_VERSION = 2  # bump when the probe picture or its measurement changes: old figures are then not used
LOCK_WAIT_S = 30 * 60  # longer than any one probe run measured (minutes for a large network on a CPU)


def seams_cache_dir() -> Path:
    """``$SST_SEAMS_CACHE`` when set, else ``$XDG_CACHE_HOME/sst-cli/seams`` (``~/.cache/sst-cli/seams``)."""
    if os.environ.get("SST_SEAMS_CACHE"):
        return Path(os.environ["SST_SEAMS_CACHE"])
    return cache_root() / "seams"


def weights_digest(model: nn.Module) -> str:
    """SHA-256 of the module's state dict: names, dtypes, shapes and bytes, in name order."""
    return state_digest(model.state_dict())


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 of a state dict: names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def cache_key(digest: str, *facts: object) -> str:
    """The file name's key: the weights' digest, the facts the figures depend on, the probe and sst-cli versions."""
    text = "|".join(str(f) for f in (digest, *facts, f"probe {PROBE_VERSION}", f"sst-cli {__version__}"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class SeamCache:
    """PSNR figures by (probe side, tile, context) for one network, read once and written after each new one."""

    def __init__(self, key: str, directory: Path | None = None) -> None:
        self.path = (directory or seams_cache_dir()) / f"{key}.json"
        self._figures: dict[str, float] | None = None

    def get(self, side: int, tile: int, context: int) -> float | None:
        return self._read().get(_entry(side, tile, context))

    def get_or_measure(self, side: int, tile: int, context: int, measure: Callable[[], float]) -> float:
        """The stored figure, else ``measure()`` stored; a process measuring the same figure is waited for."""
        psnr = self.get(side, tile, context)
        if psnr is not None:
            return psnr
        with locked_if_possible(self.path, LOCK_WAIT_S):
            self._figures = None  # read again: a process we waited for may have written it
            psnr = self.get(side, tile, context)
            if psnr is None:
                psnr = measure()
                self.put(side, tile, context, psnr)
            return psnr

    def put(self, side: int, tile: int, context: int, psnr: float) -> None:
        self._figures = None  # read again: another process may have added figures since
        figures = self._read()
        figures[_entry(side, tile, context)] = psnr
        with suppress(WriteError):  # an unwritable cache: the probe runs again next time, nothing else changes
            atomic_write_text(self.path, json.dumps({"version": PROBE_VERSION, "psnr": figures}))

    def _read(self) -> dict[str, float]:
        if self._figures is None:
            self._figures = {}
            try:
                data = json.loads(self.path.read_text())
                stored = data["psnr"] if data.get("version") == PROBE_VERSION else {}
                self._figures = {
                    str(k): float(v)
                    for k, v in stored.items()
                    if isinstance(v, (int, float)) and not math.isnan(float(v))
                }
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                pass  # missing or corrupt: measured again, and rewritten whole on the next put
        return self._figures


def _entry(side: int, tile: int, context: int) -> str:
    return f"{side}/{tile}/{context}"
