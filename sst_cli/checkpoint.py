"""Reading weights files safely, whatever the architecture, and loading them strictly into a network.

Pickled files are only ever opened with ``weights_only=True``. Wrappers are unwrapped the way
the official (basicsr) loader does: ``params_ema``, then ``params``, then ``state_dict``, and a
``module.`` prefix is stripped. What the tensors say about the architecture is each room's business
(``archs/<name>/``); a strict load here reports missing, unexpected and mis-shaped tensors in words.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import stat
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import CheckpointError, DamagedCheckpoint, SstError, WeightsNotFound

WRAPPER_KEYS = ("params_ema", "params", "state_dict")
STATE_FORMAT = "sst-cli-train/1"  # the ``format`` of sst train's state files (``trainstate``)

StateDict = dict[str, torch.Tensor]


_KINDS = ((b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"RIFF", "a RIFF file (WebP, WAV ...)"),
          (b"GIF8", "a GIF image"), (b"\x1f\x8b", "a gzip archive"), (b"<", "an HTML or XML page"))  # fmt: skip


def _kind(path: Path) -> str:
    """What the file is by its first bytes: "zip" (PyTorch's format since 1.6), "pickle" (the legacy format,
    which starts with the protocol opcode 0x80), "safetensors", or words for anything else (a PNG image, text)."""
    try:
        with path.open("rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read it: {_reason(exc)}") from exc
    # safetensors first: its header length (8 bytes, little-endian) may begin with b"PK" or 0x80 itself
    if len(head) >= 9 and int.from_bytes(head[:8], "little") < 100_000_000 and head[8:9] == b"{":
        return "safetensors"
    if head.startswith(b"PK"):
        return "zip"
    if head.startswith(b"\x80"):
        return "pickle"
    kind = next((what for magic, what in _KINDS if head.startswith(magic)), None)
    if kind is None:
        text = head.isascii() and all(c.isprintable() or c in "\t\r\n" for c in head.decode("ascii"))
        kind = "text" if text else "something else"
    return kind


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _read_pickle(path: Path, kind: str, *, lazy: bool = False) -> Any:
    """``lazy``: map the tensors of a zip checkpoint instead of reading them (for its metadata alone)."""
    if kind not in ("zip", "pickle"):  # the unpickler would misread anything else
        raise CheckpointError(f"{path}: not a PyTorch checkpoint: the file is {kind}")
    if kind == "zip" and not _torch_zip(path):
        raise CheckpointError(f"{path}: not a PyTorch checkpoint: the file is a zip archive of other files")
    try:
        with warnings.catch_warnings():  # torch's own advice about weights_only; the refusal below says it all
            warnings.simplefilter("ignore", UserWarning)
            if lazy and kind == "zip" and path.suffix.lower() != ".safetensors":
                return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            with path.open("rb") as f:  # a file object: torch reads a path named .safetensors as safetensors
                return torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "Unsupported global" not in str(exc):  # a damaged byte reads as an opcode the safe unpickler lacks
            raise DamagedCheckpoint(_unreadable(path, kind, exc)) from exc
        raise CheckpointError(
            f"{path}: refused to load: the file contains Python objects other than tensors, and loading it "
            "could run code. Only plain tensor checkpoints are accepted"
        ) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError, KeyError) as exc:
        raise DamagedCheckpoint(_unreadable(path, kind, exc)) from exc


def _unreadable(path: Path, kind: str, exc: BaseException) -> str:
    """Why a checkpoint could not be read, naming the member of a zip checkpoint that fails its checksum: one
    flipped byte was called a file that could run code."""
    damaged = None
    if kind == "zip":
        unreadable = contextlib.suppress(zipfile.BadZipFile, OSError, RuntimeError, ValueError)
        with unreadable, zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    if damaged is not None:
        return f"{path}: a damaged PyTorch checkpoint: its part {damaged} fails its checksum"
    return f"{path}: not a readable PyTorch checkpoint (truncated or corrupt?): {_first_sentence(exc)}"


def _first_sentence(exc: BaseException) -> str:
    """An error's first sentence: the rest of torch's zip reader's text ("This is an internal miniz error. If
    you are seeing this error, ...") is advice to its own developers."""
    text = str(exc).strip()
    return re.split(r"(?<=[a-z])\. ", text.splitlines()[0])[0] if text else type(exc).__name__


def _torch_zip(path: Path) -> bool:
    """Whether a zip archive is laid out as torch.save writes one (``<name>/data.pkl``)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.count("/") == 1 and name.endswith("/data.pkl") for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return True  # damaged: torch.load says how


def _read_safetensors(path: Path, kind: str) -> tuple[StateDict, dict[str, str]]:
    from safetensors import SafetensorError, safe_open

    if kind != "safetensors":
        raise CheckpointError(f"{path}: not a safetensors file: the file is {kind}")

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            metadata = dict(f.metadata() or {})
            return {k: f.get_tensor(k) for k in f.keys()}, metadata  # noqa: SIM118 (safe_open has no iterator)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file (truncated or corrupt?): {exc}") from exc


def unwrap(obj: Any, source: str = "checkpoint") -> StateDict:
    """Find the state dict inside a checkpoint and strip a DataParallel ``module.`` prefix."""
    for key in WRAPPER_KEYS:
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not obj:
        raise CheckpointError(f"{source}: no state dict found (expected tensors, or one of {', '.join(WRAPPER_KEYS)})")
    bad = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    nested = [
        k for k in bad if isinstance(obj[k], Mapping) and any(isinstance(v, torch.Tensor) for v in obj[k].values())
    ]
    if nested:  # {"model": state_dict}, as some trainers save: "entries that are not tensors: model" said too little
        raise CheckpointError(
            f"{source}: the tensors are nested under {nested[0]!r}, a key sst-cli does not unwrap (it unwraps "
            f"{', '.join(WRAPPER_KEYS)}): save them under one of those, or bare"
        )
    if bad:
        raise CheckpointError(f"{source}: entries that are not tensors: {', '.join(map(str, bad[:5]))}")
    return {k.removeprefix("module."): v for k, v in obj.items()}


def read_weights(path: str | os.PathLike[str]) -> tuple[StateDict, dict[str, str]]:
    """State dict of a ``.pth``/``.pt``/``.safetensors`` file, and its safetensors metadata (empty for pickles)."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise WeightsNotFound(f"{path}: a link to {os.readlink(path)}, which does not exist") from None
        raise WeightsNotFound(f"weights file not found: {path}") from None
    except OSError as exc:  # a name too long, a loop of links, a folder that may not be entered
        raise CheckpointError(f"{path}: cannot read it: {_reason(exc)}") from None
    if stat.S_ISDIR(info.st_mode):
        raise CheckpointError(f"{path}: a folder, not a weights file")
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(f"{path}: not a regular file")
    if info.st_size == 0:
        raise CheckpointError(f"{path}: the file is empty")
    kind = _kind(path)
    metadata: dict[str, str] = {}
    if kind == "safetensors" or (path.suffix.lower() == ".safetensors" and kind not in ("zip", "pickle")):
        state, metadata = _read_safetensors(path, kind)  # by content: a renamed file loads all the same
    else:
        state = _read_pickle(path, kind)
        metadata = _own_metadata(state)
    state = unwrap(state, str(path))
    _check_finite(state, path)
    return state, metadata


def _own_metadata(checkpoint: Any) -> dict[str, str]:
    """The metadata ``sst train`` puts beside the tensors of a ``.pth`` (``meta``), as a safetensors file keeps it;
    for its training state, the network it records (so the state loads as weights, its EMA, as ``--init`` takes it:
    it was told "window sizes cannot be read")."""
    if isinstance(checkpoint, Mapping) and checkpoint.get("format") == STATE_FORMAT:
        return _state_metadata(checkpoint)
    meta = checkpoint.get("meta") if isinstance(checkpoint, Mapping) else None
    if not isinstance(meta, Mapping) or meta.get("trained_by") != "sst-cli":  # other tools' "meta" mean other things
        return {}
    return {str(k): str(v) for k, v in meta.items()}


def _state_metadata(state: Mapping[str, Any]) -> dict[str, str]:
    """A training state's network (``sst_config``, ``variant``) and a ``source`` line saying what the file is."""
    settings = state.get("settings")
    if not isinstance(settings, Mapping) or not isinstance(settings.get("sst_config"), Mapping):
        return {}
    return {
        "sst_config": json.dumps(dict(settings["sst_config"])),
        "variant": str(settings.get("model") or ""),
        "source": f"training state of sst train at iteration {state.get('iteration')}: these are its EMA weights "
        "(params_ema); its --out holds them with the training record",
    }


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The metadata of a weights file, read without its tensors (safetensors: the header; a zip .pth: the pickle,
    its tensors mapped, not read); empty when it has none or is unreadable."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        if _kind(path) == "safetensors":
            with safe_open(str(path), framework="pt", device="cpu") as f:
                return dict(f.metadata() or {})
        return _own_metadata(_read_pickle(path, _kind(path), lazy=True))
    except (SstError, SafetensorError, OSError, ValueError):  # an unreadable file has no metadata to show
        return {}


def _check_finite(state: Mapping[str, torch.Tensor], path: Path) -> None:
    """NaN or Inf in the weights (a diverged training run) would only show as a failed output per file."""
    broken = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if broken:
        more = f" and {len(broken) - 1} more" if len(broken) > 1 else ""
        raise CheckpointError(f"{path}: the weights hold NaN or Inf values ({broken[0]}{more}): they cannot be used")


def load_state(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> None:
    """Strict load with a readable report of missing, unexpected and mis-shaped tensors (``check_fit``)."""
    state = check_fit(model, state, source)
    on_meta = any(p.is_meta for p in model.parameters())
    # A network built on the meta device takes the file's tensors as they are (no copy, no init).
    model.load_state_dict(state, strict=True, assign=on_meta)


def check_fit(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """``state`` as ``model`` will load it, or a CheckpointError listing missing, unexpected and mis-shaped tensors.

    Only BatchNorm's ``num_batches_tracked`` may be absent (some converters drop it): a training counter
    that inference never reads. Works on a network built on the meta device (nothing is allocated).
    """
    expected = model.state_dict()
    counters = {k: torch.zeros((), dtype=torch.long) for k in expected if k.endswith(".num_batches_tracked")}
    state = {**{k: v for k, v in counters.items() if k not in state}, **state}
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    kinds = [  # an integer tensor (a quantized file) cannot stand in for a weight; torch says so in 700 lines
        f"{k} {str(state[k].dtype).removeprefix('torch.')}"
        for k, v in expected.items()
        if k in state and v.is_floating_point() and not state[k].is_floating_point()
    ]
    inexact = []
    for k, v in expected.items():
        if k in state and not v.is_floating_point() and state[k].is_floating_point():
            cast = _as_integers(state[k], v.dtype)
            if cast is None:
                inexact.append(f"{k} {str(state[k].dtype).removeprefix('torch.')}")
            else:
                state[k] = cast
    problems = []
    labelled = (
        ("missing", missing),
        ("unexpected", unexpected),
        ("wrong shape (file vs model)", shapes),
        ("not floating point", kinds),
        ("integer tensors stored as floats that do not hold whole numbers exactly", inexact),
    )
    for label, items in labelled:
        if items:
            more = f" and {len(items) - 5} more" if len(items) > 5 else ""
            problems.append(f"{len(items)} {label}: {', '.join(items[:5])}{more}")
    if problems:
        raise CheckpointError(f"{source} does not fit the network: " + "; ".join(problems))
    return state


def _as_integers(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """An integer buffer (an index, a counter) that a "convert everything to half" script stored as floats, cast
    back; None when that could be wrong.

    Cast back rather than refused: whole numbers below the float type's exact limit (2048 in float16, 256 in
    bfloat16) are the very integers the file held, so the network computes what the original did (torch's copying
    ``load_state_dict`` casts them just so; assigning, as here, kept the floats, which fail as indices at the first
    forward pass). A fraction, or a value at or above that limit (float16 rounds 2049 to 2048: another row of a
    table), cannot be trusted and is refused.
    """
    if values.is_meta:
        return values.to(dtype)
    exact = round(2 / torch.finfo(values.dtype).eps)  # every integer up to it is a float of this type
    low, high = (0, 1) if dtype == torch.bool else (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    low, high = max(low, 1 - exact), min(high, exact - 1)
    fits = not values.numel() or (low <= values.min().item() and values.max().item() <= high)
    return values.to(dtype) if fits and torch.equal(values, values.round()) else None
