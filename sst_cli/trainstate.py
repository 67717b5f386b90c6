"""What a run takes from earlier runs: its own state file (``resume``) or another scale's weights (``init``).

The state file holds what a run needs to continue bit for bit in another session, as one ``torch.save``
dict (loaded back with ``weights_only``): ``params`` and ``params_ema`` in the authors' layout (so the file
also loads as weights, e.g. for ``--init``), the optimizer, the schedule position, the iteration and
training seconds, the random states (torch, CUDA, numpy, Python, and the data order's own generator) and
the settings of the run. A file that is not such a state, or is a run of another network, scale or seed,
is refused with one sentence naming it.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from .archs.sst import SST
from .checkpoint import STATE_FORMAT, read_weights
from .checks import option_flag, option_name, option_value
from .errors import CheckpointError, ConfigError, SstError, WeightsNotFound
from .files import atomic_save

REQUIRED = ("params", "params_ema", "optimizer", "iteration", "elapsed", "rng", "settings")
MIN_INIT_FRACTION = 0.5  # --init must fill at least this share of the network's tensors
# Settings that may change on resume (with a note); the network, scale and seed may not. The data is compared by
# what the folders hold (``trainset.fingerprint``), not by how their paths are written.
MAY_CHANGE = ("iters", "batch", "patch", "lr", "warmup", "ema_decay", "data_files", "precision", "device")
# What a stretch of a run records: the settings that say how its iterations ran (``--iters`` only plans them).
STRETCH_KEYS = ("data", "batch", "patch", "lr", "warmup", "ema_decay", "precision", "device")


def to_cpu(obj: Any) -> Any:
    """Tensors (nested in dicts / lists) copied to the CPU, so a state file loads anywhere."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def capture_rng(data: torch.Generator, device: torch.device) -> dict[str, Any]:
    """Every random state a run may draw from, in types that ``torch.load(weights_only=True)`` accepts."""
    name, keys, pos, has_gauss, gauss = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
    return {
        "data": data.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": pos,
            "has_gauss": has_gauss,
            "gauss": gauss,
        },
        "python": random.getstate(),
    }


def restore_rng(rng: dict[str, Any], data: torch.Generator, device: torch.device) -> None:
    """Put back what ``capture_rng`` saved (the CUDA state only on a CUDA run)."""
    data.set_state(rng["data"])
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and rng.get("cuda") is not None:
        torch.cuda.set_rng_state(rng["cuda"], device)
    if rng.get("numpy") is not None:
        n = rng["numpy"]
        keys = n["keys"].numpy().astype(np.uint32)
        np.random.set_state((n["name"], keys, int(n["pos"]), int(n["has_gauss"]), float(n["gauss"])))
    if rng.get("python") is not None:
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))


def write_state(path: Path, payload: dict[str, Any]) -> None:
    """The state, atomically: a run killed while saving keeps its previous state file."""
    payload = {"format": STATE_FORMAT, **to_cpu(payload)}
    atomic_save(path, lambda tmp: torch.save(payload, tmp))


def read_state(path: Path, *, cli: bool = False) -> dict[str, Any]:
    """A state file written by ``write_state``; anything else raises CheckpointError naming the file. ``cli``: name
    the options as the command line spells them (``--resume``), not as keywords (``resume``)."""
    resume = option_name("resume", cli)
    if not path.is_file():
        # A file that is not there exits 1 as a missing --weights or --init does (a ConfigError exited 2).
        raise WeightsNotFound(
            f"{resume}: there is no training state {path}; start without {option_flag('resume', cli)}"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle, zip and OS errors (torch's own words suggest unsafe loading: not repeated)
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise CheckpointError(
            f"{resume}: {path} is not a readable training state (corrupt, truncated or not one: {detail})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        weights = isinstance(state, dict) and any(k in state for k in ("params", "params_ema", "meta"))
        hint = f"; weights to start a run from go to {option_name('init', cli)}" if weights else ""
        raise CheckpointError(f"{resume}: {path} is not an sst-cli training state (format {STATE_FORMAT}){hint}")
    missing = [key for key in REQUIRED if key not in state]
    if missing:
        raise CheckpointError(f"{resume}: {path} is an incomplete training state (no {', '.join(missing)})")
    return state


def check_resume(state: dict[str, Any], settings: dict[str, Any], path: Path, *, cli: bool = False) -> list[str]:
    """Refuse a state of another network, scale or seed; return the settings that changed (a note's worth).
    ``cli``: as in ``read_state``."""
    saved = state["settings"]
    resume, init = option_name("resume", cli), option_name("init", cli)
    if saved.get("scale") != settings["scale"]:
        raise ConfigError(
            f"{resume}: {path} is a x{saved.get('scale')} run and this one is x{settings['scale']}; "
            f"start the new scale with {init} from it instead"
        )
    if saved.get("sst_config") != settings["sst_config"] or saved.get("model") != settings["model"]:
        same = "--model and --config" if cli else "model"  # an API caller's model is the name or the SSTConfig
        raise ConfigError(
            f"{resume}: {path} is a run of {saved.get('model')} x{saved.get('scale')} with another network "
            f"config than {settings['model']} x{settings['scale']}; use the same {same}, or another "
            f"{option_name('out', cli)}"
        )
    if saved.get("seed") != settings["seed"]:
        seed = option_value("seed", saved.get("seed"), cli)
        raise ConfigError(f"{resume}: {path} was started with {seed}, not {settings['seed']}")
    changed = [key for key in MAY_CHANGE if saved.get(key) != settings[key]]
    if "data_files" not in saved and "data_files" in changed:  # a state from before the fingerprint: its paths
        changed = [key for key in changed if key != "data_files" or saved.get("data") != settings["data"]]
    return changed


def stretch(settings: dict[str, Any], first: int, last: int) -> dict[str, Any]:
    """Iterations ``first``..``last`` (from 1) of a run and the settings they ran with."""
    return {"iterations": [first, last], **{key: settings.get(key) for key in STRETCH_KEYS}}


def history_of(state: dict[str, Any], changed: list[str]) -> list[dict[str, Any]]:
    """The stretches of the run in ``state`` whose settings differ, as its settings' ``history`` keeps them: the saved
    ones, plus the stretch that ends at the saved iteration when this session changes how iterations run (so the
    weights' record says which settings made which iterations, not only the last). Empty while nothing changed;
    a state of an older sst-cli, which kept none, starts its history at its first iteration."""
    history = list(state["settings"].get("history") or [])
    first = history[-1]["iterations"][1] + 1 if history else 1
    last = int(state["iteration"])
    if set(changed) - {"iters"} and last >= first:
        history.append(stretch(state["settings"], first, last))
    return history


@dataclass(frozen=True)
class InitReport:
    """What ``init_from`` did with each tensor of the network."""

    source: Path
    loaded: list[str]
    resized: list[str]  # sub-pixel convs mapped from another scale
    reinitialised: list[str]
    unused: list[str]  # tensors in the file that the network has no place for

    def summary(self) -> str:
        """One line for logs: counts, and the names of what was not simply loaded."""
        parts = [f"{len(self.loaded)} tensors loaded"]
        if self.resized:
            parts.append(f"resized from the other scale: {', '.join(self.resized)}")
        parts.append(f"re-initialised: {', '.join(self.reinitialised) or 'none'}")
        if self.unused:
            parts.append(f"{len(self.unused)} in the file unused")
        return f"init from {self.source}: " + "; ".join(parts)


def _subpixel_resize(weight: torch.Tensor, groups: int, scale: int) -> torch.Tensor | None:
    """Map a pixel-shuffle conv's output channels (group, sub-pixel) to ``scale`` by nearest sub-pixel."""
    old = math.isqrt(weight.shape[0] // groups) if weight.shape[0] % groups == 0 else 0
    if old < 1 or old * old * groups != weight.shape[0]:
        return None
    index = []
    for g in range(groups):
        for i in range(scale):
            for j in range(scale):  # the old sub-pixel whose centre is nearest to this one's
                oi, oj = int((i + 0.5) * old / scale), int((j + 0.5) * old / scale)
                index.append(g * old * old + oi * old + oj)
    return weight[torch.tensor(index)].clone()


def init_from(model: SST, path: str | os.PathLike[str], *, cli: bool = False) -> InitReport:
    """Start ``model`` from weights of another scale (x2 -> x3 -> x4 as the paper does).

    Tensors whose shapes match are loaded (``params_ema`` first, as the authors' training does); the
    upsampler conv whose width depends on the scale is resized sub-pixel by sub-pixel; anything else
    keeps its fresh initialisation. Raises when less than half of the network's tensors fit. ``cli``: name the
    option ``--init``, as the command line spells it, not ``init``.
    """
    init = option_name("init", cli)
    try:
        state, _ = read_weights(path)
    except SstError as exc:  # named as --resume's refusals are: a run has several files
        raise type(exc)(f"{init}: {exc}") from exc
    target = model.state_dict()
    scale = model.config.scale
    new: dict[str, torch.Tensor] = {}
    loaded, resized, fresh = [], [], []
    for key, value in target.items():
        src = state.get(key)
        if src is not None and src.shape == value.shape:
            new[key] = src
            loaded.append(key)
            continue
        mapped = None
        if src is not None and key.startswith("upsampler.up_conv.") and src.shape[1:] == value.shape[1:]:
            mapped = _subpixel_resize(src, value.shape[0] // (scale * scale), scale)
        if mapped is not None and mapped.shape == value.shape:
            new[key] = mapped
            resized.append(key)
        else:
            fresh.append(key)
    if len(loaded) < MIN_INIT_FRACTION * len(target):
        raise CheckpointError(
            f"{init} {path}: only {len(loaded)} of the network's {len(target)} tensors fit it; it is not "
            "weights of the same architecture (another model or config?)"
        )
    model.load_state_dict({k: v.to(target[k].dtype) for k, v in new.items()}, strict=False)
    return InitReport(Path(path), loaded, resized, fresh, [k for k in state if k not in target])
