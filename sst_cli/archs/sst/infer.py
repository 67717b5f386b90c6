"""What an SST checkpoint's tensors say about its architecture (everything except the window sizes).

Window sizes shape no tensor (``sst-l`` and ``sst-l+`` files are identical in shape), so they always come
from a zoo name, a config file or metadata stored by sst-cli; the rest is inferred and checked here, so
that a mismatch is explained field by field instead of as a shape dump.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import torch

from ...errors import CheckpointError, ScaleMismatch
from ..base import ArchConfig, tensor_shape

_LAYER_KEY = re.compile(r"^body\.(\d+)\.(\d+)\.attn\.to_q$")
REQUIRED = ("proj.weight", "body.0.0.attn.to_q", "body.0.0.attn.to_hidden", "upsampler.up_conv.weight")


def detect(state: Mapping[str, torch.Tensor]) -> bool:
    """SST's own key layout: ``proj``, ``body.G.L.attn.to_q`` (RIB) and ``upsampler.up_conv``, unprefixed."""
    return all(key in state for key in REQUIRED)


def _shape(state: Mapping[str, torch.Tensor], key: str, ndim: int) -> torch.Size:
    return tensor_shape(state, key, ndim, "SST")


def infer(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, Any], bool]:
    """Constructor keywords the tensors determine, plus ``layers_per_block``; never complete (window sizes)."""
    dim = _shape(state, "proj.weight", 4)[0]
    layers: dict[int, dict[int, torch.Size]] = {}
    for key in state:
        match = _LAYER_KEY.match(key)
        if match:
            layers.setdefault(int(match[1]), {})[int(match[2])] = _shape(state, key, 3)
    first = layers.get(0) or {0: _shape(state, "body.0.0.attn.to_q", 3)}
    per_layer = [first[i] for i in sorted(first)]
    hidden_ffn = _shape(state, "body.0.0.ffn.proj.weight", 4)[0]
    to_hidden = _shape(state, "body.0.0.attn.to_hidden", 2)
    up = _shape(state, "upsampler.up_conv.weight", 4)[0]
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
        inner = _shape(state, "upsampler.feature_conv.weight", 4)[0]
        scale = _scale(up, inner, f"its intermediate_dim {inner}")
        arch |= {"upsampler_type": "pixelshuffle", "intermediate_dim": inner, "upscaling_factor": scale}
    else:
        arch |= {"upsampler_type": "pixelshuffle_direct", "upscaling_factor": _scale(up, 3, "3 colours")}
    return arch, False


def _exp_ratio(dim: int, hidden: int) -> float:
    ratio = hidden / dim
    # int(dim * ratio) must give back the hidden width, as in the constructor.
    return ratio if int(dim * ratio) == hidden else (hidden + 0.5) / dim


def _scale(channels: int, per: int, what: str) -> int:
    """The pixel shuffle's factor r, from its ``per * r * r`` input channels."""
    r = math.isqrt(channels // per)
    if r < 1 or r * r * per != channels:
        raise CheckpointError(
            f"upsampler.up_conv.weight has {channels} output channels: not {what} times a square scale factor"
        )
    return r


def check(inferred: Mapping[str, Any], config: ArchConfig, source: str) -> None:
    """Explain, field by field, where the weights disagree with the requested architecture."""
    wanted = config.to_kwargs()
    wanted["layers_per_block"] = len(wanted["window_sizes"])
    if wanted["upsampler_type"] == "pixelshuffle_direct":
        wanted.pop("intermediate_dim")
    if inferred["upscaling_factor"] != config.scale:
        # the loader adds what to do, as its caller names the scale (--scale 2, scale=2)
        raise ScaleMismatch(f"{source} holds x{inferred['upscaling_factor']} weights but x{config.scale} was requested")
    diffs = [
        f"{k}: file has {v}, " + (f"model needs {wanted[k]}" if k in wanted else "the model has none")
        for k, v in inferred.items()
        if v != wanted.get(k)
    ]
    if diffs:
        raise CheckpointError(f"{source} does not match the requested architecture: " + "; ".join(diffs))
