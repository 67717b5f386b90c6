"""Reading weights files safely and matching them to the network.

Pickled files are only ever opened with ``weights_only=True``. Wrappers are unwrapped the way
the official (basicsr) loader does: ``params_ema``, then ``params``, then ``state_dict``, and a
``module.`` prefix is stripped. Everything the tensors determine is inferred and compared with
what the user asked for, so a mismatch is explained in words instead of a shape dump.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .archs.sst import SSTConfig
from .errors import CheckpointError, WeightsNotFound

WRAPPER_KEYS = ("params_ema", "params", "state_dict")
SUFFIXES = (".pth", ".pt", ".safetensors")
CONFIG_METADATA_KEY = "sst_config"

StateDict = dict[str, torch.Tensor]


def _read_pickle(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: refused to load: the file contains Python objects other than tensors, and loading it "
            "could run code. Only plain tensor checkpoints are accepted"
        ) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as exc:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint (truncated or corrupt?): {exc}") from exc


def _read_safetensors(path: Path) -> tuple[StateDict, dict[str, str]]:
    from safetensors import SafetensorError, safe_open

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
    if bad:
        raise CheckpointError(f"{source}: entries that are not tensors: {', '.join(map(str, bad[:5]))}")
    return {k.removeprefix("module."): v for k, v in obj.items()}


def read_weights(path: str | os.PathLike[str]) -> tuple[StateDict, SSTConfig | None]:
    """State dict of a ``.pth``/``.pt``/``.safetensors`` file, and the config stored in its metadata, if any."""
    path = Path(path)
    if not path.is_file():
        raise WeightsNotFound(f"weights file not found: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: the file is empty")
    config = None
    if path.suffix.lower() == ".safetensors":
        state, metadata = _read_safetensors(path)
        if CONFIG_METADATA_KEY in metadata:
            try:
                config = SSTConfig.from_kwargs(json.loads(metadata[CONFIG_METADATA_KEY]))
            except (ValueError, TypeError) as exc:
                raise CheckpointError(f"{path}: invalid {CONFIG_METADATA_KEY} metadata: {exc}") from exc
    else:
        state = _read_pickle(path)
    return unwrap(state, str(path)), config


_LAYER_KEY = re.compile(r"^body\.(\d+)\.(\d+)\.attn\.to_q$")


def infer_architecture(state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The constructor kwargs that the tensors determine (everything except window sizes)."""
    try:
        dim = state["proj.weight"].shape[0]
        layers: dict[int, dict[int, torch.Size]] = {}
        for key, value in state.items():
            match = _LAYER_KEY.match(key)
            if match:
                layers.setdefault(int(match[1]), {})[int(match[2])] = value.shape
        if not layers:
            raise KeyError("body.0.0.attn.to_q")
        first = layers[0]
        per_layer = [first[i] for i in sorted(first)]
        hidden_ffn = state["body.0.0.ffn.proj.weight"].shape[0]
        to_hidden = state["body.0.0.attn.to_hidden"].shape
        up = state["upsampler.up_conv.weight"].shape
    except KeyError as exc:
        raise CheckpointError(f"not an SST checkpoint: key {exc.args[0]!r} is missing") from exc
    arch: dict[str, Any] = {
        "dim": dim,
        "n_blocks": len(layers),
        "layers_per_block": len(per_layer),
        "num_heads": [s[0] for s in per_layer],
        "ranks": [s[2] for s in per_layer],
        "rib_hidden_dim": to_hidden[1],
        "rib_n_freqs": (to_hidden[0] - 2) // 4,
        "exp_ratio": _exp_ratio(dim, hidden_ffn),
    }
    if "upsampler.final_conv.weight" in state:
        inner = state["upsampler.feature_conv.weight"].shape[0]
        arch |= {"upsampler_type": "pixelshuffle", "intermediate_dim": inner, "upscaling_factor": _root(up[0] // inner)}
    else:
        arch |= {"upsampler_type": "pixelshuffle_direct", "upscaling_factor": _root(up[0] // 3)}
    return arch


def _exp_ratio(dim: int, hidden: int) -> float:
    ratio = hidden / dim
    # int(dim * ratio) must give back the hidden width, as in the constructor.
    return ratio if int(dim * ratio) == hidden else (hidden + 0.5) / dim


def _root(n: int) -> int:
    r = round(n**0.5)
    if r * r != n:
        raise CheckpointError(f"upsampler has {n} channels per colour, which is not a square scale factor")
    return r


def compare_architecture(arch: Mapping[str, Any], config: SSTConfig, source: str) -> None:
    """Explain, field by field, where the weights disagree with the requested architecture."""
    wanted = config.to_kwargs() | {"layers_per_block": len(config.window_sizes)}
    if config.upsampler_type == "pixelshuffle_direct":
        wanted.pop("intermediate_dim")
    diffs = [f"{k}: file has {arch[k]}, model needs {wanted[k]}" for k in arch if arch[k] != wanted[k]]
    if arch["upscaling_factor"] != config.scale:
        raise CheckpointError(
            f"{source} holds x{arch['upscaling_factor']} weights but x{config.scale} was requested; "
            f"use --scale {arch['upscaling_factor']} or weights for x{config.scale}"
        )
    if diffs:
        raise CheckpointError(f"{source} does not match the requested architecture: " + "; ".join(diffs))


def load_state(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> None:
    """Strict load with a readable report of missing, unexpected and mis-shaped tensors."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    problems = []
    for label, items in (("missing", missing), ("unexpected", unexpected), ("wrong shape (file vs model)", shapes)):
        if items:
            more = f" and {len(items) - 5} more" if len(items) > 5 else ""
            problems.append(f"{len(items)} {label}: {', '.join(items[:5])}{more}")
    if problems:
        raise CheckpointError(f"{source} does not fit the network: " + "; ".join(problems))
    on_meta = any(p.is_meta for p in model.parameters())
    # A network built on the meta device takes the file's tensors as they are (no copy, no init).
    model.load_state_dict(state, strict=True, assign=on_meta)
